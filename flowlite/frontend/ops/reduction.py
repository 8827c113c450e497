"""Reductions: sum, mean, max/min (with indices), argmax, prod, var/std, logsumexp,
cumsum/cumprod, norm, all/any.

Layer: frontend — imports engine.buckets, engine.dtypes, engine.errors, engine.runtime,
ops._autocast, ops._core, ops._registry, ops.creation, ops.elementwise, ops.shape, tensor. The
family's primitives (`<name>_p`) are declared here, beside the front end that records them:
their gradient rules call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import collections

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...engine.errors import ArgumentError, DTypeError
from ...engine import buckets as B, dtypes as D
from ..tensor import _norm_dim, apply, name_grad_fn, Tensor
from ._core import _expand_back, full_p, nondiff, prim, reduce_sum_p, to_dtype
from .elementwise import (abs, eq, exp, isfinite, isnan, log, logical_and, logical_not, maximum,
                          minimum, ne, pow, sqrt, where)
from .shape import _take_along_prim, cat, flip, narrow, permute, reshape, squeeze
from ._registry import torch_op
from . import _autocast
from ...engine.runtime import rt
from .creation import ones_like


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _extreme_vjp(a, i, o, g):
    x = i[0]
    ob = _expand_back(o, a, x)
    mask = (x == ob).to(g.dtype)
    count = _expand_back(sum(mask, dim=a[0], keepdim=a[1]), a, x)
    return (_expand_back(g, a, x) * mask / count,)


reduce_max_p = prim("amax", lambda a, x: jnp.max(x, axis=a[0], keepdims=a[1]), _extreme_vjp,
                    bucket=B.rule_reduce(True))


reduce_min_p = prim("amin", lambda a, x: jnp.min(x, axis=a[0], keepdims=a[1]), _extreme_vjp,
                    bucket=B.rule_reduce(False))


def _prod_vjp(a, i, o, g):
    x = i[0]
    axes = a[0]
    # product of all *other* elements, zero-safe: exclusive cumprods from both ends.
    rest = [d for d in range(x.ndim) if d not in axes]
    perm = rest + list(axes)
    xt = permute(x, perm)
    lead = tuple(xt.shape[:len(rest)])
    k = 1
    for ax in axes:
        k *= x.shape[ax]
    flat = reshape(xt, lead + (k,))
    one = ones_like(narrow(flat, -1, 0, 1))
    left = cumprod(cat([one, narrow(flat, -1, 0, k - 1)], -1), -1)
    right = flip(cumprod(flip(cat([narrow(flat, -1, 1, k - 1), one], -1), [-1]), -1), [-1])
    others = reshape(left * right, tuple(xt.shape))
    inv = [0] * len(perm)
    for j, p in enumerate(perm):
        inv[p] = j
    others = permute(others, inv)
    return (_expand_back(g, a, x) * others,)


reduce_prod_p = prim("prod", lambda a, x: jnp.prod(x, axis=a[0], keepdims=a[1]), _prod_vjp)


argmax_p = nondiff("argmax", lambda a, x: jnp.argmax(x, axis=a[0], keepdims=a[1]))


argmin_p = nondiff("argmin", lambda a, x: jnp.argmin(x, axis=a[0], keepdims=a[1]))


reduce_all_p = nondiff("all", lambda a, x: jnp.all(x, axis=a[0], keepdims=a[1]))


reduce_any_p = nondiff("any", lambda a, x: jnp.any(x, axis=a[0], keepdims=a[1]))


cumsum_p = prim("cumsum", lambda a, x: lax.cumsum(x, axis=a[0], reverse=a[1]),
                lambda a, i, o, g: (cumsum(g, a[0], reverse=not a[1]),))


def _cumprod_vjp(a, i, o, g):
    # d out_j / d x_i = out_j / x_i only while no zero precedes i; zero-safe, like PyTorch:
    # before a slice's first zero use that formula, at the first zero the reverse sum of
    # g * cumprod(x with that zero set to 1), after it 0.
    x, axis = i[0], a[0]
    zero = x == 0
    seen = cumsum(zero, axis)
    first = logical_and(zero, seen == 1)
    regular = cumsum(g * o, axis, reverse=True) / where(zero, 1.0, x)
    at_zero = cumsum(g * cumprod(where(first, 1.0, x), axis), axis, reverse=True)
    return (where(seen == 0, regular, where(first, at_zero, 0.0)),)


cumprod_p = prim("cumprod", lambda a, x: lax.cumprod(x, axis=a[0]), _cumprod_vjp)


cummax_p = nondiff("cummax", lambda a, x: lax.cummax(x, axis=a[0]))


def _order_key(x, descending):
    """An integer key whose order is PyTorch's order of x: for floats -0.0 == 0.0 and every NaN
    above +inf (the IEEE bits of a float, sign-folded, sort as signed integers); bools as 0/1.
    Descending order is the key's bitwise complement (exact, no overflow)."""
    if x.dtype == jnp.bool_:
        k = x.astype(jnp.int8)
    elif jnp.issubdtype(x.dtype, jnp.floating):
        x = jnp.where(x == 0, jnp.zeros((), x.dtype), x)
        x = jnp.where(jnp.isnan(x), jnp.array(np.nan, x.dtype), x)
        bits = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[x.dtype.itemsize]
        b = lax.bitcast_convert_type(x, bits)
        k = b ^ ((b >> (8 * x.dtype.itemsize - 1)) & jnp.array(np.iinfo(bits).max, bits))
    else:
        k = x
    return ~k if descending else k


