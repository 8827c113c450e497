"""What the run summary's phase clock costs, on a loop of tiny training steps (an MLP, SGD,
a `.item()` every 10 steps: ~0.5 ms a step on 2 cores, so per-step costs show).

    python bench/summary_overhead.py                 # in one process: blocks of 10 steps,
                                                     # the clock on and off alternately
    python bench/summary_overhead.py --workload mlp  # bench/run.py's MLP step instead
    python bench/summary_overhead.py --baseline /tmp/base --rounds 5
                                                     # + fresh processes: this checkout with
                                                     # the summary off vs another checkout

The in-process comparison (the same process, compiled programs and heap; blocks of 10 steps
alternate so a busy machine slows both modes alike) prints the median block time per step of
each mode, in wall time and in the main thread's CPU time (what the clock itself costs).
Across processes (fresh interpreters, alternating; the minimum of the rounds, the least
disturbed) it compares the flag checks left when the summary is off with the code before them.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r'''
import sys, time, statistics
from flowlite.engine import metrics, phases
import flowlite as fl
from flowlite import nn
n, mode, workload = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if workload == "tiny":
    fl.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = fl.optim.SGD(model.parameters(), lr=0.05)
    x, y = fl.randn(64, 16), fl.randint(0, 4, (64,))

    def steps(k):
        for i in range(k):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i % 10 == 0:
                loss.item()
        loss.item()
else:                           # bench/run.py's MLP step (bench/flowlite_workloads.py)
    sys.path.insert(0, sys.argv[4])
    import workloads
    wl = workloads.build("flowlite", workload)

    def steps(k):
        for _ in range(k):
            r = wl.step()
        wl.wait(r)


def block(k):
    c0 = time.thread_time()
    t0 = time.perf_counter()
    steps(k)
    return (time.perf_counter() - t0) / k, (time.thread_time() - c0) / k


block(100)                      # compiles
if mode == "plain":
    print(block(n)[0])
else:                           # the clock on and off in alternate blocks of 10 steps
    metrics.enable_summary(print_at_exit=False)
    on, off = [], []
    for j in range(n // 10):
        phases.clock.on = j % 2 == 0
        (on if phases.clock.on else off).append(block(10))
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(med(on, 0), med(off, 0), med(on, 1), med(off, 1))
'''


def _one(root, steps, mode, workload):
    env = dict(os.environ, PYTHONPATH=root, FLOWLITE_SUMMARY="0")
    out = subprocess.run([sys.executable, "-c", CHILD, str(steps), mode, workload, HERE],
                         env=env, check=True, capture_output=True, text=True).stdout
    return [float(v) for v in out.strip().splitlines()[-1].split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--workload", default="tiny", help="tiny (default) or mlp: bench/run.py's")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="another checkout, to time against with the summary off")
    a = ap.parse_args()
    on, off, con, coff = _one(ROOT, a.steps, "ab", a.workload)
    print(f"in one process, {a.steps} steps in alternate blocks of 10 (medians): wall clock on "
          f"{on * 1e3:.3f} ms/step, off {off * 1e3:.3f}, on/off {on / off:.3f}; main thread's "
          f"CPU on {con * 1e3:.3f}, off {coff * 1e3:.3f}, on/off {con / coff:.3f}")
    if a.baseline:
        times = {"this (off)": [], "baseline": []}
        for _ in range(a.rounds):
            times["baseline"].append(_one(a.baseline, a.steps // 2, "plain", a.workload)[0])
            times["this (off)"].append(_one(ROOT, a.steps // 2, "plain", a.workload)[0])
        for m, v in times.items():
            print(f"{m:10s} min {min(v) * 1e3:.3f} ms/step  "
                  f"({', '.join(f'{t * 1e3:.3f}' for t in v)})")
        print(f"off/baseline (minimum of {a.rounds} processes each): "
              f"{min(times['this (off)']) / min(times['baseline']):.3f}")


if __name__ == "__main__":
    main()
