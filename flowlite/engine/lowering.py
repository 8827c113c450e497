"""Lowering: a topologically ordered node list -> one jitted, compiled program.

Layer: engine — imports device, fusion, matmul_precision, metrics, reroll. It knows primitives
by their `lower` functions.

The program is rebuilt as plain tuples (primitive, attributes, input slots,
output slot) so the cached executable holds no reference to the graph it came
from; `jax.jit(...).lower(...).compile()` then turns it into one XLA
executable with the donated leaf buffers marked.
"""
from __future__ import annotations

import ctypes
import functools
import math
import operator
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import make_single_device_sharding

from . import fusion, matmul_precision, metrics, reroll
from .device import platform_of


class Executable:
    """One compiled program and what the tools report about it."""
    __slots__ = ("fn", "compiled", "n_outputs", "donate", "hits", "stats", "summary",
                 "n_checks", "guarded", "need_bytes", "check_infos", "chained", "loaded",
                 "upgrade_at", "upgrade", "bucket", "where", "rolled", "compile_s")

    def __init__(self, fn, n_outputs, donate):
        self.summary = None
        self.bucket = None        # a length bucket's program: the largest length it runs
        self.loaded = False       # built from JAX's persistent cache rather than compiled
        self.upgrade_at = None    # re-rolled: the run count at which the unrolled form replaces it
        self.upgrade = None       # ... a future of it, compiling on a background thread
        self.where = None         # each root's position among the compiled outputs (None: same)
        self.rolled = ()          # the re-rolled segments' repeat counts
        self.compile_s = 0.0      # how long it took to build here (0: loaded, or not timed)
        self.fn = fn              # outputs in root order
        self.compiled = fn        # the jax Compiled (its outputs may be ordered differently)
        self.n_outputs = n_outputs
        self.donate = donate
        self.hits = 0
        self.stats = None
        self.n_checks = 0         # check flags: one extra (n_checks, 2) output, last
        self.guarded = frozenset()  # outputs kept at their old leaf when a check fails
        self.need_bytes = 0       # new memory a run allocates (XLA's memory analysis)
        self.check_infos = ()     # the checks' error builders of the last run (for replays)
        self.chained = False      # takes a last argument "previous step ok", returns
        #                           "ok" (its own checks and that) before the flags
        self.where = None         # root i's position among the compiled program's outputs
        self.rolled = ()          # the segment counts of its re-rolled runs (exec_store)


_libc = []


def _trim():
    """Give the heap XLA's compiler freed back to the system (glibc keeps it otherwise): the
    next compile's peak then starts from the live memory, not from the last compile's.
    Measured on nanoGPT's README config: peak RSS 490 -> 465 MB."""
    if not _libc:
        try:
            _libc.append(ctypes.CDLL("libc.so.6").malloc_trim)
        except (OSError, AttributeError):      # not glibc: nothing to trim
            _libc.append(None)
    if _libc[0] is not None:
        _libc[0](0)


