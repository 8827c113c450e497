"""Re-rolling: a run of structurally identical segments of a program lowers as one lax.scan.

Layer: engine — imports nothing of flowlite.

The same block stacked N times (a GPT's layers) or a Python loop over time steps records N
copies of one segment, forward and backward alike, and XLA's compile time grows with all of
them.  `plan` finds maximal runs of repeated segments in the ordered program — the same
primitives, attributes, shapes and dtypes, wired the same way — and `run` lowers each as one
`lax.scan` whose body is one segment:

- a value a segment reads from the one before it is the scan's carry (segment 0 reads its
  initial value from outside the run);
- a value from outside the run is a constant when every segment reads the same one, else one
  stacked input per segment (a layer's weights);
- a value used after the run (an activation the backward reads, a gradient) is a stacked
  output, and each segment's own slot is its slice.

A run's stacked output that a later run reads back whole, in order or reversed (the backward
walks the layers backwards), is passed as is: no copy.  The program computes the same values
in the same order; only XLA's fusion choices inside one segment may differ (float32 rounding).
FLOWLITE_REROLL=0 or set_reroll(False) turns it off.
"""
from __future__ import annotations

import os
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

_state = {"on": os.environ.get("FLOWLITE_REROLL", "1").strip().lower() not in ("0", "off", "false")}

# Shorter runs stay unrolled: a scan costs a loop and stacked copies of its inputs, and a few
# small segments compile quickly anyway (thresholds measured: bench/RESULTS.md, re-rolling).
MIN_ENTRIES = 64        # entries a run covers (a segment shorter than 4 counts as 4)
MIN_PERIOD = 1          # entries per segment (a column: one op per time step)
MIN_REPS = 10           # segments: nanoGPT's 4 layers (3.8 s vs 2.7) and a GPT's 8 (3.7 vs
#                         3.3) compile slower as loops, 12 faster (3.2 vs 5.4): bench/compile_depth.py
UPGRADE_AFTER = 20      # runs of a re-rolled program before its unrolled form replaces it
UPGRADE_MAX_REPS = 64   # longer loops stay loops


def set_reroll(on: bool) -> None:
    """Turn re-rolling on or off (FLOWLITE_REROLL=0 starts with it off).  Programs compiled
    before keep their form; new structures follow the setting."""
    _state["on"] = bool(on)


def reroll_enabled() -> bool:
    return _state["on"]


def upgrade_after(reps):
    """After how many runs a re-rolled program (its runs' segment counts `reps`) is replaced
    by its unrolled form, compiled then, once: a scan costs steady time on XLA:CPU (its
    stacked outputs are zero-filled every step, its stacked inputs copied — a 12-layer GPT
    step +3-10%), so loops of layers are only the first steps' form.  None: keep the loop
    (none, or one so long — a cell stepped over hundreds of steps — that the unrolled form
    would take minutes to compile)."""
    if not reps or max(reps) > UPGRADE_MAX_REPS:
        return None
    return UPGRADE_AFTER


class Run:
    """R segments of P entries from `start` of an entry list, lowered as one scan.

    body: per template entry (lower, attrs, refs, dtype), a ref being (kind, index): 0 an
    earlier entry of the same segment, 1 a carry, 2 a stacked input, 3 a constant.
    carry_src/carry_init: the entry each carry comes from and its initial slot; xs: per
    stacked input its slot in each segment; consts: slots; ys: (entry, slot in each segment)
    of each stacked output; lazy: output slots only concatenations read (join takes them
    from the stack, no per-segment slice)."""
    __slots__ = ("start", "period", "reps", "body", "carry_src", "carry_init", "xs", "consts",
                 "ys", "lazy")

    def __repr__(self):
        return (f"Run(start={self.start}, period={self.period}, reps={self.reps}, "
                f"carry={len(self.carry_src)}, xs={len(self.xs)}, ys={len(self.ys)})")


# views whose static attributes (a slice's offset) differ from one segment to the next —
# a time step's `x[:, t]` — are moved next to their input, out of the repeated segments
MOVABLE = frozenset(("slice", "reshape"))


