"""The sync barrier: pending graph -> cached XLA executable -> rebound tensors.

Layer: engine — imports buckets, cache, device, exec_store, graph_key, host_data, ir, lowering,
metrics, phases, reroll, rollback, runtime, tape. It works on nodes, never on the Tensor class.
Debug tools observe it through the hooks on `runtime.rt`.

At a sync every live tensor with pending work (and every pending node the tape
still needs) becomes an output of ONE executable per device.  The graph key is
a flat tuple of ints — interned node signatures plus input wiring — gathered
in a single walk that also collects the leaf arguments.  The ops also record a key of
their own as they are made (graph_key): a sync whose recorded key was seen before reuses
that walk's structure, so a steady step's cache hit costs no walk: the recorded key made a
tuple and looked up.  Leaf buffers that nothing but this graph can reach any more (an
in-place update replaced them) are donated to the executable.  A host read syncs only the work
its value needs.  The cache of executables lives in `cache`, what a failed sync undoes in
`rollback`, host reads computed in numpy in `host_reads`.
"""
from __future__ import annotations

import sys
import threading
import time

import jax
import numpy as np

from . import buckets, exec_store, ir, metrics, phases, reroll
from .cache import (_by_stream, _cache, _limit, _remember_stream, _Structure,
                    on_clear)
from .rollback import (_BIG, FAILED, _again, _failed_live, _failures, _first_failure,
                       _has_failed, _replaced_input, _rollback, _taint, _Unverified,
                       memory_error, verify)
from .device import default_device
from .host_data import HostNode, arg as host_arg
from .graph_key import out_codes
from .lowering import build_executable
from .phases import clock
from .runtime import KeyStream, rt
from .tape import saved_pending_nodes

_getrefcount = sys.getrefcount
_DATA, _SCALAR = ir.DATA, ir.SCALAR
_UNPAD = buckets.UNPAD


def register_pending(ref) -> None:
    """Make the tensor behind weakref `ref` a root of this thread's next sync."""
    rt.local.pending.append(ref)


