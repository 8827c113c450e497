"""`torch.fft` for flowlite: the real-valued helpers (fftfreq, rfftfreq, fftshift,
ifftshift). The transforms themselves produce or consume complex tensors, which flowlite does
not have: they raise NotImplementedError naming them (flowlite/frontend/surface.py).

Layer: entry — imports frontend.ops, frontend.ops.creation_more, frontend.surface.
"""
from __future__ import annotations

from .frontend import ops as _ops
from .frontend import surface as _surface
from .frontend.ops.creation_more import fftfreq, rfftfreq


def _shift(x, dim, half):
    dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    shifts = [half(x.shape[d]) for d in dims]
    return _ops.roll(x, shifts, dims)


def fftshift(input, dim=None):  # noqa: A002 - PyTorch's name
    """The zero-frequency term moved to the centre: roll by n // 2 along dim (all dims)."""
    return _shift(input, dim, lambda n: n // 2)


def ifftshift(input, dim=None):  # noqa: A002
    """The inverse of fftshift: roll by (n + 1) // 2."""
    return _shift(input, dim, lambda n: (n + 1) // 2)


__all__ = ["fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_surface.install("torch.fft", globals())
