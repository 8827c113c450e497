"""Small helpers shared by the layer files."""
from __future__ import annotations

from ... import dtypes as D
from ... import ops as F
from ..module import Parameter


def new_param(shape, dtype=None, device=None) -> Parameter:
    """An uninitialised (zero) parameter; `reset_parameters` initialises it lazily."""
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.default_float()
    return Parameter(F.zeros(tuple(shape), dtype=d, device=device))


def ntuple(v, n):
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return tuple(v) * n
        if len(v) != n:
            raise ValueError(f"expected an int or a tuple of {n} ints, got {v!r}")
        return tuple(v)
    return (v,) * n
