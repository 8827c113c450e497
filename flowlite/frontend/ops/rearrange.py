"""Rearranging ops built from slices, gathers and broadcasts: roll, repeat_interleave,
meshgrid.

Layer: frontend — imports engine.dtypes, engine.errors, ops._core, ops._registry, ops.creation,
ops.indexing, ops.reduction, ops.shape, ops.sorting, tensor. The family's primitives
(`<name>_p`) are declared here, beside the front end that records them: their gradient rules
call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import warnings

import numpy as np

from ...engine.errors import ArgumentError
from ...engine import dtypes as D
from ..tensor import _norm_dim, apply, from_numpy, Tensor
from .sorting import searchsorted_p
from ._core import broadcast_to
from .creation import arange
from .shape import cat, expand, narrow, reshape, unsqueeze
from .reduction import cumsum
from .indexing import index_select
from ._registry import torch_op


@torch_op
def roll(x, shifts, dims=None):
    """Shift elements along dims, wrapping around (dims=None: over the flattened tensor)."""
    if dims is None:
        if isinstance(shifts, (tuple, list)):
            if len(shifts) != 1:
                raise RuntimeError(f"roll(): shifts must be an int when dims is None (got "
                                   f"{tuple(shifts)})")
            shifts = shifts[0]
        return reshape(roll(reshape(x, (-1,)), shifts, 0), x._node.shape)
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll(): shifts and dims must align, got shifts {shifts} and dims "
                           f"{dims}")
    for s, d in zip(shifts, dims):
        d = _norm_dim(d, x.ndim, "roll")
        n = x._node.shape[d]
        k = builtins.int(s) % n if n else 0
        if k:
            x = cat([narrow(x, d, n - k, k), narrow(x, d, 0, n - k)], d)
    return x


@torch_op
def repeat_interleave(x, repeats=None, dim=None, output_size=None):
    """Repeat each element `repeats` times along dim (flattened when dim is None).

    Tensor repeats make the output size depend on data: pass `output_size` (their sum) to
    keep everything lazy, as PyTorch's CUDA path does (flowlite then trusts it, unchecked);
    without it the repeats are read on the host (a sync) and checked, as PyTorch's CPU
    path does."""
    if repeats is None:      # repeat_interleave(repeats): arange(len(repeats)) repeated
        reps = x
        if not isinstance(reps, Tensor) or reps.ndim != 1 or reps.dtype.kind not in "iu":
            raise RuntimeError("repeat_interleave(): repeats must be a 1-D integer tensor")
        return repeat_interleave(arange(reps.shape[0], device=reps.device, dtype=reps.dtype),
                                 reps, 0, output_size)
    if dim is None:
        x = reshape(x, (-1,))
        d = 0
    else:
        d = _norm_dim(dim, x.ndim, "repeat_interleave")
    if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats.ndim <= 1 and \
            x._node.shape[d] != 1:
        if output_size is None:   # one repeat count for all: it sets the shape (a host read)
            repeats = builtins.int(repeats.item())
        else:
            n = x._node.shape[d]
            if output_size % builtins.max(n, 1):
                raise RuntimeError(f"repeat_interleave(): output_size {output_size} is not a "
                                   f"multiple of the size {n} of dim {d}")
            repeats = output_size // builtins.max(n, 1)
    if not isinstance(repeats, Tensor):
        r = builtins.int(repeats)
        if r < 0:
            raise RuntimeError(f"repeat_interleave(): repeats can not be negative (got {r})")
        shape = x._node.shape
        y = unsqueeze(x, d + 1)
        y = expand(y, shape[:d + 1] + (r,) + shape[d + 1:])
        return reshape(y, shape[:d] + (shape[d] * r,) + shape[d + 1:])
    reps = repeats
    if reps.dtype.kind not in "iu":
        raise RuntimeError(f"repeat_interleave(): repeats must have an integer dtype, got "
                           f"{reps.dtype}")
    if reps.ndim > 1:
        raise RuntimeError(f"repeat_interleave(): repeats must be 0-dimensional or "
                           f"1-dimensional tensor, got shape {tuple(reps.shape)}")
    reps = reshape(reps, (-1,))
    n = x._node.shape[d]
    if reps.shape[0] != n:
        raise RuntimeError(f"repeat_interleave(): repeats must have the same size as input "
                           f"along dim {d}, but got repeats.size(0) = {reps.shape[0]} and "
                           f"input.size({d}) = {n}")
    if output_size is None:
        host = np.asarray(reps.numpy())
        if (host < 0).any():
            raise RuntimeError("repeat_interleave(): repeats can not be negative")
        output_size = builtins.int(host.sum())
        reps = from_numpy(host, device=reps.device)
    ends = cumsum(reps, 0)
    pos = arange(builtins.int(output_size), device=x.device, dtype=ends.dtype)
    # source of output position p: the first i whose cumulative count exceeds p
    src = apply(searchsorted_p, (ends, pos), (True, D.canonical(D.int64)), pos._node.shape,
                D.canonical(D.int64))
    return index_select(x, d, src)


@torch_op(method=False)
def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 1-D (or 0-d) tensors; indexing 'ij' (matrix, the default) or
    'xy' (Cartesian: the first two output dims swapped)."""
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("flowlite.meshgrid: in an upcoming release, it will be required to pass "
                      "the indexing argument (as torch.meshgrid warns); defaulting to 'ij'",
                      UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if not isinstance(t, Tensor) or t.ndim > 1:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise RuntimeError(f"meshgrid: expected 0D or 1D tensors, got {got}")
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError(f"meshgrid expects all tensors to have the same dtype (got "
                               f"{tensors[0].dtype} and {t.dtype})")
    sizes = [t.numel() for t in tensors]
    order = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        order[0], order[1] = 1, 0       # output dim j holds the varying axis of input order[j]
    shape = tuple(sizes[i] for i in order)
    out = []
    for i, t in enumerate(tensors):
        pos = order.index(i)
        view = tuple(sizes[i] if j == pos else 1 for j in range(len(shape)))
        out.append(broadcast_to(reshape(t, view), shape))
    return tuple(out)
