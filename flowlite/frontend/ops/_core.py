"""Shared machinery of the op front end: Python scalars (baked or data), `as_tensor`,
broadcasting, the elementwise shape/dtype rules (`_unary`, `_binary`), dtype conversion,
`broadcast_to`, devices and creation dtypes.

Layer: frontend — imports engine.buckets, engine.device, engine.dtypes, engine.errors,
engine.host_data, engine.ir, engine.tape, ops._registry, tensor. The family's primitives
(`<name>_p`) are declared here, beside the front end that records them: their gradient rules
call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from ...engine.errors import ArgumentError, DTypeError
from ...engine import dtypes as D
from ...engine import ir
from ...engine.host_data import (HostNode as _HostNode, _VIEW_OPS as _HOST_VIEWS,
                                 convert as host_convert, elementwise as host_elementwise, int_op)
from ..tensor import Tensor, apply, tensor, from_numpy, Size
from ...engine.device import default_device, device as _make_device
from ._registry import torch_op
from ...engine import buckets as B
from ...engine.ir import Prim
from ...engine.tape import _TupleCotangent
from jax import lax
import jax.numpy as jnp


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def prim(name, lower, vjp=None, **kw) -> Prim:
    return Prim(name, lower, vjp, **kw)


def nondiff(name, lower, **kw) -> Prim:
    return prim(name, lower, None, nondiff=True, **kw)


def pointwise(name, lower, vjp=None, **kw) -> Prim:
    """An elementwise primitive (Prim.elementwise): fused by XLA, padded freely by buckets."""
    return prim(name, lower, vjp, elementwise=True, **kw)


def pointwise_nondiff(name, lower, **kw) -> Prim:
    return nondiff(name, lower, elementwise=True, **kw)


def _convert_vjp(a, i, o, g):
    x = i[0]
    return (to_dtype(g, x.dtype),) if x.dtype.is_floating_point else (None,)


# (exponent, mantissa) bits of the floats a cast can narrow to
_FLOAT_BITS = {np.dtype(jnp.bfloat16): (8, 7), np.dtype(np.float16): (5, 10),
               np.dtype(np.float32): (8, 23)}


def _convert_lower(a, x):
    d = np.dtype(a[0].np)
    bits = _FLOAT_BITS.get(d)
    if bits is not None and jnp.issubdtype(x.dtype, jnp.floating) and \
            x.dtype.itemsize > d.itemsize:
        # a narrowing cast rounds, as in PyTorch: XLA:GPU's default excess precision may
        # otherwise drop a convert pair (`x.bfloat16().float()` would return x unrounded);
        # reduce_precision is kept.  XLA:CPU keeps the pair: its programs stay as they were
        return lax.platform_dependent(
            x, cpu=lambda x: x.astype(d),
            default=lambda x: lax.reduce_precision(x, *bits).astype(d))
    if d in _NARROW_INTS and jnp.issubdtype(x.dtype, jnp.floating):
        # PyTorch truncates to a wide integer first, then wraps (300.0 -> uint8 44, -2.0 ->
        # 254); a direct convert would saturate
        return x.astype(np.int32).astype(d)
    return x.astype(d)


_NARROW_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.uint8))


convert_p = pointwise("convert", _convert_lower, _convert_vjp)


def _expand_back(g, a, x):
    """Broadcast a reduced cotangent back over the reduced axes."""
    axes, keep = a[0], a[1]
    if not keep:
        shape = list(x.shape)
        for ax in axes:
            shape[ax] = 1
        g = _reshape_raw(g, tuple(shape))
    return broadcast_to(g, x.shape)


def _reshape_raw(x, shape):
    shape = tuple(shape)
    return x if x._node.shape == shape else apply(reshape_p, (x,), (shape,), shape, x._node.dtype)


def sum_to(g, shape):
    """Sum a broadcast result back down to `shape` (the unbroadcast in every VJP)."""
    gs = g._node.shape
    if gs == tuple(shape):
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                      if s == 1 and gs[i + lead] != 1)
    kept = tuple(s for i, s in enumerate(gs) if i not in axes)
    r = apply(reduce_sum_p, (g,), (axes, False), kept, g.dtype)
    return _reshape_raw(r, shape)


def _st(g, x):
    """Sum a broadcast cotangent back to x's shape."""
    return sum_to(g, x.shape)


def _sum_lower(a, x):
    axes, keep = a
    k = len(axes)
    if x.dtype == np.float32 and 0 < k < x.ndim and sorted(d % x.ndim for d in axes) == \
            list(range(k)) and 0 not in x.shape:
        # a float32 sum over leading axes only (a gradient summed over the batch of a
        # broadcast operand): on CPU as a dot with ones.  XLA:CPU gives such a reduce to
        # YNNPACK, whose kernel for it is ~20-80x slower than the dot when the leading dims
        # are short and the rest wide: (16, 128, 768) summed over dim 0 in 26.7 ms vs 0.16,
        # (35, 200, 800) 83 vs 1.1 ms (bench/RESULTS.md, issue 49)
        def as_dot(x):
            lead = tuple(range(k))
            y = lax.dot_general(jnp.ones(x.shape[:k], x.dtype), x, ((lead, lead), ((), ())),
                                precision=lax.Precision.HIGHEST)
            return y.reshape((1,) * k + y.shape) if keep else y
        return lax.platform_dependent(x, cpu=as_dot,
                                      default=lambda x: jnp.sum(x, axis=axes, keepdims=keep))
    return jnp.sum(x, axis=axes, keepdims=keep)