def plan(entries, tokens, types, pinned, movable=None, on=None, joins=frozenset()):
    """The entries, with maximal repeated runs replaced by Run objects.

    entries: (lower, attrs, input slots, output slot, dtype, break) in order; tokens: each
    entry's structural signature; types: slot -> (shape, dtype) of every slot a run may
    read; pinned: slots used after this entry list; movable: per entry, whether it is a
    one-input view (MOVABLE) that may move up to just after its input; on: re-roll (default:
    the setting); joins: output slots of the concatenations (see join)."""
    if not (_state["on"] if on is None else on) or len(entries) < MIN_ENTRIES:
        return list(entries)
    if movable is not None:
        entries, tokens = _canonical_order(entries, tokens, movable)
    runs = _find_runs(entries, tokens, types, pinned, joins)
    if not runs:
        return list(entries)
    out = []
    k = 0
    for r in sorted(runs, key=lambda r: r.start):
        out.extend(entries[k:r.start])
        out.append(r)
        k = r.start + r.period * r.reps
    out.extend(entries[k:])
    return out


def _canonical_order(entries, tokens, movable):
    """A topological order of the same entries that repeats where the program repeats:
    entries without inputs (constants: a fill, an iota) come first, each kind once — a
    constant the first layer made and the others read, or one each layer made again, no
    longer makes the first layer differ; each movable view comes right after the entry that
    makes its input (first when its input is an argument)."""
    made = {e[3] for e in entries}
    same = {}                   # slot of a repeated constant -> the first one's slot
    first = {}
    for k, e in enumerate(entries):
        if not e[2]:
            same[e[3]] = first.setdefault(tokens[k], e[3])
    after = {}                  # producer slot (None: an argument) -> views that follow it
    for k, e in enumerate(entries):
        if movable[k] and len(e[2]) == 1:
            src = same.get(e[2][0], e[2][0])
            after.setdefault(src if src in made else None, []).append(k)
    if not same and not after:
        return entries, tokens
    moved = {k for ks in after.values() for k in ks}
    order = []

    def emit(k):
        order.append(k)
        for c in after.get(entries[k][3], ()):
            emit(c)

    consts = [k for k, e in enumerate(entries) if not e[2]]
    for k in consts:
        emit(k)
    for k in after.get(None, ()):
        emit(k)
    for k in range(len(entries)):
        if k not in moved and entries[k][2]:
            emit(k)
    out = []
    for k in order:
        e = entries[k]
        if any(i in same for i in e[2]):
            e = (e[0], e[1], tuple(same.get(i, i) for i in e[2])) + e[3:]
        out.append(e)
    return out, [tokens[k] for k in order]


