"""Order statistics built on sort: quantile, nanquantile, unique_consecutive.

Layer: frontend — imports engine.dtypes, ops._core, ops._registry, ops.elementwise,
ops.reduction, ops.shape, ops.sorting, tensor.

quantile follows PyTorch's at::quantile op for op (sort, ranks q * (n - 1) — the last index
where a slice has a NaN, or for nanquantile over the non-NaN count — then a gather and a lerp),
so values and gradients (through the sort's gather and the lerp) are PyTorch's.
unique_consecutive has a data-dependent shape and reads its input on the host (a sync).
"""
from __future__ import annotations

import builtins

import numpy as np

from ...engine import dtypes as D
from ..tensor import _norm_dim, from_numpy, Tensor
from ._core import as_tensor, broadcast_to, to_dtype
from ._registry import torch_op
from .elementwise import ceil, eq, floor, isnan, lerp, logical_not, round, where
from .reduction import all as _all, any as _any, sum
from .shape import _take_along_prim, permute, reshape, squeeze
from .sorting import sort

_MODES = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(x, q, dim, keepdim, interpolation, ignore_nan, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}() argument 'input' must be Tensor")
    if x.dtype.kind != "f":
        raise RuntimeError(f"{op}() input tensor must be either float or double dtype")
    if interpolation not in _MODES:
        raise ValueError(f"{op}() interpolation must be one of linear, lower, higher, midpoint "
                         f"or nearest. Got {interpolation}")
    scalar_q = not isinstance(q, Tensor)
    if scalar_q:
        if not 0 <= q <= 1:
            raise RuntimeError(f"{op}() q must be in the range [0, 1] but got {q}")
        qt = as_tensor(float(q), dtype=x.dtype)
    else:
        if q.ndim > 1:
            raise RuntimeError(f"{op}() q must be a scalar or 1D tensor")
        if q.dtype is not x.dtype:
            raise RuntimeError(f"{op}() q tensor must be same dtype as the input tensor")
        if q.numel() and not builtins.bool(_all((q >= 0) & (q <= 1)).item()):
            raise RuntimeError(f"{op}() q values must be in the range [0, 1]")
        qt = q
    if x.numel() == 0:
        raise RuntimeError(f"{op}() input tensor must be non-empty")
    # the reduced dim last, sorted (NaN sorts last)
    if dim is None:
        y = reshape(x, (-1,))
        kept = (1,) * x.ndim if keepdim else ()
    else:
        d = _norm_dim(dim, x.ndim, op)
        y = permute(x, [i for i in range(x.ndim) if i != d] + [d]) if x.ndim else \
            reshape(x, (1,))
        kept = tuple(1 if i == d else s for i, s in enumerate(x._node.shape)) if keepdim \
            else tuple(s for i, s in enumerate(x._node.shape) if i != d)
    srt = sort(y, -1).values
    n = srt._node.shape[-1]
    lead = srt._node.shape[:-1]
    qv = reshape(qt, (1,) * len(lead) + (-1,)) if qt.ndim else reshape(qt, (1,) * len(lead) +
                                                                         (1,))
    nq = qv._node.shape[-1]
    nan = isnan(srt)
    if ignore_nan:
        count = sum(to_dtype(logical_not(nan), x.dtype), -1, keepdim=True)
        ranks = qv * (count - 1)
        ranks = where(ranks < 0, 0.0, ranks)
    else:
        last = n - 1
        has_nan = broadcast_to(_any(nan, -1, keepdim=True), lead + (nq,))
        ranks = where(has_nan, float(last), broadcast_to(qv * last, lead + (nq,)))
    ranks = broadcast_to(ranks, lead + (nq,))
    if interpolation == "lower":
        ranks = floor(ranks)
    elif interpolation == "higher":
        ranks = ceil(ranks)
    elif interpolation == "nearest":
        ranks = round(ranks)
    index = D.canonical(D.int64)
    below = to_dtype(ranks, index)
    out = _take_along_prim(srt, below, srt.ndim - 1)
    if interpolation in ("linear", "midpoint"):
        weights = to_dtype(where(eq(ranks, ranks), 0.5, 0.5), x.dtype) if \
            interpolation == "midpoint" else \
            ranks - to_dtype(below, x.dtype)
        above = to_dtype(ceil(ranks), index)
        out = lerp(out, _take_along_prim(srt, above, srt.ndim - 1), weights)
    # (..., nq) -> (nq, ...) then keepdim's shape
    if scalar_q or qt.ndim == 0:
        return reshape(squeeze(out, -1), kept)
    out = permute(out, [out.ndim - 1] + list(range(out.ndim - 1)))
    return reshape(out, (nq,) + kept)


@torch_op
def quantile(x, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The q-th quantiles of x over dim (or all elements), q a number or a 1-D tensor in
    [0, 1] (a tensor q is checked on the host, a sync, as in PyTorch); NaN wherever the
    reduced slice holds a NaN. interpolation: linear, lower, higher, midpoint or nearest."""
    return _quantile(x, q, dim, keepdim, interpolation, False, "quantile")


@torch_op
def nanquantile(x, q, dim=None, keepdim=False, *, interpolation="linear"):
    """quantile() ignoring NaNs (NaN only where a slice is all NaN)."""
    return _quantile(x, q, dim, keepdim, interpolation, True, "nanquantile")


@torch_op
def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    """The first element of every run of equal consecutive elements (or slices along dim),
    with optional inverse indices and run lengths. The output's size depends on the data, so
    this reads the input on the host: a sync."""
    arr = np.asarray(x.numpy())
    if dim is None:
        flat = arr.reshape(-1)
        if flat.size:
            new = np.concatenate([[True], flat[1:] != flat[:-1]])
        else:
            new = np.zeros((0,), bool)
        starts = np.flatnonzero(new)
        vals = flat[starts]
        inv = (np.cumsum(new) - 1).reshape(arr.shape)
    else:
        d = _norm_dim(dim, x.ndim, "unique_consecutive")
        moved = np.moveaxis(arr, d, 0)
        m = moved.shape[0]
        if m:
            rows = moved.reshape(m, -1)
            new = np.concatenate([[True], np.any(rows[1:] != rows[:-1], axis=1)])
        else:
            new = np.zeros((0,), bool)
        starts = np.flatnonzero(new)
        vals = np.moveaxis(moved[starts], 0, d)
        inv = np.cumsum(new) - 1
    counts = np.diff(np.append(starts, new.shape[0])) if starts.size else \
        np.zeros((0,), np.int64)
    out = [from_numpy(np.ascontiguousarray(vals).astype(arr.dtype), device=x.device)]
    if return_inverse:
        out.append(from_numpy(inv.astype(np.int64), device=x.device))
    if return_counts:
        out.append(from_numpy(counts.astype(np.int64), device=x.device))
    return out[0] if len(out) == 1 else tuple(out)

