"""Counting into bins: histc, histogram, histogramdd, bincount.

Layer: frontend — imports engine.dtypes, linspace_values, ops._core, ops._registry,
ops.creation, ops.elementwise, ops.indexing, ops.reduction, ops.shape, ops.sorting, tensor.

Each is a composition: a bin index per element (a binary search of the bin edges, or for histc
PyTorch's linear interpolation, in the input's dtype as PyTorch computes it), then an
`index_add` of the weights (ones without weights) into the bins. The values are PyTorch's.
The gradient with respect to `weight` is the incoming gradient gathered at each element's bin
(PyTorch's histogram and bincount have no derivative at all); the counts are piecewise constant
in the input, which gets no gradient (PyTorch's histc output does not require grad).

Shapes that depend on values read the input on the host, as PyTorch's CPU kernels do: a
histogram without `range` reads the input's min and max (one sync of two numbers), `histc`
with min == max likewise, `bincount` reads its input's max. Bin edges computed on the host
enter the program as data, so a changing range never recompiles.
"""
from __future__ import annotations

import builtins
import collections
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...engine import dtypes as D
from ..linspace_values import linspace_values
from ..tensor import apply, from_numpy, Tensor
from ._core import as_tensor, pointwise, to_dtype
from ._registry import torch_op
from .creation import zeros
from .elementwise import eq, ge, le, logical_and, trunc, where
from .indexing import index_add
from .reduction import amax, amin, sum
from .shape import expand, narrow, reshape
from .sorting import searchsorted

Histogram = collections.namedtuple("histogram", ["hist", "bin_edges"])
HistogramDD = collections.namedtuple("histogramdd", ["hist", "bin_edges"])


