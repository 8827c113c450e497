"""flowlite.compile: replay gives bit-identical results to tracing and retraces when guards
change (input shape, captured Python scalar)."""
from __future__ import annotations

import numpy as np

import flowlite as fl
from flowlite.optim import Optax
import optax
import pytest

# the shared step helpers run many different programs from one source line
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")


@pytest.fixture(autouse=True)
def _no_length_family_from_earlier_tests():
    """The replay counts below assume plain programs: an earlier test's graphs that differ
    only in a length would make this one's first sync a bucketed program (buckets.py), whose
    padded leaf is one more retrace away from the plan.  Start from an empty cache."""
    fl.clear_cache()
    yield


def _setup(seed=0):
    fl.manual_seed(seed)
    X = fl.randn(32, 3)
    Y = X @ fl.tensor([[1.0], [-2.0], [0.5]])
    w = fl.zeros(3, 1, requires_grad=True)
    b = fl.zeros(1, requires_grad=True)
    tx = optax.inject_hyperparams(optax.adam)(learning_rate=0.1)
    opt = Optax([w, b], tx, hyperparams={"learning_rate": 0.1})
    return X, Y, w, b, opt


def _lsq_step(w, b, opt):
    """A least-squares training step on (x, y), the body most tests compile."""
    def step(x, y):
        opt.zero_grad()
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return step


def _run(compiled, steps=20):
    X, Y, w, b, opt = _setup()

    def step(x, y):
        opt.zero_grad()
        noise = fl.randn(1)                      # device RNG advances inside the step
        loss = ((x @ w + b - y) ** 2).mean() + 0.01 * (noise ** 2).sum()
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = fl.compile(step)
    losses = []
    for i in range(steps):
        opt.param_groups[0]["learning_rate"] = 0.1 / (1 + 0.1 * i)   # a schedule
        losses.append(step(X, Y))
    return [l.item() for l in losses], w.numpy(), b.numpy(), w.grad.numpy(), step


def test_replay_is_bit_identical_to_tracing_over_20_steps():
    # a compiled function draws from the device stream (its draws replay as data); eager
    # draws on the CPU are PyTorch's, on the host, unless in device_draws()
    with fl.random.device_draws():
        traced = _run(False)
        fl.metrics.reset()
        replayed = _run(True)
    assert traced[0] == replayed[0]
    np.testing.assert_array_equal(traced[1], replayed[1])
    np.testing.assert_array_equal(traced[2], replayed[2])
    np.testing.assert_array_equal(traced[3], replayed[3])
    step = replayed[4]
    assert step.replays >= 17
    assert fl.metrics.counters()["replays"] == step.replays


def test_changed_input_shape_retraces():
    X, Y, w, b, opt = _setup()
    step = fl.compile(_lsq_step(w, b, opt))

    for _ in range(4):
        step(X, Y)
    assert step.replays == 2
    traces = step.traces
    l_small = step(X[:8], Y[:8])            # new shape: traced, never the stale program
    assert step.traces == traces + 1
    ref = ((X[:8] @ w + b - Y[:8]) ** 2).mean()
    assert np.isfinite(l_small.item()) and np.isfinite(ref.item())


def test_changed_captured_scalar_retraces_instead_of_replaying_stale_work():
    x = fl.tensor([1.0, 2.0, 3.0])
    acc = fl.zeros(3)
    fl.sync()
    scale = 2.0

    def step(v):
        with fl.no_grad():
            acc.add_(v * scale)
        out = acc.sum()
        fl.sync()
        return out

    cstep = fl.compile(step)
    results = [cstep(x).item() for _ in range(4)]
    assert results == [12.0, 24.0, 36.0, 48.0]
    assert cstep.replays == 2
    scale = 10.0                                    # noqa: F841 - read through the closure
    r = cstep(x).item()
    assert r == 48.0 + 60.0
    assert cstep.replays == 2                      # the guard forced a retrace


def test_compile_without_a_sync_in_the_body_still_returns_correct_values():
    x = fl.tensor([1.0, 2.0])

    @fl.compile
    def f(v):
        return (v * 3).sum()

    assert [f(x).item() for _ in range(4)] == [9.0] * 4


