"""PyTorch's remaining small names, composed of the front end: the top-level in-place functions
(`torch.exp_(x)` is `x.exp_()`), the `*_copy` variants of view ops, split aliases, gradient,
isin, nonzero_static, fill/fill_diagonal_/sum_to_size, dtype utilities (promote_types,
result_type, can_cast, typename), process settings (threads, determinism, warn-always), the
functions PyTorch removed (which raise PyTorch's error) and a few Tensor conveniences
(where, new, new_empty, reshape_as, ndimension, to_dense, ...).

Layer: frontend — imports engine.device, engine.dtypes, ops, tensor, views. `TOP` is merged into
the `flowlite` namespace by the package; the Tensor methods are set here, on import.
"""
from __future__ import annotations

import builtins
import math
import os

import numpy as np

from ..engine import dtypes as D
from ..engine.device import default_device
from . import ops as F
from . import views as V
from .tensor import from_numpy, Size, Tensor, tensor as _tensor

TOP: dict = {}


def _top(fn):
    TOP[fn.__name__] = fn
    return fn


# ---- torch.<op>_(x, ...): the in-place method on the first argument -----------------------------
# PyTorch's top-level in-place functions whose Tensor method flowlite has
TOP_LEVEL_INPLACE = (
    "abs_ acos_ acosh_ addmv_ arccos_ arccosh_ arcsin_ arcsinh_ arctan_ arctanh_ asin_ asinh_ "
    "atan_ atanh_ ceil_ clamp_ clamp_max_ clamp_min_ clip_ conj_physical_ cos_ cosh_ deg2rad_ "
    "erf_ erfc_ exp2_ exp_ expm1_ fix_ floor_ frac_ gcd_ i0_ index_put_ lcm_ ldexp_ log10_ "
    "log1p_ log2_ log_ logit_ nan_to_num_ neg_ negative_ rad2deg_ reciprocal_ relu_ round_ "
    "rsqrt_ sigmoid_ sin_ sinc_ sinh_ sqrt_ square_ tan_ tanh_ trunc_ xlogy_ zero_ fill_ "
    "detach_").split()


def _inplace_function(name):
    def fn(input, *args, **kwargs):  # noqa: A002 - PyTorch's name
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"torch.{name}(input, ...): input.{name}(...), in place."
    return fn


for _name in TOP_LEVEL_INPLACE:
    TOP[_name] = _inplace_function(_name)


# ---- the *_copy variants: the view op's result as a new tensor -----------------------------------
def _copy_of(name, view):
    def fn(input, *args, **kwargs):  # noqa: A002
        out = view(input, *args, **kwargs)
        if isinstance(out, (tuple, list)):
            return tuple(F.clone(o) for o in out)
        return F.clone(out)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"torch.{name}: {name[:-5]}() as new tensors (no aliasing)."
    return fn


def _slice(x, dim=0, start=None, end=None, step=1):
    d = dim % builtins.max(x.ndim, 1)
    return V.getitem(x, (slice(None),) * d + (slice(start, end, step),))


def _view_dtype_or_shape(x, *shape):
    return V.view(x, *shape)


for _name, _view in (("alias_copy", lambda x: x), ("as_strided_copy", V.as_strided),
                     ("detach_copy", V.detach), ("diagonal_copy", V.diagonal),
                     ("expand_copy", lambda x, size, implicit=False: V.expand(x, size)),
                     ("permute_copy", V.permute), ("select_copy", V.select),
                     ("slice_copy", _slice), ("split_copy", V.split),
                     ("split_with_sizes_copy", V.split), ("squeeze_copy", V.squeeze),
                     ("t_copy", V.t), ("transpose_copy", V.transpose),
                     ("unbind_copy", V.unbind), ("unfold_copy", V.unfold),
                     ("unsqueeze_copy", V.unsqueeze), ("view_copy", _view_dtype_or_shape)):
    TOP[_name] = _copy_of(_name, _view)


@_top
def split_with_sizes(input, split_sizes, dim=0):  # noqa: A002
    """split() with a list of sizes (views)."""
    return V.split(input, list(split_sizes), dim)


@_top
def unsafe_split(input, split_size, dim=0):  # noqa: A002
    """split() (PyTorch's unchecked variant; flowlite's views are always safe)."""
    return V.split(input, split_size, dim)


@_top
def unsafe_split_with_sizes(input, split_sizes, dim=0):  # noqa: A002
    return V.split(input, list(split_sizes), dim)


@_top
def unsafe_chunk(input, chunks, dim=0):  # noqa: A002
    return V.chunk(input, chunks, dim)


