"""A fusion boundary XLA keeps: the value is materialised once, never recomputed inside its
consumers.

Layer: engine — imports nothing of flowlite. Used by the lowering (cuts in long elementwise
chains) and by primitive lowerings whose cheap-looking result would be expensive to duplicate.

XLA:CPU folds a conditional whose predicate it can prove and merges identical branches, and
its optimisation barriers are expanded away before fusion; a conditional whose predicate is
read from the data (always true: the low bit is forced) and whose untaken branch differs
from the taken one survives, and no fusion crosses it.  Only for CPU programs: elsewhere a
conditional costs a device-to-host read of its predicate.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def barrier(v):
    """`v`, materialised (an identity XLA can neither fold nor fuse across)."""
    word = jax.lax.bitcast_convert_type(v.reshape(-1)[0], _UINT[v.dtype.itemsize])
    return jax.lax.cond((word | 1) != 0, lambda x: x, lambda x: x + jnp.zeros((), x.dtype), v)
