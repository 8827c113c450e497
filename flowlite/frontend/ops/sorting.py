"""Ordering ops: sort, argsort, topk, kthvalue, median/nanmedian, mode, unique, searchsorted,
bucketize.

Layer: frontend — imports engine.dtypes, engine.errors, ops._core, ops._registry,
ops.elementwise, ops.reduction, ops.shape, tensor. The family's primitives (`<name>_p`) are
declared here, beside the front end that records them: their gradient rules call the ops of this
module and of those before it.

Each selection is an index-producing primitive (a stable `lax.sort` or `lax.top_k` over an
integer key that orders floats as PyTorch does: -0.0 == 0.0, NaN above +inf) and the values
are gathered at those indices, so the gradient is the incoming gradient scattered back to the
selected elements — PyTorch's rule for all of them.  `unique` has a data-dependent output
shape: it reads its input on the host (a sync), as PyTorch's semantics require.
"""
from __future__ import annotations

import builtins
import collections

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...engine.errors import ArgumentError, DTypeError, IndexRangeError
from ...engine import dtypes as D
from ..tensor import _norm_dim, apply, from_numpy, name_grad_fn, Tensor
from ._core import as_tensor, full_p, nondiff, prim, to_dtype
from .shape import _take_along_prim, narrow, reshape, squeeze
from .elementwise import eq, isnan, logical_and, logical_or, where
from .reduction import _order_key, sum
from ._registry import torch_op


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _argsort_lower(a, x):
    axis, descending, out = a
    key = _order_key(x, descending)
    iota = lax.broadcasted_iota(out.np, x.shape, axis)
    return lax.sort((key, iota), dimension=axis, is_stable=True, num_keys=1)[1]


def _topk_lower(a, x):
    k, axis, largest, out = a
    key = jnp.moveaxis(_order_key(x, not largest), axis, -1)   # top_k takes the largest keys
    return jnp.moveaxis(lax.top_k(key, k)[1].astype(out.np), -1, axis)


argsort_p = nondiff("argsort", _argsort_lower)


topk_indices_p = nondiff("topk_indices", _topk_lower)


def _mode_lower(a, x):
    # the most frequent value along axis (the smallest among equally frequent ones) and, as in
    # PyTorch, the index of its last occurrence: a stable sort makes equal values one run in
    # original order; each run's length comes from running max/min of its boundaries
    axis, out = a
    n = x.shape[axis]
    order = _argsort_lower((axis, False, out), x)
    s = jnp.take_along_axis(x, order, axis)
    pos = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    first = lax.slice_in_dim(s, 0, 1, axis=axis)
    lead = jnp.concatenate([jnp.ones_like(first, bool),
                            lax.slice_in_dim(s, 1, n, axis=axis)
                            != lax.slice_in_dim(s, 0, n - 1, axis=axis)], axis)
    tail = jnp.concatenate([lax.slice_in_dim(lead, 1, n, axis=axis),
                            jnp.ones_like(first, bool)], axis)
    start = lax.cummax(jnp.where(lead, pos, 0), axis=axis)
    end = lax.cummin(jnp.where(tail, pos, n), axis=axis, reverse=True)
    best = jnp.argmax(end - start, axis=axis, keepdims=True)    # first longest run
    last = jnp.take_along_axis(end, best, axis)
    return jnp.take_along_axis(order, last, axis)


mode_index_p = nondiff("mode_index", _mode_lower)


def _searchsorted_lower(a, seq, v):
    right, out = a
    side = "right" if right else "left"
    if seq.ndim == 1:
        r = jnp.searchsorted(seq, v, side=side)
    else:   # one sorted row per leading index
        lead = seq.shape[:-1]
        f = jax.vmap(lambda s, x: jnp.searchsorted(s, x, side=side))
        r = f(seq.reshape((-1, seq.shape[-1])), v.reshape((-1, v.shape[-1]))).reshape(
            lead + (v.shape[-1],))
    return r.astype(out.np)


