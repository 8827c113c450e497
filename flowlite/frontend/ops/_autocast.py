"""Automatic mixed precision as PyTorch's CPU autocast does it: the casts, per op family.

Layer: frontend — imports engine.device, engine.dtypes, engine.runtime, ops._core, tensor.

Inside an autocast region (`rt.local.autocast`: {device type: dtype}, per thread as in
PyTorch) the ops of PyTorch's CPU "lower precision" list — matmul/mm/bmm, linear,
convolutions and transposed convolutions, prelu, scaled_dot_product_attention, and einsum
where PyTorch's einsum reaches bmm — call `lower(...)` on their tensor arguments: floating
ones that are not float64 are cast to the region's dtype, so the op computes and returns in
it.  Ops of its "fp32" list (losses, prod, cdist, 3-D pooling, reflect/replicate padding,
linear algebra decompositions) call `fp32(...)`: lower-precision inputs are computed in
float32.  Every other op follows the ordinary promotion of its inputs.  The casts are
ordinary differentiable conversions, so gradients reach float32 parameters as float32.
"""
from __future__ import annotations

from ...engine import dtypes as D
from ...engine.device import default_device, platform_of
from ...engine.runtime import rt
from ._core import to_dtype
from ..tensor import Tensor

__all__ = ["lower", "fp32", "region_dtype", "current", "set_current", "device_type_of",
           "suspended"]

_F64 = D.float64


def device_type_of(t) -> str:
    """PyTorch's device type of a tensor: "cpu", "cuda", ... (a mesh: its devices' type)."""
    dev = t._node.device or default_device()
    ty = dev.type
    if ty == "mesh":
        ty = platform_of(dev)
        ty = "cuda" if ty == "gpu" else ty
    return ty


def region_dtype(xs):
    """The autocast dtype for an op on `xs`, or None outside a region for their device."""
    state = rt.local.autocast
    if state is None:
        return None
    for x in xs:
        if isinstance(x, Tensor):
            return state.get(device_type_of(x))
    return None


def _cast(xs, dt):
    out = []
    for x in xs:
        if isinstance(x, Tensor):
            xd = x._node.dtype
            if xd is not dt and xd.is_floating_point and xd is not _F64:
                x = to_dtype(x, dt)
        out.append(x)
    return tuple(out)


def lower(*xs):
    """`xs` with their floating tensors (float64 excepted) in the autocast region's dtype
    (the lower-precision list); `xs` itself outside a region."""
    if rt.local.autocast is None:
        return xs
    dt = region_dtype(xs)
    return xs if dt is None else _cast(xs, dt)


def fp32(*xs):
    """`xs` with their lower-precision floating tensors in float32 (the fp32 list); `xs`
    itself outside a region."""
    if rt.local.autocast is None or region_dtype(xs) is None:
        return xs
    return _cast(xs, D.float32)


def current():
    """This thread's autocast state ({device type: dtype}, or None): to restore later."""
    return rt.local.autocast


def set_current(state) -> None:
    rt.local.autocast = state or None


class suspended:
    """A block outside every autocast region: for modules PyTorch does not autocast although
    flowlite writes them with autocast ops (bilinear, interpolation's matrices)."""
    __slots__ = ("prev",)

    def __enter__(self):
        self.prev = rt.local.autocast
        rt.local.autocast = None

    def __exit__(self, *exc):
        rt.local.autocast = self.prev
        return False