reduce_sum_p = prim("sum", _sum_lower,
                    lambda a, i, o, g: (_expand_back(g, a, i[0]),), bucket=B.rule_reduce(None))


# ---- shape -----------------------------------------------------------------------------------
reshape_p = prim("reshape", lambda a, x: jnp.reshape(x, a[0]),
                 lambda a, i, o, g: (_reshape_raw(g, i[0].shape),), bucket=B.rule_reshape)


broadcast_to_p = prim("broadcast_to", lambda a, x: jnp.broadcast_to(x, a[0]),
                      lambda a, i, o, g: (sum_to(g, i[0].shape),), bucket=B.rule_broadcast_to)


# ---- creation and randomness (no inputs except an RNG key) ------------------------------------
full_p = nondiff("full", lambda a, *s: jnp.full(a[0], a[1], a[2].np), bucket=B.rule_full)


def _tuple_get_vjp(a, i, o, g):
    n = a[1]
    ct = _TupleCotangent([None] * n)
    ct[a[0]] = g
    return (ct,)


tuple_get_p = prim("tuple_get", lambda a, t: t[a[0]], _tuple_get_vjp,
                   bucket=lambda ctx, op, a, shape, ins, vals: vals[0][a[0]])


stop_gradient_p = pointwise_nondiff("stop_gradient", lambda a, x: lax.stop_gradient(x))

_scalar_types = (int, float, bool, np.number, np.bool_)


_Node = ir.Node


_SCALAR = ir.SCALAR


_promote = D.promote


_scalar_result = D.scalar_result


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}


def _promote_nodes(nx, ny):
    """PyTorch's tensor-tensor promotion: a 0-d tensor only decides the result dtype when its
    category (bool < integer < floating) is higher than the dimensioned operand's."""
    dx, dy = nx.dtype, ny.dtype
    if dx is dy:
        return dx
    if bool(nx.shape) != bool(ny.shape):
        dim, zero = (dx, dy) if nx.shape else (dy, dx)
        return zero if _CATEGORY[zero.kind] > _CATEGORY[dim.kind] else dim
    return _promote(dx, dy)


# ---- scalars -------------------------------------------------------------------------------
# A few constants are baked into graphs (XLA simplifies x*1, x+0, x*2 ...); every other Python
# scalar enters as data (packed per dtype at the sync), so a changing value never recompiles.
_BAKED = {0, 1, 2, -1, 0.5}


_const_cache: dict = {}


def _scalar(value, dtype) -> Tensor:
    v = value.item() if isinstance(value, (np.number, np.bool_)) else value
    if type(v) is bool or dtype is D.bool_:
        v = builtins.bool(v) if dtype is D.bool_ else v
    if type(v) is bool or (v in _BAKED) or (type(v) is float and not math.isfinite(v)):
        key = (v, type(v), dtype)
        node = _const_cache.get(key)
        if node is None:
            cv = v if dtype.kind == "f" else (builtins.int(v) if dtype.kind in "iu" else v)
            node = _const_cache[key] = _Node(full_p, (), ((), cv, dtype), (), dtype, None)
        return Tensor(node)
    if dtype.kind in "iu":
        v = builtins.int(v)
    return Tensor(ir.scalar_node(v, dtype))


@torch_op(method=False)
def as_tensor(x, dtype=None, device=None) -> Tensor:
    if isinstance(x, Tensor):
        if dtype is not None and x.dtype is not D.canonical(D.from_any(dtype)):
            return to_dtype(x, dtype)
        return x
    if isinstance(x, _scalar_types):
        d = D.canonical(D.from_any(dtype)) if dtype is not None else D.of_python_value(x)
        return _scalar(x, d)
    return tensor(x, dtype=dtype, device=device)


# ---- broadcasting ------------------------------------------------------------------------------
_bcast_cache: dict = {}


@torch_op(method=False)
def broadcast_shapes(*shapes, op="broadcast_shapes"):
    if len(shapes) == 2:
        key = shapes
        r = _bcast_cache.get(key)
        if r is not None:
            return r
    out = []
    ndim = builtins.max(len(s) for s in shapes)
    for i in range(ndim):
        size = 1
        for s in shapes:
            k = len(s) - ndim + i
            if k < 0:
                continue
            d = s[k]
            if d == 1:
                continue
            if size == 1:
                size = d
            elif d != size:
                shown = " and ".join(str(tuple(s)) for s in shapes)
                raise ArgumentError(f"{op}: shapes {shown} cannot be broadcast together "
                                    f"(dimension {i - ndim}: {size} vs {d})")
        out.append(size)
    r = tuple(out)
    if len(shapes) == 2:
        _bcast_cache[shapes] = r
    return r