def _find_runs(entries, tokens, types, pinned, joins=frozenset()):
    n = len(entries)
    arr = np.asarray(tokens, dtype=np.int64)
    cands = []
    for p in _periods(tokens):
        eq = np.concatenate(([0], (arr[:-p] == arr[p:]).astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(eq))
        for a, b in zip(edges[0::2], edges[1::2]):
            reps = (b - a + p) // p
            if reps >= MIN_REPS and reps * max(p, 4) >= MIN_ENTRIES:
                cands.append((reps * p, int(a), p, int(b - a + p)))
    cands.sort(key=lambda c: (-c[0], c[2]))
    producer = {e[3]: k for k, e in enumerate(entries)}
    users = {}
    for k, e in enumerate(entries):
        for s in e[2]:
            users.setdefault(s, []).append(k)
    taken = np.zeros(n, dtype=bool)
    runs = []
    todo = cands[::-1]          # a stack: the longest candidate on top
    while todo:
        _, a, p, length = todo.pop()
        # the longest free stretch of this candidate's region
        seg = taken[a:a + length]
        if seg.any():
            free = np.flatnonzero(~seg)
            if not len(free):
                continue
            a, length = _longest_free(a, free)
            if length < MIN_REPS * p or length * max(p, 4) < MIN_ENTRIES * p:
                continue
        run = _fit(entries, a, p, length, producer, users, types, pinned)
        if run is not None:
            end = run.start + run.period * run.reps
            taken[run.start:end] = True
            runs.append(run)
            # the same repeated ops may go on wired another way (a loop over inputs, then
            # one feeding its output back): what is left of the region is tried again
            if a + length > end:
                todo.append((a + length - end, end, p, a + length - end))
            if run.start > a:
                todo.append((run.start - a, a, p, run.start - a))
    runs = [r for r in runs if _worth_it(r, taken, users, pinned, entries, joins)]
    rolled = np.zeros(n, dtype=bool)
    for r in runs:
        rolled[r.start:r.start + r.period * r.reps] = True
    for r in runs:
        # outputs only other loops or concatenations read — or the run itself, through its
        # carry (a running sum's every partial sum) —: no per-segment slice
        start, end = r.start, r.start + r.period * r.reps
        r.lazy = frozenset(s for _, slots in r.ys for s in slots if s not in pinned and all(
            start <= u < end or u >= end and (rolled[u] or entries[u][3] in joins)
            for u in users.get(s, ())))
    return runs


def _worth_it(r, rolled, users, pinned, entries, joins):
    """Whether the run compiles fewer kernels as a loop: its glue (one stack per stacked
    input, one slice per segment of each output read outside every loop — parameters
    initialised layer by layer are all glue) against a quarter of the unrolled
    segments' entries (XLA shares some kernels between identical unrolled segments)."""
    sliced = sum(1 for _, slots in r.ys for s in slots
                 if s in pinned or any(not rolled[u] and entries[u][3] not in joins
                                       for u in users.get(s, ())))
    return sliced + len(r.xs) <= r.reps * r.period / 4


def _periods(tokens, most=32):
    """Candidate segment lengths: the distances between consecutive occurrences of one
    signature, the most frequent first."""
    where = {}
    for i, t in enumerate(tokens):
        where.setdefault(t, []).append(i)
    votes = Counter()
    for ps in where.values():
        if len(ps) >= 2:
            votes.update(b - a for a, b in zip(ps, ps[1:]) if b - a >= MIN_PERIOD)
    return [p for p, _ in votes.most_common(most)]


def _longest_free(a, free):
    """(start, length) of the longest run of consecutive offsets in `free`, from `a`."""
    best = (a, 0)
    start = prev = int(free[0])
    for f in [int(x) for x in free[1:]] + [None]:
        if f is None or f != prev + 1:
            if prev - start + 1 > best[1]:
                best = (a + start, prev - start + 1)
            start = f
        prev = f
    return best


def _ref(x, q, lo, k, p, j):
    """How entry k of segment j (starting at lo) reads slot x made by entry q (None: made
    outside the list)."""
    if q is not None:
        if lo <= q < lo + k:
            return ("in", q - lo)
        if j and lo - p <= q < lo:
            return ("carry", q - lo + p)
        if j and q >= lo - j * p:
            return None                 # from an older segment of the run: not a scan
    return ("ext", x)


def _fit(entries, a, p, length, producer, users, types, pinned):
    """The Run of the most wiring-consistent segments in the periodic stretch of `length`
    entries from `a`, over the rotations of the segment boundary (a layer's first op may
    read what the embedding made in another shape than what the layer before makes), or
    None."""
    best = None
    for shift in range(p):
        count = (length - shift) // p
        if count < MIN_REPS or (best is not None and count <= best[0]):
            break
        wires = _wiring(entries, a + shift, p, count, producer, types)
        if wires is None:
            continue
        good, tmpl, seg0 = wires
        if good >= MIN_REPS and good * max(p, 4) >= MIN_ENTRIES and \
                (best is None or good > best[0]):
            best = (good, a + shift, tmpl, seg0)
    if best is None:
        return None
    good, start, tmpl, seg0 = best
    return _build(entries, start, p, good, tmpl, seg0, users, types, pinned)


def _wiring(entries, start, p, count, producer, types):
    """(segments whose wiring matches segment 1's, segment 1's template refs, segment 0's
    refs) or None when segment 0 cannot start the run."""
    def refs(j):
        lo = start + j * p
        out = []
        for k in range(p):
            row = []
            for x in entries[lo + k][2]:
                r = _ref(x, producer.get(x), lo, k, p, j)
                if r is None:
                    return None
                row.append(r)
            out.append(row)
        return out

    tmpl = refs(1)
    seg0 = refs(0)
    if tmpl is None or seg0 is None:
        return None
    for k in range(p):
        for (kind, v), (kind0, v0) in zip(tmpl[k], seg0[k]):
            if kind == "in":
                if (kind0, v0) != (kind, v):
                    return None
            elif kind0 != "ext":
                return None
            elif kind == "carry":
                carried = entries[start + v][3]
                if types.get(v0) is None or types.get(v0) != types.get(carried):
                    return None
    good = 2
    while good < count:
        r = refs(good)
        if r is None or any(kind != k0 or (kind != "ext" and v != v0)
                            for row, row0 in zip(r, tmpl)
                            for (kind, v), (k0, v0) in zip(row, row0)):
            break
        good += 1
    return good, tmpl, seg0


def _build(entries, start, p, reps, tmpl, seg0, users, types, pinned):
    end = start + p * reps
    # every segment's slot of each (entry, input) that reads from outside the run
    ext_slots = {}
    for j in range(reps):
        lo = start + j * p
        for k in range(p):
            for i, x in enumerate(entries[lo + k][2]):
                if tmpl[k][i][0] == "ext":
                    ext_slots.setdefault((k, i), []).append(x)
    carry_key, xs_key, const_key = {}, {}, {}
    body = []
    for k in range(p):
        lower, attrs, _ins, _out, dt, _brk = entries[start + k]
        row = []
        for i, (kind, v) in enumerate(tmpl[k]):
            if kind == "in":
                row.append((0, v))
            elif kind == "carry":
                key = (v, seg0[k][i][1])
                row.append((1, carry_key.setdefault(key, len(carry_key))))
            else:
                slots = tuple(ext_slots[(k, i)])
                if all(s == slots[0] for s in slots):
                    row.append((3, const_key.setdefault(slots[0], len(const_key))))
                else:
                    if len({types.get(s) for s in slots}) != 1 or types.get(slots[0]) is None:
                        return None
                    row.append((2, xs_key.setdefault(slots, len(xs_key))))
        body.append((lower, attrs, tuple(row), dt))
    ys = []
    for k in range(p):
        outs = [entries[start + j * p + k][3] for j in range(reps)]
        if any(s in pinned or any(u >= end for u in users.get(s, ())) for s in outs):
            ys.append((k, tuple(outs)))
    run = Run()
    run.start, run.period, run.reps = start, p, reps
    run.body = tuple(body)
    run.carry_src = tuple(r for r, _ in carry_key)
    run.carry_init = tuple(s for _, s in carry_key)
    run.xs = tuple(xs_key)
    run.consts = tuple(const_key)
    run.ys = tuple(ys)
    run.lazy = frozenset()       # set by _find_runs once the runs are chosen
    return run


def _strong(v):
    """`v` without JAX's weak type (a scan's carry must keep one exact type)."""
    return jax.tree_util.tree_map(lambda a: jax.lax.convert_element_type(a, a.dtype), v)


def run(r, env, stacks, packed=None, tiles=None):
    """Lower Run `r`: read its inputs from `env` (a slot list or dict), write each segment's
    outputs back.  `stacks` maps an output slot to (stacked array, index) for the runs
    lowered so far, so a stacked input that is a whole earlier output is passed as is.
    packed: (slot -> (pack, position), packs) of the host scalars; tiles: slot -> (input
    slot, starts, limits, strides) of slices (a stacked input cut from one array is one
    block of it)."""
    reps = r.reps
    reuse = []      # per stacked input: (block of an earlier stack, reversed) or None
    for slots in r.xs:
        reuse.append(_whole(slots, stacks))
    backwards = sum(1 for u in reuse if u is not None and u[1]) > \
        sum(1 for u in reuse if u is not None and not u[1])
    order = (lambda sl: sl[::-1]) if backwards else (lambda sl: sl)
    xs = [None] * len(r.xs)
    # per-segment host scalars: one gather per pack for the whole run (a stack of scalar
    # slices would compile one small kernel per input)
    in_pack = packed[0] if packed else {}
    by_pack = {}
    for n, slots in enumerate(r.xs):
        if reuse[n] is None and all(s in in_pack for s in slots) and \
                len({in_pack[s][0] for s in slots}) == 1:
            by_pack.setdefault(in_pack[slots[0]][0], []).append(n)
    for p, ns in by_pack.items():
        at = np.array([[in_pack[s][1] for s in order(r.xs[n])] for n in ns], dtype=np.int32)
        got = jnp.take(packed[1][p], at.T, axis=0)          # (reps, inputs)
        for c, n in enumerate(ns):
            xs[n] = got[:, c]
    for n, (slots, u) in enumerate(zip(r.xs, reuse)):
        if xs[n] is not None:
            continue
        if u is not None:
            xs[n] = u[0] if u[1] == backwards else jnp.flip(u[0], 0)
        elif tiles and (t := _tiled(order(slots), tiles, env, stacks)) is not None:
            xs[n] = t
        else:
            xs[n] = _pieces(order(slots), env, stacks)
    consts = [_get(env, s, stacks) for s in r.consts]
    init = tuple(_strong(_get(env, s, stacks)) for s in r.carry_init)
    body, carry_src, y_src = r.body, r.carry_src, tuple(k for k, _ in r.ys)

    def step(carry, x):
        local = []
        for lower, attrs, refs, dt in body:
            args = [local[v] if kind == 0 else carry[v] if kind == 1 else
                    x[v] if kind == 2 else consts[v] for kind, v in refs]
            v = lower(attrs, *args)
            if dt is not None and v.dtype != dt:
                v = v.astype(dt)
            local.append(v)
        return (tuple(_strong(local[k]) for k in carry_src),
                tuple(local[k] for k in y_src))

    ys = None
    if not carry_src:
        # independent segments (a layer's per-step gradient pieces): one batched op each
        # instead of a loop — no loop, no zero-filled outputs
        try:
            ys = jax.vmap(lambda x: step((), x)[1])(tuple(xs))
        except Exception:       # a lowering without a batching rule: loop over it
            ys = None
    if ys is None:
        _, ys = jax.lax.scan(step, init, tuple(xs), length=reps, reverse=backwards)
    # each segment's slice of a stacked output, at an index XLA cannot see: one kernel per
    # shape serves every segment (a static slice per segment would compile one kernel each)
    index = jax.lax.optimization_barrier(jnp.arange(reps, dtype=jnp.int32))
    for (k, slots), y in zip(r.ys, ys):
        for j, s in enumerate(slots):
            idx = reps - 1 - j if backwards else j
            stacks[s] = (y, idx)
            if s not in r.lazy:
                env[s] = _segment(y, index[idx])


def _segment(y, at):
    return jax.tree_util.tree_map(
        lambda a: jax.lax.dynamic_index_in_dim(a, at, keepdims=False), y)


def join(entry, env, stacks):
    """Lower a concatenation (torch.cat/stack of a list a loop filled, one piece per time
    step): consecutive pieces that are consecutive segments of one stacked output are taken
    from the stack as one block, not slice by slice."""
    _lower, attrs, ins, out, dt, _brk = entry
    axis = attrs[0]
    pieces = []
    for i, j, block in _segment_blocks(ins, stacks):
        if block is None:
            pieces.append(_get(env, ins[i], stacks))
            continue
        block = jnp.moveaxis(block, 0, axis)
        shape = list(block.shape)
        shape[axis:axis + 2] = [(j - i) * shape[axis + 1]]
        pieces.append(block.reshape(shape))
    v = pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=axis)
    if dt is not None and v.dtype != dt:
        v = v.astype(dt)
    env[out] = v


