"""A long run of a test-sized model: zero recompiles after warm-up, one execution per step,
flat memory (host RSS, cached programs, pending-work and tape registries)."""
from __future__ import annotations

import numpy as np

import flowlite as fl
from flowlite import nn, optim
from flowlite.frontend import backward as autograd
from flowlite.engine import cache, executor


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


def test_thousands_of_steps_flat_memory_and_no_recompiles():
    fl.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    opt = optim.AdamW(model.parameters(), lr=1e-3)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3000)
    rng = np.random.default_rng(0)
    xs = [fl.from_numpy(rng.normal(size=(32, 16)).astype(np.float32)) for _ in range(8)]
    ys = [fl.from_numpy(rng.integers(0, 4, 32).astype(np.int32)) for _ in range(8)]

    def step(i):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xs[i % 8]), ys[i % 8])
        loss.backward()
        opt.step()
        sched.step()
        return loss

    for i in range(50):
        step(i)
    fl.metrics.reset()
    cache0 = cache.cache_size()
    rss0 = _rss_mb()
    losses = []
    for i in range(2000):
        losses.append(step(i))
        if i % 500 == 499:
            losses = [l.item() for l in losses][-10:] and []
    c = fl.metrics.counters()
    assert c["compiles"] == 0
    assert c["executions"] == 2000
    assert cache.cache_size() == cache0
    assert len(executor._pending) < 100
    assert len(autograd._live) < 1000
    growth = _rss_mb() - rss0
    assert growth < 40, f"host memory grew by {growth:.1f} MB over 2000 steps"