def test_bound_method_attribute_change_retraces():
    class Acc:
        def __init__(self):
            self.scale = 1.0
            self.t = fl.zeros(())
            fl.sync()
            self.step = fl.compile(self._step)

        def _step(self):
            with fl.no_grad():
                self.t.add_(fl.ones(()) * self.scale)
            out = self.t + 0
            fl.sync()
            return out

    a = Acc()
    assert [a.step().item() for _ in range(3)] == [1.0, 2.0, 3.0]
    a.scale = 10.0
    assert a.step().item() == 13.0


def test_returning_a_value_computed_after_the_sync_warns():
    import pytest
    x = fl.zeros(())
    fl.sync()

    @fl.compile
    def f():
        with fl.no_grad():
            x.add_(1.0)
        fl.sync()
        return x * 2

    with pytest.warns(UserWarning, match="computed after its last sync"):
        vals = [f().item() for _ in range(4)]
    assert vals == [2.0, 4.0, 6.0, 8.0]
    assert f.replays == 0


# -- the fast guard (checked against the plan replayed last) keeps every guard ----------------

_GLOBAL_SCALE = 2.0


def _scaled_sum(acc, v):
    with fl.no_grad():
        acc.add_(v * _GLOBAL_SCALE)
    out = acc.sum()
    fl.sync()
    return out


def test_changed_global_scalar_retraces():
    global _GLOBAL_SCALE
    x = fl.tensor([1.0, 2.0, 3.0])
    acc = fl.zeros(3)
    fl.sync()
    step = fl.compile(_scaled_sum)
    try:
        assert [step(acc, x).item() for _ in range(4)] == [12.0, 24.0, 36.0, 48.0]
        assert step.replays == 2
        _GLOBAL_SCALE = 10.0
        assert step(acc, x).item() == 48.0 + 60.0
        assert step.replays == 2
    finally:
        _GLOBAL_SCALE = 2.0


def test_changed_python_scalar_argument_retraces():
    x = fl.tensor([1.0, 2.0])
    acc = fl.zeros(2)
    fl.sync()

    @fl.compile
    def f(v, k):
        with fl.no_grad():
            acc.add_(v * k)
        out = acc.sum()
        fl.sync()
        return out

    assert [f(x, 2.0).item() for _ in range(4)] == [6.0, 12.0, 18.0, 24.0]
    assert f.replays == 2
    assert f(x, 3.0).item() == 33.0               # new value: traced, not the k=2 program
    assert f(x, 2.0).item() == 39.0


def test_mutated_captured_list_retraces():
    x = fl.tensor([1.0, 2.0])
    acc = fl.zeros(2)
    fl.sync()
    coefs = [1.0, 2.0]

    @fl.compile
    def f(v):
        with fl.no_grad():
            acc.add_(v * coefs[1])
        out = acc.sum()
        fl.sync()
        return out

    assert [f(x).item() for _ in range(4)] == [6.0, 12.0, 18.0, 24.0]
    assert f.replays == 2
    coefs[1] = 10.0                                # same list object, new contents
    assert f(x).item() == 54.0