def _binary(prim, x, y, result="promote"):
    """Record an elementwise binary op with PyTorch promotion and broadcasting."""
    if x.__class__ is Tensor and x._node.__class__ is _HostNode and result == "promote":
        # integer arithmetic on a 0-d element of host data (`i + block_size`): done now
        n = int_op(prim.name, x._node, y)
        if n is not None:
            return Tensor(n)
    if type(x) is not Tensor:
        if isinstance(x, Tensor):
            pass
        elif type(y) is Tensor or isinstance(y, Tensor):
            nd = y._node.dtype
            x = _scalar(x, _scalar_result(nd, x)) if isinstance(x, _scalar_types) else \
                as_tensor(x)
        else:
            raise DTypeError(f"{prim.name}: expected a Tensor")
    nx = x._node
    if type(y) is Tensor or isinstance(y, Tensor):
        ny = y._node
        dt = nx.dtype
        if ny.dtype is not dt:
            dt = _promote_nodes(nx, ny)
    elif isinstance(y, _scalar_types):
        dt = _scalar_result(nx.dtype, y)
        y = _scalar(y, dt)
        ny = y._node
    else:
        if y is None:
            raise DTypeError(f"{prim.name}: unsupported operand None")
        y = as_tensor(y, device=x.device)
        ny = y._node
        dt = _promote(nx.dtype, ny.dtype)
    if result == "float" and dt.kind != "f":
        dt = D.default_float()
    sx, sy = nx.shape, ny.shape
    shape = sx if sx == sy else broadcast_shapes(sx, sy, op=prim.name)
    if (nx.__class__ is _HostNode or ny.__class__ is _HostNode) and result != "bool":
        h = host_elementwise(prim.name, x, y, dt, shape)    # a per-sample transform: now
        if h is not None:
            return Tensor(h)
    if nx.dtype is not dt:
        x = to_dtype(x, dt)
    if ny.dtype is not dt:
        y = to_dtype(y, dt)
    return apply(prim, (x, y), (), shape, D.bool_ if result == "bool" else dt)


def _unary(prim, x, float_only=False):
    if not isinstance(x, Tensor):
        x = as_tensor(x)
    n = x._node
    if float_only and n.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
        n = x._node
    return apply(prim, (x,), (), n.shape, n.dtype)


def to_dtype(x, dtype):
    d = D.canonical(D.from_any(dtype))
    n = x._node
    if n.dtype is d:
        return x
    if n.__class__ is _HostNode or n.op.name in _HOST_VIEWS and n.value is None:
        h = host_convert(x, d)      # `img.to(float32)` of host data: done now
        if h is not None:
            return Tensor(h)
    return apply(convert_p, (x,), (d,), n.shape, d)


# ---- shape -----------------------------------------------------------------------------------
def int_size(s, op="size"):
    """One entry of a size argument as an int; a float, str or other non-integer is PyTorch's
    TypeError (`zeros(2.5)`, `view(2.0, 3)`), not silently truncated."""
    if type(s) is int:
        return s
    try:
        return operator.index(s)
    except TypeError:
        raise DTypeError(f"{op}: size must be a sequence of ints, got {s!r} "
                         f"({type(s).__name__})") from None


def _shape_arg(shape, op="reshape"):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
        shape = shape[0]
    return tuple(s if type(s) is int else int_size(s, op) for s in shape)


@torch_op(top=False)
def broadcast_to(x, shape):
    shape = tuple(shape)
    if x._node.shape == shape:
        return x
    try:
        r = broadcast_shapes(x._node.shape, shape, op="broadcast_to")
    except ValueError:
        raise ArgumentError(f"broadcast_to: the tensor of shape {tuple(x.shape)} can't be "
                            f"expanded to {shape}") from None
    if r != shape:
        raise ArgumentError(f"broadcast_to: the tensor of shape {tuple(x.shape)} can't be "
                            f"expanded to {shape}")
    return apply(broadcast_to_p, (x,), (shape,), shape, x._node.dtype)





@torch_op
def nonzero(x, as_tuple=False):
    """Data-dependent shape: reads the mask on the host (a sync)."""
    idx = np.nonzero(x.numpy())
    if as_tuple:
        return tuple(from_numpy(i.astype(np.int64), device=x.device) for i in idx)
    if not idx:
        return from_numpy(np.zeros((0, 0), np.int64))
    return from_numpy(np.stack(idx, 1).astype(np.int64), device=x.device)


# ---- creation ---------------------------------------------------------------------------------
def _dev(device):
    if device is None:
        return default_device()
    return _make_device(device)


def _creation_dtype(dtype, fill=None):
    if dtype is not None:
        return D.canonical(D.from_any(dtype))
    if fill is None:
        return D.default_float()
    return D.of_python_value(fill)
