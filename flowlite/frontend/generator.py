"""`Generator`: PyTorch's `torch.Generator`, a random stream of its own.

Layer: frontend — imports cpu_stream, engine.device, engine.dtypes, engine.ir, engine.mesh,
tensor. Two kinds, chosen by the generator's device as in PyTorch:

* a **CPU** generator (`Generator()`, `Generator(device="cpu")`) is PyTorch's CPU generator
  bit for bit (cpu_stream.MT19937Stream: MT19937 and ATen's transforms): seeded alike, it
  draws exactly PyTorch's numbers for CPU tensors, on the host (the values are host data that
  enters later programs as an argument), and its state is PyTorch's 5056 bytes. A draw that
  must happen inside a program (inside `flowlite.compile`, on a mesh) takes a key from it.
* a **device** generator (`Generator(device=d)`, d not a CPU) is flowlite's counter-based
  stream (the global device stream's algorithm) with its own seed and draw counter: its key is
  device data and each draw folds the counter in inside the program, so draws stay lazy in the
  step's program and drawing again never recompiles. Seeded with `s` it draws what the global
  device stream draws after `manual_seed(s)` (PyTorch's rule too).

Either kind never touches the global streams and the global streams never touch it. States
(`get_state`/`set_state`) are uint8 tensors, as in PyTorch.
"""
from __future__ import annotations

import os

import jax
import numpy as np

from ..engine import dtypes as D
from ..engine.device import Device, device as _device
from ..engine.ir import scalar_node
from ..engine.mesh import put
from .cpu_stream import DEFAULT_SEED, STATE_BYTES, MT19937Stream
from .tensor import Tensor, from_jax, from_numpy

__all__ = ["Generator", "DEFAULT_SEED", "seed_key", "place_key", "host_stream", "counter",
           "check_seed"]

_MASK = (1 << 64) - 1
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


def check_seed(seed, op="manual_seed") -> int:
    """A seed as PyTorch takes it: an integer in [-2**63, 2**64) (negatives wrap)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            raise RuntimeError(f"{op} expected a long, but got "
                               f"{type(seed).__name__}") from None
    seed = int(seed)
    if not -(1 << 63) <= seed < (1 << 64):
        raise RuntimeError(f"{op}: Overflow when unpacking long ({seed})")
    return seed & _MASK


class Generator:
    """torch.Generator: a CPU generator is PyTorch's MT19937 stream (on the host); a
    generator of another device is flowlite's counter-based device stream."""

    def __init__(self, device=None):
        self.device = _device(device) if device is not None else _device("cpu")
        self._on_device = self.device.type != "cpu"
        self._keys: dict = {}       # Device -> key Tensor (device kind)
        self.mt = None if self._on_device else MT19937Stream(DEFAULT_SEED)
        self.manual_seed(DEFAULT_SEED)

    # ---- PyTorch's methods ------------------------------------------------------------------
    def manual_seed(self, seed) -> "Generator":
        self._seed = check_seed(seed)
        if self._on_device:
            self._raw = seed_key(self._seed)
            self._keys.clear()
            self._n = 0
        else:
            self.mt.manual_seed(self._seed)
        return self

    def seed(self) -> int:
        """Reseed from OS entropy; returns the new seed."""
        s = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed if self._on_device else self.mt.seed

    def get_state(self) -> Tensor:
        """The stream's state as a uint8 tensor (a CPU generator's: PyTorch's 5056 bytes)."""
        if self._on_device:
            raw = ((self._seed & _MASK).to_bytes(8, "little")
                   + np.asarray(self._raw, "<u4").tobytes() + self._n.to_bytes(8, "little"))
            return _state_tensor(raw)
        return _state_tensor(self.mt.get_state())

    def set_state(self, state) -> "Generator":
        raw = _state_bytes(state, "Generator.set_state")
        want = _DEVICE_STATE_BYTES if self._on_device else STATE_BYTES
        if len(raw) != want:
            kind = f"'{self.device.type}'" if self._on_device else "CPU"
            raise RuntimeError(f"Generator.set_state: expected the {want}-byte state of a "
                               f"{kind} generator (its get_state()), got {len(raw)} bytes")
        if self._on_device:
            self._seed = int.from_bytes(raw[:8], "little")
            self._raw = np.frombuffer(raw[8:16], "<u4").astype(np.uint32)
            self._n = int.from_bytes(raw[16:], "little")
            self._keys.clear()
            return self
        self.mt.set_state(raw)
        return self

    def clone_state(self) -> "Generator":
        g = Generator(self.device)
        return g.set_state(self.get_state())

    # ---- flowlite's draws -------------------------------------------------------------------
    def draw_key(self, device: Device, op: str):
        """(key, counter) tensors for one draw of `op` on `device` drawn in a program,
        advancing this stream (a CPU generator: two of its words make the key)."""
        if self.device.type != device.type:
            raise RuntimeError(f"{op}: Expected a '{device.type}' device type for generator "
                               f"but found '{self.device.type}'")
        if not self._on_device:
            return place_key(self.mt.words(2), device), counter(0)
        key = self._keys.get(device)
        if key is None:
            key = self._keys[device] = place_key(self._raw, device)
        n = self._n
        self._n = n + 1
        return key, counter(n)

    def host_rng(self) -> np.random.Generator:
        """A numpy stream for host-side draws without a PyTorch counterpart: one seeded by
        a 64-bit draw of a CPU generator; for the device kind, one derived from (key,
        counter), advancing the counter."""
        if not self._on_device:
            return np.random.default_rng(int(self.mt.words64(1)[0]))
        n = self._n
        self._n = n + 1
        k = [int(x) for x in self._raw]
        return np.random.default_rng(np.random.SeedSequence(k + [n & 0xFFFFFFFF, n >> 32,
                                                                 0x5EED]))

    @property
    def is_device(self) -> bool:
        return self._on_device

    def __repr__(self):
        kind = f"device={self.device}" if self._on_device else "cpu"
        return f"Generator({kind}, seed={self.initial_seed()})"


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