def lower_program(order, leaves, scalars, slot, out_slots, device, donate, args,
                  check_slots=(), guards=(), chain=False, roll=None, rolled=None, name=None):
    """jax `Lowered` for the program (StableHLO, before XLA's compile), its module named
    `jit_<name>` when a name is given (exec_store's programs: their own JAX cache key).

    With `check_slots` the program returns one more output, the check nodes' flags stacked
    into one (n, 2) array, and each output position in `guards` (position, leaf slot) is
    the new value only when all checks passed, else the old leaf: a failed check leaves that
    leaf's value intact even when its buffer was donated.  The work only guarded outputs
    need (an optimizer's update) runs inside one lax.cond on that ok, so XLA:CPU still
    updates the donated buffers in place (a select after the update made it copy every one
    first).  Elsewhere the guard is that select: an XLA:GPU conditional copies its predicate
    to the host mid-program, which makes the dispatching call wait for the whole step.
    With `chain` the program takes one more argument, the previous step's ok (a bool
    scalar), folds it into its own ok and returns that ok before the flags: a step
    dispatched on top of a failed one commits nothing either."""

    leaf_slots = tuple(slot[id(n)] for n in leaves)
    scalar_map = scalar_layout([(slot[id(s)], s.dtype) for s in scalars])
    # (CPU only: a GPU conditional reads its predicate on the host, a mesh one gathers it)
    breaks = _fusion_breaks(order) if getattr(device, "type", None) == "cpu" else ()
    program = tuple((n.op.lower, n.attrs, tuple(slot[id(i)] for i in n.inputs), slot[id(n)],
                     None if n.op.multi else n.dtype.np, id(n) in breaks) for n in order)
    n_slots = len(slot)

    on_cpu = guards_in_conditional(device)
    inner, ext = _guarded_only(program, out_slots, check_slots, guards) if on_cpu else ((), ())
    outer = [e for k, e in enumerate(program) if k not in inner] if inner else program
    # repeated segments (stacked layers, unrolled steps) each lower as one scan
    types = _slot_types(order, leaves, scalars, slot)
    pinned = set(out_slots) | set(check_slots)
    sig_of = {slot[id(n)]: n.sig for n in order}
    views = {slot[id(n)] for n in order if n.op.name in reroll.MOVABLE}
    joins = frozenset(slot[id(n)] for n in order if n.op.name == "concatenate")
    # slices (their input slot and static bounds): a loop's per-step inputs cut from one
    # array are taken from it as one block (reroll.run)
    tiles = {slot[id(n)]: (slot[id(n.inputs[0])],) + tuple(n.attrs[:3])
             for n in order if n.op.name == "slice"}
    joins = (joins, tiles)
    roll = reroll.reroll_enabled() if roll is None else roll
    outer = reroll.plan(outer, [sig_of[e[3]] for e in outer], types, pinned | set(ext),
                        [e[3] in views for e in outer], roll, joins[0])
    outer = _batch_draws(outer, order, slot, set(leaf_slots) | {s for s, _, _ in scalar_map},
                         getattr(device, "type", None) == "cpu")
    inner_plan = None
    if inner:
        entries = [program[k] for k in sorted(inner)]
        inner_plan = reroll.plan(entries, [sig_of[e[3]] for e in entries], types, pinned,
                                 [e[3] in views for e in entries], roll, joins[0])

    for r in [e for e in outer + (inner_plan or []) if type(e) is reroll.Run]:
        metrics._C["rerolled_runs"] += 1
        metrics._C["rerolled_segments"] += r.reps
        if rolled is not None:
            rolled.append(r.reps)
    in_pack = {sl: (p, k) for sl, p, k in scalar_map}
    needed = _scalar_reads(outer, in_pack) if scalar_map else None

    def run_program(*flat_args):
        env = load_arguments(n_slots, leaf_slots, scalar_map, flat_args, needed)
        _run_entries(outer, env, (in_pack, flat_args[len(leaf_slots)]) if scalar_map else None,
                     joins)
        if check_slots:
            flags = jnp.stack([env[s] for s in check_slots])
            ok = jnp.all(flags[:, 0] == 0)
            if chain:
                ok = ok & flat_args[-1]
            if guards and on_cpu:
                packs = flat_args[len(leaf_slots)] if scalar_map else ()
                _guarded_update(inner_plan, ext, guards, out_slots, env, ok,
                                scalar_map, packs, joins)
            else:
                for pos, leaf in guards:
                    out = out_slots[pos]
                    env[out] = jnp.where(ok, env[out], env[leaf])
        outs = [env[s] for s in out_slots]
        if check_slots:
            if chain:
                outs.append(ok)
            outs.append(flags)
        return tuple(outs)

    if name is not None:
        run_program.__name__ = run_program.__qualname__ = name
    if getattr(device, "mesh", None) is not None:
        # GSPMD: input shardings come from the arguments; XLA propagates them to the
        # outputs and inserts the collectives
        jitted = jax.jit(run_program, donate_argnums=donate)
    else:
        jitted = jax.jit(run_program, donate_argnums=donate,
                         out_shardings=make_single_device_sharding(device.jax_device))
    return lower_for(jitted, device, args)


def guards_in_conditional(device) -> bool:
    """Whether a checked program guards its in-place updates with lax.cond (CPU) or with a
    select (elsewhere: an XLA:GPU conditional reads its predicate on the host mid-program)."""
    return platform_of(device) == "cpu"


def lower_for(jitted, device, args):
    """`jitted.lower(*args)` under the float32 matmul precision flowlite promises on the
    device's platform (matmul_precision: PyTorch's full float32 unless the user asks for
    less; CPU programs are left as JAX makes them)."""
    setting = matmul_precision.jax_setting(platform_of(device))
    if setting is None:
        return jitted.lower(*args)
    with matmul_precision.lowering(setting):
        return jitted.lower(*args)


def pack_groups(dtypes):
    """The host-scalar packing layout, defined here only: a graph's host scalars travel as one
    array per dtype, the dtypes ordered by name.  -> [(dtype, positions of its scalars)]."""
    groups = {}
    for i, d in enumerate(dtypes):
        groups.setdefault(d, []).append(i)
    return [(d, groups[d]) for d in sorted(groups, key=lambda d: d.name)]


