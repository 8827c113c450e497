"""`flowlite.accelerator`: PyTorch's device-agnostic `torch.accelerator` API.

The accelerator is JAX's non-CPU backend, if any: a GPU (reported as `cuda`, PyTorch's
name) or a TPU.  On a CPU-only machine `is_available()` is False and
`current_accelerator()` returns None, exactly as PyTorch does without an accelerator.

Layer: compat — imports engine.device, engine.executor, engine.phases.
"""
from __future__ import annotations

import jax

from ..engine.device import Device, default_device, device as _device, set_default_device
from ..engine.executor import sync as _sync
from ..engine.phases import timed as _timed

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index",
           "set_device_index", "current_device_idx", "set_device_idx", "synchronize"]

_KINDS = (("gpu", "cuda"), ("tpu", "tpu"))


def _accel():
    """(flowlite type, jax devices) of the accelerator backend, or (None, [])."""
    for platform, kind in _KINDS:
        try:
            devs = jax.devices(platform)
        except RuntimeError:
            continue
        if devs:
            return kind, list(devs)
    return None, []


def is_available() -> bool:
    return _accel()[0] is not None


def device_count() -> int:
    return len(_accel()[1])


def current_accelerator(check_available: bool = False):
    """The accelerator's device (`device(type='cuda', index=0)`), or None without one."""
    kind, devs = _accel()
    if kind is None:
        return None
    return _device(f"{kind}:{_current_index(kind)}")


def _current_index(kind) -> int:
    d = default_device()
    return d.index if d.type == kind else 0


def _require(what):
    kind, devs = _accel()
    if kind is None:
        raise RuntimeError(f"flowlite.accelerator.{what}(): no accelerator is available "
                           f"(JAX backend: {jax.default_backend()})")
    return kind, devs


def current_device_index() -> int:
    kind, _ = _require("current_device_index")
    return _current_index(kind)


def set_device_index(index) -> None:
    """Make accelerator device `index` the default device for new tensors."""
    kind, devs = _require("set_device_index")
    i = index.index if isinstance(index, Device) else int(index)
    if not 0 <= i < len(devs):
        raise ValueError(f"flowlite.accelerator.set_device_index(): index {i} out of range; "
                         f"{len(devs)} {kind} device(s) present")
    set_default_device(f"{kind}:{i}")


current_device_idx = current_device_index
set_device_idx = set_device_index


def synchronize(device=None) -> None:
    """Run all pending flowlite work and wait until the accelerator has finished it."""
    kind, devs = _require("synchronize")
    i = _current_index(kind) if device is None else _device(device).index
    _sync("flowlite.accelerator.synchronize()")
    _timed("blocked", lambda: (jax.device_put(0, devs[i]) + 0).block_until_ready())
