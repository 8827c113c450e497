"""flowlite dtypes: PyTorch-style names over numpy/JAX dtypes.

A `DType` is interned (one object per dtype) so IR signatures compare and hash
by identity.  64-bit types follow JAX's x64 switch: with x64 off (JAX's
default) `int64` tensors are stored as int32 and `float64` as float32 — the
same documented mapping JAX itself applies.

Layer: engine — imports namespace.
"""
from __future__ import annotations

import jax
import ml_dtypes
import numpy as np

from .namespace import prefix as _prefix


class DType:
    __slots__ = ("name", "np", "is_floating_point", "is_signed", "itemsize", "kind", "_canon")

    def __init__(self, name: str, np_dtype, kind: str):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.kind = kind  # 'b' bool, 'i' int, 'u' unsigned, 'f' float
        self.is_floating_point = kind == "f"
        self.is_signed = kind in "if"
        self.itemsize = self.np.itemsize
        self._canon = None

    def __repr__(self):
        return f"{_prefix()}.{self.name}"    # flowlite.float32; torch.float32 under flowlite.run

    def __reduce__(self):
        return (from_any, (self.name,))

    def to_jax(self):
        return self.np


float32 = DType("float32", np.float32, "f")
float16 = DType("float16", np.float16, "f")
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, "f")
float64 = DType("float64", np.float64, "f")
int8 = DType("int8", np.int8, "i")
int16 = DType("int16", np.int16, "i")
int32 = DType("int32", np.int32, "i")
int64 = DType("int64", np.int64, "i")
uint8 = DType("uint8", np.uint8, "u")
uint32 = DType("uint32", np.uint32, "u")
bool_ = DType("bool", np.bool_, "b")

half, float, double = float16, float32, float64  # noqa: A001 - PyTorch aliases
long, int = int64, int32  # noqa: A001

ALL = (float32, float16, bfloat16, float64, int8, int16, int32, int64, uint8, uint32, bool_)
_BY_NP = {d.np: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"float": float32, "half": float16, "double": float64, "long": int64, "int": int32,
                 "bool_": bool_})


def x64_enabled() -> bool:
    return bool(jax.config.jax_enable_x64)


def canonical(d: DType) -> DType:
    """The dtype actually stored: 64-bit types narrow when JAX's x64 mode is off."""
    if d is int64 or d is float64:
        if not x64_enabled():
            return int32 if d is int64 else float32
    return d


def from_any(d) -> DType:
    """Accept a flowlite DType, a numpy/JAX dtype, a Python type or a name."""
    if isinstance(d, DType):
        return d
    if d is bool:
        return bool_
    if d is builtins_int:
        return int64
    if d is builtins_float:
        return float32
    if isinstance(d, str):
        try:
            return _BY_NAME[d]
        except KeyError:
            raise TypeError(f"unknown dtype {d!r}") from None
    try:
        return _BY_NP[np.dtype(d)]
    except (KeyError, TypeError):
        raise TypeError(f"unsupported dtype {d!r}; flowlite supports "
                        f"{', '.join(x.name for x in ALL)}") from None


import builtins as _b  # noqa: E402

builtins_int, builtins_float = _b.int, _b.float

# PyTorch's promotion lattice: bool < integers < floating; float16 + bfloat16 -> float32.
_promote_cache: dict = {}


def promote(a: DType, b: DType) -> DType:
    if a is b:
        return a
    key = (a, b, bool(jax.config.jax_enable_x64))   # canonical widths follow the x64 switch
    r = _promote_cache.get(key)
    if r is None:
        if {a, b} == {float16, bfloat16}:
            r = float32
        elif a.kind == "f" and b.kind != "f":
            r = a
        elif b.kind == "f" and a.kind != "f":
            r = b
        elif a.kind == "b":
            r = b
        elif b.kind == "b":
            r = a
        else:
            r = _BY_NP[np.promote_types(a.np, b.np)]
            if r.kind == "f" and a.kind != "f":  # e.g. uint64+int64; keep integers integral
                r = int64
        r = canonical(r)
        _promote_cache[key] = r
    return r


def scalar_result(t: DType, value) -> DType:
    """Result dtype of `tensor op python_scalar` (Python scalars are weakly typed)."""
    tv = type(value)
    if tv is _b.float:
        return t if t.kind == "f" else default_float()
    if tv is _b.int:
        return t if t.kind != "b" else canonical(int64)
    if tv is _b.bool:
        return t
    if isinstance(value, (np.floating,)):
        return t if t.kind == "f" else default_float()
    if isinstance(value, (np.integer,)):
        return t if t.kind != "b" else canonical(int64)
    raise TypeError(f"unsupported scalar {value!r}")


_default_float = [float32]


def default_float() -> DType:
    return _default_float[0]


def set_default_dtype(d) -> None:
    d = from_any(d)
    if not d.is_floating_point:
        raise TypeError(f"set_default_dtype: {d} is not a floating-point dtype")
    _default_float[0] = d


def get_default_dtype() -> DType:
    return _default_float[0]


def of_python_value(value) -> DType:
    """dtype that `flowlite.tensor(value)` infers for a Python scalar/list element."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (_b.int, np.integer)):
        return canonical(int64)
    return default_float()


def from_numpy_dtype(npd) -> DType:
    d = _BY_NP.get(np.dtype(npd))
    if d is None:
        raise TypeError(f"unsupported numpy dtype {npd}")
    return canonical(d)