def _segment_blocks(slots, stacks):
    """(i, j, block) over `slots`: slots[i:j] consecutive segments (either direction) of one
    stacked output as the block of it holding them, in slot order; (i, i + 1, None) for a
    slot that is not."""
    i = 0
    while i < len(slots):
        j = i + 1
        st = stacks.get(slots[i])
        if st is not None and hasattr(st[0], "shape"):
            step = None
            while j < len(slots):
                nxt = stacks.get(slots[j])
                if nxt is None or nxt[0] is not st[0]:
                    break
                d = nxt[1] - stacks[slots[j - 1]][1]
                if d not in (1, -1) or (step is not None and d != step):
                    break
                step = d
                j += 1
        if j - i >= 2:
            block, rev = _whole(slots[i:j], stacks)
            yield i, j, jnp.flip(block, 0) if rev else block
        else:
            yield i, j, None
        i = j


def _read(env, s):
    return env.get(s) if isinstance(env, dict) else env[s]


def _get(env, s, stacks):
    """The value of slot `s`: from `env`, or its segment of a stack (a lazy output)."""
    v = _read(env, s)
    if v is None and s in stacks:
        y, idx = stacks[s]
        v = jax.tree_util.tree_map(lambda a: a[idx], y)
    return v


def _pieces(slots, env, stacks):
    """The stack of `slots`: runs of consecutive segments of one earlier stack as blocks of it
    (the first layer's value, unrolled, then the other layers' from a loop), the rest one by
    one."""
    vals = [_read(env, s) for s in slots]
    if all(v is not None for v in vals) and not any(s in stacks for s in slots):
        return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *vals)
    parts = [block if block is not None else
             jax.tree_util.tree_map(lambda a: a[None], _get(env, slots[i], stacks))
             for i, _j, block in _segment_blocks(slots, stacks)]
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, 0), *parts)


