"""Reductions: sum, mean, max/min (with indices), argmax, prod, var/std, logsumexp,
cumsum/cumprod, norm, all/any.

Layer: op front end (flowlite.ops) — imports dtypes, device, ir, tensor, primitives and
the op modules listed before it in ops/__init__.py.
"""
from __future__ import annotations

import builtins
import collections

from .. import dtypes as D
from .. import primitives as P
from ..tensor import Tensor, apply, tensor, _norm_dim
from ._core import (_take_along_prim, to_dtype)
from .elementwise import (abs, eq, exp, isfinite, isnan, log, logical_not, maximum, minimum, ne,
                          pow, sqrt, where)
from .shape import (reshape, squeeze)
from ._registry import torch_op


# ---- reductions --------------------------------------------------------------------------------
def _axes(x, dim, op):
    nd = len(x._node.shape)
    if dim is None:
        return tuple(range(nd))
    if isinstance(dim, (list, tuple)):
        axes = tuple(sorted({_norm_dim(d, nd, op) for d in dim}))
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
    return apply(P.reduce_sum, (x,), (axes, keepdim), shape, x._node.dtype)


def sum_to(g, shape):
    """Sum a broadcast result back down to `shape` (the unbroadcast in every VJP)."""
    gs = g._node.shape
    if gs == tuple(shape):
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                      if s == 1 and gs[i + lead] != 1)
    r = apply(P.reduce_sum, (g,), (axes, False), _reduced_shape(gs, axes, False), g.dtype)
    if r._node.shape != tuple(shape):
        r = reshape(r, tuple(shape))
    return r


@torch_op
def mean(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    if x.dtype.kind != "f":
        raise TypeError(f"mean(): could not infer output dtype. Input dtype must be floating "
                        f"point, but got {x.dtype}")
    axes = _axes(x, dim, "mean")
    n = 1
    for a in axes:
        n *= x._node.shape[a]
    s = sum(x, axes, keepdim)
    return s / n if n != 1 else s


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
    return _reduce_extreme(P.reduce_max, x, _axes(x, dim, "amax"), keepdim)


@torch_op
def amin(x, dim=None, keepdim=False):
    return _reduce_extreme(P.reduce_min, x, _axes(x, dim, "amin"), keepdim)


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
    return MinMax(values, idx)


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
    return _arg(P.argmax, x, dim, keepdim)


@torch_op
def argmin(x, dim=None, keepdim=False):
    return _arg(P.argmin, x, dim, keepdim)


@torch_op
def prod(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu":
        x = to_dtype(x, D.int64)
    axes = _axes(x, dim, "prod")
    return apply(P.reduce_prod, (x,), (axes, keepdim),
                 _reduced_shape(x._node.shape, axes, keepdim), x._node.dtype)


@torch_op
def all(x, dim=None, keepdim=False):  # noqa: A001
    x = to_dtype(x, D.bool_)
    axes = _axes(x, dim, "all")
    return apply(P.reduce_all, (x,), (axes, keepdim),
                 _reduced_shape(x._node.shape, axes, keepdim), D.bool_)


@torch_op
def any(x, dim=None, keepdim=False):  # noqa: A001
    x = to_dtype(x, D.bool_)
    axes = _axes(x, dim, "any")
    return apply(P.reduce_any, (x,), (axes, keepdim),
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
    return sum(d * d, axes, keepdim) / builtins.max(n - correction, 0)


@torch_op
def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    # a constant row has std 0 and, as in PyTorch, gradient 0 (not inf * 0 = nan)
    return _zero_safe_root(var(x, dim, unbiased, keepdim, correction), sqrt)


@torch_op
def logsumexp(x, dim, keepdim=False):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    axes = _axes(x, dim, "logsumexp")
    m = amax(x, axes, keepdim=True).detach()
    m = where(isfinite(m), m, 0.0)
    s = log(sum(exp(x - m), axes, keepdim=True)) + m
    return s if keepdim else reshape(s, _reduced_shape(x._node.shape, axes, False))


@torch_op(inplace=True)
def cumsum(x, dim, reverse=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu":
        x = to_dtype(x, D.int64)
    ax = _norm_dim(dim, len(x._node.shape), "cumsum")
    if not x._node.shape:
        return x
    return apply(P.cumsum, (x,), (ax, reverse), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def cumprod(x, dim):
    ax = _norm_dim(dim, len(x._node.shape), "cumprod")
    if not x._node.shape:
        return x
    return apply(P.cumprod, (x,), (ax,), x._node.shape, x._node.dtype)


@torch_op
def norm(x, p="fro", dim=None, keepdim=False):
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
        return result(x, apply(P.full, (), ((), 0, out), (), out))
    # the values are gathered at the running arg-extreme: the gradient flows to that element
    idx = apply(P.cum_extreme_indices, (x,), (ax, largest, out), x._node.shape, out)
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
    return apply(P.logcumsumexp, (x,), (axis, reverse), x._node.shape, x._node.dtype)


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
