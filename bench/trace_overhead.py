"""Tracing cost per recorded op and cache-hit cost per sync, on small fixed programs.

    python bench/trace_overhead.py
"""
from __future__ import annotations

import time

import numpy as np

import flowlite as fl
from flowlite.engine import executor


def per_op(label, fn, n=20000):
    fn()
    executor._pending.clear()
    ops0 = fl.metrics.counters()["ops"]
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = time.perf_counter() - t
    ops = fl.metrics.counters()["ops"] - ops0
    executor._pending.clear()
    print(f"  {label:28s} {dt / ops * 1e6:6.2f} µs per recorded op")


def main():
    a = fl.randn(64, 64)
    b = fl.randn(64, 64)
    w = fl.randn(64, 64, requires_grad=True)
    fl.sync()
    print("tracing cost")
    per_op("add", lambda: a + b)
    per_op("mul by Python float", lambda: a * 0.37)
    per_op("matmul", lambda: a @ b)
    per_op("add (tape recorded)", lambda: w + a)
    per_op("sum(dim)", lambda: a.sum(1))
    per_op("reshape", lambda: a.reshape(4096))
    per_op("basic indexing", lambda: a[:, 1:5])
    per_op("relu", lambda: fl.relu(a))

    def step():
        y = fl.tanh(a @ w) * 0.5
        loss = (y * y).mean()
        loss.backward()
        return loss
    per_op("forward + backward", step, n=2000)
    # cache-hit cost of a sync: walk + exact key + donation analysis + argument list
    costs = []
    for _ in range(200):
        with fl.no_grad():
            w.mul_(0.999)
        loss = (fl.tanh(a @ w) ** 2).mean()
        fl.sync()
        t0, t1, _, nodes = fl.metrics.last_sync
        costs.append((t1 - t0) * 1e6)
        loss.item()
    print(f"cache-hit cost per sync: {np.median(costs):.0f} µs for a {nodes}-node graph")


if __name__ == "__main__":
    main()
