"""Binds the front end onto Tensor: PyTorch-named methods, operators, in-place `*_`
variants (which rebind the handle to a new node) and `backward`.

Layer: frontend — imports backward, engine.device, engine.dtypes, engine.errors,
engine.host_data, engine.runtime, host_writes, ops, primitives, random, random_methods,
recording, tensor, views. The package imports it once, so every Tensor has its full API.
"""
from __future__ import annotations

import jax

from ..engine.errors import ArgumentError, DTypeError
from ..engine import dtypes as D
from . import ops as F
from . import primitives as P
from . import random as R
from . import random_methods as RM
from . import views as V
from ..engine.device import Device, device as _make_device, platform_of as _platform_of
from ..engine.host_data import HostNode as _HostNode, int_op as _int_op
from .backward import backward_into
from . import host_writes as HW
from .host_writes import on_host as _host_inplace
from .recording import rebind
from ..engine.runtime import rt as _rt
from .tensor import Tensor, from_jax, tensor as _tensor


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    if gradient is None:
        if self._node.shape != ():
            raise RuntimeError(f"grad can be implicitly created only for scalar outputs "
                               f"(backward on a tensor of shape {tuple(self._node.shape)})")
        gradient = F.ones_like(self)
    elif not isinstance(gradient, Tensor):
        gradient = _tensor(gradient, dtype=self.dtype, device=self.device)
    if retain_graph is None:
        retain_graph = create_graph
    backward_into([self], [gradient], retain_graph, create_graph, inputs)


def _iter(self):
    if not self._node.shape:
        raise DTypeError("iteration over a 0-d tensor")
    return iter(V.unbind(self, 0))   # rows are views, as in PyTorch


Tensor.backward = _backward
Tensor.__iter__ = _iter
Tensor._rebind = rebind


def _method(fn):
    return lambda self, *a, **k: fn(self, *a, **k)


# every op declared as a method (@torch_op in flowlite/frontend/ops)
for _name, _entry in F.OPS.items():
    if _entry.method:
        setattr(Tensor, _name, _method(_entry.fn))
Tensor.multinomial = _method(R.multinomial)

# ops that PyTorch defines as returning views (flowlite.views): writes go through to the base
_VIEWS = [
    "reshape", "view", "view_as", "flatten", "ravel", "unflatten", "squeeze", "unsqueeze",
    "permute", "transpose", "swapaxes", "swapdims", "t", "movedim", "moveaxis", "expand",
    "expand_as", "broadcast_to", "narrow", "select", "split", "chunk", "unbind", "diagonal", "unfold",
    "as_strided", "contiguous", "is_contiguous", "stride", "storage_offset", "detach",
    "tensor_split", "hsplit", "vsplit", "dsplit", "adjoint",
]
for _name in _VIEWS:
    setattr(Tensor, _name, getattr(V, _name))
Tensor.data = property(V.detach, V.set_data)
Tensor._version = property(V.version)

Tensor.absolute = Tensor.abs
Tensor.negative = Tensor.neg
Tensor.multiply = Tensor.mul
Tensor.divide = Tensor.div
Tensor.subtract = Tensor.sub
Tensor.true_divide = Tensor.div
Tensor.arctan2 = Tensor.atan2
Tensor.T = property(V.T)
Tensor.mT = property(V.mT)

# operators
def _add(a, b):
    n = a._node
    if n.__class__ is _HostNode and a.__class__ is Tensor:
        r = _int_op("add", n, b)     # `i + block_size`, i an element of host data: done now
        if r is not None:
            return Tensor(r)
    return F._binary(P.add, a, b)


Tensor.__add__ = Tensor.__radd__ = _add


def _sub(a, b):
    if a.dtype is D.bool_ and isinstance(b, Tensor) and b.dtype is D.bool_:
        raise DTypeError("sub: subtraction, the `-` operator, with two bool tensors is not "
                         "supported; use the `^` or logical_xor() operator instead")
    return F._binary(P.sub, a, b)