def test_module_mode_change_retraces():
    class Scale(fl.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = fl.nn.Parameter(fl.ones(2))

        def forward(self, v):
            return v * self.w * (2.0 if self.training else 1.0)

    m = Scale()
    x = fl.tensor([1.0, 2.0])
    acc = fl.zeros(2)
    fl.sync()

    @fl.compile
    def f(v):
        with fl.no_grad():
            acc.add_(m(v))
        out = acc.sum()
        fl.sync()
        return out

    assert [f(x).item() for _ in range(4)] == [6.0, 12.0, 18.0, 24.0]
    assert f.replays == 2
    m.eval()
    assert f(x).item() == 27.0
    m.train()
    assert f(x).item() == 33.0


def _adam_run(compiled, steps=16):
    fl.manual_seed(0)
    X = fl.randn(32, 3)
    Y = X @ fl.tensor([[1.0], [-2.0], [0.5]])
    w = fl.zeros(3, 1, requires_grad=True)
    opt = fl.optim.Adam([w], lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = fl.compile(step)
    losses = []
    for i in range(steps):
        if i % 4 == 0:
            opt.param_groups[0]["lr"] = 0.1 / (1 + i)      # a schedule, every 4th step
        if i == 9:
            opt.param_groups[0]["betas"] = (0.8, 0.99)
        losses.append(step(X, Y))
    return [l.item() for l in losses], w.numpy(), step


def test_flowlite_optimizer_hyperparameter_changes_are_replayed():
    traced = _adam_run(False)
    replayed = _adam_run(True)
    assert traced[0] == replayed[0]
    np.testing.assert_array_equal(traced[1], replayed[1])
    assert replayed[2].replays >= 12


def test_a_tensor_sharing_a_state_node_keeps_its_value():
    X, Y, w, b, opt = _setup()
    step = fl.compile(_lsq_step(w, b, opt))

    for _ in range(4):
        step(X, Y)
    assert step.replays == 2
    old = w.clone()                      # shares w's node: its buffer can't be reused
    old_value = old.numpy().copy()
    step(X, Y)
    np.testing.assert_array_equal(old.numpy(), old_value)
    assert not np.array_equal(w.numpy(), old_value)
    del old
    replays = step.replays
    for _ in range(3):
        step(X, Y)
    assert step.replays >= replays + 2   # back to replaying


def test_an_overwritten_tensor_shared_with_another_keeps_the_others_value():
    x = fl.tensor([1.0, 2.0])
    acc = fl.zeros(2)
    k = fl.zeros(())
    fl.sync()

    @fl.compile
    def f(v):
        with fl.no_grad():
            k.add_(1.0)
            acc.copy_(v * k)          # overwrites: acc's old buffer isn't an input
        out = acc.sum()
        fl.sync()
        return out

    assert [f(x).item() for _ in range(4)] == [3.0, 6.0, 9.0, 12.0]
    assert f.replays == 2
    snap = acc.detach()               # shares acc's node (and so its value)
    assert f(x).item() == 15.0
    assert f.replays == 3             # replayed, with a new node for acc
    np.testing.assert_array_equal(snap.numpy(), [4.0, 8.0])
    np.testing.assert_array_equal(acc.numpy(), [5.0, 10.0])


def test_a_tensor_sharing_a_grad_keeps_its_value():
    X, Y, w, b, opt = _setup()
    step = fl.compile(_lsq_step(w, b, opt))

    for _ in range(4):
        step(X, Y)
    g_old = w.grad.detach()
    g_value = g_old.numpy().copy()
    step(X, Y)
    assert step.replays == 3
    np.testing.assert_array_equal(g_old.numpy(), g_value)
    assert not np.array_equal(w.grad.numpy(), g_value)


def test_a_held_grad_tensor_keeps_its_value_as_when_tracing():
    for compiled in (False, True):
        X, Y, w, b, opt = _setup()
        step = _lsq_step(w, b, opt)
        if compiled:
            step = fl.compile(step)
        for _ in range(4):
            step(X, Y)
        g = w.grad
        g_value = g.numpy().copy()
        step(X, Y)
        assert w.grad is not g                     # backward() made a new .grad tensor
        np.testing.assert_array_equal(g.numpy(), g_value)
        if compiled:
            assert step.replays == 3


def test_flipping_maximize_between_replays_retraces():
    def losses(compiled):
        fl.manual_seed(0)
        w = fl.ones(3, requires_grad=True)
        opt = fl.optim.SGD([w], lr=0.1)

        def step():
            opt.zero_grad()
            loss = (w * w).sum()
            loss.backward()
            opt.step()
            return loss

        step = fl.compile(step) if compiled else step
        out = []
        for i in range(8):
            opt.param_groups[0]["maximize"] = i >= 4     # gradient ascent from step 4 on
            out.append(step().item())
        return out

    assert losses(True) == losses(False)