def __getattr__(name):      # executor._pending: this thread's pending tensors (tests read it)
    if name == "_pending":
        return rt.local.pending
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Observers (flowlite.compile's recorder) see every execution with its leaves/roots.
observers: list = rt.observers


# A sync (or a host read) before backward() also outputs the activations the tape saved, so
# the backward program doesn't compute them again — unless there are more than this many
# (counted with repeats): a cell stepped over a long sequence (pytorch/examples'
# time_sequence_prediction reads its loss inside LBFGS's closure) made every step's
# activations outputs of their own, and a program of 2,000 outputs per 50 steps can't run
# as a loop (12 s to compile 50 steps, minutes and 18 GB for its 999).  The backward
# program computes them then, with the same draws.
_SAVED_OUTPUTS_MAX = 2048


def _saved_roots() -> list:
    saved = saved_pending_nodes()
    return saved if len(saved) <= _SAVED_OUTPUTS_MAX else []


def live_pending_roots(owners=None, stream=None) -> list:
    """The nodes this thread's next sync must materialise: those of live tensors with pending
    work (`owners`, when given, maps each to its tensors), then those the tape still needs;
    each once, in first-seen order.  Clears the pending list.  `stream`: the graph key these
    nodes were recorded under (graph_key), whose op nodes are pending by construction."""
    pending = rt.local.pending
    if owners is None:
        # the hot path (every sync): a comprehension (de-duplicated below)
        nodes = [t._node for r in pending if (t := r()) is not None]
    else:
        nodes = []
        for r in pending:
            t = r()
            if t is not None:
                nodes.append(t._node)
                owners.setdefault(id(t._node), []).append(t)
    pending.clear()
    if not rt.local.growing:
        # a piece of a growing loop (cuts.py) leaves what only the tape saved lazy: a
        # backward that never comes would otherwise make every activation an output
        nodes.extend(_saved_roots())
    if stream is not None and stream.valid:
        # (a valid stream's nodes are unchanged since recorded; its leaves have marks < 0.)
        # Its nodes are told apart by their numbers: a dict of a step's nodes is a large
        # allocation, the first of which after the executable ran takes malloc's slow path
        seen = bytearray(stream.nxt)
        out = []
        others = None
        for n in nodes:
            if n.epoch is stream and n.mark >= 0:
                m = n.mark
                if not seen[m]:
                    seen[m] = 1
                    out.append(n)
            elif _is_pending(n):
                if others is None:
                    others = {}
                if n not in others:
                    others[n] = None
                    out.append(n)
        return out
    return [n for n in dict.fromkeys(nodes) if _is_pending(n)]


def _is_pending(n) -> bool:
    # device-less nodes are shared baked constants: recomputed, never materialised; a
    # bucketed output (unpad) is already computed: the next graph takes its padded buffer
    op = n.op
    return op is not _DATA and op is not _SCALAR and op is not FAILED and \
        op is not _UNPAD and n.device is not None


def sync(cause: str = "explicit flowlite.sync()", extra_roots=(), defer_checks=False) -> None:
    """Materialise every live tensor of this thread that has pending work (one executable per
    device).  One sync runs at a time: walks number nodes, and the cache is shared.  A sync
    that fails (a check, an XLA error, not enough memory) commits nothing: see _rollback.

    With `defer_checks` (an optimizer step's sync) the check flags are read at the next sync
    or host read instead of now, so the host goes on tracing the next step while this one
    runs; that later call raises the error (verify_pending)."""
    with rt.lock:
        # the run summary times it (flowlite.engine.phases), unless that is done already
        # (an optimizer step times its sync itself)
        if clock.on and clock.cur != "sync":
            return phases.timed_sync(_sync, cause, extra_roots, defer_checks)
        _sync(cause, extra_roots, defer_checks)


def sync_for_read(cause: str, node) -> None:
    """The sync of a host read (`.item()`, `int()`, `.numpy()`, printing) of `node`: it
    materialises `node` and the live pending work that shares pending nodes with it — so
    nothing is computed twice — and leaves the rest lazy for a later sync (the training
    step's forward pass while the next batch's indices are drawn and read joins the step's
    one executable).  When everything pending is needed this is a plain sync."""
    with rt.lock:
        if clock.on:        # the run summary times it (flowlite.engine.phases)
            return phases.timed_read_sync(_read_sync, cause, node)
        if observers or rt.local.tracing_body:
            _sync(cause, (node,))       # flowlite.compile records whole syncs; scan raises
            return
        _sync_read(cause, node)


def _read_sync(cause, node):
    if observers or rt.local.tracing_body:
        _sync(cause, (node,))
        return
    _sync_read(cause, node)


def _pending_ids(node, into, stream, floor):
    """Add the ids of `node`'s pending subgraph (work a sync would compute) to `into`; ->
    the lowest recording number among the nodes added and `floor` (-1: one was not recorded
    in `stream`, so there is no such bound)."""
    stack = [node]
    while stack:
        n = stack.pop()
        k = id(n)
        if k in into or not _is_pending(n):
            continue
        into.add(k)
        if floor >= 0:
            floor = n.mark if n.epoch is stream and 0 <= n.mark < floor else \
                (floor if n.epoch is stream and n.mark >= 0 else -1)
        stack.extend(n.inputs)
    return floor


def _reaches(node, need, seen, stream, floor):
    """Whether `node`'s pending subgraph holds a node of `need` (ids).  `seen`: nodes already
    walked in this pass (a walk that stopped at a hit leaves some half-walked: the caller
    then walks again).  Every node of `need` was recorded in `stream` at or after number
    `floor` (when >= 0), and inputs are recorded before their consumers: a node recorded
    earlier can't reach one — the forward pass, when the next batch's indices are read."""
    stack = [node]
    while stack:
        n = stack.pop()
        k = id(n)
        if k in need:
            return True
        if k in seen or not _is_pending(n):
            continue
        seen.add(k)
        if floor >= 0 and n.epoch is stream and 0 <= n.mark < floor:
            continue
        stack.extend(n.inputs)
    return False


def _guards(check, need):
    """Whether `check` guards work in `need`, or guards a result nobody can read any more (an
    orphan: it runs with the next sync of any kind, so its error surfaces near its cause)."""
    rec = check.check
    out = rec.out() if rec.out is not None else None
    if out is None:
        return True
    index = rec.index() if rec.index is not None else None
    return id(out) in need or (index is not None and id(index) in need)


def _sync_read(cause, node):
    local = rt.local
    if local.unverified is not None:
        _verify_deferred()
    need = set()
    stream = local.stream
    floor = _pending_ids(node, need, stream, 1 << 62)
    refs = local.pending
    cands = []                  # (node, its tensor's weakref) of the other pending work
    for r in refs:
        t = r()
        if t is not None and _is_pending(t._node):
            cands.append((t._node, r))
    cands.extend((n, None) for n in _saved_roots() if _is_pending(n))
    checks = local.checks
    taken = [False] * len(cands)
    taken_checks = [False] * len(checks)
    if need:
        changed = True
        while changed:          # until no more work joins: what joins brings its own nodes
            changed = False
            seen = set()
            for k, (n, _) in enumerate(cands):
                if not taken[k] and _reaches(n, need, seen, stream, floor):
                    taken[k] = changed = True
                    floor = _pending_ids(n, need, stream, floor)
            for k, c in enumerate(checks):
                # a check joins when it guards work the read runs (its op's result or index)
                # or reads any of it
                if not taken_checks[k] and (_guards(c, need) or
                                            _reaches(c, need, seen, stream, floor)):
                    taken_checks[k] = changed = True
                    floor = _pending_ids(c, need, stream, floor)
    if all(taken) and all(taken_checks):
        _sync(cause, (node,))   # the read needs all pending work: one ordinary sync
        return
    # roots in the order an ordinary sync takes them (the pending list's), so a read that
    # runs part of the pending work and one that runs all of it key the same graph
    roots = [n for (n, _), t in zip(cands, taken) if t]
    if _is_pending(node):
        roots.append(node)
    roots = list(dict.fromkeys(roots))
    local.pending[:] = [r for (_, r), t in zip(cands, taken) if not t and r is not None]
    run_checks = [c for c, t in zip(checks, taken_checks) if t]
    local.checks = [c for c, t in zip(checks, taken_checks) if not t]
    metrics.note_sync(cause)
    if roots or run_checks:
        # the graph key recorded with the ops names all pending work, part of which runs
        # now: the next sync walks its graph instead
        local.stream.valid = False
        _dispatch(roots, run_checks, cause, None)
    if local.unverified is not None and not (roots or run_checks):
        _verify_deferred()
    # committed: the undo records of what ran (the rest stays undoable); the random-draw
    # counter's rollback point stays where the last full sync left it
    local.undo[:] = [u for u in local.undo if (t := u[0]()) is not None and
                     _is_pending(t._node)]
    local.undo_gen = object()
    if node.op is FAILED:
        raise _again(node.value)


def sync_part(cause, roots, n_checks, defer=False) -> None:
    """Run `roots` (pending nodes, in this order) and the first `n_checks` pending checks,
    leaving the rest pending: the pieces a growing loop's first cut splits its graph into
    (cuts.py), each as the cut at its `cat` would have run it."""
    with rt.lock:
        if clock.on and clock.cur != "sync":
            return phases.timed_sync(_sync_part, cause, roots, n_checks, defer)
        _sync_part(cause, roots, n_checks, defer)


def _sync_part(cause, roots, n_checks, defer):
    local = rt.local
    if local.unverified is not None and not defer:
        _verify_deferred()
    roots = [n for n in dict.fromkeys(roots) if _is_pending(n)]
    run_checks = local.checks[:n_checks]
    local.checks = local.checks[n_checks:]
    metrics.note_sync(cause)
    if roots or run_checks:
        # (the graph key recorded with the ops names more than runs now)
        local.stream.valid = False
        _dispatch(roots, run_checks, cause, None, defer)
    local.undo[:] = [u for u in local.undo if (t := u[0]()) is not None and
                     _is_pending(t._node)]
    local.undo_gen = object()


def verify_pending() -> None:
    """Raise (after rolling it back) the failure of this thread's last deferred execution,
    if it had one; a no-op otherwise.  Every host read and every sync calls it first."""
    if rt.local.unverified is not None:
        with rt.lock:
            _verify_deferred()


def _sync(cause, extra_roots, defer=False):
    if rt.local.tracing_body:
        raise RuntimeError(f"{cause}: a tensor's value can't be read inside a scan body (the "
                           "body is traced once on placeholders); move the read after scan()")
    local = rt.local
    # the pending work's graph key ends here: what is recorded from now on starts a new one
    stream = local.stream
    local.stream = KeyStream()
    if local.unverified is not None and not defer:
        _verify_deferred()
    owners = {} if observers else None
    roots = live_pending_roots(owners, stream)
    checks = local.checks
    if checks:
        local.checks = []
    for n in extra_roots:
        if n.op is not _DATA and n.op is not _SCALAR and n.op is not FAILED and \
                n.device is not None and n not in roots:
            roots.append(n)
    metrics.note_sync(cause)
    try:
        if roots or checks:
            _dispatch(roots, checks, cause, owners, defer, stream)
    finally:
        # the nodes it numbered may outlive it (a batch kept for later): only a shell stays
        stream.flat = stream.ext = stream.esigs = None
    if local.unverified is not None and not (roots or checks):
        _verify_deferred()
    # committed: what a later failure would roll back starts here
    local.undo.clear()
    local.undo_gen = object()
    local.rng_draws = (rt.rng_seed, rt.rng_draws)
    for n in extra_roots:
        if n.op is FAILED:
            raise _again(n.value)


def _dispatch(roots, checks, cause, owners, defer=False, stream=None):
    device = roots[0].device if roots else checks[0].device
    for n in roots:
        if n.device is not device:
            break
    else:
        for n in checks:
            if n.device is not device:
                break
        else:
            if device is not None:     # the usual case: everything on one device
                return _run(roots, device, cause, owners, checks, defer, stream)
    by_device = {}
    for n in roots:
        # baked constants have no device of their own: they run on the default one
        by_device.setdefault(n.device or default_device(), ([], []))[0].append(n)
    for n in checks:
        by_device.setdefault(n.device or default_device(), ([], []))[1].append(n)
    for device, (rs, cs) in by_device.items():
        _run(rs, device, cause, owners, cs)


# Every walk numbers the nodes it reaches from 0 (Node.mark) under an epoch object of its own
# (Node.epoch), so "seen in this walk" is `epoch is tag` and a node's slot is its mark: no dict
# on the hot path, and no clash with the numbering of a graph key being recorded (graph_key).


def _walk_marked(roots):
    """One iterative post-order walk: topological order, leaf args, exact key; each node's
    mark is its slot."""
    tag = object()
    nxt = 0
    order = []
    leaves = []
    scalars = []
    flat = []
    fappend = flat.append
    for r in roots:
        if r.epoch is tag:
            continue
        stack = [r]
        while stack:
            n = stack[-1]
            if n.epoch is tag:
                stack.pop()
                continue
            op = n.op
            if op is _DATA or op is _SCALAR:
                n.epoch = tag
                n.mark = nxt
                nxt += 1
                (leaves if op is _DATA else scalars).append(n)
                fappend(n.sig)
                stack.pop()
                continue
            ins = n.inputs
            pushed = False
            for i in ins:
                if i.epoch is not tag:
                    stack.append(i)
                    pushed = True
            if pushed:
                continue
            stack.pop()
            n.epoch = tag
            n.mark = nxt
            nxt += 1
            order.append(n)
            fappend(n.sig)
            for i in ins:
                fappend(i.mark)
    return order, leaves, scalars, flat


def _walk(roots):
    """(slot by id, order, leaves, scalars, flat key) — the inspection tools' view."""
    with rt.lock:
        order, leaves, scalars, flat = _walk_marked(roots)
    return _slots(leaves, scalars, order), order, leaves, scalars, flat


def _slots(*node_lists):
    return {id(n): n.mark for ns in node_lists for n in ns}


def _run(roots, device, cause, owners=None, checks=(), defer=False, stream=None):
    t0 = time.perf_counter()
    # a deferred step's checks chain: its executable also takes the previous deferred
    # step's ok flag and commits nothing when that one failed, so it can be dispatched
    # before the previous step's flags are read (the host traces ahead)
    chain = bool(checks) and defer and device.type != "mesh"
    skey = None
    if stream is not None and stream.valid and not observers and device.type != "mesh":
        outs = out_codes(stream, roots)
        cks = out_codes(stream, checks) if checks else ()
        if outs is not None and cks is not None:
            skey = (device, tuple(stream.flat), tuple(stream.esigs), outs, cks, chain)
    known = _by_stream.get(skey) if skey is not None else None
    order = None
    if known is not None:
        # the graph key recorded with the ops names a structure run before: no walk (its
        # leaves are alive: the outputs' graph holds them)
        st, key, at_leaf, at_scalar, n_nodes = known
        ext = stream.ext
        leaves = [ext[j]() for j in at_leaf]
        scalars = [ext[j]() for j in at_scalar]
        del ext
        _cache.move_to_end(key)
    else:
        order, leaves, scalars, flat = _walk_marked(roots + checks if checks else roots)
        n_nodes = len(order)
        if _failed_live and _has_failed(order):
            # (this frame's leaf list would count as a holder and stop the nested run's
            # donations)
            del leaves, scalars, flat
            return _run_around_failed(roots, checks, order, device, cause, owners)
        out_slots = tuple([r.mark for r in roots])
        key = (device, tuple(flat), out_slots)
        if checks:
            key += (tuple([c.mark for c in checks]), chain)
        if device.type == "mesh":   # the sharding of every input is part of the key
            key += tuple(leaf.value.sharding for leaf in leaves)
        st = _cache.get(key)
        if st is None and buckets._state["on"] and device.type != "mesh" and \
                not observers and not rt.flags["eager"] and \
                _run_bucketed(order, leaves, scalars, roots, checks, device, cause, t0, key,
                              defer):
            return
        if st is None:
            st = _cache[key] = _Structure(order, leaves, roots, checks)
            if len(_cache) > _limit["structures"]:
                _cache.popitem(last=False)      # the least recently used structure goes
                _by_stream.clear()
        else:
            _cache.move_to_end(key)
        if skey is not None:
            _remember_stream(skey, stream, st, key, leaves, scalars, n_nodes)
    donate = st.donatable(leaves)
    exe = st.exes.get(donate)
    if exe is None and st.exes:
        exe = _donating_less(st, donate, leaves)
        if exe is not None:
            donate = exe.donate
    args = [leaf.value if leaf.__class__ is not HostNode else host_arg(leaf)
            for leaf in leaves]
    if scalars:
        args.append(st.scalar_pack(scalars, device))
    if chain:
        args.append(_true(device))      # replaced below when a previous step is unread
    if exe is None:
        if order is None:       # a new donation set of a known stream: the program is needed
            order = _walk_marked(roots + checks if checks else roots)[0]
            out_slots = tuple([r.mark for r in roots])
        tc = time.perf_counter()
        try:
            exe = _build(order, leaves, scalars, out_slots, device, donate, args, st.partners,
                         tuple(c.mark for c in checks) if checks else (), chain)
        except Exception as e:
            _rollback(roots, e)
            raise
        st.exes[donate] = exe
        took = time.perf_counter() - tc         # compiled, or loaded from a store
        exe.compile_s = 0.0 if exe.loaded else took
        _admit(exe, took, order, leaves, scalars, roots, len(args), cause, device)
    else:
        if exe.upgrade_at is not None and exe.hits >= exe.upgrade_at:
            exe = _unroll(exe, st, donate, order, roots, checks, leaves, scalars, args, device,
                          chain, cause)
        _admit(exe, None, order, leaves, scalars, roots, len(args), cause, device)
    if observers:
        for ob in observers:
            ob(exe, leaves, scalars, roots, owners, donate)
    local = rt.local
    if local.unverified is not None:
        # earlier steps' flags, read as late as possible (this graph was walked and keyed
        # while they ran); a chained step reads only those already finished
        _verify_deferred(roots, wait=not chain)
        if local.unverified is not None:
            last = local.unverified[-1]
            if last.ok is not None and last.device is device:
                args[-1] = last.ok
            else:
                _verify_deferred(roots)
    t1 = time.perf_counter()
    try:
        outs = exe.fn(*args)
    except Exception as e:   # nothing ran: put back what a donated-but-unused leaf can
        _rollback(roots, e)
        raise
    if donate:
        metrics._C["donated_buffers"] += len(donate)
    t2 = time.perf_counter()
    del args
    failed = None
    if checks:
        exe.check_infos = infos = [c.check for c in checks]
        if defer:
            _defer_checks(outs, infos, st, roots, chain, device)
        else:
            failed = _failures(outs[-1], infos, st.masks)
    for r, v, sig in zip(roots, outs, st.out_sigs):
        # each output becomes a data leaf (inline: this runs for every output of every step)
        r.op = _DATA
        r.inputs = ()
        r.attrs = ()
        r.value = v
        r.sig = sig
        if r.device is None:
            r.device = device
    _note_run(t0, t1, t2, n_nodes, cause)
    if failed is not None:
        err, taint = failed
        # outputs computed from a failed op fail; outputs that replace a leaf in place
        # already hold the leaf's old value (the guarded update); the rest stands
        _rollback([roots[i] for i in taint], err,
                  taint={id(roots[i]): e for i, e in taint.items()})
        raise err


def _defer_checks(outs, infos, st, roots, chain, device):
    """Leave an execution's check flags (outs[-1]) to be read at the next sync."""
    local = rt.local
    rec = _Unverified(outs, infos, st, roots, local.undo, chain, device)
    if local.unverified is None:
        local.unverified = [rec]
    else:
        local.unverified.append(rec)


def _unroll(exe, st, donate, order, roots, checks, leaves, scalars, args, device, chain, cause):
    """The unrolled form of a re-rolled executable that has run exe.upgrade_at times
    (reroll.upgrade_after): loaded from the store of executables, or lowered now and compiled
    on a background thread while the loop form keeps running; it takes the loop form's place,
    for good, at the first run after it is ready.  Logged as a compile whose cause says so."""
    fut = exe.upgrade
    if fut is None:
        if order is None:
            order = _walk_marked(roots + checks if checks else roots)[0]
        try:
            exe.upgrade = _build(order, leaves, scalars, tuple([r.mark for r in roots]),
                                 device, donate, args, st.partners,
                                 tuple(c.mark for c in checks) if checks else (), chain,
                                 roll=False, background=_compiler())
            exe.upgrade.n_nodes = len(order)
        except Exception:       # (memory): the loop form stays
            exe.upgrade_at = None
        return exe
    if not fut.done():
        return exe
    exe.upgrade_at = exe.upgrade = None
    try:
        new, seconds = fut.result()
    except Exception:           # (memory): the loop form stays
        return exe
    new.hits = exe.hits
    new.summary = exe.summary
    if st.exes.get(donate) is exe:
        st.exes[donate] = new
    metrics._C["rerolled_upgrades"] += 1
    metrics.note_compile(seconds, fut.n_nodes, len(args), len(roots),
                         f"{cause}: the unrolled form of a re-rolled program, after "
                         f"{exe.hits} runs" + ("" if new.loaded else
                                               " (compiled in the background)"),
                         new.loaded, background=True)
    return new


class _Compiler:
    """The daemon thread that compiles programs nothing waits for (XLA's compiler releases
    the GIL: the host goes on recording and dispatching meanwhile).  A daemon, so a script
    that ends while it compiles exits at once; `submit` -> a concurrent.futures.Future."""

    def __init__(self):
        import queue
        self.jobs = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="flowlite-compile", daemon=True).start()

    def _loop(self):
        while True:
            fut, fn = self.jobs.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:  # noqa: BLE001 (handed to the waiting side)
                    fut.set_exception(e)

    def submit(self, fn):
        from concurrent.futures import Future
        fut = Future()
        self.jobs.put((fut, fn))
        return fut