Tensor.__sub__ = _sub
Tensor.__rsub__ = lambda a, b: F.rsub(a, b)
Tensor.__mul__ = lambda a, b: F._binary(P.mul, a, b)
Tensor.__rmul__ = lambda a, b: F._binary(P.mul, a, b)
Tensor.__truediv__ = lambda a, b: F._binary(P.div, a, b, "float")
Tensor.__rtruediv__ = lambda a, b: F.rdiv(a, b)
Tensor.__floordiv__ = lambda a, b: F.floor_divide(a, b)
Tensor.__rfloordiv__ = lambda a, b: F.floor_divide(F._lift(b, a), a)
Tensor.__mod__ = lambda a, b: F.remainder(a, b)
Tensor.__rmod__ = lambda a, b: F.remainder(F._lift(b, a), a)
Tensor.__pow__ = lambda a, b: F.pow(a, b)
Tensor.__rpow__ = lambda a, b: F.pow(b, a)          # pow lifts the scalar base itself
Tensor.__matmul__ = lambda a, b: F.matmul(a, b)
Tensor.__rmatmul__ = lambda a, b: F.matmul(F.as_tensor(b), a)
Tensor.__neg__ = F.neg
Tensor.__pos__ = lambda a: a
Tensor.__abs__ = F.abs
Tensor.__invert__ = F.bitwise_not
Tensor.__and__ = lambda a, b: F._logical(P.bit_and, "and", a, b)
Tensor.__rand__ = lambda a, b: F._logical(P.bit_and, "and", a, b)
Tensor.__or__ = lambda a, b: F._logical(P.bit_or, "or", a, b)
Tensor.__ror__ = lambda a, b: F._logical(P.bit_or, "or", a, b)
Tensor.__xor__ = lambda a, b: F._logical(P.bit_xor, "xor", a, b)
Tensor.__rxor__ = lambda a, b: F._logical(P.bit_xor, "xor", a, b)
Tensor.__eq__ = lambda a, b: F.eq(a, b)
Tensor.__ne__ = lambda a, b: F.ne(a, b)
Tensor.__lt__ = lambda a, b: F.lt(a, b)
Tensor.__le__ = lambda a, b: F.le(a, b)
Tensor.__gt__ = lambda a, b: F.gt(a, b)
Tensor.__ge__ = lambda a, b: F.ge(a, b)
Tensor.__getitem__ = HW.getitem      # (views.getitem, but elements of host data now)
Tensor.__setitem__ = HW.setitem


# dtype / device conversion
def _to(self, *args, **kwargs):
    """`.to(dtype)`, `.to(device)`, `.to(device, dtype)`, `.to(other_tensor)`."""
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    if kwargs:
        raise DTypeError(f"to(): unexpected arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, (D.DType, type)) or (hasattr(a, "kind") and not isinstance(a, str)):
            dtype = a
        elif isinstance(a, (str, Device)):
            try:
                dtype = D.from_any(a) if isinstance(a, str) and not a.split(":")[0] in (
                    "cpu", "gpu", "cuda", "tpu") else dtype
                if dtype is None or not isinstance(a, str) or a.split(":")[0] in (
                        "cpu", "gpu", "cuda", "tpu"):
                    device = a
            except TypeError:
                device = a
        elif a is not None:
            raise DTypeError(f"to(): unsupported argument {a!r}")
    out = self
    if device is not None:
        out = _to_device(out, device)
    if dtype is not None:
        out = F.to_dtype(out, dtype)
    return out


def _to_device(t, device):
    dev = _make_device(device)
    if dev is t.device:
        return t
    # a cross-device copy is a cut: the value is produced here, then transferred
    arr = t._value(".to(device)")
    out = from_jax(jax.device_put(arr, dev.jax_device), device=dev)
    if t.requires_grad:
        out.requires_grad_(True)
    return out


Tensor.to = _to
Tensor.type_as = lambda self, other: F.to_dtype(self, other.dtype)


def _caster(dt):
    def cast(self, memory_format=None):
        return F.to_dtype(self, dt)
    return cast


# Tensor.float(), .byte(), ...: PyTorch's dtype shorthands
for _name, _dt in (("float", D.float32), ("double", D.float64), ("half", D.float16),
                   ("bfloat16", D.bfloat16), ("long", D.int64), ("int", D.int32),
                   ("short", D.int16), ("char", D.int8), ("byte", D.uint8), ("bool", D.bool_)):
    setattr(Tensor, _name, _caster(_dt))
Tensor.cpu = lambda self: _to_device(self, "cpu")
Tensor.cuda = lambda self, index=0: _to_device(self, f"gpu:{index}")
Tensor.new_zeros = lambda self, *size, dtype=None, device=None: F.zeros(
    *size, dtype=dtype or self.dtype, device=device or self.device)
Tensor.new_ones = lambda self, *size, dtype=None, device=None: F.ones(
    *size, dtype=dtype or self.dtype, device=device or self.device)
Tensor.new_full = lambda self, size, fill_value, dtype=None, device=None: F.full(
    size, fill_value, dtype=dtype or self.dtype, device=device or self.device)
Tensor.new_tensor = lambda self, data, dtype=None, device=None: F.tensor(
    data, dtype=dtype or self.dtype, device=device or self.device)


# ---- in-place variants: compute out of place, then rebind the handle ------------------------
_local = _rt.local
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}


