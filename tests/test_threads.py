"""Threads training their own models at once, on a cold executable cache: no crash, and
each thread's losses equal the same training run alone (pending work is per thread)."""
import threading

import numpy as np
import pytest

import flowlite as fl
from flowlite import nn, optim


def _train(width, steps=4):
    rng = np.random.default_rng(width)
    model = nn.Sequential(nn.Linear(6, width), nn.Tanh(), nn.Linear(width, 3))
    for p in model.parameters():     # weights from numpy: independent of the shared RNG
        with fl.no_grad():
            p.copy_(fl.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = fl.tensor(rng.standard_normal((8, 6)).astype(np.float32))
    y = fl.tensor(rng.integers(0, 3, 8))
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.filterwarnings("ignore:flowlite.*recompiled")   # a cold cache every trial
def test_three_threads_train_their_own_models_on_a_cold_cache():
    widths = (5, 7, 9)
    alone = {w: _train(w) for w in widths}
    for trial in range(20):
        fl.clear_cache()
        results, errors = {}, []
        start = threading.Barrier(len(widths))

        def run(w):
            try:
                start.wait()
                results[w] = _train(w)
            except BaseException as e:  # noqa: BLE001  (reported below)
                errors.append(f"width {w}: {type(e).__name__}: {e}")
        threads = [threading.Thread(target=run, args=(w,)) for w in widths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, f"trial {trial}: {errors}"
        for w in widths:
            np.testing.assert_allclose(results[w], alone[w], rtol=1e-6,
                                       err_msg=f"trial {trial}, width {w}")
