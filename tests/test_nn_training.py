"""A training step built from nn layers is ONE executable: forward, backward, gradient
clipping, the parameter update, BatchNorm's running statistics and Dropout's RNG advance."""
from __future__ import annotations

import numpy as np
import pytest

import flowlite as fl
import flowlite.nn as nn
import flowlite.nn.functional as F
from _nn_helpers import compiles, executions

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")


def _model():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Dropout(0.2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def test_training_step_is_one_executable_and_updates_batchnorm():
    rng = np.random.default_rng(0)
    model = _model()
    # deterministic weights (the lazy initialisation never runs), then a fresh RNG stream
    state = {k: rng.standard_normal(tuple(v.shape)) * 0.3 for k, v in model.state_dict().items()}
    state.update({"1.running_var": np.ones(4), "1.num_batches_tracked": np.array(0)})
    model.load_state_dict(state)
    fl.manual_seed(0)
    x = fl.from_numpy(rng.standard_normal((8, 3, 8, 8)).astype(np.float32))
    y = fl.from_numpy(rng.integers(0, 3, 8))
    bn = model[1]
    params = list(model.parameters())

    def step():
        loss = F.cross_entropy(model(x), y)
        model.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        with fl.no_grad():
            for p in params:
                p.sub_(p.grad * 0.05)
        fl.sync()
        return loss.item()

    for _ in range(2):          # warm-up: the first steps compile
        step()
    c0, e0 = compiles(), executions()
    means, losses = [], []
    for _ in range(5):
        losses.append(step())
        means.append(bn.running_mean.numpy().copy())
    assert compiles() == c0, "steady-state steps must not recompile"
    assert executions() == e0 + 5, "one executable per training step"
    for a, b in zip(means, means[1:]):
        assert not np.allclose(a, b)            # running stats move on every step
    assert bn.num_batches_tracked.item() == 7
    assert all(np.isfinite(losses))
    # eval mode: running statistics frozen, dropout off, deterministic
    model.eval()
    with fl.no_grad():
        a = model(x).numpy()
        b = model(x).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(bn.running_mean.numpy(), means[-1])
    assert bn.num_batches_tracked.item() == 7


def test_gradient_accumulation_matches_one_large_batch():
    rng = np.random.default_rng(1)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2))
    model.load_state_dict({k: rng.standard_normal(tuple(v.shape))
                           for k, v in model.state_dict().items()})
    xs = rng.standard_normal((6, 5)).astype(np.float32)
    ys = rng.integers(0, 2, 6)
    loss = F.cross_entropy(model(fl.from_numpy(xs)), fl.from_numpy(ys))
    loss.backward()
    full = [p.grad for p in model.parameters()]
    model.zero_grad()
    for part in (slice(0, 3), slice(3, 6)):
        (F.cross_entropy(model(fl.from_numpy(xs[part])), fl.from_numpy(ys[part])) * 0.5
         ).backward()
    fl.sync()
    for p, g in zip(model.parameters(), full):
        np.testing.assert_allclose(p.grad.numpy(), g.numpy(), rtol=1e-5, atol=1e-6)