_background: list = []


def _compiler():
    if not _background:
        _background.append(_Compiler())
    return _background[0]


def wait_for_compiles() -> None:
    """Wait until the background compiles started so far are done (tests, benchmarks)."""
    if _background:
        _background[0].submit(lambda: None).result()


# a known structure met with more buffers it may donate than its executables donate runs one
# of them (donating less computes the same, it only keeps those buffers) when another compile
# would be slow and the buffers kept are small: an LBFGS closure over a 999-step LSTM whose
# parameters became donatable at its third evaluation compiled again for 20 s
_REUSE = {"compile_s": 1.0, "kept_bytes": 16 << 20}


def _donating_less(st, donate, leaves):
    want = set(donate)
    best = None
    for k, e in st.exes.items():
        if e.compile_s >= _REUSE["compile_s"] and want.issuperset(k) and \
                (best is None or len(k) > len(best.donate)):
            best = e
    if best is None:
        return None
    kept = sum(getattr(leaves[j].value, "nbytes", 0) for j in want.difference(best.donate))
    return best if kept <= _REUSE["kept_bytes"] else None


def _build(order, leaves, scalars, out_slots, device, donate, args, partners, check_slots,
           chain, roll=None, background=None):
    """The executable of the walked graph `order` (marks: its slots): loaded from flowlite's
    store of executables when a process stored it before (no trace, no lowering), else
    compiled and stored there — or, when the store can't hold it, compiled through JAX's
    persistent cache.  `exe.loaded` says it was loaded from either.  With `background` (a
    _Compiler): a future of (executable, seconds), compiled on that thread."""
    slot = _slots(leaves, scalars, order)
    key = None
    if exec_store.directory() is not None:
        key = exec_store.program_key(
            leaves + scalars + order, slot, out_slots, check_slots, device, donate, chain,
            reroll.reroll_enabled() if roll is None else roll)
        tc = time.perf_counter()
        exe, key = exec_store.lookup(key, device)
        if exe is not None:
            if background is None:
                return exe
            from concurrent.futures import Future
            done = Future()
            done.set_result((exe, time.perf_counter() - tc))
            return done
    if background is not None:
        return _build_later(order, leaves, scalars, slot, out_slots, device, donate, args,
                            partners, check_slots, chain, roll, key, background)
    hits0 = metrics.persistent_hits()
    if key is None:
        exe = build_executable(order, leaves, scalars, slot, out_slots, device, donate, args,
                               partners, check_slots, chain, roll)
        exe.loaded = metrics.persistent_hits() > hits0
        return exe
    with exec_store.storing():      # (not written to JAX's cache too)
        exe = build_executable(order, leaves, scalars, slot, out_slots, device, donate, args,
                               partners, check_slots, chain, roll, exec_store.name(key))
    exe.loaded = metrics.persistent_hits() > hits0
    if not exe.loaded:      # (one JAX loaded from its cache can't be serialized whole)
        exec_store.save(key, exe, device)
    return exe


