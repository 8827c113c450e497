"""Device meshes: a named grid of jax devices that acts as one flowlite device.

Layer: engine — imports device.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from .device import Device

_meshes: dict = {}


class Mesh:
    """A named grid of devices, e.g. Mesh(("data",)) or Mesh(("data", "model"), (4, 2))."""

    def __init__(self, axis_names=("data",), shape=None, devices=None):
        devs = list(devices) if devices is not None else jax.devices()
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        if shape is None:
            if len(axis_names) != 1:
                raise ValueError(f"Mesh: give a shape for {len(axis_names)} axes")
            shape = (len(devs),)
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape)) != len(devs):
            raise ValueError(f"Mesh: shape {shape} needs {int(np.prod(shape))} devices, "
                             f"{len(devs)} available")
        self.axis_names = axis_names
        self.shape = dict(zip(axis_names, shape))
        self.jax_mesh = jax.sharding.Mesh(np.array(devs, dtype=object).reshape(shape),
                                          axis_names)
        self.replicated = NamedSharding(self.jax_mesh, P())
        self.device = Device("mesh", len(_meshes), self.replicated)
        self.device.mesh = self
        _meshes[id(self.jax_mesh)] = self

    def __repr__(self):
        return f"Mesh({self.shape})"

    @property
    def size(self) -> int:
        return int(np.prod(list(self.shape.values())))

    def sharding(self, *spec) -> NamedSharding:
        return NamedSharding(self.jax_mesh, P(*spec))

    def batch_sharding(self, shape) -> NamedSharding:
        """Split the leading dim over the 'data' axis when it divides evenly."""
        n = self.shape.get("data", 1)
        if shape and n > 1 and shape[0] % n == 0:
            return NamedSharding(self.jax_mesh, P("data"))
        return self.replicated


def device_for_sharding(sharding, create=True):
    """The flowlite device of an array placed with `sharding` (a mesh device or None); with
    create=False, only a mesh flowlite already made (a one-device mesh among them)."""
    if isinstance(sharding, NamedSharding):
        m = _meshes.get(id(sharding.mesh))
        if m is None:
            for cand in _meshes.values():
                if cand.jax_mesh == sharding.mesh:
                    m = cand
                    break
        if m is None:
            if not create:
                return None
            m = Mesh(sharding.mesh.axis_names, sharding.mesh.devices.shape,
                     list(sharding.mesh.devices.flat))
        return m.device
    return None


def put(arr, sharding):
    """device_put that also works across processes (each holds the same host value)."""
    if jax.process_count() > 1 and not getattr(sharding, "is_fully_addressable", True):
        host = np.asarray(arr)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
    return jax.device_put(arr, sharding)