@_top
def concatenate(tensors, axis=0):
    """cat() (PyTorch's NumPy-style name, `axis`)."""
    return F.cat(tensors, axis)


@_top
def detach(input):  # noqa: A002
    return V.detach(input)


@_top
def fill(input, value):  # noqa: A002
    """A new tensor of input's shape and dtype filled with value."""
    return F.full_like(input, value)


@_top
def rsub(input, other, alpha=1):  # noqa: A002
    """other - alpha * input."""
    return F.sub(other if isinstance(other, Tensor) else F._lift(other, input), input,
                 alpha=alpha)


@_top
def constant_pad_nd(input, pad, value=0):  # noqa: A002
    """F.pad(input, pad, 'constant', value)."""
    return F.pad(input, tuple(pad), "constant", value)


@_top
def get_device(input) -> int:  # noqa: A002
    return input.get_device()


# ---- gradient: PyTorch's finite differences, op for op ------------------------------------------
def _sl(x, d, a, b=None):
    n = x.shape[d]
    a = a + n if a < 0 else a
    b = n if b is None else (b + n if b < 0 else b)
    return F.narrow(x, d, a, b - a)


@_top
def gradient(input, *, spacing=1, dim=None, edge_order=1):  # noqa: A002
    """torch.gradient: the derivative estimate along each dim (central differences inside,
    one-sided of order edge_order at the ends), for a scalar spacing, one per dim, or
    coordinate tensors; a tuple with one tensor per dim."""
    x = input
    if edge_order not in (1, 2):
        raise RuntimeError(f"torch.gradient only supports edge_order=1 and edge_order=2, got "
                           f"{edge_order}")
    dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else \
        list(dim)
    dims = [d % x.ndim for d in dims]
    for d in dims:
        if x.shape[d] < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least "
                               "edge_order+1")
    if isinstance(spacing, (int, float)):
        spacing = [spacing] * len(dims)
    else:
        spacing = list(spacing)
        if len(spacing) == 1 and len(dims) > 1 and not isinstance(spacing[0], Tensor):
            spacing = spacing * len(dims)
    if len(spacing) != len(dims):
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or a "
                           f"list of length {len(dims)}, got a list of length {len(spacing)}")
    out = []
    for d, h in zip(dims, spacing):
        if isinstance(h, Tensor) and h.ndim == 1:
            out.append(_gradient_coords(x, h, d, edge_order))
            continue
        h = h.item() if isinstance(h, Tensor) else h
        center = (_sl(x, d, 2) - _sl(x, d, 0, -2)) / h
        if edge_order == 1:
            pre = (_sl(x, d, 1, 2) - _sl(x, d, 0, 1)) / h
            app = (_sl(x, d, -1) - _sl(x, d, -2, -1)) / h
        else:
            pre = (_sl(x, d, 0, 1) * -1.5 + _sl(x, d, 1, 2) * 2 - _sl(x, d, 2, 3) * 0.5) / h
            app = (_sl(x, d, -3, -2) * 0.5 + _sl(x, d, -2, -1) * -2 + _sl(x, d, -1) * 1.5) / h
        out.append(F.cat([pre, center / 2, app], d))
    return tuple(out)


def _gradient_coords(x, c, d, edge_order):
    if c.shape[0] != x.shape[d]:
        raise RuntimeError("torch.gradient expected each tensor to be on the same device and "
                           "the coordinates to match the size of the dimension")
    shape = [1] * x.ndim
    shape[d] = -1
    dx = F.diff(c)
    dx1, dx2 = F.narrow(dx, 0, 0, dx.shape[0] - 1), F.narrow(dx, 0, 1, dx.shape[0] - 1)
    a = F.reshape(-dx2 / (dx1 * (dx1 + dx2)), tuple(shape))
    b = F.reshape((dx2 - dx1) / (dx1 * dx2), tuple(shape))
    cc = F.reshape(dx1 / (dx2 * (dx1 + dx2)), tuple(shape))
    center = a * _sl(x, d, 0, -2) + b * _sl(x, d, 1, -1) + cc * _sl(x, d, 2)
    d0, d1 = F.narrow(dx, 0, 0, 1), F.narrow(dx, 0, 1, 1)
    n = dx.shape[0]
    dl, dl2 = F.narrow(dx, 0, n - 1, 1), F.narrow(dx, 0, n - 2, 1)
    if edge_order == 1:
        pre = (_sl(x, d, 1, 2) - _sl(x, d, 0, 1)) / F.reshape(d0, ())
        app = (_sl(x, d, -1) - _sl(x, d, -2, -1)) / F.reshape(dl, ())
    else:
        d0, d1, dl, dl2 = (F.reshape(t, ()) for t in (d0, d1, dl, dl2))
        pa = -(2.0 * d0 + d1) / (d0 * (d0 + d1))
        pb = (d0 + d1) / (d0 * d1)
        pc = (-d0) / (d1 * (d0 + d1))
        pre = pa * _sl(x, d, 0, 1) + pb * _sl(x, d, 1, 2) + pc * _sl(x, d, 2, 3)
        aa = dl / (dl2 * (dl + dl2))
        ab = -(dl + dl2) / (dl * dl2)
        ac = (2 * dl + dl2) / (dl * (dl + dl2))
        app = aa * _sl(x, d, -3, -2) + ab * _sl(x, d, -2, -1) + ac * _sl(x, d, -1)
    return F.cat([pre, center, app], d)


