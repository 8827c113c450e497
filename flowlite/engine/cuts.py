"""Graphs that grow without a read run in pieces: a sequence grown by `cat` in a loop, and any
loop that keeps recording (in-place writes, a running sum, a cell stepped over a sequence).

Layer: engine — imports executor, graph_key, host_data, ir, metrics, reroll, runtime, tape.

A generation loop — `logits = model(idx)`, a draw, `idx = torch.cat((idx, idx_next), 1)` —
that reads nothing until the end would record every step into one pending graph whose
shapes grow every step: one huge program, compiled once for that one run (bigram.py's 500
tokens: ~55 s of compiles).  Here such a loop runs one piece per step instead: when `cat`
extends a sequence that is itself a pending `cat` along the same dimension — or the sequence
a previous cut carried — everything pending is dispatched (asynchronously, like any sync) and
the new sequence becomes the carry.  The two steps before that cut run first as pieces of
their own (note_cat noted what a cut at their `cat` would have run), so every piece is one
step and has one structure with one length growing, so the length buckets (buckets.py) run them all with one program per bucket;
a cut's family is bucketed from its second graph on, in few large buckets (buckets.bucket_for),
so a whole loop of a few hundred steps compiles about three programs.

The results are exactly those of the uncut graph: a piece is an ordinary sync (the same
random draws: every draw's counter is data), and a bucketed program computes what the exact
one does.  A sequence that carries autograd history (a decoder's outputs in a training
forward) is never cut: a training step stays one executable.  A piece outputs the live
tensors, not what only the autograd tape saved (generating with autograd on, as gpt.py does,
made every activation an output): a backward that does come recomputes those, with the same
draws.  `set_graph_cuts(False)` or
`FLOWLITE_GRAPH_CUTS=0` turn cutting off.
"""
from __future__ import annotations

import math
import os
import weakref

import jax
import numpy as np

import bisect

from . import executor, host_data, ir, metrics, reroll
from .graph_key import forget
from .runtime import rt
from .tape import saved_pending_nodes

_state = {"on": os.environ.get("FLOWLITE_GRAPH_CUTS", "1") not in ("0", "off", "false"),
          "carry": None,     # weakref to the sequence node the last cut carried
          "marks": []}       # the last two note_cat records (cat node, roots, checks, syncs)


def set_graph_cuts(on: bool) -> None:
    """Turn the cutting of growing graphs on or off (FLOWLITE_GRAPH_CUTS=0 starts off)."""
    _state["on"] = bool(on)
    _state["carry"] = None
    _state["marks"] = []
    _loop["stream"] = None


# note_cat records a `cat` that appends at most this many elements along its dimension (a
# step's new tokens) while at most this much is pending (the record costs a reference each)
_STEP_MAX = 8
_PENDING_MAX = 8192


def note_cat(node, nodes, dim) -> None:
    """A `cat` of integers (token ids) that may be a growing loop's first or second step: what
    a cut there would run (the live pending work, the checks so far) is noted, so that the
    cut that finds the loop at its third step runs the first two as the pieces they would
    have been — the same graphs as every later piece: the length family forms from the
    start instead of after a piece of three steps and an exact one."""
    if node.dtype.kind not in "iu" or len(nodes) != 2 or rt.observers or \
            rt.local.tracing_body or min(n.shape[dim] for n in nodes) > _STEP_MAX:
        return
    local = rt.local
    if len(local.pending) > _PENDING_MAX:
        return
    # (weak: a record must not keep a graph, or the buffers it computed, alive)
    roots = [weakref.ref(t._node) for r in local.pending if (t := r()) is not None]
    marks = _state["marks"]
    marks.append((weakref.ref(node), roots, len(local.checks), metrics._C["syncs"]))
    del marks[:-2]


def graph_cuts_enabled() -> bool:
    return _state["on"]


def extends_sequence(nodes, concat, dim) -> bool:
    """Whether a `cat` of `nodes` along `dim` extends a growing sequence: one of them is the
    sequence the last cut carried, or a pending concatenation along the same dimension of a
    pending one (a chain of three: a model's nested `cat`s are not a loop)."""
    carry = _state["carry"]
    carry = carry() if carry is not None else None
    at = (dim,)
    for n in nodes:
        if n is carry:
            return True
        if n.op is concat and n.attrs == at:
            for i in n.inputs:
                if i.op is concat and i.attrs == at:
                    return True
    return False


