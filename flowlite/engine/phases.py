"""Where the host's time goes, by coarse phase: the clock behind the run summary
(`flowlite.metrics.summary()`, `python -m flowlite.run --summary`, `FLOWLITE_SUMMARY=1`).

Layer: engine — imports runtime. Off unless the summary is asked for: each instrumented phase (a
sync, a host read, backward(), Optimizer.step(), a DataLoader batch, host data creation) tests
`clock.on` once and runs untimed; no op's recording is ever timed. When on, the main thread's
time since the process started is split exclusively: a phase nested in another (the sync inside
a read, the compile inside that sync, the wait for the device inside both) is taken out of the
outer one, so the phases add up to the wall time. Time outside every phase counts as "forward"
(recording ops, and the Python around them) in the stretches between phases where this thread
records ops or has pending work — from the stretch its first op after a sync is recorded in to
the sync that runs it — and as "other" otherwise. Other threads (DataLoader workers) are not
timed; the transfers they make are counted.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from .runtime import rt

# in the order the summary lists them
PHASES = ("startup", "forward", "backward", "optimizer", "data", "reads", "sync", "compile",
          "blocked", "other")

_now = time.perf_counter
_ident = threading.get_ident


class _Clock:
    """The phase clock's state (one per process, `clock`; only the main thread moves it).
    An instance, not class attributes: writing a class's attributes invalidates Python's
    attribute caches for it, and the clock is written at every phase."""
    __slots__ = ("on", "cur", "base", "last", "depth", "acc", "start", "imported", "steps",
                 "first", "latest", "transfers", "counters")

    def __init__(self):
        self.on = False             # the one flag the instrumented phases test
        self.cur = "other"          # the phase being timed (`base` between phases)
        self.base = "other"         # what time between phases counts as ("forward": pending)
        self.last = 0.0             # when the current interval started
        self.depth = 0              # timed phases open (nested)
        self.acc = dict.fromkeys(PHASES, 0.0)
        self.start = None           # the process's start, on perf_counter's scale
        self.imported = None        # when `import flowlite` finished
        self.steps = 0              # Optimizer.step() calls (training iterations)
        self.first = None           # the snapshot at the end of the first step
        self.latest = None          # ... and of the latest one
        self.transfers = [0, 0, 0, 0]   # host->device count, bytes; device->host count, bytes
        self.counters = {}          # the executor's counters (metrics._C)


clock = _Clock()
_MAIN = threading.main_thread().ident

# The phases below spell the clock's bookkeeping out rather than share helpers: a training
# step passes through several, and a small model's step takes well under a millisecond.


def untimed(phase) -> bool:
    """Whether the main thread is not inside `phase` yet: a function that is a phase calls
    `timed(phase, itself, ...)` when the clock is on and this holds, and runs its own body
    otherwise (so with the summary off, a phase costs the one test of `clock.on`)."""
    return clock.cur != phase and _ident() == _MAIN


def enter(phase):
    """Start timing `phase` on the main thread: -> what leave() needs (None elsewhere)."""
    c = clock
    if _ident() != _MAIN:
        return None
    prev = c.cur
    now = _now()
    c.acc[prev] += now - c.last
    c.depth += 1
    c.cur = phase
    c.last = now
    return prev


def leave(phase, prev) -> None:
    """End `phase` (enter() returned `prev`)."""
    c = clock
    now = _now()
    c.acc[phase] += now - c.last
    c.depth -= 1
    c.cur = prev if c.depth else c.base
    c.last = now


def timed(phase, fn, *args):
    """`fn(*args)`, its time (less that of the phases nested in it) counted as `phase` when
    called on the main thread."""
    if not clock.on or _ident() != _MAIN:
        return fn(*args)
    prev = enter(phase)
    try:
        return fn(*args)
    finally:
        leave(phase, prev)


def timed_sync(fn, *args):
    """A sync of all pending work: after it, time between phases counts as "other"."""
    if not clock.on or _ident() != _MAIN:
        return fn(*args)
    prev = enter("sync")
    try:
        return fn(*args)
    finally:
        leave("sync", prev)
        c = clock
        c.base = "other"
        if not c.depth:
            c.cur = "other"


def timed_read_sync(fn, *args):
    """A host read's sync: it may leave work pending (it runs only the work it needs)."""
    try:
        return timed("sync", fn, *args)
    finally:
        c = clock
        if c.on and _ident() == _MAIN and not rt.local.pending:
            c.base = "other"
            if not c.depth:
                c.cur = "other"


