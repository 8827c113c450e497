"""The sync barrier: pending graph -> cached XLA executable -> rebound tensors.

Layer: executor — imports ir, runtime, tape (the saved nodes it must keep), lowering,
metrics and device; it works on nodes, never on the Tensor class.  Debug tools observe it
through the hooks on `runtime.rt`.

At a sync every live tensor with pending work (and every pending node the tape
still needs) becomes an output of ONE executable per device.  The graph key is
a flat tuple of ints — interned node signatures plus input wiring — gathered
in a single walk that also collects the leaf arguments; a cache hit costs that
walk and one dict lookup.  Leaf buffers that nothing but this graph can reach
any more (an in-place update replaced them) are donated to the executable.
"""
from __future__ import annotations

import collections
import os
import sys
import time

import jax
import numpy as np

from . import ir, metrics
from .device import default_device
from .lowering import Executable, build_executable  # noqa: F401  (Executable: re-exported)
from .runtime import rt
from .tape import saved_pending_nodes

# graph key -> _Structure (its executables by donation set), least recently used first
_cache: collections.OrderedDict = collections.OrderedDict()
# at most this many graph structures stay compiled (a run uses a handful; eager mode one per
# op signature); FLOWLITE_CACHE_LIMIT or set_cache_limit() change it
_limit = {"structures": max(1, int(os.environ.get("FLOWLITE_CACHE_LIMIT", "") or 256))}
_getrefcount = sys.getrefcount
_DATA, _SCALAR = ir.DATA, ir.SCALAR



def register_pending(ref) -> None:
    """Make the tensor behind weakref `ref` a root of this thread's next sync."""
    rt.local.pending.append(ref)


def __getattr__(name):      # executor._pending: this thread's pending tensors (tests read it)
    if name == "_pending":
        return rt.local.pending
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _setup_persistent_cache():
    """JAX's persistent compilation cache under a flowlite directory, on by default."""
    path = os.environ.get("FLOWLITE_CACHE_DIR")
    if path is None:
        path = os.path.join(os.path.expanduser("~"), ".cache", "flowlite", "xla")
    if path in ("", "0", "off", "none"):
        return
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except Exception:  # read-only home, old jax: run without the persistent cache
        return
    try:
        from jax import monitoring

        def _on_event(event, **kw):
            if event == "/jax/compilation_cache/cache_hits":
                metrics._C["persistent_cache_hits"] += 1
        monitoring.register_event_listener(_on_event)
    except Exception:
        pass


_setup_persistent_cache()


# Observers (flowlite.compile's recorder) see every execution with its leaves/roots.
observers: list = rt.observers


def live_pending_roots(owners=None) -> list:
    roots = []
    seen = set()
    pending = rt.local.pending
    for r in pending:
        t = r()
        if t is None:
            continue
        n = t._node
        if n.op is not _DATA and n.op is not _SCALAR and n.device is not None:
            if owners is not None:
                owners.setdefault(id(n), []).append(t)
            if id(n) not in seen:
                seen.add(id(n))
                roots.append(n)
    saved = saved_pending_nodes()
    for n in saved:
        # device-less nodes are shared baked constants: recomputed, never materialised
        if n.op is not _DATA and n.device is not None and id(n) not in seen:
            seen.add(id(n))
            roots.append(n)
    pending.clear()
    return roots


def sync(cause: str = "explicit flowlite.sync()", extra_roots=()) -> None:
    """Materialise every live tensor of this thread that has pending work (one executable per
    device).  One sync runs at a time: walks number nodes, and the cache is shared."""
    with rt.lock:
        _sync(cause, extra_roots)


def _sync(cause, extra_roots):
    if rt.local.tracing_body:
        raise RuntimeError(f"{cause}: a tensor's value can't be read inside a scan body (the "
                           "body is traced once on placeholders); move the read after scan()")
    owners = {} if observers else None
    roots = live_pending_roots(owners)
    for n in extra_roots:
        if n.op is not _DATA and n.op is not _SCALAR and n.device is not None and \
                n not in roots:
            roots.append(n)
    metrics.note_sync(cause)
    if not roots:
        return
    device = roots[0].device
    for n in roots:
        if n.device is not device:
            break
    else:
        if device is not None:     # the usual case: everything on one device
            return _run(roots, device, cause, owners)
    by_device = {}
    for n in roots:
        # baked constants have no device of their own: they run on the default one
        by_device.setdefault(n.device or default_device(), []).append(n)
    for device, rs in by_device.items():
        _run(rs, device, cause, owners)