def cut(node, what: str) -> None:
    """Dispatch everything pending, `node` (the grown sequence) included, and carry `node`
    into the next piece.  Not while a scan body is traced or flowlite.compile records (their
    programs are whole by definition)."""
    local = rt.local
    if local.tracing_body or executor.observers or rt.recording:
        return
    _state["carry"] = weakref.ref(node)
    site = metrics.user_site(3)
    metrics.note_cut(site, what)
    local.growing = True
    try:
        _first_steps(node, what, site)
        executor.sync(f"graph cut: {what} at {site}", defer_checks=True)
    finally:
        local.growing = False


def _first_steps(node, what, site):
    """At the cut that found the loop (a chain of three `cat`s, no carry yet), run the chain's
    first two steps as their own pieces, from note_cat's records."""
    marks, _state["marks"] = _state["marks"], []
    inner = [i for i in node.inputs if i.op is node.op and i.attrs == node.attrs]
    # (both records still describe the pending work: no sync since the first)
    if len(inner) != 1 or len(marks) != 2 or marks[0][3] != metrics._C["syncs"]:
        return
    second = inner[0]
    first = [i for i in second.inputs if i.op is node.op and i.attrs == node.attrs]
    if len(first) != 1 or marks[0][0]() is not first[0] or marks[1][0]() is not second:
        return
    done = 0
    for _ref, roots, n_checks, _syncs in marks:
        roots = [n for r in roots if (n := r()) is not None]
        if not done:
            _settle_host_views(roots)
        executor.sync_part(f"graph cut: {what} at {site}", roots, n_checks - done, True)
        done = n_checks


# a view of host data this small becomes a data leaf of the loop's first piece
_SETTLE_MAX = 1 << 16


def _settle_host_views(roots):
    """The first piece's views of host data (`torch.tensor(ids)[None, ...]`, the start of a
    generation) become data leaves, as every later piece's sequence is a leaf: the first
    piece then has the family's structure (its length-1 member) instead of one of its own,
    and compiles no program of its own."""
    stream = rt.local.stream
    seen = set()
    todo = list(roots)
    while todo:
        n = todo.pop()
        if id(n) in seen or n.op is ir.DATA or n.op is ir.SCALAR:
            continue
        seen.add(id(n))
        v = None
        if type(n.shape) is tuple and math.prod(n.shape) <= _SETTLE_MAX:
            v = host_data.host_value(n)
        if v is None:
            todo.extend(n.inputs)
            continue
        forget(n, stream)
        n.op, n.inputs, n.attrs = ir.DATA, (), ()
        n.value = jax.device_put(np.array(v, copy=True), n.device.jax_device)
        n.sig = ir.intern_sig((ir.DATA, (), n.shape, n.dtype, 0))


# ---- any loop that records without a read: pieces at its period --------------------------------
# `N[i, j] += 1` on a device tensor, `s = s + x[i]`, `acc.add_(x[i])`, a cell stepped over a long
# sequence under no_grad: a loop whose every iteration records the same few ops, read only at
# the end.  Uncut it is one program of every iteration's ops (228k in-place writes: 2.7M nodes,
# minutes of compiling, gigabytes).  Every _GUARD pending tensors (tensor.apply), `bound` reads
# the recorded graph key back (graph_key: per node its signature and its inputs' numbers), finds
# the loop's period P — the fewest nodes after which the recorded structure repeats — and runs
# the pending work in pieces of L = P * k nodes at the same phase of the loop: each piece the
# same program over different data (its first inputs the previous piece's outputs), compiled
# once and re-rolled into one scan over its k iterations (reroll.py); the rest are cache hits.
# A piece outputs exactly what later work reads of it (and what live tensors hold), so the
# results are those of the uncut graph.  Work with autograd in flight (a training step's
# forward, its backward) is never cut: a step stays one executable.  A graph this big without
# a period found runs whole at the guard (`_LOOP["fallback"]` nodes): bounded, if not shared.
_LOOP = {"piece": 4096,        # the nodes a piece aims at
         "max_period": 2048,   # the longest loop body looked for (nodes per iteration)
         "window": 8192,       # recorded entries read back to find the period
         "fallback": 1 << 15}  # pending nodes without a period before a cut anyway
