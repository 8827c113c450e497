"""Graphs that grow without a read run in pieces: a sequence grown by `cat` in a loop.

Layer: engine — imports executor, metrics, runtime.

A generation loop — `logits = model(idx)`, a draw, `idx = torch.cat((idx, idx_next), 1)` —
that reads nothing until the end would record every step into one pending graph whose
shapes grow every step: one huge program, compiled once for that one run (bigram.py's 500
tokens: ~55 s of compiles).  Here such a loop runs one piece per step instead: when `cat`
extends a sequence that is itself a pending `cat` along the same dimension — or the sequence
a previous cut carried — everything pending is dispatched (asynchronously, like any sync) and
the new sequence becomes the carry.  Every piece after the first has one structure with one
length growing, so the length buckets (buckets.py) run them all with one program per bucket;
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

import os
import weakref

from . import executor, metrics
from .runtime import rt

_state = {"on": os.environ.get("FLOWLITE_GRAPH_CUTS", "1") not in ("0", "off", "false"),
          "carry": None}     # weakref to the sequence node the last cut carried


def set_graph_cuts(on: bool) -> None:
    """Turn the cutting of growing graphs on or off (FLOWLITE_GRAPH_CUTS=0 starts off)."""
    _state["on"] = bool(on)
    _state["carry"] = None


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
        executor.sync(f"graph cut: {what} at {site}", defer_checks=True)
    finally:
        local.growing = False