def pack_values(groups, values):
    """The packed arrays of `values` (one per scalar) in the layout `groups` (pack_groups)."""
    return tuple(np.array([values[i] for i in idx], dtype=d.np) for d, idx in groups)


def scalar_layout(scalars):
    """(slot, pack index, position in the pack) of each (slot, dtype) host scalar, in the
    layout of pack_groups."""
    layout = [None] * len(scalars)
    for p, (_d, idx) in enumerate(pack_groups([d for _, d in scalars])):
        for k, i in enumerate(idx):
            layout[i] = (scalars[i][0], p, k)
    return layout


def load_arguments(n_slots, leaf_slots, scalar_map, flat_args, needed=None):
    """A slot list holding the program's arguments: leaves first, then the scalar packs
    (each host scalar taken from its pack: those in `needed`, when given)."""
    env = [None] * n_slots
    for s, a in zip(leaf_slots, flat_args):
        env[s] = a
    if scalar_map:
        packs = flat_args[len(leaf_slots)]
        for s, p, k in scalar_map:
            if needed is None or s in needed:
                env[s] = lax.index_in_dim(packs[p], k, keepdims=False)
    return env


def _scalar_reads(entries, in_pack):
    """The slots `entries` read from the slot list — all but the per-segment host scalars a
    re-rolled run gathers from their packs itself (reroll.run): taking each of a loop's
    thousand offsets from its pack first cost ~0.3 ms of tracing apiece, for nothing."""
    need = set()
    for e in entries:
        t = type(e)
        if t is reroll.Run:
            need.update(e.consts)
            need.update(e.carry_init)
            for slots in e.xs:
                if not (all(s in in_pack for s in slots) and
                        len({in_pack[s][0] for s in slots}) == 1):
                    need.update(slots)
        elif t is Draws:
            need.add(e.key)
            need.update(e.counters)
        else:
            need.update(e[2])
    return need


def _slot_types(order, leaves, scalars, slot):
    """slot -> (shape, dtype) of every value of the program (what a scan's carry and stacked
    inputs must agree on)."""
    types = {slot[id(n)]: (n.shape, n.dtype) for n in leaves}
    types.update((slot[id(n)], (n.shape, n.dtype)) for n in scalars)
    types.update((slot[id(n)], (n.shape, n.dtype) if not n.op.multi else None) for n in order)
    return types


# batching saves compile time per draw, not per element: a draw this large lowers alone, and
# a batch holds at most this many elements (it is one more buffer while the program runs)
_BATCH_MAX = 1 << 20


class Draws:
    """Program entries of one batchable primitive (Prim.batch: random draws) that share their
    key, lowered as one computation at the first one's place."""
    __slots__ = ("batch", "attrs", "key", "counters", "outs", "keep")

    def __init__(self, batch, key, keep):
        self.batch, self.key, self.keep = batch, key, keep
        self.attrs, self.counters, self.outs = [], [], []

    def run(self, env):
        flat = self.batch(self.attrs, env[self.key], [env[c] for c in self.counters])
        if self.keep:
            # (XLA:CPU would fuse the whole computation into every draw's slice again)
            flat = fusion.barrier(flat)
        at = 0
        for a, out in zip(self.attrs, self.outs):
            size = math.prod(a[0])
            env[out] = lax.slice(flat, (at,), (at + size,)).reshape(a[0]).astype(a[1].np)
            at += size


def draw_groups(cands, on_cpu):
    """{output slot: its Draws} for the batchable draws among `cands` — (output slot, prim,
    attrs, key slot, counter slot) in program order, their key and counter loaded before
    any entry runs — grouped by (prim, key), up to _BATCH_MAX elements a group; a draw
    larger than that, or alone, is left out."""
    groups = {}
    for c in cands:
        if math.prod(c[2][0]) <= _BATCH_MAX:
            groups.setdefault((c[1], c[3]), []).append(c)
    member = {}
    for (op, k), cs in groups.items():
        if len(cs) > 1:
            d, total = None, 0
            for out, _op, attrs, _k, counter in cs:
                size = math.prod(attrs[0])
                if d is None or total + size > _BATCH_MAX:
                    d, total = Draws(op.batch, k, on_cpu), 0
                total += size
                d.attrs.append(attrs)
                d.counters.append(counter)
                d.outs.append(out)
                member[out] = d
    return member