# iterations per piece: more than a re-rolled program is ever unrolled for (reroll.py), so a
# piece's program stays a loop (no second, unrolled compile in the background)
_MIN_REPS = reroll.UPGRADE_MAX_REPS + 1

_loop = {"stream": None, "period": 0, "length": 0, "next": 0}
_n_inputs: dict = {}         # interned signature -> its node's number of inputs (-1: an entry
#                              of several nodes: a backward template, an update's projections)


def _nin(sig) -> int:
    k = _n_inputs.get(sig)
    if k is None:
        for key, v in list(ir._SIGS.items()):
            _n_inputs[v] = key[4] if len(key) == 5 and isinstance(key[0], ir.Prim) else -1
        k = _n_inputs.get(sig, -1)
    return k


_MAX_INPUTS = 16      # (an entry with more inputs — a cat of many pieces — ends the reading)


def _entries(st, count):
    """The structure of the last `count` nodes recorded in stream `st`, oldest first: their
    signatures, and per node and input how many nodes back that input was recorded (-1: a
    leaf, a host scalar, a node of an earlier piece; 0: no such input) — arrays (n,) and
    (n, _MAX_INPUTS); None when an entry records several nodes or has too many inputs."""
    flat = st.flat
    i = len(flat)
    m = st.nxt
    sigs = []
    back = []
    while i > 0 and len(sigs) < count:
        sig = flat[i - 1]
        k = _nin(sig)
        if k < 0 or k > _MAX_INPUTS or i - 1 - k < 0:
            return None
        m -= 1
        sigs.append(sig)
        back.append([-1 if c <= 0 else m - c for c in flat[i - 1 - k:i - 1]])
        i -= 1 + k
    n = len(sigs)
    width = max((len(b) for b in back), default=0)
    d = np.zeros((n, max(width, 1)), np.int64)
    for r, b in enumerate(back):
        d[n - 1 - r, :len(b)] = b
    return np.array(sigs[::-1], np.int64), d


def _period(entries, max_period):
    """(P, the index where the repetition with period P starts) for the smallest P <=
    max_period with which the end of the recorded entries repeats over at least 4 periods;
    None otherwise.  An entry repeats the one P before it when it has the same signature and
    each input is recorded as far back (the previous iteration's value: a loop's carry) or is
    the very same node (one recorded before the loop, read by every iteration)."""
    sigs, back = entries
    n = len(sigs)
    if n < 8:
        return None
    pos = np.nonzero(sigs[:-1] == sigs[-1])[0]
    for j in pos[::-1]:
        p = n - 1 - int(j)
        if p > max_period or 4 * p > n:
            break
        b1, b0 = back[p:], back[:-p]
        same = (sigs[p:] == sigs[:-p]) & np.all((b1 == b0) | ((b0 > 0) & (b1 == b0 + p)), 1)
        bad = np.nonzero(~same)[0]
        start = int(bad[-1]) + 1 if len(bad) else 0   # entry k repeats k - p for k >= start + p
        if n - start >= 4 * p:
            return p, start
    return None


def bound(n_pending) -> None:
    """Called every _GUARD pending tensors: cut the pending work into pieces at its loop's
    period (see above), or run it whole when it is this big without one."""
    local = rt.local
    if not _state["on"] or local.tracing_body or executor.observers or rt.recording or \
            local.growing or local.recorder is not None:
        return
    if saved_pending_nodes():        # autograd in flight: a step stays one executable
        return
    st = local.stream
    roots = _live_roots(local.pending)
    nodes, foreign = _pending_graph(st, roots + local.checks)
    if not nodes:
        return
    site = metrics.user_site(3)
    cuts = None if foreign else _boundaries(st)
    if cuts is None:
        if len(nodes) >= _LOOP["fallback"]:
            metrics.note_cut(site, "a graph recorded without a read, run whole (no loop "
                                   "period found)")
            executor.sync(f"graph cut: a graph recorded without a read at {site}",
                          defer_checks=True)
        return
    bounds, what = cuts
    if not bounds:
        return
    outs = _piece_outputs(st, bounds, nodes, roots)
    # (no reference of ours may outlive a piece: an output held here would not be donated to
    # the next piece as it is to every later one, and its program would be compiled again)
    del nodes, roots
    cause = f"graph cut: {what} at {site}"
    for c in bounds:
        n_checks = 0
        for ck in local.checks:
            if ck.epoch is not st or ck.mark >= c:
                break
            n_checks += 1
        metrics.note_cut(site, what)
        executor.sync_part(cause, outs.pop(0), n_checks, True)
    # what the pieces ran is data now: the pending list keeps the live pending tensors only,
    # the graph key (invalid since the first piece) its recent entries only
    local.pending[:] = list(dict.fromkeys(
        r for r in local.pending if (t := r()) is not None and executor._is_pending(t._node)))
    if not st.valid:
        keep = 4 * _LOOP["window"]
        if len(st.flat) > 2 * keep:
            del st.flat[:-keep]
        st.ext.clear()
        st.esigs.clear()


