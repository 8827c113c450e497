"""Child process of bench/real_programs.py: runs one unchanged program and records when each of
its training iterations ends.

    python bench/real_runner.py OUT.json MARKER MAX_STEPS SCRIPT [ARGS...]
    python -m flowlite.run bench/real_runner.py OUT.json MARKER MAX_STEPS SCRIPT [ARGS...]

MARKER says what ends an iteration: "optimizer" (the first optimizer the program creates:
its `step()` returns), a `torch` function name such as "nn.utils.clip_grad_norm_" (for
programs that update their parameters by hand), or "none" (a program without iterations, such
as nanoGPT's sample.py: only the whole run and the peak RSS are recorded).  After MAX_STEPS
iterations (0: no limit) the program is stopped, and under flowlite the work it dispatched is
waited for: `end` is when the last iteration really finished (flowlite's steps return before
their program runs).  So that the steady window starts the same way, the iteration at a
third of MAX_STEPS is recorded once the work flowlite dispatched has run.
OUT.json gets the wall-clock time (time.time()) at which every iteration ended, flowlite's
execution/sync/compile counters there (under flowlite), and the process's peak RSS.  The
torchvision stand-in (bench/standins) is put on the path first, for both frameworks; the
tiktoken stand-in (bench/standins/fallback) last, so an installed tiktoken wins (nanoGPT's
sample.py imports it but uses it only when its data set has no meta.pkl).
"""
from __future__ import annotations

import functools
import json
import os
import resource
import runpy
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))


class _Stop(BaseException):
    """Raised from the marker after MAX_STEPS iterations (BaseException: programs catching
    Exception don't swallow it)."""


def _wait_for_device(flowlite, run_pending=True):
    """Until every step flowlite dispatched (and, with run_pending, all pending work) has run."""
    if run_pending:
        flowlite.sync()
    import jax
    for a in jax.live_arrays():
        a.block_until_ready()


def main():
    out_path, marker, max_steps, script = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        sys.argv[4]
    sys.argv = [script] + sys.argv[5:]
    sys.path.insert(0, os.path.join(HERE, "standins"))
    sys.path.append(os.path.join(HERE, "standins", "fallback"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    import torch                                 # flowlite, under python -m flowlite.run
    flowlite = sys.modules.get("flowlite")
    rec = {"steps": [], "counters": [], "marker": marker, "error": None,
           "framework": "flowlite" if flowlite is not None else "torch"}

    def note():
        if flowlite is not None and max_steps and len(rec["steps"]) == max_steps // 3:
            # the steady window (bench/real_programs.summarize) starts at this iteration: it
            # must start when the work dispatched so far has really run, as PyTorch's has.
            # Without this wait it started at a step flowlite had only dispatched, and the
            # steps still queued before it (up to a log interval's worth) were charged to the
            # window.  Only a wait: a sync here would cut the iteration's graph in two
            _wait_for_device(flowlite, run_pending=False)
        rec["steps"].append(time.time())
        if flowlite is not None:
            c = flowlite.metrics.counters()
            rec["counters"].append([c["executions"], c["syncs"], c["compiles"]])
        if max_steps and len(rec["steps"]) >= max_steps:
            raise _Stop

    def timed(fn):
        def wrapper(*a, **k):
            out = fn(*a, **k)
            note()
            return out
        return wrapper

    if marker == "optimizer":
        Optimizer = torch.optim.Optimizer
        init = Optimizer.__init__
        first = []

        def patched_init(self, *a, **k):
            init(self, *a, **k)
            if not first:                 # the first optimizer made times the iterations
                first.append(self)
                step = type(self).step

                def timed_step(opt, *a, **k):
                    out = step(opt, *a, **k)
                    note()
                    return out
                # a bound method, as PyTorch's LR schedulers expect (they wrap step.__func__)
                self.step = types.MethodType(functools.wraps(step)(timed_step), self)
        Optimizer.__init__ = patched_init
    elif marker != "none":
        owner = torch
        *path, name = marker.split(".")
        for p in path:
            owner = getattr(owner, p)
        setattr(owner, name, timed(getattr(owner, name)))

    try:
        runpy.run_path(script, run_name="__main__")
    except _Stop:
        rec["stopped"] = True
    except SystemExit as e:
        if e.code not in (None, 0):
            rec["error"] = f"SystemExit({e.code})"
    except BaseException as e:        # noqa: BLE001 - reported, not raised
        rec["error"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        if flowlite is not None:      # the steps dispatched but not yet run finish first
            try:
                _wait_for_device(flowlite)
            except Exception:         # noqa: BLE001
                pass
        rec["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rec["end"] = time.time()
        with open(out_path, "w") as f:
            json.dump(rec, f)
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0)                       # don't wait for the program's loader threads


if __name__ == "__main__":
    main()