# Every walk numbers the nodes it reaches from a fresh base upwards (Node.mark), so "seen in
# this walk" is `mark >= base` and a node's slot is `mark - base`: no dict on the hot path.


def _walk_marked(roots):
    """One iterative post-order walk: topological order, leaf args, exact key."""
    base = nxt = rt.mark_base
    order = []
    leaves = []
    scalars = []
    flat = []
    fappend = flat.append
    for r in roots:
        if r.mark >= base:
            continue
        stack = [r]
        while stack:
            n = stack[-1]
            if n.mark >= base:
                stack.pop()
                continue
            op = n.op
            if op is _DATA or op is _SCALAR:
                n.mark = nxt
                nxt += 1
                (leaves if op is _DATA else scalars).append(n)
                fappend(n.sig)
                stack.pop()
                continue
            ins = n.inputs
            pushed = False
            for i in ins:
                if i.mark < base:
                    stack.append(i)
                    pushed = True
            if pushed:
                continue
            stack.pop()
            n.mark = nxt
            nxt += 1
            order.append(n)
            fappend(n.sig)
            for i in ins:
                fappend(i.mark - base)
    rt.mark_base = nxt
    return order, leaves, scalars, flat, base


def _walk(roots):
    """(slot by id, order, leaves, scalars, flat key) — the inspection tools' view."""
    with rt.lock:
        order, leaves, scalars, flat, base = _walk_marked(roots)
    return _slots(base, leaves, scalars, order), order, leaves, scalars, flat


def _slots(base, *node_lists):
    return {id(n): n.mark - base for ns in node_lists for n in ns}


def _replaced_leaf(root, leaf_pos):
    """Index of the leaf this output replaces in place (see Prim.inplace), or None."""
    op = root.op
    j = 0
    if op.name == "tuple_get":            # output j of a multi-output node
        j = root.attrs[0]
        root = root.inputs[0]
        op = root.op
    if op.inplace is None:
        return None
    k = op.inplace(root.attrs, j)
    return None if k is None else leaf_pos.get(id(root.inputs[k]))


class _Structure:
    """What a cached graph structure fixes for every run of it: which leaves may be
    donated (an output of the same shape/dtype can reuse the buffer) and how many of the
    graph's input tuples hold each — so a cache hit checks donations without a re-count."""
    __slots__ = ("candidates", "out_sigs", "exes", "partners", "last_pack")

    def __init__(self, order, leaves, roots, base):
        avail = {}
        for r in roots:
            k = (r.shape, r.dtype)
            avail[k] = avail.get(k, 0) + 1
        uses = [0] * len(leaves)
        pos = {id(leaf): j for j, leaf in enumerate(leaves)}
        for n in order:
            for i in n.inputs:
                j = pos.get(id(i))
                if j is not None:
                    uses[j] += 1
        groups = {}
        self.candidates = []
        for j, leaf in enumerate(leaves):
            k = (leaf.shape, leaf.dtype)
            if k in avail:
                g = groups.setdefault(k, [avail[k]])   # one shared, mutable capacity
                self.candidates.append((j, uses[j], g))
        self.out_sigs = [ir.intern_sig((_DATA, (), r.shape, r.dtype, 0)) for r in roots]
        self.partners = [_replaced_leaf(r, pos) for r in roots]
        self.exes = {}    # donated leaf indices -> Executable
        self.last_pack = None   # (scalar values, their packed device arrays) of the last run

    def scalar_pack(self, scalars, device):
        """The host scalars as packed device arrays, uploaded again only when a value
        changed (learning rates usually don't from one step to the next)."""
        vals = [s.value for s in scalars]
        last = self.last_pack
        if last is not None and last[0] == vals:
            return last[1]
        pack = _pack_scalars(scalars)
        if getattr(device, "mesh", None) is None:
            pack = tuple(jax.device_put(a, device.jax_device) for a in pack)
        self.last_pack = (vals, pack)
        return pack

    def donatable(self, leaves):
        """Indices of leaves whose buffers nothing outside this graph can reach."""
        if not self.candidates:
            return ()
        left = {}
        donate = []
        for j, uses, cap in self.candidates:
            leaf = leaves[j]
            # references: the `leaves` list, `leaf`, getrefcount's argument, plus one per
            # input tuple of this graph that holds it; any other holder (a tensor, the tape)
            # means the buffer is still reachable
            if _getrefcount(leaf) != 3 + uses:
                continue
            v = leaf.value
            # the array itself: leaf.value, `v`, getrefcount's argument
            if isinstance(v, jax.Array) and _getrefcount(v) == 3 and not v.is_deleted():
                k = id(cap)
                n = left.get(k, cap[0])
                if n > 0:
                    left[k] = n - 1
                    donate.append(j)
        return tuple(donate)