def _check_float(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument 'input' must be Tensor, not {type(x).__name__}")
    if x.dtype.kind != "f":
        raise NotImplementedError(f'"{op}" not implemented for \'{x.dtype}\' tensors (shape '
                                  f"{tuple(x.shape)}), as in PyTorch; convert to a float dtype")


def _host_range(x, op):
    """(min, max) of x as Python floats: one host read (a sync) of two numbers."""
    lo_hi = np.asarray([amin(x).item(), amax(x).item()], np.float64)
    return builtins.float(lo_hi[0]), builtins.float(lo_hi[1])


def _edges(lo, hi, bins, x, op, dim=0):
    """PyTorch's outer edges (an empty range widened by 0.5 each side) and the bin edges, a
    linspace in the input's dtype, as host data."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.{op}: dimension {dim}'s range [{lo}, {hi}] is not finite")
    if lo > hi:
        raise RuntimeError(f"torch.{op}: min should not exceed max, but got min {lo} max {hi} "
                           f"for dimension {dim}")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return from_numpy(linspace_values(lo, hi, bins + 1, x.dtype.np), device=x.device)


def _bin_of(x, edges, nbins):
    """Each element's bin (PyTorch's: left edges included, the last bin also its right edge)
    and whether it falls in any bin at all (NaN and values outside the edges do not)."""
    first = narrow(edges, 0, 0, 1)
    last = narrow(edges, 0, nbins, 1)
    idx = searchsorted(edges, x, right=True) - 1
    idx = where(eq(x, last), nbins - 1, idx)
    inside = logical_and(ge(x, first), le(x, last))
    return where(inside, idx, 0), inside


def _check_bins(bins, op):
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)):
        raise TypeError(f"{op}(): bins must be an int or a 1-D tensor of bin edges, got "
                        f"{type(bins).__name__}")
    if bins <= 0:
        raise RuntimeError(f"torch.{op}(): bins must be > 0, but got {bins} for dimension 0")
    return builtins.int(bins)


def _weights(weight, x, n, op):
    if weight is None:
        return None
    if not isinstance(weight, Tensor):
        raise TypeError(f"{op}(): weight must be a Tensor")
    if weight.dtype is not x.dtype:
        raise RuntimeError(f"torch.{op}: if weight tensor is provided, input tensor and weight "
                           f"tensor should have the same dtype, but got input({x.dtype}), and "
                           f"weight({weight.dtype})")
    return reshape(weight, (n,))


def _accumulate(nbins, idx, inside, w, x):
    one = w if w is not None else 1.0
    vals = where(inside, one, 0.0)
    vals = to_dtype(vals, x.dtype)
    return index_add(zeros(nbins, dtype=x.dtype, device=x.device), 0, idx, vals)


def _exact_div_vjp(a, i, o, g):
    x, t = i
    return g / t, sum(-(g * o) / t)


# x / t for a 0-d t, divided element by element and kept apart from the next division: XLA
# would otherwise multiply by 1/t, or fold (x / t) / w into x / (t * w) — a rounding PyTorch
# does not make (a density 1 ulp off)
exact_div_p = pointwise("exact_div", lambda a, x, t: lax.optimization_barrier(
    x / lax.optimization_barrier(jnp.broadcast_to(t, x.shape))), _exact_div_vjp)


def _normalized(hist):
    return apply(exact_div_p, (hist, sum(hist)), (), hist._node.shape, hist._node.dtype)


def _density(hist, edges):
    widths = narrow(edges, 0, 1, edges.shape[0] - 1) - narrow(edges, 0, 0, edges.shape[0] - 1)
    return _normalized(hist) / widths


@torch_op
def histogram(x, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    """PyTorch's torch.histogram: (hist, bin_edges) of a float tensor. `bins` is a number of
    equal-width bins over `range` (default: the input's min and max — read on the host, a
    sync) or a 1-D tensor of increasing edges. Elements outside the edges (and NaN) are not
    counted; the last bin includes its right edge. `weight` (the input's shape and dtype)
    weighs each element; `density` divides by the total and the bin widths. The gradient
    with respect to `weight` is the gradient of its bin; the input gets none."""
    _check_float(x, "histogram")
    flat = reshape(x, (-1,))
    n = flat.shape[0]
    w = _weights(weight, x, n, "histogram")
    if isinstance(bins, Tensor):
        if bins.dtype is not x.dtype:
            raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have "
                               f"the same dtype, but got input with dtype {x.dtype} and bins "
                               f"for dimension 0 with dtype {bins.dtype}")
        if bins.ndim != 1 or bins.shape[0] < 1:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension and "
                               f"at least 1 element, but got shape {tuple(bins.shape)}")
        edges = bins.clone()
    else:
        nb = _check_bins(bins, "histogram")
        if range is not None:
            lo, hi = (builtins.float(v) for v in range)
        elif n:
            lo, hi = _host_range(flat, "histogram")
        else:
            lo, hi = 0.0, 1.0
        edges = _edges(lo, hi, nb, x, "histogramdd")
    nbins = edges.shape[0] - 1
    if nbins == 0:
        return Histogram(zeros(0, dtype=x.dtype, device=x.device), edges)
    idx, inside = _bin_of(flat, edges, nbins)
    hist = _accumulate(nbins, idx, inside, w, x)
    if density:
        hist = _density(hist, edges)
    return Histogram(hist, edges)


@torch_op
def histc(x, bins=100, min=0, max=0):  # noqa: A002 - PyTorch's names
    """PyTorch's torch.histc: counts of a float tensor's elements in `bins` equal-width bins
    over [min, max] (both 0, or equal: the input's min and max, read on the host — a sync).
    Elements outside are not counted. Bins are found as PyTorch's histc finds them, by linear
    interpolation in the input's dtype (so an element within rounding of an edge lands where
    PyTorch puts it). Not differentiable (PyTorch's output does not require grad)."""
    _check_float(x, "histogram_cpu")
    nb = _check_bins(bins, "histc")
    flat = reshape(x, (-1,)).detach()
    lo, hi = builtins.float(min), builtins.float(max)
    if lo == hi and flat.shape[0]:
        lo, hi = _host_range(flat, "histc")
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not all(math.isfinite(v) for v in (lo, hi)):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    if lo >= hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    edges = linspace_values(lo, hi, nb + 1, x.dtype.np)
    left = as_tensor(edges[0].item(), dtype=x.dtype)
    right = as_tensor(edges[-1].item(), dtype=x.dtype)
    # PyTorch's LINEAR_INTERPOLATION: (x - left) * bins / (right - left), truncated
    pos = to_dtype(trunc((flat - left) * nb / (right - left)), D.canonical(D.int64))
    pos = where(eq(pos, nb), nb - 1, pos)
    inside = logical_and(ge(flat, left), le(flat, right))
    return _accumulate(nb, where(inside, pos, 0), inside, None, x)


@torch_op(method=False)
def histogramdd(x, bins=10, *, range=None, weight=None, density=False):  # noqa: A002
    """PyTorch's torch.histogramdd: the N-dimensional histogram of a (..., N) float tensor's
    points — (hist, bin_edges: a tuple of N edge tensors). `bins`: an int, N ints or N 1-D
    edge tensors; `range`: 2N numbers (default: each coordinate's min and max, read on the
    host — a sync)."""
    _check_float(x, "histogramdd")
    if x.ndim < 2:
        raise RuntimeError(f"torch.histogramdd: input tensor should have at least 2 dimensions, "
                           f"but got {x.ndim}")
    d = x.shape[-1]
    pts = reshape(x, (-1, d))
    m = pts.shape[0]
    w = _weights(weight, x, m, "histogramdd")
    if isinstance(bins, (int, np.integer)):
        bins = [builtins.int(bins)] * d
    bins = list(bins)
    if len(bins) != d:
        raise RuntimeError(f"torch.histogramdd: expected {d} sequences of bin edges for a "
                           f"{d}-dimensional histogram but got {len(bins)}")
    if range is not None and len(range) != 2 * d:
        raise RuntimeError(f"torch.histogramdd: for a {d}-dimensional histogram range should "
                           f"have {2 * d} elements, but got {len(range)}")
    edges, nbins = [], []
    for k, b in enumerate(bins):
        col = narrow(pts, 1, k, 1)
        if isinstance(b, Tensor):
            if b.dtype is not x.dtype or b.ndim != 1 or b.shape[0] < 1:
                raise RuntimeError(f"torch.histogramdd: bins for dimension {k} must be a "
                                   f"non-empty 1-D {x.dtype} tensor, got {b.dtype} "
                                   f"{tuple(b.shape)}")
            e = b.clone()
        else:
            nb = _check_bins(b, "histogramdd")
            if range is not None:
                lo, hi = builtins.float(range[2 * k]), builtins.float(range[2 * k + 1])
            elif m:
                lo, hi = _host_range(col, "histogramdd")
            else:
                lo, hi = 0.0, 1.0
            e = _edges(lo, hi, nb, x, "histogramdd", k)
        edges.append(e)
        nbins.append(e.shape[0] - 1)
    shape = tuple(nbins)
    total = 1
    for s in shape:
        total *= s
    if total == 0:
        return HistogramDD(zeros(shape, dtype=x.dtype, device=x.device), tuple(edges))
    flat_idx, inside = None, None
    for k, e in enumerate(edges):
        idx, ok = _bin_of(reshape(narrow(pts, 1, k, 1), (-1,)), e, nbins[k])
        flat_idx = idx if flat_idx is None else flat_idx * nbins[k] + idx
        inside = ok if inside is None else logical_and(inside, ok)
    hist = reshape(_accumulate(total, flat_idx, inside, w, x), shape)
    if density:
        hist = _normalized(hist)
        for k, e in enumerate(edges):
            widths = narrow(e, 0, 1, nbins[k]) - narrow(e, 0, 0, nbins[k])
            hist = hist / reshape(widths, tuple(nbins[k] if j == k else 1 for j in
                                                builtins.range(d)))
    return HistogramDD(hist, tuple(edges))


@torch_op
def bincount(x, weights=None, minlength=0):
    """PyTorch's torch.bincount: how often each value 0..max(x) occurs in a 1-D non-negative
    integer tensor (at least `minlength` bins), or the sum of `weights` per value. The number
    of bins depends on the values: the input's min and max are read on the host (a sync).
    The result is int64 without weights, the weights' dtype for float weights, float64
    otherwise. The gradient with respect to `weights` is the gradient of each element's bin
    (PyTorch has none)."""
    if not isinstance(x, Tensor) or x.ndim != 1 or x.dtype.kind not in "iub" or \
            x.dtype is D.bool_:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    n = x.shape[0]
    if weights is not None:
        if not isinstance(weights, Tensor) or weights.ndim != 1 or weights.shape[0] != n:
            raise RuntimeError("weights should be 1-d and have the same length as input")
    size = builtins.int(minlength)
    if n:
        lo, hi = _host_range(x, "bincount")
        if lo < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        size = builtins.max(size, builtins.int(hi) + 1)
    if weights is None:
        dt = D.canonical(D.int64)
        vals = expand(reshape(to_dtype(as_tensor(1), dt), (1,)), n)
    else:
        dt = weights.dtype if weights.dtype.kind == "f" else D.canonical(D.float64)
        vals = to_dtype(weights, dt)
    out = zeros(size, dtype=dt, device=x.device)
    if not n:
        return out
    return index_add(out, 0, x, vals)
