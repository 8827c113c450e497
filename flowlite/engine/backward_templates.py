"""Backward templates: run the VJP rules once per tape structure, then re-emit their nodes.

A training loop builds a tape of the same structure every step, and calling every
primitive's VJP rule again (wrapping saved nodes as tensors, broadcasting and shape rules,
a Tensor per cotangent) is most of a step's tracing time — yet it yields the same nodes,
wired the same way.  So `backward()` keys the tape by structure: the root cotangent's
signature and device, then for each GradFn (breadth-first) the signature of its output
(primitive, attributes, shape, dtype), its input signatures and where its edges lead.
That is everything a VJP rule can read.  The first two backward passes with a key run the
rules while recording the nodes they create (in creation order, each input named as "the
root cotangent", "input j / output of the k-th GradFn", "the m-th node created" or a
constant); when both recordings agree, later passes emit those nodes directly, wired to
this step's saved nodes.  Recordings that disagree, or that reach a node they can't name,
mark the key as untemplated: that tape always runs its VJP rules.

Only the plain `loss.backward()` of one root uses templates; `create_graph`, `grad(...,
inputs=)`, `retain_grad()` and the eager / anomaly debug modes run the rules.

Layer: engine — imports graph_key, ir, metrics, runtime.
"""
from __future__ import annotations

import itertools

from . import graph_key, ir
from .metrics import _C, user_site
from .runtime import rt

_DATA, _SCALAR = ir.DATA, ir.SCALAR
_Node = ir.Node
_new_node = ir.Node.__new__
_UNSAFE = "untemplated"
_MAX_TEMPLATES = 256

# key -> _UNSAFE | _Template | (recording) list of earlier recordings
_cache: dict = {}
enabled = [True]   # tests switch templates off to compare against the rules themselves


_serials = itertools.count()


class _Template:
    __slots__ = ("steps", "consts", "outs", "n_env", "token", "reads")

    def __init__(self, steps, consts, outs, n_env):
        self.steps = steps      # (op, input env indices, attrs, shape, dtype, device, sig)
        self.consts = consts    # nodes shared by every emission (baked constants, scalars)
        self.outs = outs        # (index of the AccumulateGrad edge, env index of its gradient)
        self.n_env = n_env      # env entries before the consts: root cotangent + saved nodes
        # one graph-key entry stands for all of an emission's nodes: the codes of the env
        # entries it reads, then this (graph_key.token); the serial makes it this template's
        self.token = graph_key.token("backward template", next(_serials))
        top = n_env + len(consts)
        self.reads = tuple(sorted({j for s in steps for j in s[1] if j < top} |
                                  {j for _, j in outs if j < top}))

    def same_as(self, other) -> bool:
        if self.steps != other.steps or self.outs != other.outs or \
                len(self.consts) != len(other.consts):
            return False
        for a, b in zip(self.consts, other.consts):
            if a is b:
                continue
            # a scalar the rule created afresh: equal if its value is (never a saved value)
            if not (a.op is _SCALAR and b.op is _SCALAR and a.dtype is b.dtype
                    and type(a.value) is type(b.value) and a.value == b.value):
                return False
        return True


def tape_key(root, gnode, GradFn):
    """Breadth-first walk of the tape from `root`.

    Returns (key, edges, env, deps) — the structural key, the edges in walk order, the saved
    nodes in walk order (env[0] is the root cotangent), and how many edges lead into each —
    or None when some GradFn asks for its own gradient (`retain_grad`).
    """
    edges = [root]
    index = {id(root): 0}
    deps = [0]
    env = [gnode]
    flat = [gnode.sig, gnode.device]
    fappend = flat.append
    i = 0
    while i < len(edges):
        e = edges[i]
        i += 1
        if type(e) is not GradFn:
            fappend(-2)
            continue
        ins = e.inputs
        if ins is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access "
                "saved tensors after they have already been freed). Specify "
                "retain_graph=True on the first backward call if you need to.")
        if e.retain is not None:
            return None
        fappend(e.sig)
        for n in ins:
            fappend(n.sig)
        env += ins
        env.append(e.out)
        for p in e.edges:
            if p is None:
                fappend(-1)
                continue
            k = index.get(id(p))
            if k is None:
                k = index[id(p)] = len(edges)
                edges.append(p)
                deps.append(1)
            else:
                deps[k] += 1
            fappend(k)
    return tuple(flat), edges, env, deps