def step_enter():
    """An optimizer step (a training iteration) starts: its recording is timed as
    "optimizer" -> what step_leave() needs (None off the main thread)."""
    return enter("optimizer")


def step_sync() -> None:
    """The step's recording is done; its sync starts (a sync called while the clock says
    "sync" adds no timing of its own: executor.sync)."""
    c = clock
    now = _now()
    c.acc["optimizer"] += now - c.last
    c.cur = "sync"
    c.last = now


def step_leave(prev) -> None:
    """The step ends: counted, and the clock and counters remembered (the summary's
    per-iteration numbers span the first step's end to the latest's)."""
    c = clock
    now = _now()
    acc = c.acc
    acc[c.cur] += now - c.last
    c.last = now
    c.depth -= 1
    if c.cur == "sync":     # it ran: nothing is pending any more
        c.base = "other"
    c.cur = prev if c.depth else c.base
    _count_step(c, now)


def timed_step(fn, *args):
    """`fn(*args)`, a training iteration whose parts are timed by what they are (L-BFGS's
    closure evaluations, its syncs): counted as a step."""
    if not clock.on or _ident() != _MAIN:
        return fn(*args)
    try:
        return fn(*args)
    finally:
        c = clock
        now = _now()
        c.acc[c.cur] += now - c.last
        c.last = now
        _count_step(c, now)


def _count_step(c, now):
    c.steps += 1
    n, t = c.counters, c.transfers
    # the executor's counters as they are (metrics.reset() shifts the snapshots: rebase)
    snap = [now - c.start, c.acc.copy(), n["executions"], n["syncs"], n["compiles"], t[0],
            t[2]]
    if c.first is None:
        c.first = snap
    c.latest = snap


def rebase(executions, syncs, compiles) -> None:
    """metrics.reset() cleared the executor's counters (which had these values): the step
    snapshots' counts are shifted with them, so their differences still count what ran."""
    first, latest = clock.first, clock.latest
    for snap in (first,) if latest is first else (first, latest):
        if snap is None:
            continue
        snap[2] -= executions
        snap[3] -= syncs
        snap[4] -= compiles


def block(value, ready=False):
    """`np.asarray(value)` of a device array: waits for the computation that makes it
    (`ready`: known to be computed, so it is only counted)."""
    c = clock
    if ready or not c.on or _ident() != _MAIN:
        a = np.asarray(value)
    else:
        acc = c.acc
        now = _now()
        acc[c.cur] += now - c.last
        a = np.asarray(value)
        c.last = end = _now()
        acc["blocked"] += end - now
    t = c.transfers
    t[2] += 1
    t[3] += a.nbytes
    return a


def note_h2d(nbytes) -> None:
    t = clock.transfers
    t[0] += 1
    t[1] += nbytes


def note_compile(seconds) -> None:
    """The last `seconds` of the current phase (a sync) were spent compiling."""
    c = clock
    if _ident() != _MAIN:
        return
    now = _now()
    span = now - c.last
    s = min(max(seconds, 0.0), span)
    c.acc[c.cur] += span - s
    c.acc["compile"] += s
    c.last = now


def _process_age() -> float:
    """Seconds since this process started (Linux: /proc; elsewhere 0, i.e. since enable)."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # field 22 (starttime, clock ticks after boot), counted after the ")" of the name
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def mark_imported() -> None:
    if clock.imported is None:
        clock.imported = _now()


def enable() -> None:
    """Start the clock (idempotent). The time before flowlite's import finished is
    "startup"; from then to this call, untimed, "other"."""
    c = clock
    if c.on:
        return
    now = _now()
    if c.imported is None:
        c.imported = now
    c.start = min(now - _process_age(), c.imported)
    c.acc["startup"] += c.imported - c.start
    c.acc["other"] += now - c.imported
    c.last = now
    c.depth = 0
    c.cur = c.base = "forward" if rt.local.pending else "other"
    prev = rt.on_first_pending

    def on_first_pending(site, _prev=prev):
        # a graph starts: the stretch between phases it starts in, and those after it until
        # a sync leaves nothing pending, are recording (no clock read: this runs every step)
        if c.on and _ident() == _MAIN:
            c.base = "forward"
            if not c.depth:
                c.cur = "forward"
        _prev(site)
    rt.on_first_pending = on_first_pending
    c.on = True


def elapsed():
    """(wall seconds since the process started, each phase's seconds so far)."""
    c = clock
    now = _now()
    acc = dict(c.acc)
    if c.on:
        acc[c.cur] += now - c.last
    return (now - c.start if c.start is not None else 0.0), acc
