"""`Generator`: PyTorch's `torch.Generator` (flowlite.frontend.generator), for the data pipeline.

Samplers, `random_split` and the DataLoader take `generator=`: a `Generator()` is a seeded
numpy PCG64 stream on the host (the data pipeline never touches the device for its random
choices); a `Generator(device=d)` gives each host draw a numpy stream derived from its key and
draw counter.  As in PyTorch, a new Generator starts from the fixed seed 67280421310721, and
`manual_seed` returns the generator so `Generator().manual_seed(42)` reads naturally.
"""
from __future__ import annotations

import numpy as np

from .. import extend

__all__ = ["Generator", "host_rng"]

Generator = extend.random.Generator
DEFAULT_SEED = extend.random.DEFAULT_SEED


def host_rng(generator=None, where: str = "") -> np.random.Generator:
    """The numpy stream to draw from: the given Generator's (or numpy Generator's) own
    stream, else a fresh one seeded from flowlite's global generator (`manual_seed`)."""
    return extend.random.host_rng(generator, where)
