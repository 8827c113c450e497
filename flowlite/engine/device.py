"""Devices: thin, interned wrappers over jax devices (PyTorch-style names).

Layer: engine — imports errors.
"""
from __future__ import annotations

from .errors import ArgumentError

import jax

_ALIASES = {"cuda": "gpu", "gpu": "gpu", "cpu": "cpu", "tpu": "tpu"}
_cache: dict = {}


class Device:
    __slots__ = ("type", "index", "jax_device", "mesh", "__weakref__")

    def __init__(self, type_: str, index: int, jax_device):
        self.type = type_
        self.index = index
        self.jax_device = jax_device   # a jax Device, or a replicated sharding for a mesh
        self.mesh = None               # flowlite.distributed.Mesh for mesh devices

    # PyTorch's printed forms: its CPU device has no index (`device(type='cpu')`, `cpu`), its
    # GPUs do (`device(type='cuda', index=0)`, `cuda:0`); flowlite's further CPU devices (a
    # process with several) print with theirs
    def __repr__(self):
        if self.type == "cpu" and self.index == 0:
            return "device(type='cpu')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return "cpu" if self.type == "cpu" and self.index == 0 else f"{self.type}:{self.index}"

    def __reduce__(self):
        return (device, (str(self),))


def platform_of(dev: Device) -> str:
    """The JAX platform ("cpu", "gpu", "tpu", ...) a device (or a mesh device) runs on."""
    jd = dev.jax_device
    if hasattr(jd, "platform"):
        return "gpu" if jd.platform in ("gpu", "cuda", "rocm") else jd.platform
    d = next(iter(jd.device_set))           # a mesh: the sharding's devices
    return "gpu" if d.platform in ("gpu", "cuda", "rocm") else d.platform


def _from_jax(d) -> Device:
    dev = _cache.get(d)
    if dev is None:
        # PyTorch's name for a GPU is "cuda" (device.type, str(device)); JAX's is "gpu"
        kind = "cuda" if d.platform in ("gpu", "cuda", "rocm") else d.platform
        dev = _cache[d] = Device(kind, d.id if kind != "cpu" else d.id, d)
    return dev


def device(spec=None) -> Device:
    """`device("cpu")`, `device("cuda:1")`, `device("gpu")`, `device("tpu")`, or a Device."""
    if spec is None:
        return default_device()
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        if hasattr(spec, "platform"):
            return _from_jax(spec)
        raise TypeError(f"device: expected a string like 'cpu' or 'cuda:0', got {spec!r}")
    name, _, idx = spec.partition(":")
    kind = _ALIASES.get(name.lower())
    if kind is None:
        raise ArgumentError(f"device: unknown device type {name!r}; expected cpu, gpu, cuda or "
                            f"tpu")
    try:
        devs = jax.devices(kind)
    except RuntimeError:
        raise RuntimeError(f"device: no {kind} device is available (JAX backends: "
                           f"{jax.default_backend()})") from None
    i = int(idx) if idx else 0
    if not 0 <= i < len(devs):
        raise ValueError(f"device: {spec!r} out of range; {len(devs)} {kind} device(s) present")
    return _from_jax(devs[i])


_default = []
_chosen = []      # the device set_default_device chose (none: PyTorch's default, the CPU)


def prints_in_repr(dev: Device) -> bool:
    """Whether a tensor's printed form names its device: as in PyTorch, when it is not on the
    default device — the CPU, or the one `set_default_device` chose (flowlite itself may
    default to a GPU; a PyTorch program's tensors are on the CPU unless it says otherwise)."""
    ref = _chosen[0] if _chosen else None
    if ref is None:
        return dev.type != "cpu" or dev.index != 0
    return dev.type != ref.type or dev.index != ref.index


def default_device() -> Device:
    if not _default:
        _default.append(_from_jax(jax.local_devices()[0]))
    return _default[0]


def set_default_device(spec) -> None:
    d = device(spec)
    _default[:] = [d]
    _chosen[:] = [d]