def _batch_draws(entries, order, slot, ready, on_cpu):
    """`entries` with each group of draw_groups as one Draws entry, at its first draw's place
    (draws inside a re-rolled run stay where they are)."""
    top = {e[3] for e in entries if type(e) is tuple}
    cands = []
    for n in order:
        if n.op.batch is not None and len(n.inputs) == 2 and slot[id(n)] in top:
            k, c = (slot[id(i)] for i in n.inputs)
            if k in ready and c in ready:
                cands.append((slot[id(n)], n.op, n.attrs, k, c))
    return place_draws(entries, draw_groups(cands, on_cpu),
                       lambda e: e[3] if type(e) is tuple else None)


def place_draws(entries, member, out_slot):
    """`entries` with each entry whose output slot (`out_slot(entry)`) is a member of a Draws
    group replaced by that group, once, at its first member's place."""
    if not member:
        return entries
    out, placed = [], set()
    for e in entries:
        d = member.get(out_slot(e))
        if d is None:
            out.append(e)
        elif id(d) not in placed:
            placed.add(id(d))
            out.append(d)
    return out


def _run_entries(entries, env, packed=None, joins=(frozenset(), {})):
    """Lower program entries (and re-rolled runs: reroll.Run) in order into `env` (a slot
    list, or a dict for a branch).  packed: (slot -> (pack, position), the packs) of the host
    scalars, from which a run gathers its per-segment scalars in one op; joins: (the
    concatenations' output slots — reroll.join takes a run's outputs from their stack —,
    slot -> (input slot, starts, limits, strides) of the slices)."""
    stacks = {}
    joins, tiles = joins
    for e in entries:
        if type(e) is reroll.Run:
            reroll.run(e, env, stacks, packed, tiles)
            continue
        if type(e) is Draws:
            e.run(env)
            continue
        if stacks and e[3] in joins:
            reroll.join(e, env, stacks)
            continue
        lower, attrs, ins, out, dt, brk = e
        v = lower(attrs, *[env[i] for i in ins])
        if dt is not None and v.dtype != dt:
            v = v.astype(dt)
        env[out] = fusion.barrier(v) if brk else v


# XLA:CPU fuses a chain of elementwise ops into each of its consumers, duplicating it: a cell
# state unrolled over T steps in Python (c = f * c + i * g, and its gradient) becomes ~T
# fusions each holding a chain O(T) long, and the compile time grows with T² (an LSTM,
# forward and backward: 4.8 s at 12 steps, 18 s at 25, 66 s at 50 in plain jax.jit).  No
# fusion crosses a conditional, so the value ending every _BREAK_DEPTH consecutive
# elementwise ops goes through one (fusion.barrier).  Deep residual streams get a few cuts
# (a 12-layer GPT step: 14, no measurable change in its compile or step time); the bench's
# models get none.
# Only on CPU: elsewhere a conditional costs a device-to-host read of its predicate.
_BREAK_DEPTH = 16


def _fusion_breaks(order):
    """ids of the floating-point nodes where an elementwise chain reaches _BREAK_DEPTH."""
    depth = {}
    breaks = set()
    for n in order:
        if not n.op.elementwise:
            continue
        d = 1 + max((depth.get(id(i), 0) for i in n.inputs), default=0)
        if d >= _BREAK_DEPTH and n.dtype.is_floating_point and all(n.shape):
            breaks.add(id(n))
            d = 0
        depth[id(n)] = d
    return breaks


def _guarded_only(program, out_slots, check_slots, guards):
    """(positions in `program` of the entries only guarded outputs need, the slots those
    entries read from outside the set) — what runs inside the lax.cond."""
    if not guards:
        return frozenset(), ()
    guarded = {out_slots[pos] for pos, _ in guards}
    outside = set(out_slots[i] for i in range(len(out_slots)) if out_slots[i] not in guarded)
    outside.update(check_slots)
    producer = {e[3]: k for k, e in enumerate(program)}
    need_out = set()          # entries an unguarded output or a check needs
    stack = [producer[s] for s in outside if s in producer]
    while stack:
        k = stack.pop()
        if k in need_out:
            continue
        need_out.add(k)
        stack.extend(producer[i] for i in program[k][2] if i in producer)
    inner = frozenset(k for k in range(len(program)) if k not in need_out)
    made = {program[k][3] for k in inner}
    ext = sorted({i for k in inner for i in program[k][2] if i not in made})
    return inner, tuple(ext)