def _build_later(order, leaves, scalars, slot, out_slots, device, donate, args, partners,
                 check_slots, chain, roll, key, background):
    """_build's background form: lowered here (the lowering reads the graph), compiled (and
    stored) on the compiler thread.  (Whether JAX's cache had it can't be told apart from
    the main thread's compiles there: such a program is compiled, never loaded.)"""
    if key is None:
        return build_executable(order, leaves, scalars, slot, out_slots, device, donate, args,
                                partners, check_slots, chain, roll, submit=background.submit)

    def store_after(finish):    # compile under exec_store.storing(), then save, on that thread
        def job():
            with exec_store.storing():
                exe, seconds = finish()
            exec_store.save(key, exe, device)
            return exe, seconds
        return background.submit(job)
    return build_executable(order, leaves, scalars, slot, out_slots, device, donate, args,
                            partners, check_slots, chain, roll, exec_store.name(key),
                            submit=store_after)


def _admit(exe, compile_s, order, leaves, scalars, roots, n_args, cause, device, note=""):
    """Count a compile (compile_s seconds; `note` says more in the compile log) or a cache
    hit (None), and refuse an executable whose new memory can't fit (OutOfMemoryError,
    nothing run)."""
    if compile_s is not None:
        st = getattr(exe, "stats", None) or {}
        parts = (st["lower_s"], st["xla_compile_s"]) if "lower_s" in st else None
        metrics.note_compile(compile_s, len(order), n_args, len(roots), cause + note,
                             exe.loaded, parts=parts)
        rt.on_compile(cause, order, leaves, scalars, roots, exe)
    else:
        exe.hits += 1
        metrics._C["cache_hits"] += 1
        rt.on_run(cause, exe)
    if exe.need_bytes > _BIG:
        err = memory_error(exe, device)
        if err is not None:
            _rollback(roots, err)
            raise err


