"""The runtime state of one flowlite process, in one object (`rt`).

Layer: engine — imports nothing of flowlite. Every layer above reads and writes the same `rt`:
the tracer (the debug switch; per thread in `rt.local`: pending tensors, live GradFns, the
backward-template node recorder), the executor (execution count and causes, observers, the sync
lock) and the debug tools, which install their hooks here instead of being imported by the core.
"""
from __future__ import annotations

import os
import threading


def _env_on(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _no_hook(*args, **kwargs):
    return None


class KeyStream:
    """The graph key of this thread's pending work, appended to as ops are recorded
    (flowlite/engine/graph_key.py): a sync that finds it in the executor's cache runs the cached
    executable without walking the graph."""
    __slots__ = ("nxt", "flat", "ext", "esigs", "valid")

    def __init__(self, valid=True):
        self.nxt = 0          # the next recorded node's number
        self.flat = []        # per recorded entry: its inputs' codes, then its signature
        self.ext = []         # weakrefs to the leaves, host scalars and baked constants read
        self.esigs = []       # their signatures
        self.valid = valid    # False once something was recorded that the key can't name


class _ThreadState(threading.local):
    """What each thread records on its own (threads training their own models don't see
    each other's pending work, as grad mode is per thread too)."""

    def __init__(self):
        self.pending = []            # weakrefs to tensors created since the last sync
        self.live = []               # weakrefs to GradFns that may still run backward
        self.recorder = None         # list collecting every new node (backward templates)
        self.tracing_body = 0        # >0 while a scan body is traced on placeholders
        self.checks = []             # check nodes recorded since the last sync (flowlite.checks)
        self.undo = []               # (tensor ref, its materialised node ref, its edge) for each
        #                              tensor rebound since the last sync: a failed sync puts
        #                              them back (a failed sync commits nothing)
        self.undo_gen = object()     # renewed whenever undo records are committed: a tensor
        #                              written on the host again within one generation needs
        #                              no second record (its first one is what a failure restores)
        self.rng_draws = None        # (seed, rt.rng_draws) after this thread's last sync
        self.unverified = None       # an execution whose check flags are still to be read
        self.stream = KeyStream()    # the graph key of the pending work, as it is recorded
        self.autocast = None         # {device type: dtype} inside autocast regions
        self.growing = False         # True during a sync that cuts a growing graph (cuts.py)
        self.loading = 0             # >0 while a DataLoader makes a batch: elementwise work on
        #                              host data is done on the host (host_data.elementwise)


class Runtime:
    """Mutable process-wide state; a plain attribute read on every hot path."""

    def __init__(self):
        self.local = _ThreadState()
        self.lock = threading.RLock()   # one sync at a time: walk numbering, cache, compile
        self.recording = 0           # threads recording a backward template right now
        self.exec_epoch = 0          # executions so far (GradFns remember it at creation)
        self.exec_causes = {}        # execution number -> its sync cause (the last 64)
        self.observers = []          # fn(exe, leaves, scalars, roots, owners, donate)
        self.rng_seed = 0            # flowlite.manual_seed's value
        self.rng_draws = 0           # random draws so far: the n-th folds n into the key
        # debug switches: the tracer reads `debug_on` only; the rest matter when it is set
        self.flags = {"track_sites": _env_on("FLOWLITE_TRACK_SITES"),
                      "eager": _env_on("FLOWLITE_EAGER"), "anomaly": False, "strict": 0}
        self.debug_on = False
        # hooks the debug layer installs (no-ops until then)
        self.on_new_node = _no_hook             # (node) while debug_on
        self.on_first_pending = _no_hook        # (site) when a graph starts
        self.check_graph_size = _no_hook        # (n_pending) every 16k pending tensors
        self.check_implicit_sync = _no_hook     # (cause) before a host read syncs
        self.on_compile = _no_hook              # (cause, order, leaves, scalars, roots, exe)
        self.on_run = _no_hook                  # (cause, exe) on a cache hit
        self.on_mid_step_execution = _no_hook   # (cause) a sync between forward and backward
        self.on_reset = []                      # metrics.reset() calls each
        self.update_debug_on()

    def update_debug_on(self) -> None:
        f = self.flags
        self.debug_on = bool(f["track_sites"] or f["eager"] or f["anomaly"] or self.recording)


rt = Runtime()
