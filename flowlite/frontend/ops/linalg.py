"""Linear algebra: matmul/bmm/mm, dot, outer, einsum.

Layer: frontend — imports engine.buckets, engine.errors, engine.matmul_precision, engine.onednn,
engine.runtime, ops._autocast, ops._core, ops._registry, ops.elementwise, ops.shape, tensor. The
family's primitives (`<name>_p`) are declared here, beside the front end that records them:
their gradient rules call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import collections

import jax.numpy as jnp

from ...engine.errors import ArgumentError, DTypeError
from ...engine import buckets as B
from ...engine import onednn
from ..tensor import apply, name_grad_fn, Tensor
from ...engine.matmul_precision import for_operands as _precision
from ...engine.runtime import rt
from ._core import _promote, as_tensor, broadcast_shapes, broadcast_to, prim, to_dtype
from .elementwise import _st, mul
from .shape import mT, reshape, unsqueeze
from ._registry import torch_op
from . import _autocast


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _matmul_vjp(a, i, o, g):
    x, y = i
    gx = mT(_flat_grad(mT(g), mT(y))) if x.ndim == 2 < y.ndim else None
    gy = _flat_grad(g, x) if y.ndim == 2 < x.ndim else None
    return (_st(matmul(g, mT(y)), x) if gx is None else gx,
            _st(matmul(mT(x), g), y) if gy is None else gy)


def _flat_grad(g, x):
    """The gradient of the 2-D operand w of x (..., M, K) @ w, which matmul broadcast over x's
    batch dims, as ONE dot that contracts them too: x.reshape(-1, K)ᵀ @ g.reshape(-1, N) —
    not a batched dot and then a sum over the batch: one kernel instead of two and no
    (batch, K, N) intermediate (word_language_model's (35, 200, 800) sum took 103 ms a step
    in YNNPACK's reduce before sums over leading dims became dots, the one dot 5 ms).
    w @ y takes it transposed: (gᵀ, yᵀ) give wᵀ's.  None where x's batch dims are
    themselves broadcast against g's."""
    k, n = x.shape[-1], g.shape[-1]
    if tuple(x.shape[:-1]) != tuple(g.shape[:-1]):
        return None
    return matmul(mT(reshape(x, (-1, k))), reshape(g, (-1, n)))


def _matmul_lower(a, x, y):
    # float32/bfloat16 matmuls on CPU: oneDNN's, where measured faster (engine/onednn.py)
    out = None if a else onednn.bmm(x, y) if x.ndim == y.ndim else onednn.matmul(x, y)
    return out if out is not None else jnp.matmul(x, y, precision=a[0] if a else
                                                  _precision(x, y))


matmul_p = prim("matmul", _matmul_lower, _matmul_vjp, bucket=B.rule_matmul)


def _einsum_vjp(a, i, o, g):
    eq = a[0]
    ins, out = eq.split("->")
    specs = ins.split(",")
    grads = []
    for k, x in enumerate(i):
        others = [s for j, s in enumerate(specs) if j != k]
        available = set(out).union(*others) if others else set(out)
        target = specs[k]
        keep = "".join(c for c in target if c in available)
        sub_eq = ",".join([out] + others) + "->" + keep
        gk = einsum(sub_eq, g, *[t for j, t in enumerate(i) if j != k])
        if keep != target:  # indices summed only inside operand k: broadcast back
            shape = [x.shape[target.index(c)] if c in keep else 1 for c in target]
            order = [c for c in target if c in keep]
            gk = reshape(gk, tuple(x.shape[target.index(c)] for c in order))
            gk = reshape(gk, tuple(shape)) if order == [c for c in target if c in keep] else gk
            gk = broadcast_to(gk, x.shape)
        grads.append(gk)
    return tuple(grads)


def _einsum_lower(a, *xs):
    out = onednn.einsum(a[0], *xs) if len(xs) == 2 else None
    return out if out is not None else jnp.einsum(a[0], *xs, precision=_precision(*xs))


einsum_p = prim("einsum", _einsum_lower, _einsum_vjp, bucket=B.rule_einsum)



# ---- linear algebra ----------------------------------------------------------------------------
def _same_dtype(op, a, b):
    if a.dtype is not b.dtype:
        raise DTypeError(f"{op}: expected both operands to have the same dtype, but got "
                         f"{a.dtype} and {b.dtype} (shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)})")


@torch_op
def mm(a, b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise DTypeError("mm: both arguments must be tensors")
    if a.ndim != 2 or b.ndim != 2:
        raise ArgumentError(f"mm: expected 2-D matrices, got shapes {tuple(a.shape)} and "
                            f"{tuple(b.shape)}")
    if rt.local.autocast is None:       # autocast casts both operands, as in PyTorch
        _same_dtype("mm", a, b)
    return matmul(a, b)


@torch_op
def matmul(a, b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise DTypeError("matmul: both arguments must be tensors")
    if rt.local.autocast is not None:      # in PyTorch's autocast lower-precision list
        a, b = _autocast.lower(a, b)
    return _matmul(a, b)


def _matmul(a, b):
    """matmul without autocast: for ops PyTorch does not autocast (dot, mv)."""
    sa, sb = a._node.shape, b._node.shape
    if not sa or not sb:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{len(sa)}D and {len(sb)}D (matmul of shapes {tuple(sa)} and "
                           f"{tuple(sb)})")
    ka = sa[-1]
    kb = sb[-2] if len(sb) >= 2 else sb[0]
    if ka != kb:
        kb_dim = builtins.max(len(sb) - 2, 0)
        raise ArgumentError(f"matmul: shapes {tuple(sa)} and {tuple(sb)} are not aligned "
                            f"({ka} (dim {len(sa) - 1}) != {kb} (dim {kb_dim}))")
    dt = a.dtype if a.dtype is b.dtype else _promote(a.dtype, b.dtype)
    if a.dtype is not dt:
        a = to_dtype(a, dt)
    if b.dtype is not dt:
        b = to_dtype(b, dt)
    squeeze_a = len(sa) == 1
    squeeze_b = len(sb) == 1
    if squeeze_a:
        a = reshape(a, (1, ka))
        sa = (1, ka)
    if squeeze_b:
        b = reshape(b, (kb, 1))
        sb = (kb, 1)
    try:
        batch = broadcast_shapes(sa[:-2], sb[:-2], op="matmul") if len(sa) > 2 or \
            len(sb) > 2 else ()
    except ValueError:
        raise ArgumentError(f"matmul: batch dimensions of shapes {tuple(a.shape)} and "
                            f"{tuple(b.shape)} cannot be broadcast together") from None
    shape = batch + (sa[-2], sb[-1])
    out = apply(matmul_p, (a, b), (), shape, dt)
    if squeeze_a or squeeze_b:
        shape = batch + ((sa[-2],) if not squeeze_a else ()) + ((sb[-1],) if not squeeze_b else ())
        # PyTorch's node for a vector operand: dot, mv, a squeeze of a vector-matrix mm, or
        # the view that folds a batched product back
        name = ("DotBackward0" if squeeze_a and squeeze_b else
                "SqueezeBackward4" if squeeze_a and len(sb) == 2 else
                "MvBackward0" if len(sa) == 2 else "UnsafeViewBackward0")
        out = name_grad_fn(reshape(out, shape), name)
    return out


@torch_op
def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise ArgumentError(f"bmm: expected 3-D tensors, got shapes {tuple(a.shape)} and "
                            f"{tuple(b.shape)}")
    if a.shape[0] != b.shape[0]:
        raise ArgumentError(f"bmm: batch sizes differ: {tuple(a.shape)} and {tuple(b.shape)}")
    if rt.local.autocast is None:
        _same_dtype("bmm", a, b)
    return name_grad_fn(matmul(a, b), "BmmBackward0")


@torch_op
def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise ArgumentError(f"dot: 1D tensors expected, but got shapes {tuple(a.shape)} and "
                            f"{tuple(b.shape)}")
    _same_dtype("dot", a, b)
    return _matmul(a, b)


@torch_op
def mv(a, v):
    if a.ndim != 2 or v.ndim != 1 or a.shape[1] != v.shape[0]:
        raise ArgumentError(f"mv: expected a matrix and a vector of matching size, got shapes "
                            f"{tuple(a.shape)} and {tuple(v.shape)}")
    _same_dtype("mv", a, v)
    return _matmul(a, v)


@torch_op
def outer(a, b):
    for name, t in (("self", a), ("vec2", b)):
        if as_tensor(t).ndim != 1:
            raise ArgumentError(f"outer: expected 1-D argument {name}, but got "
                                f"{as_tensor(t).ndim}-D (shapes {tuple(as_tensor(a).shape)} and "
                                f"{tuple(as_tensor(b).shape)})")
    return mul(unsqueeze(a, 1), unsqueeze(b, 0))


def _explicit_einsum(eq, operands):
    eq = eq.replace(" ", "")
    if "->" in eq:
        ins, out = eq.split("->")
    else:
        ins, out = eq, None
    specs = ins.split(",")
    for k, c in enumerate(eq):
        if not (c.isascii() and c.isalpha()) and c not in ",.->":
            raise ArgumentError(f"einsum: invalid subscript {c!r} at index {k} of {eq!r}, "
                                f"subscripts must be in [a-zA-Z]")
    if out is not None:
        letters = out.replace("...", "")
        for c in letters:
            if letters.count(c) > 1:
                raise ArgumentError(f"einsum: output subscript {c!r} appears more than once "
                                    f"in {eq!r}")
            if c not in ins:
                raise ArgumentError(f"einsum: output subscript {c!r} does not appear in the "
                                    f"equation {eq!r} for any input operand")
    if len(specs) != len(operands):
        raise ArgumentError(f"einsum: equation {eq!r} names {len(specs)} operands but "
                            f"{len(operands)} were given")
    used = set(c for c in eq if c.isalpha())
    free = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
    ell = None
    new_specs = []
    for s, t in zip(specs, operands):
        if "..." in s:
            n = t.ndim - (len(s) - 3)
            if ell is None or len(ell) < n:
                ell = "".join(free[:n]) if ell is None or len(ell) < n else ell
            s = s.replace("...", ell[len(ell) - n:] if n else "")
        if len(s) != t.ndim:
            raise ArgumentError(f"einsum: operand spec {s!r} has {len(s)} indices but the operand "
                                f"has shape {tuple(t.shape)}")
        if len(set(s)) != len(s):
            raise ArgumentError(f"einsum: repeated index in {s!r} (diagonals) is not supported")
        new_specs.append(s)
    if out is None:
        counts = collections.Counter("".join(new_specs))
        out = (ell or "") + "".join(sorted(c for c, k in counts.items() if k == 1 and
                                           (ell is None or c not in ell)))
    else:
        out = out.replace("...", ell or "")
    sizes = {}
    for s, t in zip(new_specs, operands):
        for c, n in zip(s, t.shape):
            if c in sizes and sizes[c] != n and 1 not in (sizes[c], n):
                raise ArgumentError(f"einsum: index {c!r} has sizes {sizes[c]} and {n} in "
                                    f"{eq!r} (shapes {[tuple(o.shape) for o in operands]})")
            sizes[c] = builtins.max(sizes.get(c, 1), n)
    operands = [broadcast_to(t, tuple(sizes[c] for c in s)) for s, t in zip(new_specs, operands)]
    return ",".join(new_specs) + "->" + out, operands, tuple(sizes[c] for c in out)


_einsum_cache: dict = {}


def _contracts(eq):
    """Whether an einsum sums over an index that several operands share ("ij,jk->ik",
    "i,i->"): PyTorch computes those with bmm, which autocast casts; an outer or elementwise
    product ("i,j->ij", "ij,ij->ij") is a multiplication, which it doesn't."""
    eq = eq.replace(" ", "")
    ins, arrow, out = eq.partition("->")
    specs = [s.replace("...", "") for s in ins.split(",")]
    letters = "".join(specs)
    kept = set(out) if arrow else {c for c in letters if letters.count(c) == 1}
    return any(c not in kept and builtins.sum(c in s for s in specs) > 1 for c in set(letters))


@torch_op(method=False)
def einsum(eq, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    operands = [o if type(o) is Tensor or isinstance(o, Tensor) else as_tensor(o)
                for o in operands]
    if rt.local.autocast is not None and len(operands) > 1 and _contracts(eq):
        operands = list(_autocast.lower(*operands))     # PyTorch's einsum reaches bmm
    key = (eq,) + tuple(o._node.shape for o in operands)
    hit = _einsum_cache.get(key)
    if hit is not None and builtins.all(o.dtype is operands[0].dtype for o in operands):
        # same equation and shapes as before: explicit equation and output shape are known
        eq2, shape, bshapes = hit
        ops_ = [o if o._node.shape == bs else broadcast_to(o, bs)
                for o, bs in zip(operands, bshapes)]
        return apply(einsum_p, tuple(ops_), (eq2,), shape, operands[0].dtype)
    eq, operands, shape = _explicit_einsum(eq, operands)
    _einsum_cache[key] = (eq, shape, tuple(o._node.shape for o in operands))
    dt = operands[0].dtype
    for o in operands[1:]:
        dt = _promote(dt, o.dtype)
    operands = [to_dtype(o, dt) for o in operands]
    return apply(einsum_p, tuple(operands), (eq,), shape, dt)