def _note_run(t0, t1, t2, n_nodes, cause):
    metrics.note_execution(t0, t1, t2)
    metrics._C["graph_nodes"] += n_nodes
    metrics.last_sync[:] = [t0, t1, t2, n_nodes]
    rt.exec_epoch = epoch = rt.exec_epoch + 1
    causes = rt.exec_causes
    causes[epoch] = cause
    causes.pop(epoch - 64, None)


# exact graph key -> [family key, its integers, _Structure, plan]; plan: (the family's
# template, whether the graph updates in place, (output, leaf argument, leaf) of each update)
_families_seen: dict = {}
on_clear(_families_seen.clear)


def _bucket_plan(tpl, nodes, key, roots, leaves, st):
    """(tpl, whether the graph updates tensors in place, (output, leaf argument position,
    leaf index) of each update, by argument position)."""
    step = False
    for r, shp in zip(roots, buckets.root_shapes(tpl, nodes, key[2])):
        if _replaced_input(r) is not None:
            if buckets.padded_shape(shp):
                # a parameter whose shape follows the length (models of several widths):
                # its updates stay exact rather than live padded
                raise buckets.Unsupported("an in-place update of a tensor whose shape "
                                          "follows the length")
            step = True
    pairs = ()
    if step:
        arg_of = {id(n): p for p, n in enumerate(buckets.leaf_nodes(tpl, nodes))}
        pairs = tuple(sorted(((i, arg_of.get(id(leaves[j])), j)
                              for i, j in enumerate(st.partners) if j is not None),
                             key=lambda t: -1 if t[1] is None else t[1]))
    return tpl, step, pairs


