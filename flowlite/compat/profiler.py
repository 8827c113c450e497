"""`torch.profiler` for flowlite: a Chrome/Perfetto trace of what each step cost.

Layer: compat — imports engine.metrics. PyTorch's profiler times kernels; a flowlite step is one
executable, so the trace shows flowlite's phases instead: recording ops (host time between
executions), each sync with its cause (an optimizer step, `.item()` at a line, ...), the graph
walk and cache lookup, compiles (with node and argument counts), dispatch, the user's
`record_function` ranges and `ProfilerStep#N` markers. Device time is asynchronous: it shows in
XLA's own trace, which `profile(..., xla_trace_dir=DIR)` records through `jax.profiler` (open it
with TensorBoard or Perfetto).

    with torch.profiler.profile() as prof:
        for _ in range(5):
            train_step()
            prof.step()
    prof.export_chrome_trace("trace.json")      # chrome://tracing or ui.perfetto.dev
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
"""
from __future__ import annotations

import collections
import enum
import functools
import json
import os
import socket
import threading
import time

from ..engine import metrics


class ProfilerActivity(enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"
    XPU = "xpu"
    MTIA = "mtia"


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """PyTorch's step schedule: skip, then cycles of wait / warmup / active steps."""
    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return (ProfilerAction.RECORD_AND_SAVE if pos == cycle - 1
                else ProfilerAction.RECORD)
    return action


def _always_record(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """on_trace_ready handler: writes `<worker>.<ms>.pt.trace.json` into `dir_name`."""
    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        name = f"{worker}.{int(time.time() * 1000)}.pt.trace.json" + (".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, name))
    return handler


_active: list = []            # the profilers recording now (record_function writes to them)


class record_function:
    """A named range in the trace (context manager or decorator)."""

    def __init__(self, name: str, args=None):
        self.name, self.args = name, args

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        t1 = time.perf_counter()
        for p in _active:
            p._add(self.name, "user_annotation", self.t0, t1, {"args": self.args} if self.args
                   else None)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            with record_function(self.name, self.args):
                return fn(*a, **k)
        return wrapper


class _Averages(list):
    """`prof.key_averages()`: one row per event name (count, total and mean milliseconds)."""

    def table(self, sort_by=None, row_limit=100, **_):
        rows = sorted(self, key=lambda r: -r["total_ms"])[:row_limit]
        head = f"{'Name':<44} {'Count':>7} {'Total ms':>11} {'Mean ms':>10}"
        lines = [head, "-" * len(head)]
        for r in rows:
            lines.append(f"{r['name'][:44]:<44} {r['count']:>7} {r['total_ms']:>11.3f} "
                         f"{r['mean_ms']:>10.3f}")
        return "\n".join(lines)


class profile:
    """`torch.profiler.profile`: records flowlite's phases while active (see the module
    docstring). `activities`, `record_shapes`, `profile_memory`, `with_stack`, `with_flops`
    and `with_modules` are accepted; what they ask of kernels has no flowlite counterpart."""

    def __init__(self, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, execution_trace_observer=None, acc_events=False,
                 use_cuda=None, xla_trace_dir=None, **_ignored):
        self.schedule = schedule or _always_record
        self.on_trace_ready = on_trace_ready
        self.xla_trace_dir = xla_trace_dir
        self.events: list = []
        self.step_num = 0
        self._recording = False
        self._t_origin = time.perf_counter()
        self._step_t0 = None
        self._lock = threading.Lock()

    # ---- the trace ------------------------------------------------------------------------
    def _add(self, name, cat, t0, t1, args=None, tid=None):
        if not self._recording:
            return
        ev = {"name": name, "cat": cat, "ph": "X", "pid": os.getpid(),
              "tid": tid if tid is not None else threading.get_ident() % 100000,
              "ts": (t0 - self._t_origin) * 1e6, "dur": max(t1 - t0, 0.0) * 1e6}
        if args:
            ev["args"] = args
        with self._lock:
            self.events.append(ev)

    def _on_metric(self, kind, now, data):
        if kind == "sync":
            self._add("sync", "flowlite", now, now, {"cause": data})
        elif kind == "compile":
            cause, n_nodes, n_in, n_out, seconds, loaded = data
            self._add("load" if loaded else "compile", "flowlite", now - seconds, now,
                      {"cause": cause, "nodes": n_nodes, "inputs": n_in, "outputs": n_out})
        elif kind == "execution":
            t0, t1, t2, last_end = data
            if last_end is not None and last_end < t0:
                self._add("record ops", "flowlite", last_end, t0)
            self._add("graph walk, key, cache", "flowlite", t0, t1)
            self._add("dispatch", "flowlite", t1, t2)

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self):
        self._act = self.schedule(self.step_num)
        self._set_recording(self._act in (ProfilerAction.RECORD,
                                          ProfilerAction.RECORD_AND_SAVE))
        metrics.listeners.append(self._on_metric)
        _active.append(self)
        if self.xla_trace_dir:
            import jax
            jax.profiler.start_trace(self.xla_trace_dir)
        self._step_t0 = time.perf_counter()
        return self

    def stop(self):
        if self.xla_trace_dir:
            import jax
            jax.profiler.stop_trace()
        if self._on_metric in metrics.listeners:
            metrics.listeners.remove(self._on_metric)
        if self in _active:
            _active.remove(self)
        if self._recording and self.on_trace_ready is not None:
            self.on_trace_ready(self)
        self._recording = False

    def _set_recording(self, on):
        self._recording = on

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def step(self):
        """Marks the end of a training step (and advances the schedule)."""
        now = time.perf_counter()
        self._add(f"ProfilerStep#{self.step_num}", "step", self._step_t0, now)
        prev = self._act
        self.step_num += 1
        self._act = self.schedule(self.step_num)
        if prev is ProfilerAction.RECORD_AND_SAVE and self.on_trace_ready is not None:
            self.on_trace_ready(self)
            self.events = []
        self._set_recording(self._act in (ProfilerAction.RECORD,
                                          ProfilerAction.RECORD_AND_SAVE))
        self._step_t0 = time.perf_counter()

    # ---- results --------------------------------------------------------------------------
    def export_chrome_trace(self, path):
        with open(path, "w") as f:
            json.dump({"traceEvents": list(self.events), "displayTimeUnit": "ms",
                       "otherData": {"producer": "flowlite.profiler"}}, f)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        agg = collections.OrderedDict()
        for ev in self.events:
            name = ev["name"] if not ev["name"].startswith("ProfilerStep#") else "ProfilerStep*"
            a = agg.setdefault(name, {"name": name, "count": 0, "total_ms": 0.0})
            a["count"] += 1
            a["total_ms"] += ev["dur"] / 1e3
        for a in agg.values():
            a["mean_ms"] = a["total_ms"] / a["count"]
        return _Averages(agg.values())

    def events_list(self):
        return list(self.events)


def supported_activities():
    return {ProfilerActivity.CPU}
