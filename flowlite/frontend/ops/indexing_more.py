"""More indexing: scatter_reduce, index_reduce, masked_select, masked_scatter, put, argwhere,
unravel_index.

Layer: frontend — imports checks, engine.dtypes, ops._core, ops._registry, ops.creation,
ops.elementwise, ops.indexing, ops.reduction, ops.shape, tensor. The family's primitives
(`<name>_p`) are declared here, beside the front end that records them: their gradient rules
call the ops of this module and of those before it.

`scatter_reduce` is one primitive (its lowering is jax's scatter with the reduction) whose
gradient is PyTorch's, written in flowlite ops: gathered for sum and mean, shared evenly among
tied extremes for amax/amin, zero-safe for prod. masked_select has a data-dependent shape and
reads the mask on the host (a sync), as PyTorch's CPU kernel does; masked_scatter does not.
"""
from __future__ import annotations

import builtins

import jax.numpy as jnp
import numpy as np

from ...engine import dtypes as D
from ..checks import index_in_range
from ..tensor import _norm_dim, apply, from_numpy, Tensor
from ._core import as_tensor, broadcast_shapes, broadcast_to, prim, to_dtype
from ._registry import torch_op
from .creation import ones_like, zeros_like
from .elementwise import eq, floor_divide, logical_and, remainder, where
from .indexing import _check_index_tensor, _scatter_args, _scatter_prim, index_put, take
from .reduction import any as _any, cumsum
from .shape import (_along, _pad_prim, _scatter_add_prim, _slice_prim, _take_along_prim, expand,
                    reshape)

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _extreme_fill(dtype, largest):
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf if largest else jnp.inf
    if dtype == jnp.bool_:
        return not largest
    info = jnp.iinfo(dtype)
    return info.min if largest else info.max


def _scatter_reduce_lower(a, x, idx, src):
    dim, reduce, include_self = a
    at = _along(idx, dim)
    s = src[tuple(slice(0, n) for n in idx.shape)]
    if reduce in ("sum", "mean"):
        base = x if include_self else x.at[at].set(0)
        total = base.at[at].add(s)
        if reduce == "sum":
            return total
        count = (jnp.ones if include_self else jnp.zeros)(x.shape, x.dtype).at[at].add(
            jnp.ones(idx.shape, x.dtype))
        count = jnp.where(count == 0, jnp.ones((), x.dtype), count)
        if jnp.issubdtype(x.dtype, jnp.floating):
            return total / count
        return jnp.floor_divide(total, count)
    if reduce == "prod":
        base = x if include_self else x.at[at].set(1)
        return base.at[at].multiply(s)
    largest = reduce == "amax"
    base = x if include_self else x.at[at].set(_extreme_fill(x.dtype, largest))
    return base.at[at].max(s) if largest else base.at[at].min(s)


def _scatter_reduce_vjp(a, i, o, g):
    # PyTorch's scatter_reduce_backward (derivatives.yaml / FunctionsManual.cpp), op for op
    dim, reduce, include_self = a
    x, idx, src = i
    src_n = _leading(src, idx)
    if reduce == "sum":
        gx, gs = g, _take_along_prim(g, idx, dim)
    elif reduce == "mean":
        n = _scatter_add_prim(ones_like(g) if include_self else zeros_like(g), idx,
                              ones_like(src_n), dim)
        n = where(eq(n, 0), 1, n)
        gx = g / n
        gs = _take_along_prim(gx, idx, dim)
    elif reduce == "prod":
        masked_x = where(eq(x, 0), 1, x)
        masked_result = scatter_reduce(masked_x, dim, idx, src_n, "prod",
                                       include_self=include_self)
        gx = g * masked_result / masked_x
        src_zero = eq(src_n, 0)
        zeros_at = _take_along_prim(_scatter_add_prim(zeros_like(x), idx,
                                                      to_dtype(src_zero, x.dtype), dim),
                                    idx, dim)
        single_zero = logical_and(src_zero, eq(zeros_at, 1))
        masked_src = where(single_zero, 1, src_n)
        masked_src_result = scatter_reduce(x, dim, idx, masked_src, "prod",
                                           include_self=include_self)
        gs = where(single_zero, _take_along_prim(g * masked_src_result, idx, dim),
                   _take_along_prim(g * o, idx, dim) / where(src_zero, 1, src_n))
    else:
        value = _take_along_prim(o, idx, dim)
        x_is = to_dtype(eq(x, o), g.dtype)
        src_is = to_dtype(eq(src_n, value), g.dtype)
        count = _scatter_add_prim(x_is, idx, src_is, dim)
        shared = g / count
        gx = x_is * shared
        gs = src_is * _take_along_prim(shared, idx, dim)
    if not include_self:
        gx = _scatter_prim(gx, idx, zeros_like(_leading(g, idx)), dim)
    if tuple(src.shape) != tuple(idx.shape):
        hi = tuple(s - n for s, n in zip(src.shape, idx.shape))
        gs = _pad_prim(gs, (0,) * len(hi), hi, (0,) * len(hi), 0)
    return gx, None, gs


scatter_reduce_p = prim("scatter_reduce", _scatter_reduce_lower, _scatter_reduce_vjp)


def _leading(t, idx):
    """t's leading block of idx's shape (a scatter reads only that much of src)."""
    if tuple(t.shape) == tuple(idx.shape):
        return t
    return _slice_prim(t, (0,) * t.ndim, tuple(idx.shape), (1,) * t.ndim)