def _cum_extreme_lower(a, x):
    # index of the running max (min) along axis: ties go to the later element, a NaN wins and
    # stays (PyTorch's cummax/cummin); an associative scan over (is-nan, key, index) pairs
    axis, largest, out = a
    nan = jnp.isnan(x) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.zeros(x.shape, bool)
    key = _order_key(x, largest)      # the running pick is the minimum of this key
    idx = lax.broadcasted_iota(out.np, x.shape, axis)

    def pick(earlier, later):
        n0, k0, i0 = earlier
        n1, k1, i1 = later
        take = n1 | (~n0 & (k1 <= k0))
        return (jnp.where(take, n1, n0), jnp.where(take, k1, k0), jnp.where(take, i1, i0))
    return lax.associative_scan(pick, (nan, key, idx), axis=axis)[2]


cum_extreme_indices_p = nondiff("cum_extreme_indices", _cum_extreme_lower)


def _logcumsumexp_vjp(a, i, o, g):
    # d out_j / d x_i = exp(x_i - out_j) for i <= j (the scan's direction): the gradient is
    # a reverse log-cum-sum-exp of log|g| - out, kept apart for g's two signs so nothing
    # overflows (the same split as PyTorch's backward)
    x = i[0]
    axis, reverse = a
    lowest = float(np.finfo(x.dtype.np).min)
    parts = []
    for mask in (g > 0, g < 0):
        mag = where(mask, abs(g), 1.0)
        logg = where(mask, log(mag), lowest)
        parts.append(exp(_logcumsumexp_prim(logg - o, axis, not reverse) + x))
    return (parts[0] - parts[1],)


logcumsumexp_p = prim("logcumsumexp",
                      lambda a, x: lax.cumlogsumexp(x, axis=a[0], reverse=a[1]), _logcumsumexp_vjp)



# ---- reductions --------------------------------------------------------------------------------
def _axes(x, dim, op):
    nd = len(x._node.shape)
    if dim is None:
        return tuple(range(nd))
    if isinstance(dim, (list, tuple)):
        normed = [_norm_dim(d, nd, op) for d in dim]
        axes = tuple(sorted(set(normed)))
        if len(axes) != len(normed):
            dup = next(d for d in normed if normed.count(d) > 1)
            raise ArgumentError(f"{op}: dim {dup} appears multiple times in the list of dims "
                                f"{tuple(dim)} (input shape {tuple(x._node.shape)})")
        return axes if nd else ()
    ax = _norm_dim(dim, nd, op)
    return (ax,) if nd else ()  # a 0-d tensor accepts dim 0 / -1 and reduces nothing


def _reduced_shape(shape, axes, keepdim):
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


@torch_op
def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001
    axes = _axes(x, dim, "sum")
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu" and x.dtype is not D.canonical(D.int64):
        x = to_dtype(x, D.int64)
    shape = _reduced_shape(x._node.shape, axes, keepdim)
    out = apply(reduce_sum_p, (x,), (axes, keepdim), shape, x._node.dtype)
    if dim is not None and not shape:       # a vector's sum(0): PyTorch's dim overload
        name_grad_fn(out, "SumBackward1")
    return out





@torch_op
def mean(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    if x.dtype.kind != "f":
        raise DTypeError(f"mean(): could not infer output dtype. Input dtype must be floating "
                         f"point, but got {x.dtype}")
    axes = _axes(x, dim, "mean")
    n = 1
    for a in axes:
        n *= x._node.shape[a]
    s = sum(x, axes, keepdim)
    return name_grad_fn(s / n if n != 1 else s, "MeanBackward0" if dim is None else
                        "MeanBackward1")


@torch_op
def nansum(x, dim=None, keepdim=False, dtype=None):
    """sum() counting NaN as zero (PyTorch's torch.nansum); its gradient is zero at NaNs."""
    if x.dtype.kind == "f":
        x = where(isnan(x), 0.0, x)
    return sum(x, dim, keepdim, dtype)


@torch_op
def nanmean(x, dim=None, keepdim=False, dtype=None):
    """mean() over the non-NaN elements (PyTorch's torch.nanmean): NaN where all are NaN.
    The gradient at a NaN element is zero -- also where all are NaN, where PyTorch's is NaN."""
    if dtype is not None:
        x = to_dtype(x, dtype)
    if x.dtype.kind != "f":
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got "
                           f"{x.dtype} (shape {tuple(x.shape)})")
    count = sum(to_dtype(logical_not(isnan(x)), x.dtype), dim, keepdim)
    return nansum(x, dim, keepdim) / count