def _inplace(name, fn):
    def method(self, *a, **k):
        new = None
        if self._edge is None and _host_inplace(self, a, k):   # elements of host data: now
            if len(a) == 1 and a[0].__class__ in (int, float) and not k and \
                    not self._node.shape:
                r = HW.update_element(name, self, a[0])       # `N[i, j] += 1`
                if r is not None:
                    return r
            _local.loading += 1     # host data's elementwise work done with numpy (host_writes)
            try:
                new = fn(self, *a, **k)
            finally:
                _local.loading -= 1
        if new is None:
            new = fn(self, *a, **k)
        # like PyTorch: an in-place result may narrow within its category, never cross down
        # (a float result into an integer tensor, an integer one into a bool tensor)
        if _CATEGORY[new.dtype.kind] > _CATEGORY[self.dtype.kind]:
            raise RuntimeError(f"{name}: result type {new.dtype} can't be cast to the in-place "
                               f"tensor's dtype {self.dtype} (shape {tuple(self.shape)})")
        return self._rebind(new, name)
    method.__name__ = name
    return method


for _name, _entry in F.OPS.items():
    if _entry.inplace:
        setattr(Tensor, _name + "_", _inplace(_name + "_", _entry.fn))

Tensor.__iadd__ = _inplace("__iadd__", lambda a, b: F._binary(P.add, a, b))
Tensor.__isub__ = _inplace("__isub__", lambda a, b: F._binary(P.sub, a, b))
Tensor.__imul__ = _inplace("__imul__", lambda a, b: F._binary(P.mul, a, b))
Tensor.__itruediv__ = _inplace("__itruediv__", lambda a, b: F._binary(P.div, a, b, "float"))
Tensor.__ifloordiv__ = _inplace("__ifloordiv__", F.floor_divide)
Tensor.__imod__ = _inplace("__imod__", F.remainder)
Tensor.__ipow__ = _inplace("__ipow__", F.pow)
Tensor.__iand__ = _inplace("__iand__", lambda a, b: F._logical(P.bit_and, "and", a, b))
Tensor.__ior__ = _inplace("__ior__", lambda a, b: F._logical(P.bit_or, "or", a, b))
Tensor.__ixor__ = _inplace("__ixor__", lambda a, b: F._logical(P.bit_xor, "xor", a, b))
Tensor.__lshift__ = lambda a, b: F.bitwise_left_shift(a, b)
Tensor.__rlshift__ = lambda a, b: F.bitwise_left_shift(F._lift(b, a), a)
Tensor.__rshift__ = lambda a, b: F.bitwise_right_shift(a, b)
Tensor.__rrshift__ = lambda a, b: F.bitwise_right_shift(F._lift(b, a), a)
Tensor.__ilshift__ = _inplace("__ilshift__", F.bitwise_left_shift)
Tensor.__irshift__ = _inplace("__irshift__", F.bitwise_right_shift)


def _fill_(self, value):
    if isinstance(value, Tensor) and value.ndim:
        raise ArgumentError(f"fill_: only supports a 0-dimensional value tensor, but got a "
                            f"tensor of shape {tuple(value.shape)}")
    return self._rebind(F.full_like(self, value), "fill_")


def _zero_(self):
    return self._rebind(F.zeros_like(self), "zero_")


def _copy_(self, src, non_blocking=False):
    src = src if isinstance(src, Tensor) else F.as_tensor(src)
    if src.device is not self.device:
        src = _to_device(src, self.device)
    return self._rebind(F.broadcast_to(F.to_dtype(src, self.dtype), self._node.shape), "copy_")


Tensor.fill_ = _fill_
Tensor.zero_ = _zero_
Tensor.copy_ = _copy_
for _name in RM.__all__:          # in-place draws (generator= as in PyTorch)
    setattr(Tensor, _name, getattr(RM, _name))


# where a tensor lives, PyTorch's way (answered from the device, never a sync)
Tensor.is_cuda = property(lambda self: _platform_of(self.device) == "gpu")
Tensor.is_cpu = property(lambda self: _platform_of(self.device) == "cpu")
Tensor.is_mps = property(lambda self: _platform_of(self.device) == "METAL")
Tensor.is_xpu = property(lambda self: False)        # JAX has no Intel XPU backend
Tensor.is_meta = property(lambda self: False)
# page-locked host memory has no meaning here (JAX places the data): the same values
Tensor.pin_memory = lambda self, device=None: self
Tensor.is_pinned = lambda self, device=None: False
Tensor.get_device = lambda self: self.device.index if _platform_of(self.device) != "cpu" else -1