searchsorted_p = nondiff("searchsorted", _searchsorted_lower)


def _distribute_vjp(a, i, o, g):
    # the gradient of a global median (PyTorch's evenly_distribute_backward): shared evenly
    # by every element equal to the result (every NaN when the result is NaN)
    x = i[0]
    mask = eq(x, o)
    if x.dtype.is_floating_point:
        mask = logical_or(mask, logical_and(isnan(x), isnan(o)))
    w = mask.to(g.dtype)
    return g * w / sum(w), None


# value v chosen from x, differentiated as above (forward: v itself)
distribute_grad_p = prim("distribute_grad", lambda a, x, v: v, _distribute_vjp)


SortResult = collections.namedtuple("sort", ["values", "indices"])
TopkResult = collections.namedtuple("topk", ["values", "indices"])
KthvalueResult = collections.namedtuple("kthvalue", ["values", "indices"])
MedianResult = collections.namedtuple("median", ["values", "indices"])
ModeResult = collections.namedtuple("mode", ["values", "indices"])


def _index_dtype():
    return D.canonical(D.int64)


def _check_tensor(x, op):
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}(): argument 'input' must be a Tensor, not {type(x).__name__}")


def _zero_d(x, op, dim):
    """0-d inputs behave as one element along dim 0 / -1 (PyTorch)."""
    _norm_dim(dim, 0, op)
    return reshape(x, (1,)), 0


def _argsort_prim(x, dim, descending):
    return apply(argsort_p, (x,), (dim, builtins.bool(descending), _index_dtype()),
                 x._node.shape, _index_dtype())


@torch_op
def sort(x, dim=-1, descending=False, stable=False):
    """(values, indices) along dim; always stable (a valid choice for stable=False too)."""
    _check_tensor(x, "sort")
    if x.ndim == 0:
        _norm_dim(dim, 0, "sort")
        return SortResult(x, reshape(_argsort_prim(reshape(x, (1,)), 0, descending), ()))
    d = _norm_dim(dim, x.ndim, "sort")
    idx = _argsort_prim(x, d, descending)
    return SortResult(name_grad_fn(_take_along_prim(x, idx, d), "SortBackward0"), idx)


@torch_op
def argsort(x, dim=-1, descending=False, stable=False):
    return sort(x, dim, descending, stable).indices


@torch_op
def msort(x):
    return sort(x, 0).values


@torch_op
def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's name
    """The k largest (smallest) elements along dim, in order, with their indices."""
    _check_tensor(x, "topk")
    k = builtins.int(k)
    if x.ndim == 0:
        y, d = _zero_d(x, "topk", dim)
    else:
        y, d = x, _norm_dim(dim, x.ndim, "topk")
    n = y._node.shape[d]
    if not 0 <= k <= n:
        raise RuntimeError(f"topk(): selected index k={k} out of range for dimension {d} of "
                           f"size {n} (input shape {tuple(x.shape)})")
    shape = tuple(k if i == d else s for i, s in enumerate(y._node.shape))
    if k == 0:
        idx = apply(full_p, (), (shape, 0, _index_dtype()), shape, _index_dtype())
    else:
        idx = apply(topk_indices_p, (y,), (k, d, builtins.bool(largest), _index_dtype()),
                    shape, _index_dtype())
    values = _take_along_prim(y, idx, d)
    if x.ndim == 0:
        values, idx = reshape(values, ()), reshape(idx, ())
    return TopkResult(name_grad_fn(values, "TopkBackward0", x), idx)


def _select_sorted(x, order, pos, d, keepdim, result):
    """values/indices at sorted position(s) `pos` (an int, or a keepdim-shaped int tensor)."""
    idx = narrow(order, d, pos, 1) if isinstance(pos, builtins.int) else \
        _take_along_prim(order, pos, d)
    values = _take_along_prim(x, idx, d)
    if not keepdim:
        values, idx = squeeze(values, d), squeeze(idx, d)
    return result(values, idx)