def lookup(key):
    """The template for `key`, or a list to record into (None: don't record)."""
    t = _cache.get(key)
    if t is None:
        if len(_cache) >= _MAX_TEMPLATES:
            _cache.clear()
        t = _cache[key] = []
    if t is _UNSAFE:
        return None
    return t


_flags = rt.flags   # the debug switches


def rules_must_run() -> bool:
    """Eager and anomaly modes check every op as it is made: no shortcuts then."""
    flags = _flags
    return flags["eager"] or flags["anomaly"]


def emit(t, env, edges, Tensor):
    """Re-create the template's nodes on this step's saved nodes; set the leaves' .grad."""
    flags = _flags
    site = user_site(3) if flags["track_sites"] else None   # backward's line, as the rules get
    env.extend(t.consts)
    st = rt.local.stream
    flat = st.flat
    enter = graph_key.enter
    for j in t.reads:
        n = env[j]
        flat.append(n.mark if n.epoch is st else enter(st, n))
    flat.append(t.token)
    k = st.nxt
    st.nxt = k + len(t.steps)
    new = _new_node
    append = env.append
    take = env.__getitem__
    for op, ins, attrs, shape, dtype, device, sig in t.steps:
        n = new(_Node)          # ir.node_with_sig, inline: one per backward node per step
        n.op = op
        n.inputs = tuple(map(take, ins))
        n.attrs = attrs
        n.shape = shape
        n.dtype = dtype
        n.device = device
        n.value = None
        n.site = site
        n.tag = n.check = None
        n.epoch = st
        n.mark = k
        k += 1
        n.size = None
        n.sig = sig
        append(n)
    _C["ops"] += len(t.steps)
    _C["backward_templates"] += 1
    for k, j in t.outs:
        leaf = edges[k].tensor_ref()
        if leaf is not None:
            g = Tensor(env[j])
            leaf.grad = g if leaf.grad is None else leaf.grad + g


def finish_recording(recordings, key, env, edges, created, outs):
    """Turn one recorded backward pass into a template; activate it once two agree."""
    t = _build(env, edges, created, outs)
    if t is None:
        _cache[key] = _UNSAFE
        return
    if recordings:
        _cache[key] = t if t.same_as(recordings[0]) else _UNSAFE
    else:
        recordings.append(t)


def _build(env, edges, created, outs):
    where = {}
    for j, n in enumerate(env):
        where.setdefault(id(n), j)
    n_env = len(env)
    consts = []
    const_at = {}
    steps = []
    base = n_env  # consts are numbered after the saved nodes; created nodes after the consts
    made = {id(n): m for m, n in enumerate(created)}
    for n in created:
        for i in n.inputs:
            k = id(i)
            if k in where or k in made or k in const_at:
                continue
            if not (i.op is _DATA or i.op is _SCALAR or (i.device is None and not i.inputs)):
                return None    # a node from outside this tape and its rules: can't name it
            const_at[k] = len(consts)
            consts.append(i)
    n_consts = len(consts)

    def ref(i):
        k = id(i)
        j = where.get(k)
        if j is not None:
            return j
        m = made.get(k)
        if m is not None:
            return base + n_consts + m
        return base + const_at[k]

    for n in created:
        steps.append((n.op, tuple(ref(i) for i in n.inputs), n.attrs, n.shape, n.dtype,
                      n.device, n.sig))
    out_refs = []
    edge_index = {id(e): k for k, e in enumerate(edges)}
    for e, g in outs:
        k = id(g)
        if k not in where and k not in made and k not in const_at:
            return None
        out_refs.append((edge_index[id(e)], ref(g)))
    return _Template(tuple(steps), tuple(consts), tuple(out_refs), n_env)
