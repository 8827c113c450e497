"""`flowlite.backends.mps` (torch.backends.mps): Apple's Metal backend.

True only when JAX itself runs on Metal (the jax-metal plugin's `METAL` platform);
flowlite's own device names are cpu, cuda and tpu, so MPS is never selected for you.

Layer: compat — imports backends._platforms.
"""
from __future__ import annotations

from ._platforms import has_platform as _has_platform


def is_available() -> bool:
    return _has_platform("METAL")


def is_built() -> bool:
    return is_available()


def is_macos_or_newer(major: int, minor: int) -> bool:
    return False