# ---- membership, non-zeros ------------------------------------------------------------------
@_top
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element occurs in test_elements (a sorted search; no host read); either
    may be a number. NaN is never found, as in PyTorch."""
    e = elements if isinstance(elements, Tensor) else F.as_tensor(elements)
    t = test_elements if isinstance(test_elements, Tensor) else F.as_tensor(test_elements)
    dt = D.promote(e.dtype, t.dtype)
    e, t = F.to_dtype(e, dt), F.to_dtype(F.reshape(t, (-1,)), dt)
    n = t.shape[0]
    if n == 0:
        found = F.ne(e, e) if e.dtype.kind == "f" else F.lt(F.zeros_like(e), 0)
        found = F.logical_and(found, F.eq(e, e)) if e.dtype.kind == "f" else found
    else:
        srt = F.sort(t).values
        pos = F.clamp(F.searchsorted(srt, F.reshape(e, (-1,))), 0, n - 1)
        found = F.reshape(F.eq(F.take(srt, pos), F.reshape(e, (-1,))), e.shape)
    return F.logical_not(found) if invert else found


@_top
def nonzero_static(input, *, size, fill_value=-1):  # noqa: A002
    """The first `size` indices of input's non-zero elements as a (size, ndim) int64 tensor,
    padded with fill_value — a fixed shape, so no host read."""
    x = input
    nd = builtins.max(x.ndim, 1) if x.ndim else 0
    flat = F.reshape(F.ne(x, 0), (-1,))
    n = flat.shape[0]
    size = builtins.int(size)
    i64 = D.canonical(D.int64)
    if n == 0 or size == 0:
        return F.full((size, x.ndim), fill_value, dtype=i64, device=x.device)
    order = F.argsort(F.logical_not(flat).to(D.int32), stable=True)
    k = builtins.min(size, n)
    first = F.narrow(order, 0, 0, k)
    count = F.sum(flat.to(i64))
    rows = F.arange(k, device=x.device, dtype=i64)
    valid = F.lt(rows, count)
    coords = []
    rest = first.to(i64)
    for s in reversed(x.shape):
        coords.append(F.remainder(rest, s))
        rest = F.floor_divide(rest, s)
    cols = F.stack(list(reversed(coords)), 1) if x.ndim else F.zeros((k, 0), dtype=i64)
    out = F.where(F.unsqueeze(valid, 1), cols, fill_value) if nd else cols
    if size > k:
        out = F.cat([out, F.full((size - k, x.ndim), fill_value, dtype=i64,
                                 device=x.device)], 0)
    return out


# ---- dtype utilities --------------------------------------------------------------------------
@_top
def promote_types(type1, type2):
    """The dtype PyTorch's type promotion gives two dtypes."""
    return D.promote(D.from_any(type1), D.from_any(type2))


@_top
def result_type(tensor1, tensor2):
    """The dtype an arithmetic op on the two (tensors or numbers) gives."""
    a = tensor1 if isinstance(tensor1, Tensor) else F.as_tensor(tensor1)
    if isinstance(tensor2, Tensor):
        return F._promote_nodes(a._node, tensor2._node)
    return D.scalar_result(a.dtype, tensor2)


_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2}


@_top
def can_cast(from_, to) -> bool:
    """Whether PyTorch's casting rules allow from_ to to (no float -> integer, no
    non-bool -> bool)."""
    a, b = D.from_any(from_), D.from_any(to)
    return _KIND_RANK[a.kind] <= _KIND_RANK[b.kind]


_LEGACY_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
                 "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor",
                 "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor",
                 "bool": "BoolTensor"}


