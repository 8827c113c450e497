"""Padding modules: Reflection/Replication/Constant/ZeroPad, 1-3 spatial dims.

Each is `functional.pad` with a fixed mode; `padding` is an int (every side) or PyTorch's
tuple ordered (left, right[, top, bottom[, front, back]]).
"""
from __future__ import annotations

from ...extend import ArgumentError
from .. import functional as Fn
from ..module import Module


class _Pad(Module):
    _dims: int = 1
    _mode: str = "constant"

    def __init__(self, padding):
        super().__init__()
        n = 2 * self._dims
        if isinstance(padding, int):
            padding = (padding,) * n
        padding = tuple(padding)
        if len(padding) != n or not all(isinstance(p, int) for p in padding):
            raise ArgumentError(f"{type(self).__name__}: padding must be an int or a tuple of {n} "
                                f"ints, got {padding!r}")
        self.padding = padding

    def forward(self, input):
        return Fn.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPad(_Pad):
    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return Fn.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


def _make(name, dims, mode, base=_Pad):
    return type(name, (base,), {"_dims": dims, "_mode": mode, "__module__": __name__,
                                "__qualname__": name,
                                "__doc__": f"Pad the last {dims} dim(s) in {mode!r} mode."})


ReflectionPad1d = _make("ReflectionPad1d", 1, "reflect")
ReflectionPad2d = _make("ReflectionPad2d", 2, "reflect")
ReflectionPad3d = _make("ReflectionPad3d", 3, "reflect")
ReplicationPad1d = _make("ReplicationPad1d", 1, "replicate")
ReplicationPad2d = _make("ReplicationPad2d", 2, "replicate")
ReplicationPad3d = _make("ReplicationPad3d", 3, "replicate")
CircularPad1d = _make("CircularPad1d", 1, "circular")
CircularPad2d = _make("CircularPad2d", 2, "circular")
CircularPad3d = _make("CircularPad3d", 3, "circular")
ConstantPad1d = _make("ConstantPad1d", 1, "constant", _ConstantPad)
ConstantPad2d = _make("ConstantPad2d", 2, "constant", _ConstantPad)
ConstantPad3d = _make("ConstantPad3d", 3, "constant", _ConstantPad)


class ZeroPad1d(ConstantPad1d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad3d(ConstantPad3d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"
