"""Scale out on JAX's runtime: device meshes, shardings, data parallelism.

flowlite doesn't implement collectives.  A step is one XLA executable, so
scaling it is a matter of giving its inputs shardings: XLA's GSPMD partitioner
splits the computation and inserts the all-reduces.  A `Mesh` acts as one
flowlite *device*: tensors placed on it (replicated, or split along a mesh
axis) mix freely in ops, and the sharding of every input is part of the graph
key.

    mesh = fl.distributed.Mesh(("data",))            # all local devices
    fl.distributed.data_parallel(model, mesh)         # replicate parameters/buffers
    opt = optim.AdamW(model.parameters())             # state follows the parameters
    loader = DataLoader(ds, batch_size=64, device=mesh.device)   # batches split on "data"

Layer: entry — imports engine.executor, engine.ir, engine.mesh, frontend.tensor.
"""
from __future__ import annotations

import os

import jax
import numpy as np

from .engine import ir
from .engine.executor import sync
from .engine.mesh import Mesh, device_for_sharding, put  # noqa: F401  (public names live here)
from .frontend.tensor import Tensor, from_jax

def place(t: Tensor, mesh: Mesh, *spec) -> Tensor:
    """A copy of `t` on `mesh` with PartitionSpec(*spec) (no spec: replicated)."""
    return _put(t, mesh.sharding(*spec) if spec else mesh.replicated, mesh)


def replicate(t: Tensor, mesh: Mesh) -> Tensor:
    return _put(t, mesh.replicated, mesh)


def shard_batch(t: Tensor, mesh: Mesh) -> Tensor:
    return _put(t, mesh.batch_sharding(tuple(t.shape)), mesh)


def _put(t, sharding, mesh):
    arr = t._value("distributed placement") if t.is_pending else t._node.value
    out = Tensor(_data_node(put(arr, sharding), t, mesh))
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def _data_node(arr, like, mesh):
    return ir.data_node(arr, tuple(like.shape), like.dtype, mesh.device)


def _rebind_to(t: Tensor, sharding, mesh) -> None:
    """Move a parameter/buffer onto the mesh in place (it stays the same Python object)."""
    arr = t._value("distributed placement") if t.is_pending else t._node.value
    t._node = _data_node(put(arr, sharding), t, mesh)


def data_parallel(model, mesh: Mesh | None = None, zero: bool = False) -> Mesh:
    """Replicate `model`'s parameters and buffers over `mesh` (default: all devices on a
    ("data",) mesh).  With `zero=True` parameters whose leading dim divides the data axis
    are sharded across it instead (ZeRO-style); optimizer state follows its parameter.
    Feed batches on `mesh.device` (DataLoader(device=mesh.device) splits them)."""
    mesh = mesh or Mesh(("data",))
    sync("data_parallel placement")
    for t in list(model.parameters()) + list(model.buffers()):
        sh = mesh.batch_sharding(tuple(t.shape)) if zero else mesh.replicated
        _rebind_to(t, sh, mesh)
    return mesh


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, local_device_ids=None) -> None:
    """Multi-host set-up: wraps `jax.distributed.initialize`.  Arguments default to the
    usual environment variables (FLOWLITE_COORDINATOR / JAX_COORDINATOR_ADDRESS,
    FLOWLITE_NUM_PROCESSES / WORLD_SIZE, FLOWLITE_PROCESS_ID / RANK), or to what JAX
    auto-detects on TPU pods and SLURM."""
    env = os.environ
    coordinator_address = coordinator_address or env.get("FLOWLITE_COORDINATOR") or \
        env.get("JAX_COORDINATOR_ADDRESS") or (
            f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '12355')}" if "MASTER_ADDR" in env
            else None)
    if num_processes is None:
        v = env.get("FLOWLITE_NUM_PROCESSES") or env.get("WORLD_SIZE")
        num_processes = int(v) if v else None
    if process_id is None:
        v = env.get("FLOWLITE_PROCESS_ID") or env.get("RANK")
        process_id = int(v) if v else None
    try:   # CPU processes exchange collectives through gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception:
        pass
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id,
                               local_device_ids=local_device_ids)


def process_index() -> int:
    return jax.process_index()


def process_count() -> int:
    return jax.process_count()


def global_batch(local: np.ndarray, mesh: Mesh) -> Tensor:
    """Assemble a global batch from each process's local shard (multi-host data loading)."""
    local = np.asarray(local)
    sh = mesh.sharding("data") if local.ndim else mesh.replicated
    arr = jax.make_array_from_process_local_data(sh, local)
    t = from_jax(arr)
    return t


# ---- torch.distributed's process-group names (what DDP training scripts call) --------------
_group = {"initialized": False}


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       **kwargs) -> None:
    """torch.distributed.init_process_group: `initialize` from the same environment
    variables (MASTER_ADDR/MASTER_PORT, WORLD_SIZE, RANK) or arguments; the backend name
    (nccl, gloo) is accepted — XLA picks the collectives."""
    if init_method not in (None, "env://"):
        raise ValueError(f"init_process_group: init_method {init_method!r} is not supported "
                         "(use env://: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK)")
    initialize(num_processes=None if world_size in (None, -1) else int(world_size),
               process_id=None if rank in (None, -1) else int(rank))
    _group["initialized"] = True


def destroy_process_group(group=None) -> None:
    if _group["initialized"]:
        jax.distributed.shutdown()
        _group["initialized"] = False


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return _group["initialized"]


def get_rank(group=None) -> int:
    return jax.process_index()


def get_world_size(group=None) -> int:
    return jax.process_count()
