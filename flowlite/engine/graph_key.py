"""The graph key, built while ops are recorded: no walk of the graph at a cache hit.

Layer: engine — imports ir. Every recorder (tensor.apply, the backward templates,
recording.record_into) appends one entry to this thread's `rt.local.stream` (a
runtime.KeyStream) per recorded node — the codes of its inputs, then its signature — and numbers
the node (`Node.mark`, with `Node.epoch` the stream). An input's code is the number of a node
recorded in the same stream (>= 0), or `~j` for the j-th leaf, host scalar or baked constant the
stream read (these also go to `stream.ext`, weakly, and their signatures to `stream.esigs`). A
signature fixes its entry's number of inputs and of nodes, so the flat list reads back
unambiguously from its end: two streams with the same key record the same program over their
`ext` lists, dead nodes included (XLA drops those).

The executor keys its executables by the walked graph (what it compiles) and maps each
stream key it has seen to that graph's structure and to where the graph's leaves sit in
`ext`: a sync whose stream key it knows skips the walk.  Anything the key can't name —
an input recorded in another stream (another thread, a scan body, before a sync that did
not materialise it) or a node a failure rewrote — makes the stream invalid, and its sync
walks the graph as before.
"""
from __future__ import annotations

import weakref

from . import ir

_DATA, _SCALAR = ir.DATA, ir.SCALAR
_ref = weakref.ref


def enter(st, n) -> int:
    """The code of input `n`, not yet numbered in stream `st`: a leaf, host scalar or baked
    constant joins `st.ext` (weakly: the stream keeps nothing alive); anything else makes
    `st` invalid."""
    if st.valid:
        op = n.op
        if op is _DATA or op is _SCALAR or (n.device is None and not n.inputs):
            ext = st.ext
            code = ~len(ext)
            n.epoch = st
            n.mark = code
            ext.append(_ref(n))
            st.esigs.append(n.sig)
            return code
        st.valid = False
    return 0


def out_codes(st, nodes):
    """The stream numbers of `nodes` (a sync's outputs or checks), or None when one of them
    was not recorded in `st`."""
    out = [n.mark for n in nodes if n.epoch is st]
    return tuple(out) if len(out) == len(nodes) else None


def token(kind, what) -> int:
    """The signature of an entry that records several nodes at once (a backward template,
    an update's projections): distinct from every node's signature."""
    return ir.intern_sig(("entry", kind, what))


def forget(node, st) -> None:
    """`node` is about to be rewritten (a failure, a rollback, a committed host read): the
    graph key `st` being recorded can't name it any more if it was recorded there."""
    if node.epoch is st:
        st.valid = False
