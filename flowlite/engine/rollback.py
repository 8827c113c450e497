"""A failed sync commits nothing: failed checks, rollback, out-of-memory refusals.

Layer: engine — imports graph_key, host_data, host_reads, ir, phases, runtime. A node whose
value failed to compute becomes FAILED (reading it raises its error again); the tensors a failed
step rebound get their materialised nodes back, and outputs that replace a leaf in place
(parameters, optimizer state) keep the leaf's value. Checks (index bounds, integer division by
zero) are flags the executable returns, read after it ran (verify).
"""
from __future__ import annotations

import os
import weakref

import jax
import numpy as np

from . import ir
from .graph_key import forget
from .host_data import HostNode, written
from .host_reads import commit_host_read
from .phases import block, clock
from .runtime import rt

_DATA = ir.DATA


# ---- failed syncs ----------------------------------------------------------------------------
# A node whose value failed to compute: `value` holds the error, reading it raises it again.
FAILED = ir.Prim("failed", None, nondiff=True)


_failed_live = weakref.WeakSet()   # FAILED nodes still reachable (a graph must be scanned)


class OutOfMemoryError(MemoryError):
    """An executable's outputs and scratch can't fit in the memory left on its device."""


def verify(flags, infos, ready=False):
    """[(index, error)] of the failed checks, in recording order (empty when all passed).
    Reading the flags waits for the execution to finish (unless `ready`: it has)."""
    f = np.asarray(flags) if not clock.on else block(flags, ready)
    bad = f[:, 0].tolist()
    if not any(bad):
        return []
    return [(i, infos[i].error(int(f[i, 1]))) for i, b in enumerate(bad) if b]


def _failures(flags, infos, masks):
    """None when every check passed; else (the first error, {root position: its error})
    for the outputs computed from a failed check (masks: _check_masks)."""
    bad = verify(flags, infos)
    if not bad:
        return None
    failed = {}
    for pos, m in enumerate(masks):
        e = _first_failure(m, bad)
        if e is not None:
            failed[pos] = e
    return bad[0][1], failed


def _first_failure(mask, bad):
    """The error of the first failed check (bad: [(index, error)]) in `mask`, or None."""
    if mask:
        for i, e in bad:
            if mask >> i & 1:
                return e
    return None


class _Unverified:
    """An execution whose check flags are still to be read, and what rolling it back needs:
    its outputs that can fail (weakly: they are the next step's inputs, whose donation
    counts references) with their check masks, the tensors it rebound with their earlier
    nodes (held, so they survive until then), the random-draw mark."""
    __slots__ = ("flags", "ok", "device", "infos", "fallible", "undo", "rng")

    def __init__(self, outs, infos, st, roots, undo, chain, device):
        self.flags = outs[-1]
        self.ok = outs[-2] if chain else None      # all its checks and its chain's passed
        self.device = device
        self.infos = infos
        masks = st.masks
        self.fallible = [(weakref.ref(roots[i]), masks[i]) for i in st.fallible]
        self.undo = [(t, o(), e) for t, o, e in undo]
        self.rng = rt.local.rng_draws


def _taint(order, seeds, readers=None, inputs=None):
    """{id(node): error} for the seeds and every node of `order` (topological) computed
    from one of them or reading one of `readers` (a failed op's index tensor: the op's
    backward reads it, not the op's output)."""
    err = dict(seeds)
    for n in order:
        if id(n) in err:
            continue
        for i in (n.inputs if inputs is None else inputs.get(id(n), n.inputs)):
            e = err.get(id(i))
            if e is None and readers:
                e = readers.get(id(i))
            if e is not None:
                err[id(n)] = e
                break
    return err


def _again(err):
    """A fresh exception with the same type and message as `err` (raised on every read)."""
    try:
        e = type(err)(*err.args)
    except Exception:
        e = RuntimeError(str(err))
    e.__cause__ = err.__cause__
    return e


