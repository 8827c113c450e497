"""The sync barrier: pending graph -> cached XLA executable -> rebound tensors.

At a sync every live tensor with pending work (and every pending node the tape
still needs) becomes an output of ONE executable per device.  The graph key is
a flat tuple of ints — interned node signatures plus input wiring — gathered
in a single walk that also collects the leaf arguments; a cache hit costs that
walk and one dict lookup.  Leaf buffers that nothing but this graph can reach
any more (an in-place update replaced them) are donated to the executable.
"""
from __future__ import annotations

import os
import sys
import time
import weakref

import jax
import numpy as np

from . import autograd, debug, ir, metrics
from .device import default_device
from .lowering import build_executable

_pending: list = []          # weakrefs to tensors created since the last sync
_cache: dict = {}            # graph key -> Executable
_getrefcount = sys.getrefcount
_DATA, _SCALAR = ir.DATA, ir.SCALAR

# Sync roots are gathered from tensors; `register` is called for every op result.
register_pending = _pending.append


class Executable:
    __slots__ = ("fn", "n_outputs", "donate", "hits", "stats", "summary")

    def __init__(self, fn, n_outputs, donate):
        self.summary = None
        self.fn = fn
        self.n_outputs = n_outputs
        self.donate = donate
        self.hits = 0
        self.stats = None


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
observers: list = []


def live_pending_roots(owners=None) -> list:
    roots = []
    seen = set()
    for r in _pending:
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
    saved = autograd.saved_pending_nodes()
    for n in saved:
        # device-less nodes are shared baked constants: recomputed, never materialised
        if n.op is not _DATA and n.device is not None and id(n) not in seen:
            seen.add(id(n))
            roots.append(n)
    _pending.clear()
    return roots


# executions are numbered; GradFns remember the number at their creation, so backward()
# can tell that a sync happened between a step's forward pass and its backward pass
exec_epoch = [0]
_exec_causes: dict = {}


tracing_body = [0]   # >0 while a scan body is being traced on placeholders


def sync(cause: str = "explicit flowlite.sync()", extra_roots=()) -> None:
    """Materialise every live tensor that has pending work (one executable per device)."""
    if tracing_body[0]:
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
    by_device = {}
    for n in roots:
        # baked constants have no device of their own: they run on the default one
        by_device.setdefault(n.device or default_device(), []).append(n)
    for device, rs in by_device.items():
        _run(rs, device, cause, owners)


def _walk(roots):
    """One iterative post-order walk: topological order, leaf args, exact key."""
    slot = {}
    order = []
    leaves = []
    scalars = []
    flat = []
    fappend = flat.append
    for r in roots:
        if id(r) in slot:
            continue
        stack = [r]
        while stack:
            n = stack[-1]
            k = id(n)
            if k in slot:
                stack.pop()
                continue
            op = n.op
            if op is _DATA:
                slot[k] = len(slot)
                leaves.append(n)
                fappend(n.sig)
                stack.pop()
                continue
            if op is _SCALAR:
                slot[k] = len(slot)
                scalars.append(n)
                fappend(n.sig)
                stack.pop()
                continue
            pushed = False
            for i in n.inputs:
                if id(i) not in slot:
                    stack.append(i)
                    pushed = True
            if pushed:
                continue
            stack.pop()
            slot[k] = len(slot)
            order.append(n)
            fappend(n.sig)
            for i in n.inputs:
                fappend(slot[id(i)])
    return slot, order, leaves, scalars, flat


def _donatable(leaves, order, slot, roots):
    """Indices of leaves whose buffers nothing outside this graph can reach (and that an
    output of the same shape/dtype can reuse — XLA ignores any other donation)."""
    avail = {}
    for r in roots:
        k = (r.shape, r.dtype)
        avail[k] = avail.get(k, 0) + 1
    refs = {}
    for n in order:
        for i in n.inputs:
            if i.op is _DATA:
                refs[id(i)] = refs.get(id(i), 0) + 1
    donate = []
    for j in range(len(leaves)):
        leaf = leaves[j]
        # references: `leaves` list, `leaf`, getrefcount's argument, plus one per
        # pending-node input tuple that holds it.  (No enumerate: it keeps a tuple alive.)
        expected = 3 + refs.get(id(leaf), 0)
        if _getrefcount(leaf) == expected:
            v = leaf.value
            # the array itself: leaf.value, `v`, getrefcount's argument
            if isinstance(v, jax.Array) and _getrefcount(v) == 3 and not v.is_deleted():
                k = (leaf.shape, leaf.dtype)
                if avail.get(k, 0) > 0:
                    avail[k] -= 1
                    donate.append(j)
    return tuple(donate)


def _run(roots, device, cause, owners=None):
    t0 = time.perf_counter()
    slot, order, leaves, scalars, flat = _walk(roots)
    donate = _donatable(leaves, order, slot, roots)
    out_slots = tuple(slot[id(r)] for r in roots)
    key = (device, tuple(flat), out_slots, donate)
    if device.type == "mesh":   # the sharding of every input is part of the key
        key += tuple(leaf.value.sharding for leaf in leaves)
    exe = _cache.get(key)
    args = [leaf.value for leaf in leaves]
    if scalars:
        args.append(_pack_scalars(scalars))
    if exe is None:
        tc = time.perf_counter()
        exe = build_executable(order, leaves, scalars, slot, out_slots, device, donate, args)
        _cache[key] = exe
        metrics.note_compile(time.perf_counter() - tc, len(order), len(args), len(roots), cause)
        debug.on_compile(cause, order, leaves, scalars, roots, exe)
    else:
        exe.hits += 1
        metrics._C["cache_hits"] += 1
        debug.on_run(cause, exe)
    if observers:
        for ob in observers:
            ob(exe, leaves, scalars, roots, owners, donate)
    t1 = time.perf_counter()
    outs = exe.fn(*args)
    if donate:
        metrics._C["donated_buffers"] += len(donate)
    t2 = time.perf_counter()
    del args
    for r, v in zip(roots, outs):
        r.materialize(v)
        if r.device is None:
            r.device = device
    metrics.note_execution(t0, t1, t2)
    metrics._C["graph_nodes"] += len(order)
    metrics.last_sync[:] = [t0, t1, t2, len(order)]
    exec_epoch[0] += 1
    _exec_causes[exec_epoch[0]] = cause
    _exec_causes.pop(exec_epoch[0] - 64, None)


def _pack_scalars(scalars):
    """All host scalars of a graph travel as one small array per dtype."""
    by_dtype = {}
    for s in scalars:
        by_dtype.setdefault(s.dtype, []).append(s.value)
    return tuple(np.asarray(v, dtype=d.np) for d, v in sorted(by_dtype.items(),
                                                                  key=lambda kv: kv[0].name))


def clear_cache() -> None:
    _cache.clear()


def cache_size() -> int:
    return len(_cache)
