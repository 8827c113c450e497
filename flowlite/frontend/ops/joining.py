"""Joining, tiling, flipping and diagonals, composed of the shape family: hstack/vstack/
dstack/column_stack, tile, block_diag, cartesian_prod, combinations, rot90, fliplr/flipud,
diag_embed, diagflat, trace, kron, diff, vander, tril_indices/triu_indices, narrow_copy and the
`*_scatter` ops (select/slice/diagonal/as_strided_scatter).

Layer: frontend — imports engine.dtypes, engine.layout, ops._core, ops._registry, ops.creation,
ops.elementwise, ops.indexing, ops.reduction, ops.shape, tensor. Every op here is a composition
of recorded primitives (reshapes, slices, concatenations, pads, strided reads and writes), so
its gradient comes from theirs. The results are new tensors, as in PyTorch (none of these ops
returns a view).
"""
from __future__ import annotations

import builtins
import itertools

import numpy as np

from ...engine import dtypes as D, layout as L
from ..tensor import _norm_dim, from_numpy, Tensor
from ._core import _promote_nodes, as_tensor, to_dtype
from ._registry import torch_op
from .creation import zeros
from .elementwise import logical_xor, mul
from .indexing import index_select
from .reduction import cumprod, sum
from .shape import (_view_read, _view_write, cat, clone, expand, flip, narrow, pad, permute,
                    repeat, reshape, stack, unsqueeze)


def _as_list(tensors, op):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError(f"{op} expects a non-empty TensorList")
    return [t if isinstance(t, Tensor) else as_tensor(t) for t in tensors]


def _atleast(t, n):
    nd = t.ndim
    if nd >= n:
        return t
    if n == 3 and nd == 1:
        return reshape(t, (1, t._node.shape[0], 1))
    if n == 3 and nd == 2:
        return unsqueeze(t, -1)
    return reshape(t, (1,) * (n - nd) + t._node.shape)


@torch_op(method=False)
def hstack(tensors):
    """Concatenate along dim 1 (dim 0 for 1-D tensors), as torch.hstack."""
    ts = [_atleast(t, 1) for t in _as_list((tensors,), "hstack")]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


@torch_op(method=False, aliases=("row_stack",))
def vstack(tensors):
    """Concatenate along dim 0 after making each tensor at least 2-D (torch.vstack)."""
    return cat([_atleast(t, 2) for t in _as_list((tensors,), "vstack")], 0)


@torch_op(method=False)
def dstack(tensors):
    """Concatenate along dim 2 after making each tensor at least 3-D (torch.dstack)."""
    return cat([_atleast(t, 3) for t in _as_list((tensors,), "dstack")], 2)


@torch_op(method=False)
def column_stack(tensors):
    """0-d and 1-D tensors become columns, then concatenate along dim 1 (torch.column_stack)."""
    ts = []
    for t in _as_list((tensors,), "column_stack"):
        ts.append(reshape(t, (t.numel(), 1)) if t.ndim <= 1 else t)
    return cat(ts, 1)