def _run_bucketed(order, leaves, scalars, roots, checks, device, cause, t0, exact_key,
                  defer=False):
    """Run the graph with the executable of its length family's bucket (buckets.py), compiling
    that once per bucket; False when the graph is not (yet) one of a family, or a primitive
    of it has no padding rule: the caller compiles it exactly.  `defer`: its checks are read
    at the next sync (a cut piece's: the host records the next piece meanwhile) unless
    it updates tensors in place under guard (a step: those are read now)."""
    seen = _families_seen.get(exact_key)
    if seen is None:
        # which leaves are updated in place (and may give their buffers: counted before
        # the family's node list holds them too)
        st = _Structure(order, leaves, roots, checks)
        donate = st.donatable(leaves)
        fam = buckets.family_of(order, leaves, scalars, roots, checks, device)
        if fam is None:
            return False
        key, ints, nodes = fam
        seen = _families_seen[exact_key] = [key, ints, st, None]
        if len(_families_seen) > 1024:
            del _families_seen[next(iter(_families_seen))]
    else:       # a length seen before: its family key and integers are known
        key, ints, st, _ = seen
        donate = st.donatable(leaves)
        nodes = buckets.family_nodes(order, leaves, scalars)
    got = buckets.lookup(key, ints, rt.local.growing)
    if got is None or got[0] is None:
        return False
    tpl, s = got
    hits0 = metrics.persistent_hits()
    try:
        plan = seen[3]
        if plan is None or plan[0] is not tpl:      # the same for every run of this graph
            plan = seen[3] = _bucket_plan(tpl, nodes, key, roots, leaves, st)
        _, step, pairs = plan
        guards, give = (), ()
        if step:
            # in-place updates keep their leaves' values when a check fails (so their
            # buffers can be donated, as in an exact step)
            if checks:
                guards = tuple((i, p) for i, p, _ in pairs if p is not None)
            mine = set(donate)
            give = tuple(p for _, p, j in pairs if p is not None and j in mine)
        ran = buckets.prepare(tpl, s, nodes, key[2], key[3], device, step, give, guards)
    except buckets.Unsupported as e:
        site = getattr(e.node, "site", None)
        metrics.note_bucket_miss(str(e) + (f" at {site}" if site else ""), cause)
        tpl.bad = True
        return False
    if ran is None:
        return False
    exe, args, out_shapes, compile_s = ran
    if compile_s is not None:
        exe.loaded = metrics.persistent_hits() > hits0
    _admit(exe, compile_s, order, leaves, scalars, roots, len(args), cause, device,
           f" [length bucket: one program for every length up to {exe.bucket}]")
    if rt.local.unverified is not None:
        _verify_deferred(roots)
    t1 = time.perf_counter()
    try:
        outs = exe.fn(*args)
    except Exception as e:
        _rollback(roots, e)
        raise
    t2 = time.perf_counter()
    del args
    failed = None
    if checks:
        exe.check_infos = infos = [c.check for c in checks]
        if defer and not exe.guarded:
            _defer_checks(outs, infos, st, roots, False, device)
        else:
            failed = _failures(outs[-1], infos, st.masks)
    if exe.donate:
        metrics._C["donated_buffers"] += len(exe.donate)
    if failed is not None:
        for i in exe.guarded:       # kept the leaf's old value: stands
            failed[1].pop(i, None)
    for r, v, shp in zip(roots, outs, out_shapes):
        if shp is not None:
            buckets.unpad(r, v)     # stays padded on the device; reads slice it
            continue
        if type(v) is tuple:        # a multi-output op's results (an RNN's scan, kept for
            v = buckets.exact_parts(v, r.shape)      # the backward): sliced to size now
        r.op = _DATA
        r.inputs = ()
        r.attrs = ()
        r.value = v
        r.sig = ir.intern_sig((_DATA, (), r.shape, r.dtype, 0))
        if r.device is None:
            r.device = device
    _note_run(t0, t1, t2, len(order), cause)
    if failed is not None:
        err, taint = failed
        _rollback([roots[i] for i in taint], err,
                  taint={id(roots[i]): e for i, e in taint.items()})
        raise err
    return True