def _prepare(x, dim, op):
    _check_tensor(x, op)
    if x.ndim == 0:
        y, d = _zero_d(x, op, dim)
        return y, d, True
    d = _norm_dim(dim, x.ndim, op)
    if x._node.shape[d] == 0:
        raise IndexRangeError(f"{op}(): expected a non-empty dimension {d} (input shape "
                              f"{tuple(x.shape)})")
    return x, d, False


def _unzero(res, was_0d, keepdim, cls):
    if not was_0d:
        return res
    return cls(reshape(res.values, ()), reshape(res.indices, ()))


@torch_op
def kthvalue(x, k, dim=-1, keepdim=False):
    """The k-th smallest element along dim (NaN counts as the largest) and its index."""
    y, d, z = _prepare(x, dim, "kthvalue")
    n = y._node.shape[d]
    k = builtins.int(k)
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k={k} out of range for dimension {d} "
                           f"of size {n} (input shape {tuple(x.shape)})")
    order = _argsort_prim(y, d, False)
    return _unzero(_select_sorted(y, order, k - 1, d, keepdim or z, KthvalueResult), z,
                   keepdim, KthvalueResult)


def _median_pos(y, order, d, ignore_nan):
    """Sorted position of the lower median along d; with NaNs (sorted last): PyTorch's median
    returns the first NaN, nanmedian the lower median of the rest."""
    n = y._node.shape[d]
    if y.dtype.kind != "f":
        return (n - 1) // 2
    nans = sum(isnan(y), d, keepdim=True)
    if ignore_nan:
        valid = n - nans
        return where(valid > 0, (valid - 1) // 2, 0)
    return where(nans > 0, n - nans, (n - 1) // 2)


def _median_dim(x, dim, keepdim, op, ignore_nan):
    y, d, z = _prepare(x, dim, op)
    order = _argsort_prim(y, d, False)
    pos = _median_pos(y, order, d, ignore_nan)
    return _unzero(_select_sorted(y, order, pos, d, keepdim or z, MedianResult), z, keepdim,
                   MedianResult)


def _median_all(x, op, ignore_nan):
    _check_tensor(x, op)
    if x.numel() == 0:
        raise RuntimeError(f"{op}(): expected a non-empty tensor (shape {tuple(x.shape)})")
    flat = reshape(x, (-1,))
    v = _median_dim(flat, 0, False, op, ignore_nan).values.detach()
    return apply(distribute_grad_p, (x, v), (), (), x._node.dtype)


@torch_op
def median(x, dim=None, keepdim=False):
    """The lower of the two middle values (PyTorch's median); NaN if the input has a NaN."""
    if dim is None:
        return _median_all(x, "median", False)
    return _median_dim(x, dim, keepdim, "median", False)


@torch_op
def nanmedian(x, dim=None, keepdim=False):
    """median ignoring NaNs (NaN only where every element is NaN)."""
    if dim is None:
        return _median_all(x, "nanmedian", True)
    return _median_dim(x, dim, keepdim, "nanmedian", True)


@torch_op
def mode(x, dim=-1, keepdim=False):
    """The most frequent value along dim (the smallest if several are) and the index of its
    last occurrence."""
    y, d, z = _prepare(x, dim, "mode")
    shape = tuple(1 if i == d else s for i, s in enumerate(y._node.shape))
    idx = apply(mode_index_p, (y,), (d, _index_dtype()), shape, _index_dtype())
    values = _take_along_prim(y, idx, d)
    if not (keepdim or z):
        values, idx = squeeze(values, d), squeeze(idx, d)
    return _unzero(ModeResult(values, idx), z, keepdim, ModeResult)


@torch_op
def unique(x, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """Distinct elements (sorted; NaNs are never merged, as in PyTorch). The output's size
    depends on the data, so this reads the input on the host: a sync."""
    _check_tensor(x, "unique")
    arr = x.numpy()
    if dim is None:
        flat = arr.reshape(-1)
        vals, inv, counts = np.unique(flat, return_inverse=True, return_counts=True,
                                      equal_nan=False)
        inv = inv.reshape(arr.shape)
    else:
        d = _norm_dim(dim, x.ndim, "unique")
        if arr.shape[d] == 0 or arr.size == 0:
            vals, inv, counts = arr, np.zeros((arr.shape[d],), np.int64), \
                np.zeros((0,), np.int64)
        else:
            vals, inv, counts = np.unique(arr, return_inverse=True, return_counts=True,
                                          axis=d, equal_nan=False)
            inv = inv.reshape(-1)
    out = [from_numpy(np.ascontiguousarray(vals).astype(arr.dtype), device=x.device)]
    if return_inverse:
        out.append(from_numpy(inv.astype(np.int64), device=x.device))
    if return_counts:
        out.append(from_numpy(counts.astype(np.int64), device=x.device))
    return out[0] if len(out) == 1 else tuple(out)


@torch_op(method=False)
def searchsorted(sorted_sequence, input, out_int32=False, right=False, side=None,  # noqa: A002
                 sorter=None):
    """Indices where `input` would be inserted into the innermost dim of sorted_sequence to
    keep it sorted (right / side='right': after equal elements)."""
    seq = sorted_sequence
    _check_tensor(seq, "searchsorted")
    if side is not None:
        if side not in ("left", "right"):
            raise ArgumentError(f"searchsorted(): side can only be 'left' or 'right', got "
                                f"{side!r}")
        if right and side == "left":
            raise RuntimeError("searchsorted(): side and right can't be set to opposites, got "
                               "side of left while right was True")
        right = side == "right"
    v = input if isinstance(input, Tensor) else as_tensor(input)
    if seq.ndim == 0:
        raise RuntimeError("searchsorted(): boundaries tensor should have 1 dimension or more "
                           "(got a 0-d tensor)")
    if sorter is not None:
        sorter = as_tensor(sorter)
        if tuple(sorter.shape) != tuple(seq.shape) or sorter.dtype.kind not in "iu":
            raise RuntimeError(f"searchsorted(): sorter must be an integer tensor of the "
                               f"boundaries' shape {tuple(seq.shape)} (got {sorter.dtype} "
                               f"{tuple(sorter.shape)})")
        seq = _take_along_prim(seq, sorter, seq.ndim - 1)
    if seq.ndim > 1 and (v.ndim != seq.ndim or
                         tuple(v.shape[:-1]) != tuple(seq.shape[:-1])):
        raise RuntimeError(f"searchsorted(): boundaries tensor should be 1 dimension or the "
                           f"first N-1 dimensions of boundaries tensor and input value tensor "
                           f"must match, but we got boundaries tensor {tuple(seq.shape)} and "
                           f"input value tensor {tuple(v.shape)}")
    if v.dtype is not seq.dtype:
        dt = D.promote(v.dtype, seq.dtype)
        seq, v = to_dtype(seq, dt), to_dtype(v, dt)
    out = D.int32 if out_int32 else _index_dtype()
    return apply(searchsorted_p, (seq, v), (builtins.bool(right), out), v._node.shape, out)


@torch_op(method=False)
def bucketize(input, boundaries, out_int32=False, right=False):  # noqa: A002
    """The bucket of each element: boundaries[i-1] < x <= boundaries[i] (right=True:
    boundaries[i-1] <= x < boundaries[i])."""
    if not isinstance(boundaries, Tensor) or boundaries.ndim != 1:
        got = tuple(boundaries.shape) if isinstance(boundaries, Tensor) else type(boundaries)
        raise RuntimeError(f"bucketize(): boundaries tensor must be 1 dimension, but got {got}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