def _reduce_extreme(prim, x, axes, keepdim):
    if x.numel() == 0:
        raise RuntimeError(f"{prim.name}(): expected a non-empty tensor")
    shape = _reduced_shape(x._node.shape, axes, keepdim)
    return apply(prim, (x,), (axes, keepdim), shape, x._node.dtype)


MinMax = collections.namedtuple("MinMax", ["values", "indices"])


@torch_op
def amax(x, dim=None, keepdim=False):
    out = _reduce_extreme(reduce_max_p, x, _axes(x, dim, "amax"), keepdim)
    return out if dim is None else name_grad_fn(out, "AmaxBackward0")


@torch_op
def amin(x, dim=None, keepdim=False):
    out = _reduce_extreme(reduce_min_p, x, _axes(x, dim, "amin"), keepdim)
    return out if dim is None else name_grad_fn(out, "AminBackward0")


@torch_op
def max(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    if dim is None:
        return amax(x)
    return _minmax_dim(x, dim, keepdim, argmax, "max")


@torch_op
def min(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    if dim is None:
        return amin(x)
    return _minmax_dim(x, dim, keepdim, argmin, "min")


def _minmax_dim(x, dim, keepdim, argfn, op):
    """Per-dim max/min: the values are gathered at the returned indices, so (as in PyTorch)
    the gradient goes to that one element even when several tie."""
    d = _norm_dim(dim, x.ndim, op)
    if x.numel() == 0:
        raise RuntimeError(f"{op}(): expected a non-empty tensor (shape {tuple(x.shape)})")
    idx = argfn(x, d, True)
    if x.ndim == 0:
        return MinMax(x, idx)
    values = _take_along_prim(x, idx, d)
    if not keepdim:
        values, idx = squeeze(values, d), squeeze(idx, d)
    return MinMax(name_grad_fn(values, "MaxBackward0" if op == "max" else "MinBackward0", x),
                  idx)


def _arg(prim, x, dim, keepdim):
    if dim is None:
        if keepdim:  # PyTorch: every dim kept, of size 1
            return reshape(_arg(prim, x, None, False), (1,) * x.ndim)
        x = reshape(x, (-1,))
        dim = 0
    elif x.ndim == 0:
        _norm_dim(dim, 0, prim.name)
        return _arg(prim, x, None, False)
    ax = _norm_dim(dim, len(x._node.shape), prim.name)
    shape = _reduced_shape(x._node.shape, (ax,), keepdim)
    return apply(prim, (x,), (ax, keepdim), shape, D.canonical(D.int64))


@torch_op
def argmax(x, dim=None, keepdim=False):
    return _arg(argmax_p, x, dim, keepdim)


@torch_op
def argmin(x, dim=None, keepdim=False):
    return _arg(argmin_p, x, dim, keepdim)


@torch_op
def prod(x, dim=None, keepdim=False, dtype=None):
    if rt.local.autocast is not None and dtype is None:     # in PyTorch's autocast fp32 list
        (x,) = _autocast.fp32(x)
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu":
        x = to_dtype(x, D.int64)
    axes = _axes(x, dim, "prod")
    out = apply(reduce_prod_p, (x,), (axes, keepdim),
                _reduced_shape(x._node.shape, axes, keepdim), x._node.dtype)
    return out if dim is None else name_grad_fn(out, "ProdBackward1")


@torch_op
def all(x, dim=None, keepdim=False):  # noqa: A001
    x = to_dtype(x, D.bool_)
    axes = _axes(x, dim, "all")
    return apply(reduce_all_p, (x,), (axes, keepdim),
                 _reduced_shape(x._node.shape, axes, keepdim), D.bool_)


@torch_op
def any(x, dim=None, keepdim=False):  # noqa: A001
    x = to_dtype(x, D.bool_)
    axes = _axes(x, dim, "any")
    return apply(reduce_any_p, (x,), (axes, keepdim),
                 _reduced_shape(x._node.shape, axes, keepdim), D.bool_)


@torch_op
def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = _axes(x, dim, "var")
    n = 1
    for a in axes:
        n *= x._node.shape[a]
    mu = mean(x, axes, keepdim=True)
    d = x - mu
    return name_grad_fn(sum(d * d, axes, keepdim) / builtins.max(n - correction, 0),
                        "VarBackward0")


@torch_op
def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    # a constant row has std 0 and, as in PyTorch, gradient 0 (not inf * 0 = nan)
    return name_grad_fn(_zero_safe_root(var(x, dim, unbiased, keepdim, correction), sqrt),
                        "StdBackward0")


@torch_op
def logsumexp(x, dim, keepdim=False):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    axes = _axes(x, dim, "logsumexp")
    m = amax(x, axes, keepdim=True).detach()
    m = where(isfinite(m), m, 0.0)
    s = log(sum(exp(x - m), axes, keepdim=True)) + m
    s = s if keepdim else reshape(s, _reduced_shape(x._node.shape, axes, False))
    return name_grad_fn(s, "LogsumexpBackward0")


@torch_op(inplace=True)
def cumsum(x, dim, reverse=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu":
        x = to_dtype(x, D.int64)
    ax = _norm_dim(dim, len(x._node.shape), "cumsum")
    if not x._node.shape:
        return x
    return apply(cumsum_p, (x,), (ax, reverse), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def cumprod(x, dim):
    ax = _norm_dim(dim, len(x._node.shape), "cumprod")
    if not x._node.shape:
        return x
    return apply(cumprod_p, (x,), (ax,), x._node.shape, x._node.dtype)


@torch_op
def norm(x, p="fro", dim=None, keepdim=False):
    return name_grad_fn(_norm(x, p, dim, keepdim), "LinalgVectorNormBackward0", x)


def _norm(x, p, dim, keepdim):
    if isinstance(p, str) and p not in ("fro", "inf", "-inf"):
        raise ArgumentError(f"norm: order {p!r} not supported (flowlite's norm takes a number, "
                            f"inf, -inf or 'fro')")
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    if p in ("fro", 2, 2.0):
        return _zero_safe_root(sum(x * x, dim, keepdim), sqrt)
    if p in (float("inf"), "inf"):
        return amax(abs(x), dim, keepdim)
    if p in (float("-inf"), "-inf"):
        return amin(abs(x), dim, keepdim)
    if p == 1:
        return sum(abs(x), dim, keepdim)
    if p == 0:
        return sum(to_dtype(ne(x, 0), x.dtype), dim, keepdim)
    return _zero_safe_root(sum(pow(abs(x), p), dim, keepdim), lambda s: pow(s, 1.0 / p))


def _zero_safe_root(s, root):
    """root(s) whose gradient is 0 where s == 0 (PyTorch's subgradient for a zero norm)
    instead of inf * 0 = nan: the root never sees a zero."""
    zero = eq(s, 0)
    return where(zero, 0.0, root(where(zero, 1.0, s)))


CumResult = collections.namedtuple("cummax", ["values", "indices"])
CumminResult = collections.namedtuple("cummin", ["values", "indices"])


def _cum_extreme(x, dim, largest, op, result):
    ax = _norm_dim(dim, len(x._node.shape), op)
    out = D.canonical(D.int64)
    if not x._node.shape:
        return result(x, apply(full_p, (), ((), 0, out), (), out))
    # the values are gathered at the running arg-extreme: the gradient flows to that element
    idx = apply(cum_extreme_indices_p, (x,), (ax, largest, out), x._node.shape, out)
    return result(_take_along_prim(x, idx, ax), idx)


@torch_op
def cummax(x, dim):
    """Running maximum along dim and its index (ties: the later element; NaN propagates)."""
    return _cum_extreme(x, dim, True, "cummax", CumResult)


@torch_op
def cummin(x, dim):
    """Running minimum along dim and its index (ties: the later element; NaN propagates)."""
    return _cum_extreme(x, dim, False, "cummin", CumminResult)


def _logcumsumexp_prim(x, axis, reverse=False):
    return apply(logcumsumexp_p, (x,), (axis, reverse), x._node.shape, x._node.dtype)


@torch_op
def logcumsumexp(x, dim):
    """log(cumsum(exp(x))) along dim, computed without overflow (a log-add-exp scan)."""
    if x.dtype.kind != "f":
        raise RuntimeError(f"logcumsumexp(): expected a floating-point tensor, got {x.dtype} "
                           f"(shape {tuple(x.shape)})")
    ax = _norm_dim(dim, len(x._node.shape), "logcumsumexp")
    if not x._node.shape:
        return x
    return _logcumsumexp_prim(x, ax)


@torch_op(method=False)
def var_mean(x, dim=None, unbiased=None, keepdim=False, correction=None):
    """(var, mean) over dim — PyTorch's order."""
    return (var(x, dim, unbiased, keepdim, correction), mean(x, dim, keepdim))


@torch_op(method=False)
def std_mean(x, dim=None, unbiased=None, keepdim=False, correction=None):
    """(std, mean) over dim — PyTorch's order."""
    v, m = var_mean(x, dim, unbiased, keepdim, correction)
    return _zero_safe_root(v, sqrt), m
