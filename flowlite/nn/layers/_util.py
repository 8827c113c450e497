"""Small helpers shared by the layer files."""
from __future__ import annotations

import math

from ...extend import ArgumentError
from ...extend import dtypes as D, ops as F
from .. import init
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
            raise ArgumentError(f"expected an int or a tuple of {n} ints, got {v!r}")
        return tuple(v)
    return (v,) * n


def weight_and_bias(module, weight_shape, out_features, bias, dtype=None, device=None) -> None:
    """Register `weight` and, unless bias=False, a per-output `bias` (else a None entry)."""
    module.weight = new_param(weight_shape, dtype, device)
    module.register_parameter("bias", new_param((out_features,), dtype, device) if bias
                              else None)


def reset_kaiming_uniform(module) -> None:
    """PyTorch's default for Linear and Conv: W ~ kaiming_uniform(a=√5) = U(-1/√fan_in, ..),
    b ~ U(-1/√fan_in, 1/√fan_in)."""
    init.kaiming_uniform_(module.weight, a=math.sqrt(5))
    if module.bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(module.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(module.bias, -bound, bound)
