"""Checked execution (flowlite.checks, executor): index bounds and integer division by zero
are flags inside the step's own executable; a failed sync commits nothing.

Oracles: PyTorch (raise vs value, and the values themselves), and bit-identical state
before/after a failed step."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings, HealthCheck, strategies as st

import flowlite as fl
from flowlite import nn, optim
import flowlite.nn.functional as F
from flowlite.engine import cache

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _raises(fn):
    """('raise', None) or ('value', array) for fn() — a flowlite or torch computation."""
    try:
        v = fn()
        if isinstance(v, torch.Tensor):
            v = v.detach().numpy()
        elif isinstance(v, fl.Tensor):
            v = v.numpy()                            # the sync: where flowlite raises
    except (IndexError, RuntimeError, ZeroDivisionError) as e:
        return "raise", e
    return "value", np.asarray(v)


# ---- the reproducers of issue 15 ------------------------------------------------------------
def test_out_of_range_index_raises_not_clamps():
    with pytest.raises(IndexError, match=r"index 10 is out of bounds for dimension 0 with size 5"):
        fl.arange(5.)[fl.tensor([10])].numpy()
    np.testing.assert_array_equal(fl.arange(5.)[fl.tensor([-1, -5])].numpy(), [4., 0.])
    with pytest.raises(IndexError, match=r"index -6"):
        fl.arange(5.)[fl.tensor([-6])].numpy()


def test_error_names_op_value_range_shape_and_line():
    x = fl.zeros(4, 3)
    y = x.gather(1, fl.tensor([[0], [5], [1], [2]]))     # the line the error must name
    line = sys._getframe().f_lineno - 1
    with pytest.raises(IndexError) as ei:
        y.numpy()
    msg = str(ei.value)
    for part in ("gather", "index 5", "dimension 1 with size 3", "[0, 2]", "(4, 1)", "(4, 3)",
                 f"test_checks.py:{line}"):
        assert part in msg, (part, msg)
    assert isinstance(ei.value, RuntimeError)       # PyTorch's gather raises RuntimeError


def test_embedding_out_of_range_raises_and_negative_is_rejected():
    e = nn.Embedding(5, 2)
    for bad in ([7], [-1]):
        with pytest.raises(IndexError, match="embedding"):
            e(fl.tensor(bad)).sum().backward()
            fl.sync()
        with pytest.raises(IndexError):       # the failed backward's gradient raises again
            e.weight.grad.numpy()
        e.weight.grad = None
    out = e(fl.tensor([4, 0]))
    out.sum().backward()
    g = e.weight.grad.numpy()
    np.testing.assert_array_equal(g[[0, 4]], np.ones((2, 2)))


def test_cross_entropy_targets():
    logits = fl.zeros(2, 5)
    for bad in ([-3, 0], [5, 0]):
        with pytest.raises(IndexError, match=f"Target {bad[0]} is out of bounds"):
            F.cross_entropy(logits, fl.tensor(bad)).item()
        with pytest.raises(IndexError, match=f"Target {bad[0]} is out of bounds"):
            F.cross_entropy(logits, fl.tensor(bad), weight=fl.ones(5)).item()
    # ignore_index is honoured (the default -100, and a custom one outside [0, C))
    assert abs(F.cross_entropy(logits, fl.tensor([-100, 1])).item() - np.log(5)) < 1e-6
    assert abs(F.cross_entropy(logits, fl.tensor([7, 1]), ignore_index=7).item()
               - np.log(5)) < 1e-6
    assert abs(F.cross_entropy(logits, fl.tensor([-100, 1]), weight=fl.ones(5),
                               label_smoothing=0.1).item() - np.log(5)) < 1e-5


def test_integer_division_by_zero():
    for f in (lambda a, b: a // b, lambda a, b: a % b, fl.fmod,
              lambda a, b: fl.div(a, b, rounding_mode="trunc")):
        with pytest.raises(ZeroDivisionError, match="ZeroDivisionError"):
            f(fl.tensor([7, -7]), fl.tensor([0, 1])).numpy()
        with pytest.raises(ZeroDivisionError):       # a Python 0 raises at the call
            f(fl.tensor([7, -7]), 0)
    np.testing.assert_array_equal((fl.tensor([7, -7]) // fl.tensor([2, 2])).numpy(), [3, -4])
    np.testing.assert_array_equal((fl.tensor([7, -7]) % fl.tensor([3, 3])).numpy(), [1, 2])
    # float division by zero is inf, as in PyTorch; an empty result raises nothing
    assert np.isinf((fl.tensor([7.]) // fl.tensor([0.])).numpy()).all()
    assert (fl.zeros(0, dtype=fl.int32) // fl.tensor([0])).numpy().shape == (0,)
    assert isinstance(pytest.raises(RuntimeError, lambda: (fl.tensor([1]) // fl.tensor([0]))
                                    .numpy()).value, ZeroDivisionError)


# ---- same executable, switch, cache key -----------------------------------------------------
def test_checks_are_in_the_same_executable():
    x = fl.randn(6, 4)
    idx = fl.tensor([1, 3, 0])
    fl.sync()
    c0 = fl.metrics.counters()
    for _ in range(3):
        y = (x[idx] * 2).sum() + x.gather(1, fl.tensor([[0], [1], [2], [3], [0], [1]])).sum()
        y.item()
    c1 = fl.metrics.counters()
    assert c1["executions"] - c0["executions"] == 3       # one per read, no extra
    assert c1["compiles"] - c0["compiles"] <= 1


def test_switch_is_part_of_the_graph_key():
    x = fl.arange(5.)
    try:
        fl.set_checks(False)
        assert not fl.checks_enabled()
        x[fl.tensor([1])].numpy()                    # compiles the unchecked graph
        fl.set_checks(True)
        with pytest.raises(IndexError):              # never served the unchecked executable
            x[fl.tensor([9])].numpy()
        fl.set_checks(False)
        x[fl.tensor([9])].numpy()                    # off: no check (the value is clamped)
    finally:
        fl.set_checks(True)
    assert fl.checks_enabled()


def test_environment_variable_turns_checks_off():
    code = ("import flowlite as fl; assert not fl.checks_enabled(); "
            "print(fl.arange(5.)[fl.tensor([9])].numpy())")
    env = dict(os.environ, FLOWLITE_CHECKS="0", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


# ---- a failed sync commits nothing ----------------------------------------------------------
def _model():
    fl.manual_seed(0)
    m = nn.Sequential(nn.Embedding(10, 8), nn.Dropout(0.1), nn.Linear(8, 10))
    return m, optim.Adam(m.parameters(), lr=1e-2)


def _step(m, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(m(x).reshape(-1, 10), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss


def _snapshot(m, opt):
    return [p.numpy().copy() for p in m.parameters()] + \
        [s.numpy().copy() for s in opt._opt_state[0]] + [fl.random.get_rng_state().numpy()]


GOOD = np.array([[1, 2, 3, 4]])
BAD = np.array([[1, 12, 3, 4]])
Y = np.array([[2, 3, 4, 5]])


@pytest.fixture(params=["conditional", "select"])
def guard_kind(request, monkeypatch):
    """Both ways a checked program guards its in-place updates: lax.cond (CPU programs) and a
    select (GPU/TPU programs, lowering.guards_in_conditional), both run here on the CPU."""
    from flowlite.engine import executor, lowering
    if request.param == "select":
        monkeypatch.setattr(lowering, "guards_in_conditional", lambda device: False)
        cache.clear_cache()
        yield request.param
        cache.clear_cache()
    else:
        yield request.param


def test_failed_training_step_commits_nothing_and_training_goes_on(guard_kind):
    m, opt = _model()
    _step(m, opt, fl.tensor(GOOD), fl.tensor(Y))
    before = _snapshot(m, opt)
    c0 = fl.metrics.counters()
    loss = _step(m, opt, fl.tensor(BAD), fl.tensor(Y))    # the step's sync doesn't wait...
    assert fl.metrics.counters()["executions"] - c0["executions"] == 1
    with pytest.raises(IndexError, match="embedding: index 12"):
        loss.item()                                  # ...the next read raises
    with pytest.raises(IndexError, match="embedding: index 12"):
        loss.item()                                  # and again, with the same cause
    for a, b in zip(before, _snapshot(m, opt)):
        np.testing.assert_array_equal(a, b)          # bit-identical: params, Adam state, RNG
    with pytest.raises(IndexError, match="embedding: index 12"):
        m[0].weight.grad.numpy()                     # the failed step's grads raise again
    l1 = _step(m, opt, fl.tensor(GOOD), fl.tensor(Y)).item()
    l2 = _step(m, opt, fl.tensor(GOOD), fl.tensor(Y)).item()
    # the same run without the failed step
    m2, opt2 = _model()
    _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y))
    assert _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y)).item() == l1
    assert _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y)).item() == l2
    for a, b in zip(_snapshot(m, opt), _snapshot(m2, opt2)):
        np.testing.assert_array_equal(a, b)


def test_deferred_failure_raises_at_the_next_step(monkeypatch, guard_kind):
    # the failed step has finished by the next sync (made certain here: on a loaded machine
    # it may still run, and then the next step chains on it and raises at the read after)
    from flowlite.engine import executor
    monkeypatch.setattr(executor, "_finished", lambda flags: flags.block_until_ready() is not None)
    m, opt = _model()
    _step(m, opt, fl.tensor(GOOD), fl.tensor(Y))
    before = _snapshot(m, opt)
    _step(m, opt, fl.tensor(BAD), fl.tensor(Y))       # no read in between
    with pytest.raises(IndexError, match="embedding: index 12"):
        _step(m, opt, fl.tensor(GOOD), fl.tensor(Y))  # its sync raises the earlier failure
    # the sync that raised commits nothing: neither the failed step nor the one on top of it
    for a, b in zip(before, _snapshot(m, opt)):
        np.testing.assert_array_equal(a, b)
    loss = _step(m, opt, fl.tensor(GOOD), fl.tensor(Y))
    m2, opt2 = _model()
    _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y))
    assert _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y)).item() == loss.item()


def _never_finished(monkeypatch):
    """Every deferred step looks still running: the next step chains on top of it."""
    from flowlite.engine import executor
    monkeypatch.setattr(executor, "_finished", lambda flags: False)


def test_chained_steps_train_as_unchained_ones(monkeypatch):
    m, opt = _model()
    ref = [_step(m, opt, fl.tensor(GOOD), fl.tensor(Y)).item() for _ in range(4)]
    _never_finished(monkeypatch)
    m2, opt2 = _model()
    losses = [_step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y)) for _ in range(4)]
    from flowlite.engine import executor
    assert len(fl.engine.runtime.rt.local.unverified) == 4          # all dispatched, none read
    assert [x.item() for x in losses] == ref
    assert fl.engine.runtime.rt.local.unverified is None
    assert any(e.chained for e in cache.executables())


def test_step_chained_on_a_failed_one_commits_nothing(monkeypatch):
    _never_finished(monkeypatch)
    m, opt = _model()
    _step(m, opt, fl.tensor(GOOD), fl.tensor(Y)).item()
    before = _snapshot(m, opt)
    _step(m, opt, fl.tensor(BAD), fl.tensor(Y))               # fails, unread
    on_top = _step(m, opt, fl.tensor(GOOD), fl.tensor(Y))     # dispatched on top of it
    assert len(fl.engine.runtime.rt.local.unverified) == 2
    with pytest.raises(IndexError, match="embedding: index 12"):
        on_top.item()                                         # the first read raises
    for a, b in zip(before, _snapshot(m, opt)):
        np.testing.assert_array_equal(a, b)                   # neither step committed
    with pytest.raises(IndexError, match="embedding: index 12"):
        on_top.item()                                         # and raises again
    with pytest.raises(IndexError, match="embedding: index 12"):
        m[2].weight.grad.numpy()
    loss = _step(m, opt, fl.tensor(GOOD), fl.tensor(Y))
    m2, opt2 = _model()
    _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y))
    assert _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y)).item() == loss.item()


@pytest.mark.parametrize("hold_grads", [False, True])
def test_failed_replay_commits_nothing(hold_grads):
    # a replay binds its outputs while the program runs and reads the check flags last:
    # on a failure, .grad (rebound in place, or replaced when the user holds the old one)
    # and everything else get their values from before the call back
    m, opt = _model()

    @fl.compile
    def step(x, y):
        return _step(m, opt, x, y)

    for _ in range(3):
        step(fl.tensor(GOOD), fl.tensor(Y))
    assert step.replays >= 1
    traces = step.traces
    params = list(m.parameters())
    held = [p.grad for p in params] if hold_grads else None
    grads = [p.grad.numpy().copy() for p in params]
    before = _snapshot(m, opt)
    with pytest.raises(IndexError, match="embedding: index 12"):
        step(fl.tensor(BAD), fl.tensor(Y))
    assert step.traces == traces                      # it failed in the replay
    for a, b in zip(before, _snapshot(m, opt)):
        np.testing.assert_array_equal(a, b)
    for p, g in zip(params, grads):
        np.testing.assert_array_equal(p.grad.numpy(), g)
    if hold_grads:
        assert all(p.grad is h for p, h in zip(params, held))
    loss = step(fl.tensor(GOOD), fl.tensor(Y))     # training goes on as if it never ran
    assert np.isfinite(loss.item())
    m2, opt2 = _model()
    for _ in range(3):
        _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y))
    assert _step(m2, opt2, fl.tensor(GOOD), fl.tensor(Y)).item() == loss.item()


def test_failed_values_raise_again_and_independent_work_commits():
    base = fl.arange(5.)
    ok = base * 2                                   # independent of the bad op: commits
    bad = base[fl.tensor([8])]
    later = bad + 1                                 # computed from the failed op
    with pytest.raises(IndexError):
        fl.sync()
    np.testing.assert_array_equal(ok.numpy(), [0, 2, 4, 6, 8])
    for t in (bad, later, later * 3):
        with pytest.raises(IndexError, match="index 8"):
            t.numpy()
    np.testing.assert_array_equal((ok + 1).numpy(), [1, 3, 5, 7, 9])


def test_batchnorm_running_stats_roll_back():
    bn = nn.BatchNorm1d(3)
    emb = nn.Embedding(4, 3)
    bn(emb(fl.tensor([0, 1, 2]))).sum().item()
    mean0 = bn.running_mean.numpy().copy()
    with pytest.raises(IndexError):
        bn(emb(fl.tensor([0, 9, 2]))).sum().item()
    np.testing.assert_array_equal(bn.running_mean.numpy(), mean0)
    bn(emb(fl.tensor([0, 1, 2]))).sum().item()
    assert not np.array_equal(bn.running_mean.numpy(), mean0)


def test_failed_forward_does_not_stop_later_donations():
    # the failed forward's tape (uncollected) still holds pending saved nodes that read the
    # failed values: later syncs must neither retry them nor count them as buffer holders
    bn, emb = nn.BatchNorm1d(3), nn.Embedding(4, 3)
    with pytest.raises(IndexError):
        bn(emb(fl.tensor([0, 9, 2]))).sum().item()
    p = fl.randn(1000)
    fl.sync()
    before = fl.metrics.counters()["donated_buffers"]
    with fl.no_grad():
        p.mul_(2.0)
    fl.sync()
    assert fl.metrics.counters()["donated_buffers"] == before + 1


def test_output_that_cannot_fit_fails_fast_and_process_stays_usable():
    w = fl.ones(3)
    w.numpy()
    w.add_(1)
    t = time.perf_counter()
    huge = fl.zeros(1 << 36) + 1                     # 256 GiB
    with pytest.raises(MemoryError, match="GiB"):
        fl.sync()
    assert time.perf_counter() - t < 30
    np.testing.assert_array_equal(w.numpy(), [1, 1, 1])   # the failed sync committed nothing
    with pytest.raises(MemoryError):
        huge.numpy()
    np.testing.assert_array_equal((w + 1).numpy(), [2, 2, 2])
    del huge


# ---- every index-consuming op against PyTorch: raise vs value ------------------------------
X = np.arange(20, dtype=np.float32).reshape(4, 5)


def _ops():
    """name -> (flowlite fn(x, idx), torch fn(x, idx)); idx is a 1-D int array of length 3
    indexing dim 0 (size 4) unless the op says otherwise."""
    def fl_scatter(x, i, add):
        idx = fl.tensor(np.stack([i, i]).T.astype(np.int64))
        src = fl.ones(3, 2)
        return (fl.scatter_add if add else fl.scatter)(x, 0, idx, src)

    def th_scatter(x, i, add):
        idx = torch.tensor(np.stack([i, i]).T.astype(np.int64))
        src = torch.ones(3, 2)
        return (torch.scatter_add if add else torch.scatter)(x, 0, idx, src)

    def fl_set(x, i):
        x = x.clone()
        x[fl.tensor(i)] = 1.0
        return x

    def th_set(x, i):
        x = x.clone()
        x[torch.tensor(i)] = 1.0
        return x

    g = lambda i: np.stack([i, i]).T.astype(np.int64)    # noqa: E731  (3, 2) for gather
    return {
        "getitem": (lambda x, i: x[fl.tensor(i)], lambda x, i: x[torch.tensor(i)]),
        "getitem_dim1": (lambda x, i: x[:, fl.tensor(i)], lambda x, i: x[:, torch.tensor(i)]),
        "setitem": (fl_set, th_set),
        "index_put_acc": (lambda x, i: x.index_put((fl.tensor(i),), fl.ones(3, 5), True),
                          lambda x, i: x.index_put((torch.tensor(i),), torch.ones(3, 5),
                                                   True)),
        "gather": (lambda x, i: x.gather(0, fl.tensor(g(i))),
                   lambda x, i: x.gather(0, torch.tensor(g(i)))),
        "scatter": (lambda x, i: fl_scatter(x, i, False), lambda x, i: th_scatter(x, i, False)),
        "scatter_add": (lambda x, i: fl_scatter(x, i, True), lambda x, i: th_scatter(x, i, True)),
        "index_select": (lambda x, i: x.index_select(0, fl.tensor(i)),
                         lambda x, i: x.index_select(0, torch.tensor(i))),
        "index_add": (lambda x, i: x.index_add(0, fl.tensor(i), fl.ones(3, 5)),
                      lambda x, i: x.index_add(0, torch.tensor(i), torch.ones(3, 5))),
        "embedding": (lambda x, i: F.embedding(fl.tensor(i), x),
                      lambda x, i: torch.nn.functional.embedding(torch.tensor(i), x)),
        "one_hot": (lambda x, i: F.one_hot(fl.tensor(i), 4),
                    lambda x, i: torch.nn.functional.one_hot(torch.tensor(i), 4)),
        "cross_entropy": (lambda x, i: F.cross_entropy(x[:3, :4], fl.tensor(i)),
                          lambda x, i: torch.nn.functional.cross_entropy(x[:3, :4],
                                                                          torch.tensor(i))),
        "nll_none": (lambda x, i: F.nll_loss(x[:3, :4], fl.tensor(i), reduction="none",
                                             ignore_index=-5),
                     lambda x, i: torch.nn.functional.nll_loss(x[:3, :4], torch.tensor(i),
                                                               reduction="none",
                                                               ignore_index=-5)),
        "floor_divide": (lambda x, i: fl.tensor([7, -7, 5]) // fl.tensor(i),
                         lambda x, i: torch.tensor([7, -7, 5]) // torch.tensor(i)),
        "remainder": (lambda x, i: fl.tensor([7, -7, 5]) % fl.tensor(i),
                      lambda x, i: torch.tensor([7, -7, 5]) % torch.tensor(i)),
    }


OPS = _ops()


@pytest.mark.parametrize("name", sorted(OPS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(idx=st.lists(st.integers(-7, 7), min_size=3, max_size=3))
def test_index_ops_match_pytorch(name, idx):
    fl_fn, th_fn = OPS[name]
    i = np.array(idx, dtype=np.int64)
    want = _raises(lambda: th_fn(torch.tensor(X), i))
    got = _raises(lambda: fl_fn(fl.tensor(X), i))
    assert got[0] == want[0], (name, idx, got, want)
    if want[0] == "value":
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, err_msg=f"{name} {idx}")
    else:
        assert isinstance(got[1], (IndexError, ZeroDivisionError)), got[1]


@settings(max_examples=12, deadline=None)
@given(idx=st.lists(st.integers(-7, 7), min_size=3, max_size=3))
def test_take_along_dim_wraps_negatives_and_raises_past_the_end(idx):
    # PyTorch wraps negative indices; it does not check too-large ones on CPU (reads past
    # the end): flowlite raises for those (a documented, safer difference)
    i = np.array(idx, dtype=np.int64)
    got = _raises(lambda: fl.take_along_dim(fl.tensor(X), fl.tensor(i[:, None]), 0))
    if ((i >= -4) & (i < 4)).all():
        want = torch.take_along_dim(torch.tensor(X), torch.tensor(i[:, None]), 0).numpy()
        np.testing.assert_array_equal(got[1], want)
    else:
        assert got[0] == "raise" and isinstance(got[1], IndexError)
