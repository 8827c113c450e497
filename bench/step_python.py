"""Per-step Python cost of the MLP training step, by phase, and function calls per step.

    python bench/step_python.py [--steps 300] [--repeats 5] [--workload mlp]

Phases: forward (zero_grad + model + loss), backward, optimizer recording (opt.step()
without its sync), and opt.step()'s sync on a cache hit split into walk + graph key + donation
analysis (up to the executable call), what follows it (output rebinding, metrics), and the
executable call itself (on CPU it may run the program inline: not Python overhead).  Each
step waits for the previous step's loss first (outside the timed phases), so device work
never overlaps the measured Python.  Medians over steps, then the median over repeats.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the steps")
    ap.add_argument("--clock", choices=("wall", "thread"), default="thread",
                    help="thread: this thread's CPU time (robust to other processes on a "
                         "busy machine; excludes XLA's own threads); wall: perf_counter")
    a = ap.parse_args()

    import flowlite as fl
    from flowlite import extend, nn
    from bench.flowlite_workloads import Trainer

    clock = time.thread_time if a.clock == "thread" else time.perf_counter
    tr = Trainer(a.workload)
    model, opt, F = tr.model, tr.opt, nn.functional
    sync_time = [0.0]
    real_sync = extend._sync

    # split the sync at the executable call (lowering's Executable.fn, called by executor._run)
    sync_split = [0.0, 0.0]
    marks = {}

    def timed_sync(*args, **kw):
        t = clock()
        marks.clear()
        r = real_sync(*args, **kw)
        end = clock()
        sync_time[0] += end - t
        if "call0" in marks:
            sync_split[0] = marks["call0"] - t
            sync_split[1] = marks["call1"] - marks["call0"]
        return r

    def wrap_executables():
        from flowlite import executor
        for st in executor._cache.values():
            for exe in st.exes.values():
                if getattr(exe.fn, "_timed", False):
                    continue
                def fn(*args, _real=exe.fn):
                    marks["call0"] = clock()
                    r = _real(*args)
                    marks["call1"] = clock()
                    return r
                fn._timed = True
                exe.fn = fn
    extend._sync = timed_sync

    def one(x, y):
        t0 = clock()
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        t1 = clock()
        loss.backward()
        t2 = clock()
        sync_time[0] = 0.0
        opt.step()
        t3 = clock()
        s = sync_time[0]
        walk, call = sync_split[0], sync_split[1]
        return loss, (t1 - t0, t2 - t1, t3 - t2 - s, walk, s - walk - call, call)

    batches = tr.batches
    for i in range(20):                       # compile + warm
        loss, _ = one(*batches[i % len(batches)])
        loss.numpy()
    c0 = fl.metrics.counters()["compiles"]
    wrap_executables()

    names = ("forward", "backward", "optimizer record", "sync: before exe",
             "sync: after exe", "sync: exe call")
    runs = []
    for _ in range(a.repeats):
        per = [[] for _ in names]
        for i in range(a.steps):
            loss, ts = one(*batches[i % len(batches)])
            loss.numpy()
            for lst, t in zip(per, ts):
                lst.append(t)
        runs.append([statistics.median(p) * 1e6 for p in per])
    assert fl.metrics.counters()["compiles"] == c0, "steady steps recompiled"
    med = [statistics.median(r[k] for r in runs) for k in range(len(names))]
    for n, m in zip(names, med):
        print(f"  {n:18s} {m:7.1f} µs")
    print(f"  {'Python total':18s} {sum(med[:5]):7.1f} µs   (without the executable call; "
          f"median of {a.repeats} x {a.steps} steps)")

    # function calls per step (deterministic, noise-free)
    prof = cProfile.Profile()
    n = 50
    prof.enable()
    for i in range(n):
        loss, _ = one(*batches[i % len(batches)])
        loss.numpy()
    prof.disable()
    st = pstats.Stats(prof)
    print(f"  function calls per step: {st.total_calls / n:.0f} "
          f"(primitive {st.prim_calls / n:.0f})")
    if a.profile:
        st.sort_stats("tottime").print_stats(40)


if __name__ == "__main__":
    main()
