"""Lowering: a topologically ordered node list -> one jitted, compiled program.

The program is rebuilt as plain tuples (primitive, attributes, input slots,
output slot) so the cached executable holds no reference to the graph it came
from; `jax.jit(...).lower(...).compile()` then turns it into one XLA
executable with the donated leaf buffers marked.
"""
from __future__ import annotations

import jax
from jax.sharding import SingleDeviceSharding


def build_executable(order, leaves, scalars, slot, out_slots, device, donate, args):
    from .executor import Executable

    leaf_slots = tuple(slot[id(n)] for n in leaves)
    dtypes = sorted({s.dtype for s in scalars}, key=lambda d: d.name)
    counts = {d: 0 for d in dtypes}
    scalar_map = []
    for s in scalars:
        scalar_map.append((slot[id(s)], dtypes.index(s.dtype), counts[s.dtype]))
        counts[s.dtype] += 1
    program = tuple((n.op.lower, n.attrs, tuple(slot[id(i)] for i in n.inputs), slot[id(n)],
                     None if n.op.multi else n.dtype.np) for n in order)
    n_slots = len(slot)
    n_leaves = len(leaf_slots)

    def run_program(*flat_args):
        env = [None] * n_slots
        for s, a in zip(leaf_slots, flat_args):
            env[s] = a
        if scalar_map:
            packs = flat_args[n_leaves]
            for s, p, k in scalar_map:
                env[s] = packs[p][k]
        for lower, attrs, ins, out, dt in program:
            v = lower(attrs, *[env[i] for i in ins])
            if dt is not None and v.dtype != dt:
                v = v.astype(dt)
            env[out] = v
        return tuple(env[s] for s in out_slots)

    sharding = SingleDeviceSharding(device.jax_device)
    jitted = jax.jit(run_program, donate_argnums=donate, out_shardings=sharding)
    compiled = jitted.lower(*args).compile()
    return Executable(compiled, len(out_slots), donate)
