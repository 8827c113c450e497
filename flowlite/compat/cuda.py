"""`flowlite.cuda`: PyTorch's `torch.cuda` questions, answered from JAX's backends.

`is_available()` is true exactly when JAX has a GPU backend; everything else follows from
the JAX devices of that backend.  flowlite's device streams share one seed, so
`manual_seed(_all)` reseeds them (not the CPU stream, as in PyTorch) when a GPU exists — and,
like PyTorch without CUDA, does nothing when none does; `get_rng_state(_all)`/
`set_rng_state(_all)` save and restore the device stream's state on each GPU (opaque uint8
tensors; `[]` without a GPU).  `synchronize()` runs the pending graph (`flowlite.sync()`) and
waits until the device has finished it.

Layer: compat — imports engine.device, engine.executor, engine.phases, frontend.random.
"""
from __future__ import annotations

import os

import jax

from ..frontend import random as _random
from ..engine.device import default_device, device as _device, set_default_device
from ..engine.executor import sync as _sync
from ..engine.phases import timed as _timed

__all__ = ["is_available", "device_count", "current_device", "set_device", "get_device_name",
           "get_device_capability", "get_device_properties", "is_bf16_supported",
           "synchronize", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
           "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
           "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
           "is_initialized", "init"]


def _gpus() -> list:
    try:
        return list(jax.devices("gpu"))
    except RuntimeError:        # JAX raises when the platform is not present
        return []


def is_available() -> bool:
    return bool(_gpus())


def is_initialized() -> bool:
    return is_available()


def init() -> None:
    _require("init")


def device_count() -> int:
    return len(_gpus())


def _require(what: str) -> list:
    gpus = _gpus()
    if not gpus:
        raise RuntimeError(f"flowlite.cuda.{what}(): no CUDA device is available (JAX "
                           f"backend: {jax.default_backend()}; install jax[cuda12] on a "
                           "machine with an NVIDIA GPU)")
    return gpus


_current = [0]


def _index(what: str, dev=None) -> int:
    gpus = _require(what)
    if dev is None:
        return _current[0]
    if isinstance(dev, int):
        i = dev
    else:
        d = _device(dev)
        if d.type != "cuda":
            raise ValueError(f"flowlite.cuda.{what}(): expected a CUDA device, got {d}")
        i = d.index
    if not 0 <= i < len(gpus):
        raise ValueError(f"flowlite.cuda.{what}(): device index {i} out of range; "
                         f"{len(gpus)} CUDA device(s) present")
    return i


def current_device() -> int:
    return _index("current_device")


def set_device(dev) -> None:
    """Select the current CUDA device; when flowlite's default device is a GPU, tensors
    created without a device go there too (PyTorch's current-device rule)."""
    i = _index("set_device", dev)
    _current[0] = i
    if default_device().type == "cuda":
        set_default_device(f"cuda:{i}")


def _jax_gpu(what, dev):
    return _require(what)[_index(what, dev)]


def get_device_name(dev=None) -> str:
    return _jax_gpu("get_device_name", dev).device_kind


def get_device_capability(dev=None) -> tuple:
    cc = getattr(_jax_gpu("get_device_capability", dev), "compute_capability", None)
    if cc is None:
        raise RuntimeError("flowlite.cuda.get_device_capability(): JAX does not report a "
                           "compute capability for this GPU")
    major, _, minor = str(cc).partition(".")
    return int(major), int(minor or 0)


class _Properties:
    def __init__(self, d):
        stats = d.memory_stats() or {}
        self.name = d.device_kind
        self.total_memory = int(stats.get("bytes_limit", 0))
        cc = getattr(d, "compute_capability", None)
        major, _, minor = str(cc or "0.0").partition(".")
        self.major, self.minor = int(major), int(minor or 0)
        self.multi_processor_count = int(getattr(d, "core_count", 0) or 0)

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_properties(dev=None) -> _Properties:
    return _Properties(_jax_gpu("get_device_properties", dev))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    gpus = _gpus()
    if not gpus:
        return False
    cc = getattr(gpus[_current[0]], "compute_capability", None)
    try:
        return including_emulation or float(cc) >= 8.0
    except (TypeError, ValueError):
        return including_emulation


def _wait(d) -> None:
    """Block until `d` finished what was enqueued on it: executions on a device run in
    order, so a tiny computation queued after them completes only after they do."""
    (jax.device_put(0, d) + 0).block_until_ready()


def synchronize(dev=None) -> None:
    """Run all pending flowlite work and wait until the CUDA device has finished it."""
    i = _index("synchronize", dev)
    _sync("flowlite.cuda.synchronize()")
    _timed("blocked", _wait, _gpus()[i])


def manual_seed(seed: int) -> None:
    if _gpus():
        _random.manual_seed_devices(seed)       # (the CPU stream is torch.manual_seed's)


manual_seed_all = manual_seed


def seed() -> None:
    if _gpus():
        _random.manual_seed_devices(int.from_bytes(os.urandom(7), "little"))


seed_all = seed


def initial_seed() -> int:
    _require("initial_seed")
    return _random.initial_seed()


def _rng_device(what, dev):
    return _device(f"cuda:{_index(what, None if dev in (None, 'cuda') else dev)}")


def get_rng_state(device="cuda"):
    """The global stream's state on a CUDA device (an opaque uint8 tensor)."""
    return _random.get_rng_state(_rng_device("get_rng_state", device))


def set_rng_state(new_state, device="cuda") -> None:
    _random.set_rng_state(new_state, _rng_device("set_rng_state", device))


def get_rng_state_all() -> list:
    """One state per CUDA device ([] without one, as PyTorch's CPU builds answer)."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    """Restore `get_rng_state_all()`'s states (nothing to restore without a CUDA device)."""
    for i, state in zip(range(device_count()), new_states):
        set_rng_state(state, i)


def empty_cache() -> None:
    """No-op: XLA's allocator keeps no user-releasable cache (results are unchanged)."""


def _stat(what, dev, key) -> int:
    return int((_jax_gpu(what, dev).memory_stats() or {}).get(key, 0))


def memory_allocated(dev=None) -> int:
    return _stat("memory_allocated", dev, "bytes_in_use")


def max_memory_allocated(dev=None) -> int:
    return _stat("max_memory_allocated", dev, "peak_bytes_in_use")


def memory_reserved(dev=None) -> int:
    return _stat("memory_reserved", dev, "bytes_reserved") or memory_allocated(dev)

