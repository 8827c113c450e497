"""`Generator`: PyTorch's `torch.Generator`, a random stream of its own, on the host or a device.

Layer: frontend — imports engine.device, engine.dtypes, engine.ir, engine.mesh, tensor. Two
kinds, chosen by how the generator is made (their numbers are flowlite's, not PyTorch's):

* `Generator()` — a **host** stream: a seeded numpy PCG64 generator, for the data pipeline
  (samplers, `random_split`, DataLoader shuffles) and host-drawn values (`rand(...,
  generator=g)` returns materialised data). Ops that draw on the device (`multinomial`,
  `bernoulli`, ...) take a fresh key from this stream for each draw.
* `Generator(device=d)` (any device, `"cpu"` included: a sampling loop's
  `torch.Generator(device=device)`) — a **device** stream: flowlite's counter-based stream
  (the global one's algorithm) with its own seed and draw counter. Its key is device data
  (one copy per device, never a constant of a program) and each draw folds the generator's
  counter into it inside the program, as the global stream does: draws stay lazy inside the
  step's program and drawing again never recompiles. A device generator seeded with `s`
  draws what the global stream draws after `manual_seed(s)` (PyTorch's rule too).

Either kind never touches the global stream (`manual_seed`, dropout) and the global stream
never touches it; the same seed gives the same sequence in any process. States
(`get_state`/`set_state`) are opaque uint8 tensors, as in PyTorch.
"""
from __future__ import annotations

import os

import jax
import numpy as np

from ..engine import dtypes as D
from ..engine.device import Device, device as _device
from ..engine.ir import scalar_node
from ..engine.mesh import put
from .tensor import Tensor, from_jax, from_numpy

__all__ = ["Generator", "DEFAULT_SEED", "seed_key", "place_key", "host_stream", "counter"]

DEFAULT_SEED = 67280421310721       # torch.Generator().initial_seed()
_MASK = (1 << 64) - 1
_HOST_STATE_BYTES = 64
_DEVICE_STATE_BYTES = 24            # seed, key, draw counter: 8 bytes each


def seed_key(seed: int) -> np.ndarray:
    """The uint32[2] key of a seed (threefry's key data: the same in every process)."""
    raw = jax.random.key_data(jax.random.key(int(seed) % (2 ** 63), dtype="threefry2x32"))
    return np.asarray(raw).astype(np.uint32)


def place_key(raw, device) -> Tensor:
    """A key as device data on `device` (replicated over a mesh, never split like a batch)."""
    mesh = getattr(device, "mesh", None)
    if mesh is not None:
        return from_jax(put(np.asarray(raw, np.uint32), mesh.replicated))
    return from_numpy(np.asarray(raw, np.uint32).copy(), device=device)


def counter(n: int) -> Tensor:
    """A draw counter: a host scalar entering the program as data (never a constant)."""
    return Tensor(scalar_node(n % (2 ** 32), D.uint32))


def _state_tensor(raw: bytes) -> Tensor:
    return from_numpy(np.frombuffer(raw, np.uint8).copy())


def _state_bytes(state, what: str) -> bytes:
    if isinstance(state, Tensor):
        if state.dtype is not D.uint8:
            raise TypeError(f"{what}: expected a uint8 (ByteTensor) state, got {state.dtype}")
        return bytes(np.asarray(state.numpy(), np.uint8).reshape(-1))
    arr = np.asarray(state)
    if arr.dtype != np.uint8:
        raise TypeError(f"{what}: expected a uint8 (ByteTensor) state, got "
                        f"{type(state).__name__} of dtype {arr.dtype}")
    return bytes(arr.reshape(-1))


