"""`nn.parallel`: PyTorch's DataParallel / DistributedDataParallel as thin wrappers over
flowlite's GSPMD data parallelism (`flowlite.distributed.data_parallel`).

No collectives are written here: the parameters are replicated over a device mesh, the
batch is split along dim 0, and XLA's partitioner inserts the gradient all-reduce into the
step's one executable.  Like PyTorch's, each wrapper is a Module holding the wrapped model
as `.module` (so its state_dict keys carry the `module.` prefix).

* `DataParallel` uses every GPU (or `device_ids` of them).  With no GPU, or one, it just
  calls the module — what PyTorch's does.  With several, outputs stay on the mesh (split
  on the batch): tensors they meet (targets) must be on `wrapper.device` too.
* `DistributedDataParallel` spans every process's devices after
  `flowlite.distributed.initialize()`.  In one process with one device it just calls the
  module.  Across processes each one passes its local batch, which is assembled into the
  global batch, so outputs — and a loss computed from them — cover the global batch (the
  gradients equal PyTorch's averaged ones for equal local batch sizes).
"""
from __future__ import annotations

import contextlib
import weakref

import jax

from .. import extend
from ..extend import Tensor
from .module import Module

__all__ = ["DataParallel", "DistributedDataParallel", "data_parallel"]


def _gpus():
    try:
        return list(jax.devices("gpu"))
    except RuntimeError:
        return []


def _map_tensors(obj, fn):
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_tensors(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _check_dim(name, dim):
    if dim != 0:
        raise ValueError(f"{name}: dim={dim} is not supported; flowlite splits the batch "
                         "along dim 0 only")


class DataParallel(Module):
    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        _check_dim("DataParallel", dim)
        self.module = module
        self.dim = dim
        devices = self._available_devices()
        if device_ids is not None and devices:
            ids = [d.index if isinstance(d, extend.Device) else int(d) for d in device_ids]
            bad = [i for i in ids if not 0 <= i < len(devices)]
            if bad:
                raise ValueError(f"DataParallel: device_ids {bad} out of range; "
                                 f"{len(devices)} device(s) present")
            devices = [devices[i] for i in ids]
        self.device_ids = list(range(len(devices))) if device_ids is None else (
            list(device_ids) if devices else [])
        self.output_device = output_device
        self.mesh = None
        if len(devices) > 1:
            self.mesh = extend.Mesh(("data",), devices=devices)
            extend.data_parallel(module, self.mesh)

    @staticmethod
    def _available_devices():
        return _gpus()

    @property
    def device(self):
        """Where inputs and outputs live: the mesh with several devices, else None."""
        return self.mesh.device if self.mesh is not None else None

    def _scatter(self, t: Tensor) -> Tensor:
        if t.device is self.mesh.device:
            return t
        return extend.shard_batch(t, self.mesh)

    def forward(self, *inputs, **kwargs):
        if self.mesh is None:
            return self.module(*inputs, **kwargs)
        return self.module(*_map_tensors(inputs, self._scatter),
                           **_map_tensors(kwargs, self._scatter))


class DistributedDataParallel(Module):
    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 **kwargs):
        super().__init__()
        _check_dim("DistributedDataParallel", dim)
        if process_group is not None:
            raise ValueError("DistributedDataParallel: process groups are not supported; "
                             "flowlite spans every process's devices (one global mesh)")
        self.module = module
        self.device_ids = device_ids
        self.output_device = output_device
        self.dim = dim
        self.mesh = None
        if jax.process_count() > 1:
            self.mesh = extend.Mesh(("data",), devices=jax.devices())
            extend.data_parallel(module, self.mesh)

    @property
    def device(self):
        return self.mesh.device if self.mesh is not None else None

    def _globalize(self, t: Tensor) -> Tensor:
        if t.device is self.mesh.device:
            return t
        # each process holds its shard of the global batch: assemble it (a host read of the
        # local batch, which a DataLoader has already materialised)
        g = extend.global_batch(t.numpy(), self.mesh)
        if t.requires_grad:
            g.requires_grad_(True)
        return g

    def forward(self, *inputs, **kwargs):
        if self.mesh is None:
            return self.module(*inputs, **kwargs)
        return self.module(*_map_tensors(inputs, self._globalize),
                           **_map_tensors(kwargs, self._globalize))

    def no_sync(self):
        """PyTorch's gradient-accumulation context: flowlite all-reduces inside the step's
        executable, so there is nothing to skip (gradients accumulate the same way)."""
        return contextlib.nullcontext()


_wrappers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def data_parallel(module: Module, inputs, device_ids=None, output_device=None, dim: int = 0,
                  module_kwargs=None):
    """PyTorch's functional form: `module(*inputs)` split over `device_ids`.  With fewer
    than two GPUs that is just the call; otherwise one DataParallel per module and device
    set is kept, so the parameters are placed on the mesh once, not on every call."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    kwargs = module_kwargs or {}
    key = tuple(device_ids) if device_ids is not None else None
    per_module = _wrappers.setdefault(module, {})
    wrapper = per_module.get(key)
    if wrapper is None:
        wrapper = per_module[key] = DataParallel(module, device_ids, output_device, dim)
    return wrapper(*inputs, **kwargs)
