"""Graphs that grow without a read run in pieces: a sequence grown by `cat` in a loop.

Layer: engine — imports executor, graph_key, host_data, ir, metrics, runtime.

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

from . import executor, host_data, ir, metrics
from .graph_key import forget
from .runtime import rt

_state = {"on": os.environ.get("FLOWLITE_GRAPH_CUTS", "1") not in ("0", "off", "false"),
          "carry": None,     # weakref to the sequence node the last cut carried
          "marks": []}       # the last two note_cat records (cat node, roots, checks, syncs)


def set_graph_cuts(on: bool) -> None:
    """Turn the cutting of growing graphs on or off (FLOWLITE_GRAPH_CUTS=0 starts off)."""
    _state["on"] = bool(on)
    _state["carry"] = None
    _state["marks"] = []


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
