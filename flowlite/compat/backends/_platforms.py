"""Which JAX platforms exist on this machine (shared by the backends modules).

Layer: compat — imports nothing of flowlite.
"""
from __future__ import annotations

import jax


def has_platform(name: str) -> bool:
    try:
        return bool(jax.devices(name))
    except RuntimeError:        # JAX raises for a platform that is not present
        return False