def before_read() -> None:
    """A host read (or flowlite.sync()) while a loop cut at its period is still recording: its
    complete pieces run first, as the guard would have run them — cache hits — so the read's
    own program is the last piece's rest, not up to a guard's worth of the loop."""
    lp = _loop
    st = rt.local.stream
    if lp["stream"] is st and _state["on"] and st.nxt - lp["period"] >= lp["next"]:
        bound(0)


def _live_roots(pending):
    """The pending nodes of the live tensors in `pending` (weak references)."""
    out = []
    for r in pending:
        t = r()
        if t is not None and executor._is_pending(t._node):
            out.append(t._node)
    return out


def _pending_graph(st, todo):
    """({recording number: node} of the pending graph of `todo`, whether it holds a node not
    numbered in stream `st` (no numbers to cut at))."""
    nodes = {}
    foreign = False
    while todo:
        n = todo.pop()
        if not executor._is_pending(n):
            continue
        if n.epoch is not st or n.mark < 0:
            foreign = True
            continue
        m = n.mark
        if m in nodes:
            continue
        nodes[m] = n
        todo.extend(n.inputs)
    return nodes, foreign


def _piece_outputs(st, bounds, nodes, roots):
    """Per boundary, the outputs of the piece that ends there, in recording order: the nodes
    before it that a node after it reads, or that a live tensor holds (each in the first piece
    that computes it)."""
    outs = [{} for _ in bounds]
    last = len(bounds)
    for m, n in nodes.items():
        for i in n.inputs:
            mi = i.mark
            if i.epoch is st and mi < m and executor._is_pending(i):
                k = bisect.bisect_right(bounds, mi)
                if k < last and bounds[k] <= m:
                    outs[k][mi] = i
    for n in roots:
        k = bisect.bisect_right(bounds, n.mark)
        if k < last:
            outs[k][n.mark] = n
    return [[o[m] for m in sorted(o)] for o in outs]


def _boundaries(st):
    """(the recording numbers to cut at, in order; what is cut) for the loop recorded at the
    end of stream `st`, continuing the previous guard's pieces when it is the same loop; None
    when no period is found."""
    maxp = _LOOP["max_period"]
    lp = _loop
    hi = st.nxt
    window = _LOOP["window"]
    if lp["stream"] is st:        # read back to the last guard's next boundary (a period before)
        window = max(window, min(hi - lp["next"] + 2 * lp["period"], 8 * window))
    entries = _entries(st, window)
    if entries is None:
        return None
    found = _period(entries, maxp)
    if found is None:
        lp["stream"] = None       # (the loop has ended: a read needs no pieces first)
        return None
    p, start = found
    first = hi - len(entries[0]) + start     # where the repetition starts, as far as read back
    if lp["stream"] is st and lp["period"] == p and lp["next"] >= first:
        length, c = lp["length"], lp["next"]
    else:
        length = p * max(_MIN_REPS, -(-_LOOP["piece"] // p))
        c = first
        if hi - p - c < length:
            return None        # (too little repetition yet for a piece: the next guard)
    out = []
    while c <= hi - p:
        out.append(c)
        c += length
    lp["stream"], lp["period"], lp["length"], lp["next"] = st, p, length, c
    return out, f"a loop recorded without a read, in pieces of {length} ops ({length // p} " \
                f"iterations of {p})"
