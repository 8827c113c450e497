"""`Generator`: PyTorch's `torch.Generator` for host-side data randomness.

Samplers, `random_split` and the DataLoader take `generator=`; this one is a seeded numpy
PCG64 stream on the host (the data pipeline never touches the device for its random
choices).  As in PyTorch, a new Generator starts from the fixed seed 67280421310721, and
`manual_seed` returns the generator so `Generator().manual_seed(42)` reads naturally.
Device-side random ops (`flowlite.randn`, dropout) use flowlite's global generator and do
not take a `generator=` argument.
"""
from __future__ import annotations

import os

import numpy as np

from .. import extend

__all__ = ["Generator", "host_rng"]

DEFAULT_SEED = 67280421310721       # torch.Generator().initial_seed()
_MASK = (1 << 64) - 1


class Generator:
    def __init__(self, device="cpu"):
        self.device = extend.device(device) if device not in (None, "cpu") else "cpu"
        self.manual_seed(DEFAULT_SEED)

    def manual_seed(self, seed) -> "Generator":
        seed = int(seed)
        self._seed = seed
        self.rng = np.random.Generator(np.random.PCG64(seed & _MASK))
        return self

    def seed(self) -> int:
        """Reseed from OS entropy; returns the new seed."""
        s = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The stream's state as a uint8 tensor (PyTorch's ByteTensor convention)."""
        full = self.rng.bit_generator.state
        st = full["state"]
        words = [st["state"], st["inc"], self._seed & _MASK,
                 (full["has_uint32"] << 64) | full["uinteger"]]
        raw = b"".join(int(w).to_bytes(16, "little") for w in words)
        return extend.tensor(np.frombuffer(raw, np.uint8).copy(), dtype=extend.dtypes.uint8)

    def set_state(self, state) -> "Generator":
        raw = bytes(np.asarray(state.numpy() if hasattr(state, "numpy") else state,
                               np.uint8).reshape(-1))
        if len(raw) != 64:
            raise ValueError(f"Generator.set_state: expected a state of 64 bytes (from "
                             f"get_state()), got {len(raw)}")
        s, inc, seed, extra = (int.from_bytes(raw[i:i + 16], "little") for i in (0, 16, 32, 48))
        self._seed = seed
        bg = np.random.PCG64()
        bg.state = {"bit_generator": "PCG64", "state": {"state": s, "inc": inc},
                    "has_uint32": extra >> 64, "uinteger": extra & _MASK}
        self.rng = np.random.Generator(bg)
        return self

    def __repr__(self):
        return f"Generator(seed={self._seed})"


def host_rng(generator=None, where: str = "") -> np.random.Generator:
    """The numpy stream to draw from: the given Generator's (or numpy Generator) own
    stream, else a fresh one seeded from flowlite's global generator (`manual_seed`)."""
    if generator is None:
        return np.random.default_rng(extend.random.host_seed())
    if isinstance(generator, Generator):
        return generator.rng
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"{where}: generator must be a flowlite.Generator (torch.Generator) or a "
                    f"numpy.random.Generator, got {type(generator).__name__}")
