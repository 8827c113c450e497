"""Lowering: a topologically ordered node list -> one jitted, compiled program.

Layer: lowering — imports only jax; it knows primitives by their `lower` functions.

The program is rebuilt as plain tuples (primitive, attributes, input slots,
output slot) so the cached executable holds no reference to the graph it came
from; `jax.jit(...).lower(...).compile()` then turns it into one XLA
executable with the donated leaf buffers marked.
"""
from __future__ import annotations

import ctypes
import functools
import time

import jax
from jax.sharding import SingleDeviceSharding


class Executable:
    """One compiled program and what the tools report about it."""
    __slots__ = ("fn", "compiled", "n_outputs", "donate", "hits", "stats", "summary")

    def __init__(self, fn, n_outputs, donate):
        self.summary = None
        self.fn = fn              # outputs in root order
        self.compiled = fn        # the jax Compiled (its outputs may be ordered differently)
        self.n_outputs = n_outputs
        self.donate = donate
        self.hits = 0
        self.stats = None


def lower_program(order, leaves, scalars, slot, out_slots, device, donate, args):
    """jax `Lowered` for the program (StableHLO, before XLA's compile)."""

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

    if getattr(device, "mesh", None) is not None:
        # GSPMD: input shardings come from the arguments; XLA propagates them to the
        # outputs and inserts the collectives
        jitted = jax.jit(run_program, donate_argnums=donate)
    else:
        jitted = jax.jit(run_program, donate_argnums=donate,
                         out_shardings=SingleDeviceSharding(device.jax_device))
    return jitted.lower(*args)


def build_executable(order, leaves, scalars, slot, out_slots, device, donate, args,
                     partners=None):
    perm = _output_order(partners, donate) if partners else None
    lowered_slots = out_slots if perm is None else tuple(out_slots[i] for i in perm)
    t0 = time.perf_counter()
    compiled = lower_program(order, leaves, scalars, slot, lowered_slots, device, donate,
                             args).compile()
    compile_s = time.perf_counter() - t0
    fn = compiled
    if perm is not None:
        where = [0] * len(perm)
        for pos, i in enumerate(perm):
            where[i] = pos

        def fn(*a, _run=compiled, _where=tuple(where)):
            outs = _run(*a)
            return [outs[p] for p in _where]
    exe = Executable(fn, len(out_slots), donate)
    exe.compiled = compiled
    exe.stats = _stats(compiled, len(args), len(out_slots), donate, args)
    if compile_s > 0.25:     # small programs (eager mode's per-op ones) leave little behind
        _release_compile_memory()
    return exe


def _release_compile_memory():
    """XLA's compiler frees hundreds of MB of scratch when it is done, but glibc keeps the
    freed pages mapped, so the process would carry a compile's peak for the rest of a run.
    Hand them back to the OS (a few ms, once per compile; a no-op off glibc)."""
    trim = _malloc_trim()
    if trim:
        trim(0)


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _output_order(partners, donate):
    """Outputs that replace a donated input first, in that input's order.

    jax.jit pairs each output with the first unused donated input of the same shape and
    dtype, in order; without this an optimizer's new weight could take the buffer of the
    old weight's *gradient* slot, and XLA would copy every parameter before updating it.
    Returns None when the natural order already pairs them."""
    donated = set(donate)
    first = sorted((p, i) for i, p in enumerate(partners) if p is not None and p in donated)
    if not first:
        return None
    lead = [i for _, i in first]
    taken = set(lead)
    perm = lead + [i for i in range(len(partners)) if i not in taken]
    return None if perm == list(range(len(partners))) else perm


def _stats(compiled, n_in, n_out, donate, args):
    s = {"inputs": n_in, "outputs": n_out,
         "donated_bytes": int(sum(getattr(args[j], "nbytes", 0) for j in donate))}
    try:
        m = compiled.memory_analysis()
        s.update(argument_bytes=int(m.argument_size_in_bytes),
                 output_bytes=int(m.output_size_in_bytes),
                 temp_bytes=int(m.temp_size_in_bytes))
    except Exception:  # not every backend reports memory statistics
        pass
    try:
        c = compiled.cost_analysis()
        c = c[0] if isinstance(c, (list, tuple)) else c
        if c and "flops" in c:
            s["flops"] = float(c["flops"])
    except Exception:
        pass
    return s