@_top
def typename(obj) -> str:
    """'torch.FloatTensor' & co. for a tensor, else the object's type name."""
    if isinstance(obj, Tensor):
        return "torch." + _LEGACY_NAMES.get(obj.dtype.name, obj.dtype.name)
    t = type(obj)
    module = t.__module__
    return t.__qualname__ if module in ("builtins", "__builtin__", None) else \
        f"{module}.{t.__qualname__}"


@_top
def is_storage(obj) -> bool:
    """False: flowlite has no storages."""
    return False


@_top
def get_default_device():
    """The device new tensors are created on (flowlite.set_default_device)."""
    return default_device()


# ---- process settings: recorded, answered back ------------------------------------------
_settings = {"threads": None, "interop": None, "deterministic": False, "warn_only": False,
             "warn_always": False}


@_top
def get_num_threads() -> int:
    """The number set with set_num_threads, else the CPU count (XLA sizes its own pools)."""
    return _settings["threads"] or os.cpu_count() or 1


@_top
def set_num_threads(n) -> None:
    """Recorded for get_num_threads(); XLA's CPU thread pools are sized by XLA itself."""
    if builtins.int(n) <= 0:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n}")
    _settings["threads"] = builtins.int(n)


@_top
def get_num_interop_threads() -> int:
    return _settings["interop"] or os.cpu_count() or 1


@_top
def set_num_interop_threads(n) -> None:
    """Recorded for get_num_interop_threads()."""
    if builtins.int(n) <= 0:
        raise RuntimeError(f"set_num_interop_threads expects a positive integer, got {n}")
    _settings["interop"] = builtins.int(n)


@_top
def use_deterministic_algorithms(mode, *, warn_only=False) -> None:
    """Recorded (are_deterministic_algorithms_enabled answers it). flowlite's XLA:CPU
    programs are deterministic: the same program on the same inputs gives the same bits."""
    _settings["deterministic"] = builtins.bool(mode)
    _settings["warn_only"] = builtins.bool(warn_only)


@_top
def are_deterministic_algorithms_enabled() -> bool:
    return _settings["deterministic"]


@_top
def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _settings["warn_only"]


@_top
def set_deterministic_debug_mode(debug_mode) -> None:
    modes = {"default": 0, "warn": 1, "error": 2}
    mode = modes.get(debug_mode, debug_mode) if isinstance(debug_mode, str) else debug_mode
    if mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got {mode}")
    use_deterministic_algorithms(mode > 0, warn_only=mode == 1)


@_top
def get_deterministic_debug_mode() -> int:
    if not _settings["deterministic"]:
        return 0
    return 1 if _settings["warn_only"] else 2


@_top
def set_warn_always(b) -> None:
    _settings["warn_always"] = builtins.bool(b)


@_top
def is_warn_always_enabled() -> bool:
    return _settings["warn_always"]


# ---- the functions PyTorch removed: PyTorch's own error -----------------------------------------
_REMOVED = {
    "eig": "`torch.linalg.eig` returns complex tensors of dtype `cfloat` or `cdouble` rather "
           "than real tensors mimicking complex tensors.",
    "symeig": "The default behavior has changed from using the upper triangular portion of "
              "the matrix by default to using the lower triangular portion.",
    "lstsq": "`torch.lstsq` is deprecated in favor of `torch.linalg.lstsq`.",
    "matrix_rank": "Please use the `torch.linalg.matrix_rank` function instead.",
    "solve": "`torch.solve` is deprecated in favor of `torch.linalg.solve`. `torch.linalg.solve` "
             "has its arguments reversed and does not return the LU factorization.",
}


def _removed(name):
    def fn(*args, **kwargs):
        raise RuntimeError(f"This function was deprecated since version 1.9 and is now removed. "
                           f"{_REMOVED[name]}")
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Removed from PyTorch (1.9): raises PyTorch's error."
    return fn


for _name in _REMOVED:
    TOP[_name] = _removed(_name)


# ---- Tensor conveniences ------------------------------------------------------------------------
def _where(self, condition, other):
    """x.where(condition, y): where(condition, x, y)."""
    return F.where(condition, self, other)


def _new(self, *args, device=None):
    """The legacy constructor with self's dtype: x.new(2, 3) or x.new(torch.Size(...)) (zeros;
    PyTorch's are uninitialised), x.new([1, 2]) (data), x.new() (empty)."""
    dev = device or self.device
    if not args:
        return F.zeros(0, dtype=self.dtype, device=dev)
    if len(args) == 1 and isinstance(args[0], Size):
        return F.zeros(tuple(args[0]), dtype=self.dtype, device=dev)
    if builtins.all(type(a) is int for a in args):
        return F.zeros(args, dtype=self.dtype, device=dev)
    if len(args) == 1:
        data = args[0]
        if isinstance(data, Tensor):
            return F.to_dtype(data, self.dtype)
        return _tensor(data, dtype=self.dtype, device=dev)
    raise TypeError(f"new(): expected sizes (ints) or one sequence of data, got {args!r}")