_TRUE = {}


def _true(device):
    """A device-resident True: the `previous step ok` of a chained step with none unread."""
    v = _TRUE.get(device)
    if v is None:
        v = _TRUE[device] = jax.device_put(np.bool_(True), device.jax_device)
    return v


def _finished(flags):       # (a function of its own, so a test can hold steps "running")
    return flags.is_ready()


def _verify_deferred(current=None, wait=True):
    """Read the deferred flags, oldest first (`wait=False`: only those already computed);
    on a failure roll back that execution, every one after it and the work recorded since
    (`current`: the roots of the sync in progress, else this thread's pending work), and
    raise."""
    local = rt.local
    recs = local.unverified
    while recs:
        rec = recs[0]
        if not wait and not _finished(rec.flags):
            return
        del recs[0]
        bad = verify(rec.flags, rec.infos, not wait)
        if bad:
            local.unverified = None
            _roll_back_deferred(rec, bad, recs, current)
    local.unverified = None


def _roll_back_deferred(rec, bad, later, current):
    err = bad[0][1]
    # the work recorded since was built on the failed results: it commits nothing either
    # (its in-place updates take their leaves' values — the failed step's guarded update
    # kept the old ones, and a chained step's update, guarded by "ok and previous ok", too —
    # and its other tensors raise this error)
    local = rt.local
    local.checks = []
    _rollback(live_pending_roots() if current is None else current, err, rng=False)
    roots, taint, undo = [], {}, []
    for r, m in rec.fallible:
        r, e = r(), _first_failure(m, bad)
        if r is not None and e is not None:
            roots.append(r)
            taint[id(r)] = e
    undo.extend(rec.undo)
    for x in later:
        for r, _ in x.fallible:
            r = r()
            if r is not None:
                roots.append(r)
        undo.extend(x.undo)
    _rollback(roots, err, taint, undo=[(t, (lambda o=o: o), e) for t, o, e in undo],
              rng=False)
    mark = rec.rng
    if mark is not None and mark[0] == rt.rng_seed:
        rt.rng_draws = mark[1]
    local.rng_draws = mark
    raise err



def _run_around_failed(roots, checks, order, device, cause, owners):
    """Some pending work reads a value that failed earlier: that work fails with the same
    error (and raises when read); the rest runs."""
    err = _taint(order, {id(n): n.value for n in order if n.op is FAILED})
    clean, bad = [], []
    for r in roots:
        e = err.get(id(r))
        if e is None:
            clean.append(r)
        elif r.op is not FAILED:
            bad.append(r)
    _rollback(bad, None, err, clear=False, rng=False)
    ok_checks = [c for c in checks if id(c) not in err]
    if clean or ok_checks:
        _run(clean, device, cause, owners, ok_checks)