@torch_op
def tile(x, *dims):
    """x repeated dims[i] times along each dim; fewer dims than x has are padded with 1s in
    front, more make new leading dims (torch.tile)."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(builtins.int(d) for d in dims)
    if len(dims) < x.ndim:
        dims = (1,) * (x.ndim - len(dims)) + dims
    return repeat(x, *dims)


@torch_op(method=False)
def block_diag(*tensors):
    """The tensors (0-d, 1-D as a row, or 2-D) placed along the diagonal of one matrix, zeros
    elsewhere; the dtype is the tensors' common one (torch.block_diag)."""
    if not tensors:
        return zeros((1, 0))
    ts = []
    for t in tensors:
        t = t if isinstance(t, Tensor) else as_tensor(t)
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {len(ts)} has {t.ndim} dimensions")
        ts.append(reshape(t, (1, 1)) if t.ndim == 0 else reshape(t, (1, -1)) if t.ndim == 1
                  else t)
    dt = ts[0].dtype
    for t in ts[1:]:
        dt = _promote_nodes(reshape(ts[0], (-1,))._node, reshape(t, (-1,))._node) \
            if t.dtype is not dt else dt
    cols = builtins.sum(t._node.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        c = t._node.shape[1]
        rows.append(pad(to_dtype(t, dt), (left, cols - left - c)))
        left += c
    return cat(rows, 0)


@torch_op(method=False)
def cartesian_prod(*tensors):
    """Every combination of one element from each 1-D tensor, as rows of a (N, k) tensor
    (a 1-D input comes back as itself), as torch.cartesian_prod."""
    ts = _as_list(tensors, "cartesian_prod")
    for t in ts:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {tuple(t.shape)}")
    if len(ts) == 1:
        return ts[0]
    sizes = tuple(t._node.shape[0] for t in ts)
    cols = []
    for k, t in enumerate(ts):
        shape = tuple(n if j == k else 1 for j, n in enumerate(sizes))
        cols.append(reshape(expand(reshape(t, shape), *sizes), (-1,)))
    return stack(cols, 1)


@torch_op(method=False)
def combinations(x, r=2, with_replacement=False):
    """The length-r combinations of a 1-D tensor's elements as rows, in itertools' order
    (torch.combinations)."""
    if x.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {tuple(x.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return zeros(0, dtype=x.dtype, device=x.device)
    n = x._node.shape[0]
    gen = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    rows = np.asarray(list(gen(range(n), r)), np.int64).reshape(-1, r)
    if rows.shape[0] == 0:
        return zeros((0, r), dtype=x.dtype, device=x.device)
    idx = from_numpy(rows.reshape(-1), device=x.device)
    return reshape(index_select(x, 0, idx), rows.shape)


@torch_op
def rot90(x, k=1, dims=(0, 1)):
    """Rotate by 90 degrees k times in the plane of dims, from the first towards the second
    (torch.rot90)."""
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if x.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {x.ndim}")
    d0, d1 = (_norm_dim(d, x.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and "
                           f"dim1 = {d1}")
    k %= 4
    perm = list(range(x.ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    if k == 1:
        return permute(flip(x, [d1]), perm)
    if k == 2:
        return flip(x, [d0, d1])
    if k == 3:
        return flip(permute(x, perm), [d1])
    return clone(x)


@torch_op
def fliplr(x):
    """Flip dim 1 (left/right) of a tensor of at least 2 dims."""
    if x.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(x, [1])


@torch_op
def flipud(x):
    """Flip dim 0 (up/down) of a tensor of at least 1 dim."""
    if x.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(x, [0])


def _diag_layout(shape, offset, d1, d2):
    vshape = L.diagonal_shape(shape, offset, d1, d2)
    off, st = L.diagonal_layout(0, L.contiguous_strides(shape), shape, offset, d1, d2)
    return vshape, off, st


@torch_op
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """A tensor whose diagonals (offset, in the plane of dim1 and dim2 of the result) hold x's
    last dim, zeros elsewhere (torch.diag_embed)."""
    nd = x.ndim + 1
    d1, d2 = _norm_dim(dim1, nd, "diag_embed"), _norm_dim(dim2, nd, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = x._node.shape[-1] + builtins.abs(offset)
    rest = list(x._node.shape[:-1])
    shape = []
    for i in range(nd):
        shape.append(n if i in (d1, d2) else rest.pop(0))
    shape = tuple(shape)
    vshape, off, st = _diag_layout(shape, offset, d1, d2)
    return _view_write(zeros(shape, dtype=x.dtype, device=x.device), reshape(x, vshape), off, st)


@torch_op
def diagflat(x, offset=0):
    """x flattened, on the offset diagonal of a square matrix (torch.diagflat)."""
    return diag_embed(reshape(x, (-1,)), offset, 0, 1)


@torch_op
def trace(x):
    """The sum of a matrix's main diagonal (torch.trace); integer inputs sum as int64."""
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    vshape, off, st = _diag_layout(x._node.shape, 0, 0, 1)
    return sum(_view_read(x, vshape, off, st))


@torch_op
def kron(x, other):
    """The Kronecker product (torch.kron): for each element of x a block of other scaled by
    it; the shorter shape is padded with leading 1s."""
    if not isinstance(other, Tensor):
        other = as_tensor(other)
    nd = builtins.max(x.ndim, other.ndim)
    a = reshape(x, (1,) * (nd - x.ndim) + x._node.shape)
    b = reshape(other, (1,) * (nd - other.ndim) + other._node.shape)
    sa, sb = a._node.shape, b._node.shape
    # a[i0, 1, i1, 1, ...] * b[1, j0, 1, j1, ...] then merge each (i, j) pair
    ai = reshape(a, tuple(v for s in sa for v in (s, 1)))
    bi = reshape(b, tuple(v for s in sb for v in (1, s)))
    return reshape(mul(ai, bi), tuple(p * q for p, q in zip(sa, sb)))


@torch_op
def diff(x, n=1, dim=-1, prepend=None, append=None):
    """The n-th forward difference along dim, after prepending/appending (torch.diff); bool
    tensors give logical_xor of neighbours, as in PyTorch."""
    if x.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = _norm_dim(dim, x.ndim, "diff")
    parts = [t if isinstance(t, Tensor) else as_tensor(t) for t in (prepend, x, append)
             if t is not None]
    if len(parts) > 1:
        parts = [expand(reshape(p, tuple(1 for _ in x._node.shape)), *[
            s if i != d else 1 for i, s in enumerate(x._node.shape)]) if p.ndim == 0 else p
            for p in parts]
        x = cat(parts, d)
    for _ in range(n):
        m = x._node.shape[d]
        if m == 0:
            break
        hi, lo = narrow(x, d, 1, m - 1), narrow(x, d, 0, m - 1)
        if x.dtype is D.bool_:
            x = logical_xor(hi, lo)
        else:
            x = hi - lo
    return x


@torch_op(method=False)
def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-D tensor: columns x**(N-1), ..., x**0 (increasing: the
    reverse); integers compute as int64, as in PyTorch."""
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x._node.shape[0] if N is None else builtins.int(N)
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    if x.dtype.kind in "bui":
        x = to_dtype(x, D.canonical(D.int64))
    if n == 0:
        return zeros((x._node.shape[0], 0), dtype=x.dtype, device=x.device)
    cols = cat([to_dtype(expand(reshape(as_tensor(1), (1, 1)), x._node.shape[0], 1), x.dtype),
                expand(unsqueeze(x, 1), x._node.shape[0], n - 1)], 1) if n > 1 else \
        to_dtype(expand(reshape(as_tensor(1), (1, 1)), x._node.shape[0], 1), x.dtype)
    out = cumprod(cols, 1)
    return out if increasing else flip(out, [1])


def _triangle_indices(row, col, offset, dtype, device, lower, op):
    r, c = np.tril_indices(row, offset, col) if lower else np.triu_indices(row, offset, col)
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.canonical(D.int64)
    if d.kind not in "iu":
        raise RuntimeError(f"\"{op}\" not implemented for '{d}'")
    return from_numpy(np.stack([r, c]).astype(d.np).reshape(2, -1), device=device)


@torch_op(method=False)
def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """The (2, N) coordinates of a row x col matrix's lower triangle (torch.tril_indices)."""
    return _triangle_indices(row, col, offset, dtype, device, True, "tril_indices")


@torch_op(method=False)
def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """The (2, N) coordinates of a row x col matrix's upper triangle (torch.triu_indices)."""
    return _triangle_indices(row, col, offset, dtype, device, False, "triu_indices")


@torch_op
def narrow_copy(x, dim, start, length):
    """narrow() as a new tensor (torch.narrow_copy)."""
    d = _norm_dim(dim, x.ndim, "narrow_copy")
    if start < 0:
        start += x._node.shape[d]
    return clone(narrow(x, d, start, length))


# ---- writing a view's elements out of place: the *_scatter ops --------------------------------
def _scatter_into(x, src, vshape, off, strides, op):
    if not isinstance(src, Tensor):
        raise TypeError(f"{op}(): argument 'src' must be Tensor")
    if tuple(src.shape) != tuple(vshape):
        raise RuntimeError(f"{op}(): expected src to have a size equal to the slice of self. "
                           f"src size = {list(src.shape)}, slice size = {list(vshape)}")
    return _view_write(x, to_dtype(src, x.dtype), off, strides)


@torch_op
def select_scatter(x, src, dim, index):
    """x with x.select(dim, index) replaced by src (a new tensor)."""
    d = _norm_dim(dim, x.ndim, "select_scatter")
    n = x._node.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select_scatter(): index {index} out of range for tensor of size "
                         f"{tuple(x.shape)} at dimension {d}")
    index %= n
    strides = L.contiguous_strides(x._node.shape)
    vshape = x._node.shape[:d] + x._node.shape[d + 1:]
    return _scatter_into(x, src, vshape, index * strides[d], strides[:d] + strides[d + 1:],
                         "select_scatter")


@torch_op
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    """x with x[..., start:end:step, ...] (along dim) replaced by src (a new tensor)."""
    d = _norm_dim(dim, x.ndim, "slice_scatter")
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    s, e, _ = slice(start, end, step).indices(x._node.shape[d])
    count = builtins.max(0, -(-(e - s) // step))
    strides = L.contiguous_strides(x._node.shape)
    vshape = x._node.shape[:d] + (count,) + x._node.shape[d + 1:]
    vstrides = strides[:d] + (strides[d] * step,) + strides[d + 1:]
    return _scatter_into(x, src, vshape, s * strides[d], vstrides, "slice_scatter")


@torch_op
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    """x with x.diagonal(offset, dim1, dim2) replaced by src (a new tensor)."""
    d1, d2 = (_norm_dim(d, x.ndim, "diagonal_scatter") for d in (dim1, dim2))
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    vshape, off, st = _diag_layout(x._node.shape, offset, d1, d2)
    return _scatter_into(x, src, vshape, off, st, "diagonal_scatter")


@torch_op
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    """x with x.as_strided(size, stride, storage_offset) replaced by src (a new tensor; the
    layout is in x's contiguous elements). The gradient with respect to x is zero at the
    replaced elements (PyTorch 2.13's is the complement: the gradient kept there and zero
    elsewhere — not the derivative)."""
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides {stride} and shape {size}")
    off = 0 if storage_offset is None else builtins.int(storage_offset)
    need = off + builtins.sum((n - 1) * s for n, s in zip(size, stride)) + 1 if \
        builtins.all(size) else 0
    if need > x.numel():
        raise RuntimeError(f"as_strided_scatter: setStorage: sizes {list(size)}, strides "
                           f"{list(stride)}, storage offset {off} are out of bounds for "
                           f"storage of {x.numel()} elements")
    if L.self_overlapping(size, off, stride):
        raise RuntimeError("as_strided_scatter: the layout writes some elements twice; "
                           "PyTorch's result is then unspecified")
    return _scatter_into(x, src, size, off, stride, "as_strided_scatter")