def _run(roots, device, cause, owners=None):
    t0 = time.perf_counter()
    order, leaves, scalars, flat, base = _walk_marked(roots)
    out_slots = tuple([r.mark - base for r in roots])
    key = (device, tuple(flat), out_slots)
    if device.type == "mesh":   # the sharding of every input is part of the key
        key += tuple(leaf.value.sharding for leaf in leaves)
    st = _cache.get(key)
    if st is None:
        st = _cache[key] = _Structure(order, leaves, roots, base)
        if len(_cache) > _limit["structures"]:
            _cache.popitem(last=False)      # the least recently used structure goes
    else:
        _cache.move_to_end(key)
    donate = st.donatable(leaves)
    exe = st.exes.get(donate)
    args = [leaf.value for leaf in leaves]
    if scalars:
        args.append(st.scalar_pack(scalars, device))
    if exe is None:
        tc = time.perf_counter()
        slot = _slots(base, leaves, scalars, order)
        exe = build_executable(order, leaves, scalars, slot, out_slots, device, donate, args,
                               st.partners)
        st.exes[donate] = exe
        metrics.note_compile(time.perf_counter() - tc, len(order), len(args), len(roots), cause)
        rt.on_compile(cause, order, leaves, scalars, roots, exe)
    else:
        exe.hits += 1
        metrics._C["cache_hits"] += 1
        rt.on_run(cause, exe)
    if observers:
        for ob in observers:
            ob(exe, leaves, scalars, roots, owners, donate)
    t1 = time.perf_counter()
    outs = exe.fn(*args)
    if donate:
        metrics._C["donated_buffers"] += len(donate)
    t2 = time.perf_counter()
    del args
    for r, v, sig in zip(roots, outs, st.out_sigs):
        # each output becomes a data leaf (inline: this runs for every output of every step)
        r.op = _DATA
        r.inputs = ()
        r.attrs = ()
        r.value = v
        r.sig = sig
        if r.device is None:
            r.device = device
    metrics.note_execution(t0, t1, t2)
    metrics._C["graph_nodes"] += len(order)
    metrics.last_sync[:] = [t0, t1, t2, len(order)]
    rt.exec_epoch = epoch = rt.exec_epoch + 1
    causes = rt.exec_causes
    causes[epoch] = cause
    causes.pop(epoch - 64, None)


def _pack_scalars(scalars):
    """All host scalars of a graph travel as one small array per dtype."""
    by_dtype = {}
    for s in scalars:
        by_dtype.setdefault(s.dtype, []).append(s.value)
    return tuple(np.asarray(v, dtype=d.np) for d, v in sorted(by_dtype.items(),
                                                                  key=lambda kv: kv[0].name))


def clear_cache() -> None:
    """Drop every compiled executable (the next sync of each graph compiles again, or loads
    it from JAX's persistent cache)."""
    _cache.clear()


def set_cache_limit(n: int) -> None:
    """Keep at most `n` compiled graph structures (least recently used are dropped)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_cache_limit: expected a positive int, got {n!r}")
    _limit["structures"] = n
    while len(_cache) > n:
        _cache.popitem(last=False)


def executables() -> list:
    """Every cached executable, oldest first."""
    return [exe for st in _cache.values() for exe in st.exes.values()]


def cache_size() -> int:
    return len(executables())