def _guarded_update(entries, ext, guards, out_slots, env, ok, scalar_map, packs, joins):
    """env[guarded output] = its new value when `ok`, else its old leaf: the entries only
    guarded outputs need run inside lax.cond's true branch (no select on their results).
    Host scalars it reads (an optimizer's hyper-parameters) are taken from their packs inside
    the branch, where XLA fuses each into its consumer, instead of as one small kernel each
    outside it."""
    slots = [out_slots[pos] for pos, _ in guards]
    olds = tuple(env[ls] for _, ls in guards)
    in_pack = {slot: (p, k) for slot, p, k in scalar_map}
    ext_sc = [i for i in ext if i in in_pack]
    ext = [i for i in ext if i not in in_pack]

    def update(ext_vals, packs, olds):
        local = dict(zip(ext, ext_vals))
        for i in ext_sc:
            p, k = in_pack[i]
            local[i] = packs[p][k]
        _run_entries(entries, local, (in_pack, packs) if ext_sc else None, joins)
        return tuple(local[s] if s in local else env[s] for s in slots)

    def keep(ext_vals, packs, olds):
        return olds

    new = jax.lax.cond(ok, update, keep, tuple(env[i] for i in ext),
                       tuple(packs) if ext_sc else (), olds)
    for s, v in zip(slots, new):
        env[s] = v


def build_executable(order, leaves, scalars, slot, out_slots, device, donate, args,
                     partners=None, check_slots=(), chain=False, roll=None, name=None,
                     submit=None):
    """The Executable of the program, compiled now — or, given `submit` (a function taking
    the compile job, returning its future), lowered now (the lowering reads the graph) and
    compiled by that job elsewhere: then a future of (Executable, compile seconds)."""
    perm = _output_order(partners, donate) if partners else None
    lowered_slots = out_slots if perm is None else tuple(out_slots[i] for i in perm)
    guards = ()
    if check_slots and partners:
        order_of = list(range(len(out_slots))) if perm is None else perm
        guards = tuple((pos, slot[id(leaves[partners[i]])]) for pos, i in enumerate(order_of)
                       if partners[i] is not None)
    rolled = []
    t0 = time.perf_counter()
    lowered = lower_program(order, leaves, scalars, slot, lowered_slots, device, donate,
                            args, check_slots, guards, chain, roll, rolled, name)
    lower_s = time.perf_counter() - t0
    n_in, donated = len(args), tuple(getattr(args[j], "nbytes", 0) for j in donate)

    def finish():
        t0 = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - t0
        _trim()
        where = None
        if perm is not None:
            where = [0] * len(perm)
            for pos, i in enumerate(perm):
                where[i] = pos
            if check_slots:
                where.extend(range(len(perm), len(perm) + 1 + chain))   # ok, flags stay last
        guarded = frozenset(i for i, p in enumerate(partners) if p is not None) \
            if check_slots and partners else frozenset()
        stats = _stats(compiled, n_in, len(out_slots), donate, donated)
        stats.update(lower_s=lower_s, xla_compile_s=compile_s)
        exe = finish_executable(compiled, where, len(out_slots), donate, len(check_slots),
                                bool(chain and check_slots), guarded, tuple(rolled), stats)
        if compile_s > 0.25:     # small programs (eager mode's per-op ones) leave little behind
            _release_compile_memory()
        return exe, compile_s
    if submit is not None:
        return submit(finish)
    return finish()[0]


def finish_executable(compiled, where, n_outputs, donate, n_checks, chained, guarded, rolled,
                      stats):
    """The Executable around a jax Compiled, built just now or loaded (exec_store): `where`
    gives each root's position among the compiled outputs (None: in order)."""
    fn = compiled
    if where is not None:
        # (a permutation that isn't the identity has two entries or more: itemgetter returns
        # a tuple, picked in C rather than by a Python loop per output)
        def fn(*a, _run=compiled, _pick=operator.itemgetter(*where)):
            return _pick(_run(*a))
    exe = Executable(fn, n_outputs, donate)
    exe.where = where
    exe.rolled = rolled
    exe.upgrade_at = reroll.upgrade_after(list(rolled))
    exe.compiled = compiled
    exe.n_checks = n_checks
    exe.chained = chained
    exe.guarded = guarded
    exe.stats = stats
    exe.need_bytes = max(0, stats.get("output_bytes", 0) + stats.get("temp_bytes", 0)
                         - stats.get("alias_bytes", 0))
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


def _stats(compiled, n_in, n_out, donate, donated_nbytes):
    s = {"inputs": n_in, "outputs": n_out, "donated_bytes": int(sum(donated_nbytes))}
    try:
        m = compiled.memory_analysis()
        s.update(argument_bytes=int(m.argument_size_in_bytes),
                 output_bytes=int(m.output_size_in_bytes),
                 temp_bytes=int(m.temp_size_in_bytes),
                 alias_bytes=int(getattr(m, "alias_size_in_bytes", 0) or 0))
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