# ---- front ends ------------------------------------------------------------------------------
@torch_op(inplace=True)
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    """x with src's elements reduced into the positions index names along dim (torch's
    scatter_reduce): reduce is "sum", "prod", "mean", "amax" or "amin"; include_self=False
    leaves x's own values out of the positions that receive any. Integer means round down,
    as in PyTorch. Differentiable with PyTorch's rules (ties among extremes share the
    gradient evenly)."""
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    index, d, src = _scatter_args(x, dim, index, src, "scatter_reduce")
    out = apply(scatter_reduce_p, (x, index, src), (d, reduce, builtins.bool(include_self)),
                x._node.shape, x._node.dtype)
    index_in_range(index, x._node.shape[d], "scatter_reduce", dim=d, shape=x._node.shape,
                   out=out)
    return out


@torch_op(inplace=True)
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    """x with source's slices reduced into the slices at `index` along dim: reduce is "prod",
    "mean", "amax" or "amin" (torch.index_reduce)."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    index = _check_index_tensor(index, "index_reduce")
    if index.ndim > 1:
        raise IndexError(f"index_reduce_(): Index is supposed to be a vector, got shape "
                         f"{tuple(index.shape)}")
    d = _norm_dim(dim, x.ndim, "index_reduce")
    n = index.numel()
    want = x._node.shape[:d] + (n,) + x._node.shape[d + 1:]
    if tuple(source.shape) != want:
        raise RuntimeError(f"index_reduce_(): Source shape {tuple(source.shape)} must match "
                           f"self {tuple(x.shape)} excluding dim {d}, with {n} indices there")
    shape = [1] * x.ndim
    shape[d] = n
    full = expand(reshape(index, tuple(shape)), *want)
    return scatter_reduce(x, d, full, to_dtype(source, x.dtype), reduce,
                          include_self=include_self)


@torch_op
def masked_select(x, mask):
    """The elements of x where mask is True (both broadcast), as a 1-D tensor. The result's
    length depends on the mask: it is read on the host (a sync), as PyTorch's CPU kernel
    does. Differentiable with respect to x."""
    if not isinstance(mask, Tensor) or mask.dtype is not D.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = broadcast_shapes(x._node.shape, mask._node.shape, op="masked_select")
    flat = reshape(broadcast_to(x, shape), (-1,))
    m = np.asarray(broadcast_to(mask, shape).numpy()).reshape(-1)
    idx = from_numpy(np.flatnonzero(m).astype(np.int64), device=x.device)
    return take(flat, idx)


@torch_op(inplace=True)
def masked_scatter(x, mask, source):
    """x with the positions where mask is True filled, in row-major order, from source's
    first elements (torch.masked_scatter); no host read. Differentiable in x and source."""
    if not isinstance(mask, Tensor) or mask.dtype is not D.bool_:
        raise RuntimeError("masked_scatter_ only supports boolean masks")
    m = broadcast_to(mask, broadcast_shapes(x._node.shape, mask._node.shape,
                                            op="masked_scatter"))
    if tuple(m.shape) != tuple(x.shape):
        x = broadcast_to(x, m._node.shape)
    flat_m = reshape(m, (-1,))
    src = reshape(to_dtype(source, x.dtype), (-1,))
    if src.numel() == 0:
        if x.numel() and builtins.bool(_any(flat_m).item()):
            raise RuntimeError("masked_scatter: expected source to have as many elements as "
                               "the mask has True values (source is empty)")
        return x * 1
    pos = cumsum(flat_m, 0) - 1
    picked = take(src, where(flat_m, pos, 0))
    return where(m, reshape(picked, m._node.shape), x)


@torch_op(inplace=True)
def put(x, index, source, accumulate=False):
    """x (read as 1-D) with the elements at `index` (negative counts from the end) set to, or
    with accumulate increased by, source's (torch.put)."""
    index = _check_index_tensor(index, "put")
    if index.numel() != source.numel():
        raise RuntimeError(f"put_(): Expected source and index to have the same number of "
                           f"elements, but got source.numel() = {source.numel()}, "
                           f"index.numel() = {index.numel()}")
    flat = reshape(x, (-1,))
    out = index_put(flat, (reshape(index, (-1,)),), reshape(to_dtype(source, x.dtype), (-1,)),
                    accumulate=accumulate)
    return reshape(out, x._node.shape)


@torch_op
def argwhere(x):
    """The (N, x.ndim) indices of x's non-zero elements (torch.argwhere); the count depends
    on the values: read on the host (a sync)."""
    arr = np.asarray(x.numpy())
    if arr.ndim == 0:
        return from_numpy(np.zeros((1 if arr else 0, 0), np.int64), device=x.device)
    return from_numpy(np.argwhere(arr).astype(np.int64), device=x.device)


@torch_op(method=False)
def unravel_index(indices, shape):
    """The coordinates, in a tensor of `shape`, of flat `indices` (a tuple of tensors, one
    per dim); indices are taken modulo the number of elements, as in PyTorch."""
    indices = as_tensor(indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices.dtype}")
    shape = (shape,) if isinstance(shape, int) else tuple(builtins.int(s) for s in shape)
    if builtins.any(s < 0 for s in shape):
        raise ValueError("'shape' cannot have negative values, but got " + str(shape))
    coords = []
    rest = to_dtype(indices, D.canonical(D.int64))
    for s in reversed(shape):
        coords.append(remainder(rest, s) if s else rest * 0)
        rest = floor_divide(rest, s) if s else rest * 0
    return tuple(reversed(coords))

