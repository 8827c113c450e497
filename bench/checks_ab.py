"""The cost of checked execution: the same flowlite training step with checks on and off, in
one process, alternating blocks (A B, B A, ...), so the machine's drift hits both alike.

    python bench/checks_ab.py                       # mlp, cnn, gpt
    python bench/checks_ab.py --workloads mlp --rounds 3

Each arm keeps its own cached executable (the switch changes the graph, so its key); one
model trains through both.  Prints per workload the median waited step and the dispatch-ahead
step of each arm and their ratio (on / off; 1.00 = free).
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import harness  # noqa: E402
from flowlite_workloads import Trainer, wait  # noqa: E402

STEPS = {"mlp": (400, 30), "cnn": (120, 8), "gpt": (60, 6)}


def main(argv=None):
    import flowlite as fl
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", nargs="+", default=["mlp", "cnn", "gpt"])
    ap.add_argument("--rounds", type=int, default=2, help="repeat the whole A/B this often")
    a = ap.parse_args(argv)
    for wl in a.workloads:
        tr = Trainer(wl)

        def arm(on):
            def step():
                fl.set_checks(on)
                return tr.step()
            return step

        fns = {"checks on": arm(True), "checks off": arm(False)}
        n, n_ahead = STEPS[wl]
        for r in range(a.rounds):
            waited = harness.time_alternating(fns, n, warmup=3, wait=wait)
            ahead = harness.time_dispatch_ahead(fns, n_ahead, wait=wait)
            print(f"{wl} round {r + 1}: waited on {waited['checks on']:.3f} ms / off "
                  f"{waited['checks off']:.3f} ms = {waited['checks on'] / waited['checks off']:.3f}"
                  f";  dispatch-ahead on {ahead['checks on']:.3f} / off {ahead['checks off']:.3f}"
                  f" = {ahead['checks on'] / ahead['checks off']:.3f}", flush=True)
        fl.set_checks(True)


if __name__ == "__main__":
    main()
