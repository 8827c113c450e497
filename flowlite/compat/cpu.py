"""`torch.cpu` for ported scripts: `torch.cpu.amp.autocast` (PyTorch's deprecated spelling of
`torch.autocast("cpu", ...)`, which warns as PyTorch does) and the device queries.

Layer: compat — imports amp.
"""
from __future__ import annotations

import types
import warnings

from . import amp as _amp

__all__ = ["amp", "is_available", "device_count", "current_device", "synchronize"]


class _cpu_autocast(_amp.autocast):
    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cpu', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


amp = types.SimpleNamespace(autocast=_cpu_autocast)


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """Nothing to wait for: a host read (`.item()`) or `flowlite.sync()` waits for results."""
