"""`Generator`: PyTorch's `torch.Generator` (flowlite.frontend.generator), for the data pipeline.

Samplers, `random_split` and the DataLoader take `generator=` and draw as PyTorch's do: from a
CPU `Generator()` (PyTorch's MT19937 stream, bit for bit) or, without one, from the global CPU
stream (`manual_seed`), on the host — the data pipeline never touches the device for its random
choices — so with the same seeds they visit PyTorch's orders. A numpy Generator is accepted too
(its own numbers); a `Generator(device=d)` of another device gives each host draw a numpy
stream derived from its key and draw counter. As in PyTorch, a new Generator starts from the
fixed seed 67280421310721, and `manual_seed` returns the generator.
"""
from __future__ import annotations

import numpy as np

from .. import extend

__all__ = ["Generator", "host_rng", "torch_stream", "host_seed", "seeded_stream"]

Generator = extend.random.Generator
DEFAULT_SEED = extend.random.DEFAULT_SEED


def host_rng(generator=None, where: str = "") -> np.random.Generator:
    """The numpy stream to draw from: the given Generator's (or numpy Generator's) own
    stream, else a fresh one seeded from flowlite's global generator (`manual_seed`)."""
    return extend.random.host_rng(generator, where)


def torch_stream(generator=None, where: str = ""):
    """The PyTorch stream (MT19937Stream) a draw takes: a CPU Generator's or, for None, the
    global one; None for a numpy Generator or a device Generator (no PyTorch counterpart)."""
    return extend.random.torch_stream(generator, where)


def host_seed(generator=None) -> int:
    """`torch.empty((), dtype=torch.int64).random_(generator=generator).item()`."""
    return extend.random.host_seed(generator)


def seeded_stream(seed: int):
    """`torch.Generator().manual_seed(seed)`'s stream."""
    return Generator().manual_seed(seed).mt