class Generator:
    """torch.Generator: `Generator()` a host stream, `Generator(device=d)` a device stream."""

    def __init__(self, device=None):
        self._on_device = device is not None
        self.device = _device(device) if device is not None else _device("cpu")
        self._keys: dict = {}       # Device -> key Tensor (device kind)
        self.manual_seed(DEFAULT_SEED)

    # ---- PyTorch's methods ------------------------------------------------------------------
    def manual_seed(self, seed) -> "Generator":
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            try:
                seed = int(seed)
            except (TypeError, ValueError):
                raise RuntimeError(f"manual_seed expected a long, but got "
                                   f"{type(seed).__name__}") from None
        seed = int(seed)
        self._seed = seed & _MASK if seed < 0 else seed
        if self._on_device:
            self._raw = seed_key(self._seed)
            self._keys.clear()
            self._n = 0
        else:
            self.rng = np.random.Generator(np.random.PCG64(self._seed & _MASK))
        return self

    def seed(self) -> int:
        """Reseed from OS entropy; returns the new seed."""
        s = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> Tensor:
        """The stream's state as a uint8 tensor (PyTorch's ByteTensor convention)."""
        if self._on_device:
            raw = ((self._seed & _MASK).to_bytes(8, "little")
                   + np.asarray(self._raw, "<u4").tobytes() + self._n.to_bytes(8, "little"))
            return _state_tensor(raw)
        full = self.rng.bit_generator.state
        st = full["state"]
        words = [st["state"], st["inc"], self._seed & _MASK,
                 (full["has_uint32"] << 64) | full["uinteger"]]
        return _state_tensor(b"".join(int(w).to_bytes(16, "little") for w in words))

    def set_state(self, state) -> "Generator":
        raw = _state_bytes(state, "Generator.set_state")
        want = _DEVICE_STATE_BYTES if self._on_device else _HOST_STATE_BYTES
        if len(raw) != want:
            kind = "device" if self._on_device else "host"
            raise RuntimeError(f"Generator.set_state: expected the {want}-byte state of a "
                               f"{kind} generator (from get_state() of a generator made "
                               f"{'with' if self._on_device else 'without'} device=), got "
                               f"{len(raw)} bytes")
        if self._on_device:
            self._seed = int.from_bytes(raw[:8], "little")
            self._raw = np.frombuffer(raw[8:16], "<u4").astype(np.uint32)
            self._n = int.from_bytes(raw[16:], "little")
            self._keys.clear()
            return self
        s, inc, seed, extra = (int.from_bytes(raw[i:i + 16], "little") for i in (0, 16, 32, 48))
        self._seed = seed
        bg = np.random.PCG64()
        bg.state = {"bit_generator": "PCG64", "state": {"state": s, "inc": inc},
                    "has_uint32": extra >> 64, "uinteger": extra & _MASK}
        self.rng = np.random.Generator(bg)
        return self

    def clone_state(self) -> "Generator":
        g = Generator(self.device if self._on_device else None)
        return g.set_state(self.get_state())

    # ---- flowlite's draws -------------------------------------------------------------------
    def draw_key(self, device: Device, op: str):
        """(key, counter) tensors for one draw of `op` on `device`, advancing this stream."""
        if not self._on_device:
            raw = self.rng.integers(0, 2 ** 32, size=2, dtype=np.uint32)
            return place_key(raw, device), counter(0)
        if self.device.type != device.type:
            raise RuntimeError(f"{op}: Expected a '{device.type}' device type for generator "
                               f"but found '{self.device.type}'")
        key = self._keys.get(device)
        if key is None:
            key = self._keys[device] = place_key(self._raw, device)
        n = self._n
        self._n = n + 1
        return key, counter(n)

    def host_rng(self) -> np.random.Generator:
        """A numpy stream for host-side draws (samplers, splits): the host kind's own stream;
        for the device kind, one derived from (key, counter), advancing the counter."""
        if not self._on_device:
            return self.rng
        n = self._n
        self._n = n + 1
        k = [int(x) for x in self._raw]
        return np.random.default_rng(np.random.SeedSequence(k + [n & 0xFFFFFFFF, n >> 32,
                                                                 0x5EED]))

    @property
    def is_device(self) -> bool:
        return self._on_device

    def __repr__(self):
        kind = f"device={self.device}" if self._on_device else "host"
        return f"Generator({kind}, seed={self._seed})"


def host_stream(generator, where: str, global_seed) -> np.random.Generator:
    """The numpy stream a host-side draw (a sampler, `random_split`) takes: the Generator's
    own (see `Generator.host_rng`), a numpy Generator itself, or else a fresh one seeded by
    `global_seed()` (the global stream: reproducible per `manual_seed`)."""
    if generator is None or getattr(generator, "is_global", False):
        return np.random.default_rng(global_seed())
    if isinstance(generator, Generator):
        return generator.host_rng()
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"{where}: generator must be a flowlite.Generator (torch.Generator) or a "
                    f"numpy.random.Generator, got {type(generator).__name__}")