def _new_empty(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
               pin_memory=False):
    """A tensor of `size` with self's dtype and device (zeros)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return F.zeros(size, dtype=dtype or self.dtype, device=device or self.device,
                   requires_grad=requires_grad)


def _new_empty_strided(self, size, stride, dtype=None, device=None, requires_grad=False,
                       layout=None, pin_memory=False):
    return F.empty_strided(size, stride, dtype=dtype or self.dtype,
                           device=device or self.device, requires_grad=requires_grad)


def _sum_to_size(self, *size):
    """self summed over the dims broadcasting would have expanded to reach its shape."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    size = tuple(size)
    try:
        shape = F.broadcast_shapes(size, tuple(self.shape))
    except Exception:
        shape = None
    if shape != tuple(self.shape):
        raise RuntimeError(f"size {list(size)} is not expandable to size {list(self.shape)}")
    return F.sum_to(self, size)


def _fill_diagonal_(self, fill_value, wrap=False):
    """The main diagonal set to fill_value in place (a matrix, or equal dims for more;
    wrap: a tall matrix's diagonal restarts every ncols + 1 rows)."""
    if self.ndim < 2:
        raise RuntimeError("dimensions must larger than 1")
    shape = tuple(self.shape)
    if self.ndim > 2 and len(set(shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    step = builtins.sum(strides)
    numel = math.prod(shape)
    if self.ndim == 2 and wrap:
        count = -(-numel // step)
    else:
        count = builtins.min(shape)
    positions = np.arange(count, dtype=np.int64) * step
    positions = positions[positions < numel]
    flat = F.reshape(self, (-1,))
    out = F.index_fill(flat, 0, from_numpy(positions, device=self.device), fill_value)
    return self._rebind(F.reshape(out, shape), "fill_diagonal_")


def _reshape_as(self, other):
    return V.reshape(self, tuple(other.shape))


def _split_with_sizes(self, split_sizes, dim=0):
    return V.split(self, list(split_sizes), dim)


Tensor.where = _where
Tensor.new = _new
Tensor.new_empty = _new_empty
Tensor.new_empty_strided = _new_empty_strided
Tensor.sum_to_size = _sum_to_size
Tensor.fill_diagonal_ = _fill_diagonal_
Tensor.reshape_as = _reshape_as
Tensor.ndimension = lambda self: self.ndim
Tensor.to_dense = lambda self, dtype=None, *, masked_grad=None: \
    self if dtype is None else F.to_dtype(self, dtype)
Tensor.split_with_sizes = _split_with_sizes
Tensor.unsafe_split = lambda self, split_size, dim=0: V.split(self, split_size, dim)
Tensor.unsafe_split_with_sizes = lambda self, sizes, dim=0: V.split(self, list(sizes), dim)
Tensor.unsafe_chunk = lambda self, chunks, dim=0: V.chunk(self, chunks, dim)
Tensor.nonzero_static = lambda self, *, size, fill_value=-1: nonzero_static(
    self, size=size, fill_value=fill_value)
Tensor.H = property(lambda self: _matrix_adjoint(self, "H"))
Tensor.mH = property(lambda self: V.adjoint(self))
for _name in ("eig", "symeig", "lstsq", "solve"):
    setattr(Tensor, _name, TOP[_name])


def _matrix_adjoint(x, op):
    if x.ndim != 2 and x.ndim != 0:
        raise RuntimeError(f"tensor.{op} is only supported on matrices (2-D tensors). Got "
                           f"{x.ndim}-D tensor.")
    return V.transpose(x, 0, 1) if x.ndim == 2 else x


@_top
def to_dlpack(tensor):
    """A DLPack capsule of the tensor's value (a host read when it is pending)."""
    v = tensor._value("to_dlpack")
    if isinstance(v, np.ndarray):
        v = np.array(v)             # host data is read-only; DLPack exports writable memory
    return v.__dlpack__()


def _dim_order(self, ambiguity_check=False):
    """The dims from outermost to innermost in memory (from the strides; ties keep order)."""
    st = V.stride(self)
    return tuple(sorted(range(self.ndim), key=lambda d: -st[d]))


Tensor.dim_order = _dim_order