def _fail(node, err):
    forget(node, rt.local.stream)
    node.op = FAILED
    node.inputs = ()
    node.attrs = ()
    node.value = err
    node.sig = ir.intern_sig((FAILED, (), node.shape, node.dtype, 0))
    _failed_live.add(node)


def _replaced_input(root):
    """The input node an output replaces in place (an optimizer's old parameter), or None."""
    j = 0
    if root.op.name == "tuple_get":
        j = root.attrs[0]
        root = root.inputs[0]
    op = root.op
    if op.inplace is None:
        return None
    k = op.inplace(root.attrs, j)
    return None if k is None else root.inputs[k]


def _usable(n):
    return n is not None and n.op is _DATA and (n.__class__ is HostNode or not (
        isinstance(n.value, jax.Array) and n.value.is_deleted()))


def _rollback(roots, err, taint=None, undo=None, clear=True, rng=True):
    """Undo the failed outputs `roots` of a sync: tensors rebound to them since the last sync
    get their materialised nodes back (so do tensors written in place on the host since then,
    host_data); a pending output that replaces a leaf in place (a parameter, optimizer
    state) takes the leaf's value; every other one raises its error
    (`taint[id(node)]`, else `err`) on read; the random-draw counter goes back to where the
    last sync left it."""
    local = rt.local
    ids = {id(r) for r in roots}
    back = {}
    for tref, oref, edge in reversed(local.undo if undo is None else undo):
        t, old = tref(), oref()
        if old is not None and old.op is FAILED and old.attrs:
            old = old.attrs[0]     # a failed node a tensor was put back from: its value
        if t is not None and (id(t._node) in ids or written(t._node)) and _usable(old):
            back[id(t._node)] = old
            t._node = old
            t._edge = edge
    if clear and undo is None:
        local.undo.clear()
        local.undo_gen = object()
    for r in roots:
        if r.op is not _DATA and commit_host_read(r):
            continue                # its value was read: it stands
        if r.op is not _DATA:
            src = _replaced_input(r)
            if _usable(src):
                forget(r, rt.local.stream)
                r.op, r.inputs, r.attrs, r.value = _DATA, (), (), src.value
                r.sig = ir.intern_sig((_DATA, (), r.shape, r.dtype, 0))
                continue
        _fail(r, err if taint is None else taint.get(id(r), err))
        old = back.get(id(r))
        if old is not None:
            # a tensor recorded on top of r before the failure surfaced (a deferred check)
            # goes back to the same value when its own sync fails
            r.attrs = (old,)
    mark = local.rng_draws
    if rng and mark is not None and mark[0] == rt.rng_seed and rt.rng_draws >= mark[1]:
        rt.rng_draws = mark[1]


def _has_failed(order):
    for n in order:
        if n.op is FAILED:
            return True
    return False


# programs needing more than this many new bytes have their need compared with the memory
# left before they run (a read of /proc/meminfo or the device's statistics)
_BIG = 1 << 28


def _available_bytes(device):
    jd = getattr(device, "jax_device", None)
    try:
        stats = jd.memory_stats() if jd is not None and hasattr(jd, "memory_stats") else None
    except Exception:
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_error(exe, device):
    """An OutOfMemoryError when `exe`'s new allocations (outputs + scratch - reused donated
    inputs, from XLA's memory analysis) exceed what `device` has left, else None."""
    avail = _available_bytes(device)
    if avail is None or exe.need_bytes <= avail:
        return None
    s = exe.stats or {}
    return OutOfMemoryError(
        f"sync: the executable needs {exe.need_bytes / 2**30:.2f} GiB of new memory "
        f"(outputs {s.get('output_bytes', 0) / 2**30:.2f} GiB, scratch "
        f"{s.get('temp_bytes', 0) / 2**30:.2f} GiB) but {device} has "
        f"{max(avail, 0) / 2**30:.2f} GiB available; nothing was run (the pending tensors "
        f"of this sync raise this error when read; earlier values are unchanged)")