# ---- comparisons that answer a Python bool (they read the result: a sync, as in PyTorch) ----
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype is not b.dtype:
        # PyTorch: RuntimeError ("Float did not match Long"); no promotion
        raise DTypeError(f"isclose: the tensors' dtypes must match, got {a.dtype} and "
                         f"{b.dtype}")
    a, b = F.as_tensor(a), F.as_tensor(b)
    close = F.abs(a - b) <= atol + rtol * F.abs(b)
    if a.dtype.is_floating_point or b.dtype.is_floating_point:
        # infinities are close only to themselves
        close = F.logical_or(F.logical_and(close, F.isfinite(a - b)), a == b)
        if equal_nan:
            close = F.logical_or(close, F.logical_and(F.isnan(a), F.isnan(b)))
    return close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(F.all(isclose(a, b, rtol, atol, equal_nan)))


def equal(a, b) -> bool:
    """True when a and b have the same shape and elements (PyTorch's torch.equal)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    return bool(F.all(a == b))


def diag(x, diagonal=0):
    """1-D -> a square matrix with x on the given diagonal; 2-D -> that diagonal (a copy)."""
    if x.ndim == 1:
        k = diagonal
        n = x.shape[0] + abs(k)
        r = F.arange(n, device=x.device)
        mask = F.eq(F.unsqueeze(r, 0) - F.unsqueeze(r, 1), k)      # [row, col]: col - row == k
        vals = F.pad(x, (0, abs(k)))       # x[i] sits in row i (k >= 0) or column i (k < 0)
        src = F.unsqueeze(vals, 1) if k >= 0 else F.unsqueeze(vals, 0)
        return F.where(mask, src, F.zeros((), dtype=x.dtype, device=x.device))
    if x.ndim == 2:
        return F.clone(V.diagonal(x, diagonal))
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D (shape "
                       f"{tuple(x.shape)})")


_TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
               "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor",
               "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor",
               "bool": "BoolTensor"}


def _type(self, dtype=None, non_blocking=False):
    """PyTorch's Tensor.type(): the type name, or a converted tensor."""
    if dtype is None:
        return "torch." + _TYPE_NAMES.get(self.dtype.name, self.dtype.name)
    if isinstance(dtype, str):
        names = {"torch." + v: k for k, v in _TYPE_NAMES.items()}
        if dtype not in names:
            raise ArgumentError(f"type(): invalid type {dtype!r}")
        dtype = D.from_any(names[dtype])
    return F.to_dtype(self, dtype)


class _LegacyTensorType(type):
    """torch.FloatTensor & co.: a constructor (`torch.LongTensor([1, 2])`, or a shape
    `torch.FloatTensor(3, 4)`) and an isinstance test on the dtype."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and D.canonical(obj.dtype) is D.canonical(cls.dtype)

    def __call__(cls, *args, device=None):
        if len(args) == 1 and isinstance(args[0], (tuple, list)) and args[0] and \
                all(type(a) is int for a in args[0]) and type(args[0]).__name__ == "Size":
            args = tuple(args[0])
        if all(type(a) is int for a in args):
            # PyTorch leaves the memory uninitialised; flowlite's is zeros
            return F.zeros(args if args else (0,), dtype=cls.dtype, device=device)
        if len(args) != 1:
            raise DTypeError(f"{cls.__name__}(): expected a shape (ints) or one sequence / "
                             f"array / tensor, got {len(args)} arguments")
        data = args[0]
        if isinstance(data, Tensor):
            return F.to_dtype(data, cls.dtype)
        return _tensor(data, dtype=cls.dtype, device=device)


def _legacy_types():
    out = {}
    for name, tname in _TYPE_NAMES.items():
        d = D.from_any(name)
        out[tname] = _LegacyTensorType(tname, (), {"dtype": d, "__module__": "flowlite",
                                                   "__doc__": f"torch.{tname}: {d} tensors"})
    return out


LEGACY_TYPES = _legacy_types()

Tensor.isclose = isclose
Tensor.allclose = allclose
Tensor.equal = equal
Tensor.diag = diag
Tensor.type = _type

# a real tensor's complex parts, as properties (PyTorch's `x.real`, `x.imag`)
Tensor.real = property(F.real)
Tensor.imag = property(F.imag)