def _tiled(slots, tiles, env, stacks):
    """The stack of `slots` when they are slices of one array tiling one axis in order, or in
    reverse order (a time step's x[:, t], the run's segments taken last first), taken from
    that array as one block; else None."""
    first = tiles.get(slots[0])
    if first is None:
        return None
    src, lo, hi, st = first
    if any(k != 1 for k in st):
        return None
    axes = None
    size = None
    sign = 1
    for j, s in enumerate(slots):
        t = tiles.get(s)
        if t is None or t[0] != src or t[3] != st:
            return None
        diff = [a - b for a, b in zip(t[1], lo)]
        if any(t[2][d] - t[1][d] != hi[d] - lo[d] for d in range(len(lo))):
            return None
        moved = [d for d, v in enumerate(diff) if v]
        if j == 0:
            continue
        if len(moved) != 1 or (axes is not None and moved[0] != axes):
            return None
        if axes is None:
            axes = moved[0]
            size = hi[axes] - lo[axes]
            sign = 1 if diff[axes] > 0 else -1
        if diff[axes] != sign * j * size:
            return None
    if axes is None:
        return None
    x = _get(env, src, stacks)
    if x is None or not hasattr(x, "shape"):
        return None
    n = len(slots)
    start = lo[axes] if sign > 0 else lo[axes] - (n - 1) * size
    block = jax.lax.slice(x, tuple(lo[d] if d != axes else start for d in range(len(lo))),
                          tuple(h if d != axes else start + n * size
                                for d, h in enumerate(hi)))
    shape = list(block.shape)
    shape[axes:axes + 1] = [n, size]
    out = jnp.moveaxis(block.reshape(shape), axes, 0)
    return out if sign > 0 else jnp.flip(out, 0)


def _whole(slots, stacks):
    """(block, reversed) when `slots` are consecutive segments of one stacked output, in
    order or reversed: the block of the stack holding them (no per-segment copy)."""
    first = stacks.get(slots[0])
    if first is None or not hasattr(first[0], "shape"):
        return None
    arr = first[0]
    got = []
    for s in slots:
        st = stacks.get(s)
        if st is None or st[0] is not arr:
            return None
        got.append(st[1])
    lo, hi = min(got), max(got)
    if got == list(range(lo, hi + 1)):
        rev = False
    elif got == list(range(hi, lo - 1, -1)):
        rev = True
    else:
        return None
    block = arr if (lo, hi + 1) == (0, arr.shape[0]) else \
        jax.lax.slice_in_dim(arr, lo, hi + 1, axis=0)
    return block, rev
