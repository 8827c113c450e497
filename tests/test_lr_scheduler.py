"""flowlite.optim.lr_scheduler: PyTorch's learning-rate sequences, and no recompiles.

Each scheduler's sequence (get_last_lr() after construction and after every step()) is compared
with the closed form or recurrence from PyTorch's documentation, written out below.  An extra
test compares every sequence with torch.optim.lr_scheduler float for float (torch is a required
test-only dependency).
"""
from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite import metrics, optim
from flowlite.optim import lr_scheduler as S

N = 25


def make_opt(kind="SGD", lrs=(0.1, 0.05), **kw):
    ps = [fl.tensor(np.ones(2, np.float32), requires_grad=True) for _ in lrs]
    groups = [{"params": [p], "lr": lr} for p, lr in zip(ps, lrs)]
    return getattr(optim, kind)(groups, **kw)


def run(sched, n=N, opt=None):
    """Learning rates (one list per group) at epochs 0..n-1."""
    seq = [sched.get_last_lr()]
    for _ in range(n - 1):
        sched.step()
        seq.append(sched.get_last_lr())
    if opt is not None:
        assert [g["lr"] for g in opt.param_groups] == seq[-1]
    return np.array(seq, dtype=np.float64)


def closed(fn, bases=(0.1, 0.05), n=N):
    return np.array([[fn(b, e) for b in bases] for e in range(n)], dtype=np.float64)


def check(sched, opt, fn, n=N, rtol=1e-12):
    np.testing.assert_allclose(run(sched, n, opt), closed(fn, n=n), rtol=rtol, atol=1e-15)


# ---- the documented sequences -----------------------------------------------------------------
def test_lambda_lr():
    opt = make_opt()
    f = lambda e: 0.9 ** e + 0.01 * e  # noqa: E731
    check(S.LambdaLR(opt, f), opt, lambda b, e: b * f(e))
    assert all("initial_lr" in g for g in opt.param_groups)


def test_lambda_lr_per_group_and_wrong_count():
    opt = make_opt()
    s = S.LambdaLR(opt, [lambda e: 1.0 / (e + 1), lambda e: 2.0 ** -e])
    seq = run(s, 5)
    np.testing.assert_allclose(seq[:, 0], [0.1 / (e + 1) for e in range(5)])
    np.testing.assert_allclose(seq[:, 1], [0.05 * 2.0 ** -e for e in range(5)])
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        S.LambdaLR(make_opt(), [lambda e: 1.0])


def test_multiplicative_lr():
    opt = make_opt()
    f = lambda e: 0.95 if e % 2 else 0.9  # noqa: E731
    check(S.MultiplicativeLR(opt, f), opt,
          lambda b, e: b * math.prod(f(k) for k in range(1, e + 1)), rtol=1e-12)


def test_step_lr():
    opt = make_opt()
    check(S.StepLR(opt, step_size=4, gamma=0.5), opt, lambda b, e: b * 0.5 ** (e // 4))


def test_multistep_lr():
    opt = make_opt()
    ms = [3, 7, 7, 12]   # a repeated milestone decays twice
    check(S.MultiStepLR(opt, milestones=ms, gamma=0.3), opt,
          lambda b, e: b * 0.3 ** bisect_right(ms, e))


def test_exponential_lr():
    opt = make_opt()
    check(S.ExponentialLR(opt, gamma=0.9), opt, lambda b, e: b * 0.9 ** e, rtol=1e-12)


@pytest.mark.parametrize("eta_min", [0.0, 0.002])
def test_cosine_annealing_lr(eta_min):
    # PyTorch computes this recursively; the sequence is the closed form, including past
    # T_max where the cosine rises again
    opt = make_opt()
    T = 7
    check(S.CosineAnnealingLR(opt, T_max=T, eta_min=eta_min), opt,
          lambda b, e: eta_min + (b - eta_min) * (1 + math.cos(math.pi * e / T)) / 2,
          rtol=1e-9)


def test_cosine_annealing_lr_reaches_exactly_eta_min():
    opt = make_opt(lrs=(0.1,))
    s = S.CosineAnnealingLR(opt, T_max=4)
    assert run(s, 5)[-1, 0] == pytest.approx(0.0, abs=1e-18)


@pytest.mark.parametrize("T_0,T_mult", [(5, 1), (3, 2)])
def test_cosine_annealing_warm_restarts(T_0, T_mult):
    opt = make_opt()
    eta_min = 0.01

    def lr(b, e):
        T_i, T_cur = T_0, e
        while T_cur >= T_i:
            T_cur -= T_i
            T_i *= T_mult
        return eta_min + (b - eta_min) * (1 + math.cos(math.pi * T_cur / T_i)) / 2
    check(S.CosineAnnealingWarmRestarts(opt, T_0=T_0, T_mult=T_mult, eta_min=eta_min), opt, lr)


def test_cosine_annealing_warm_restarts_fractional_epochs():
    opt = make_opt(lrs=(1.0,))
    s = S.CosineAnnealingWarmRestarts(opt, T_0=2)
    s.step(0.5)
    assert s.get_last_lr()[0] == pytest.approx((1 + math.cos(math.pi * 0.25)) / 2)
    s.step(2.5)
    assert s.get_last_lr()[0] == pytest.approx((1 + math.cos(math.pi * 0.25)) / 2)
    with pytest.raises(ValueError, match="T_0"):
        S.CosineAnnealingWarmRestarts(opt, T_0=0)


def test_linear_lr():
    opt = make_opt()
    s0, s1, T = 0.25, 0.9, 6
    check(S.LinearLR(opt, start_factor=s0, end_factor=s1, total_iters=T), opt,
          lambda b, e: b * (s0 + (s1 - s0) * min(e, T) / T), rtol=1e-12)
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        S.LinearLR(make_opt(), start_factor=0.0)


def test_constant_lr():
    opt = make_opt()
    check(S.ConstantLR(opt, factor=0.5, total_iters=4), opt,
          lambda b, e: b * (0.5 if e < 4 else 1.0))
    with pytest.raises(ValueError, match="between 0 and 1"):
        S.ConstantLR(make_opt(), factor=1.5)


def test_polynomial_lr():
    opt = make_opt()
    check(S.PolynomialLR(opt, total_iters=6, power=2.0), opt,
          lambda b, e: b * (1 - min(e, 6) / 6) ** 2, rtol=1e-12)


def _one_cycle_ref(total, max_lr, pct, div, final_div, three_phase, strategy, mmax, mbase):
    if strategy == "cos":
        anneal = lambda a, b, p: b + (a - b) / 2 * (math.cos(math.pi * p) + 1)  # noqa: E731
    else:
        anneal = lambda a, b, p: (b - a) * p + a  # noqa: E731
    init = max_lr / div
    low = init / final_div
    up = pct * total - 1
    if three_phase:
        phases = [(up, init, max_lr, mmax, mbase), (2 * pct * total - 2, max_lr, init, mbase, mmax),
                  (total - 1, init, low, mmax, mmax)]
    else:
        phases = [(up, init, max_lr, mmax, mbase), (total - 1, max_lr, low, mbase, mmax)]
    lrs, moms = [], []
    for e in range(total):
        start = 0.0
        for i, (end, a, b, ma, mb) in enumerate(phases):
            if e <= end or i == len(phases) - 1:
                p = (e - start) / (end - start)
                lrs.append(anneal(a, b, p))
                moms.append(anneal(ma, mb, p))
                break
            start = end
    return lrs, moms


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
@pytest.mark.parametrize("strategy,three_phase", [("cos", False), ("linear", True)])
def test_one_cycle_lr(kind, strategy, three_phase):
    total = 20
    opt = make_opt(kind, lrs=(0.1,), **({"momentum": 0.9} if kind == "SGD" else {}))
    s = S.OneCycleLR(opt, max_lr=1.0, total_steps=total, pct_start=0.3,
                     anneal_strategy=strategy, three_phase=three_phase, div_factor=10.0,
                     final_div_factor=100.0)
    lrs, moms = [], []
    for e in range(total):
        if e:
            s.step()
        g = opt.param_groups[0]
        lrs.append(s.get_last_lr()[0])
        moms.append(g["momentum"] if kind == "SGD" else g["betas"][0])
        if kind == "Adam":
            assert g["betas"][1] == 0.999
    want_lr, want_m = _one_cycle_ref(total, 1.0, 0.3, 10.0, 100.0, three_phase, strategy,
                                     0.95, 0.85)
    np.testing.assert_allclose(lrs, want_lr, rtol=1e-12)
    np.testing.assert_allclose(moms, want_m, rtol=1e-12)
    assert lrs[0] == pytest.approx(0.1) and lrs[-1] == pytest.approx(0.001)
    with pytest.raises(ValueError, match="Tried to step 21 times"):
        s.step()
        s.step()


def test_one_cycle_lr_arguments():
    with pytest.raises(ValueError, match="total_steps OR"):
        S.OneCycleLR(make_opt(), max_lr=1.0)
    with pytest.raises(ValueError, match="momentum or beta1"):
        S.OneCycleLR(make_opt("Adagrad"), max_lr=1.0, total_steps=10)
    s = S.OneCycleLR(make_opt("Adagrad"), max_lr=[1.0, 2.0], epochs=2, steps_per_epoch=5,
                     cycle_momentum=False)
    assert s.total_steps == 10 and s.get_last_lr() == pytest.approx([0.04, 0.08])


def test_sequential_lr():
    opt = make_opt()
    warm = S.LinearLR(opt, start_factor=0.1, total_iters=4)
    decay = S.ExponentialLR(opt, gamma=0.8)
    s = S.SequentialLR(opt, [warm, decay], milestones=[5])
    check(s, opt, lambda b, e: b * (0.1 + 0.9 * min(e, 4) / 4) if e < 5 else b * 0.8 ** (e - 5),
          rtol=1e-12)
    with pytest.raises(ValueError, match="one more than the number of milestone"):
        S.SequentialLR(opt, [warm, decay], milestones=[2, 3])


def test_chained_scheduler():
    opt = make_opt()
    s = S.ChainedScheduler([S.ExponentialLR(opt, gamma=0.9), S.StepLR(opt, 3, gamma=0.5)])
    check(s, opt, lambda b, e: b * 0.9 ** e * 0.5 ** (e // 3), rtol=1e-12)


def test_reduce_lr_on_plateau_min_rel():
    opt = make_opt(lrs=(1.0,))
    s = S.ReduceLROnPlateau(opt, factor=0.5, patience=2)
    # best improves (rel. threshold 1e-4) at 1.0, 0.9; then 3 bad epochs > patience -> halve
    metrics_ = [1.0, 0.9, 0.9, 0.89999, 0.95, 0.95, 0.95, 0.95, 0.5, 0.5]
    want = [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]
    got = []
    for m in metrics_:
        s.step(m)
        got.append(s.get_last_lr()[0])
    assert got == want


def test_reduce_lr_on_plateau_max_abs_cooldown_min_lr():
    opt = make_opt(lrs=(1.0,))
    s = S.ReduceLROnPlateau(opt, mode="max", factor=0.1, patience=0, threshold=0.5,
                            threshold_mode="abs", cooldown=1, min_lr=0.005)
    got = []
    for m in [1.0, 1.2, 2.0, 2.1, 2.2, 2.3, 9.0, 9.0]:
        s.step(m)
        got.append(s.get_last_lr()[0])
    # 1.0 best; 1.2 not > 1.5 -> reduce (0.1), cooldown 1; 2.0 > 1.5 best; 2.1 bad -> 0.01,
    # cooldown; 2.2 in cooldown; 2.3 bad -> max(0.001, min_lr) = 0.005; 9.0 best; 9.0 in cooldown
    np.testing.assert_allclose(got, [1.0, 0.1, 0.1, 0.01, 0.01, 0.005, 0.005, 0.005])
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        S.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode sideways is unknown"):
        S.ReduceLROnPlateau(opt, mode="sideways")


def test_not_an_optimizer():
    with pytest.raises(TypeError, match="is not an Optimizer"):
        S.StepLR(object(), 3)


def test_resume_requires_initial_lr():
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(make_opt(), 3, last_epoch=4)


# ---- schedules never recompile ------------------------------------------------------------------
def _step(opt, w, x):
    opt.zero_grad()
    loss = ((w * x - 1.0) ** 2).sum()
    loss.backward()
    opt.step()
    return loss.item()


@pytest.mark.parametrize("kind,make_sched", [
    ("SGD", lambda o: S.CosineAnnealingLR(o, T_max=4)),          # reaches lr == 0.0 exactly
    ("Adam", lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=12)),   # lr and beta1 change
    ("SGD", lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=12)),    # momentum 0 -> 0.95
    ("AdamW", lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.2, total_iters=3),
                                           S.ExponentialLR(o, 0.7)], [3])),
])
def test_schedules_do_not_recompile(kind, make_sched):
    w = fl.tensor(np.array([0.5, -0.3, 0.2], np.float32), requires_grad=True)
    x = fl.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    opt = getattr(optim, kind)([w], lr=0.1)
    sched = make_sched(opt)
    for _ in range(2):          # the steady-state graph exists after the first step
        _step(opt, w, x)
        sched.step()
    c0 = metrics.counters()
    seen = set()
    for _ in range(8):
        _step(opt, w, x)
        sched.step()
        seen.add(opt.param_groups[0]["lr"])
    c1 = metrics.counters()
    assert len(seen) >= 4
    assert c1["compiles"] == c0["compiles"]
    assert c1["executions"] - c0["executions"] == 8


def test_scheduled_lr_reaches_the_update():
    # SGD without momentum: the parameter moves by exactly -lr_t * grad_t each step
    w = fl.tensor(np.array([2.0], np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.5)
    sched = S.StepLR(opt, step_size=1, gamma=0.5)
    want = 2.0
    for t in range(5):
        lr = opt.param_groups[0]["lr"]
        opt.zero_grad()
        (w * w).sum().backward()     # grad = 2w
        opt.step()
        sched.step()
        want = want - lr * 2 * want
        assert w.item() == pytest.approx(want, rel=1e-6)


# ---- checkpoints ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make_sched,metric", [
    (lambda o: S.MultiStepLR(o, [2, 4, 4, 9], gamma=0.5), None),
    (lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=20, three_phase=True), None),
    (lambda o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2), None),
    (lambda o: S.SequentialLR(o, [S.ConstantLR(o, 0.5, 2), S.CosineAnnealingLR(o, 6)], [3]),
     None),
    (lambda o: S.ReduceLROnPlateau(o, patience=1, cooldown=1), True),
])
def test_state_dict_round_trip(tmp_path, make_sched, metric):
    vals = [1.0, 0.9, 0.95, 0.97, 0.99, 0.8, 0.85, 0.9, 0.91, 0.92, 0.93, 0.7]

    def advance(s, i0, n):
        out = []
        for i in range(i0, i0 + n):
            s.step(vals[i]) if metric else s.step()
            out.append(s.get_last_lr())
        return out

    opt = make_opt("SGD", momentum=0.9)
    s = make_sched(opt)
    advance(s, 0, 5)
    fl.save({"optimizer": opt.state_dict(), "scheduler": s.state_dict()}, tmp_path / "s.fl")
    want = advance(s, 5, 6)

    ck = fl.load(tmp_path / "s.fl")
    opt2 = make_opt("SGD", momentum=0.9)
    s2 = make_sched(opt2)
    opt2.load_state_dict(ck["optimizer"])
    s2.load_state_dict(ck["scheduler"])
    assert advance(s2, 5, 6) == want


# ---- the same sequences as PyTorch, float for float ----------------------------------------------
@pytest.mark.filterwarnings("ignore::UserWarning")   # torch: "lr_scheduler.step() before ..."
def test_cross_check_with_torch():
    T = torch.optim.lr_scheduler
    cases = {
        "LambdaLR": lambda L, o: L.LambdaLR(o, lambda e: 0.9 ** e + 0.01 * e),
        "MultiplicativeLR": lambda L, o: L.MultiplicativeLR(o, lambda e: 0.95),
        "StepLR": lambda L, o: L.StepLR(o, step_size=3, gamma=0.5),
        "MultiStepLR": lambda L, o: L.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3),
        "ExponentialLR": lambda L, o: L.ExponentialLR(o, gamma=0.9),
        "CosineAnnealingLR": lambda L, o: L.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
        "CosineAnnealingWarmRestarts": lambda L, o: L.CosineAnnealingWarmRestarts(
            o, T_0=3, T_mult=2, eta_min=0.01),
        "LinearLR": lambda L, o: L.LinearLR(o, start_factor=0.25, end_factor=0.9,
                                            total_iters=6),
        "ConstantLR": lambda L, o: L.ConstantLR(o, factor=0.5, total_iters=4),
        "PolynomialLR": lambda L, o: L.PolynomialLR(o, total_iters=6, power=2.0),
        "OneCycleLR": lambda L, o: L.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=N),
        "OneCycleLR3": lambda L, o: L.OneCycleLR(o, max_lr=1.0, total_steps=N,
                                                 anneal_strategy="linear", three_phase=True),
        "SequentialLR": lambda L, o: L.SequentialLR(
            o, [L.LinearLR(o, start_factor=0.1, total_iters=4), L.CosineAnnealingLR(o, 10)],
            milestones=[4]),
    }
    for name, mk in cases.items():
        for kind in (["SGD", "Adam"] if name.startswith("OneCycle") else ["SGD"]):
            opt = make_opt(kind, **({"momentum": 0.9} if kind == "SGD" else {}))
            tps = [torch.zeros(2, requires_grad=True) for _ in range(2)]
            topt = getattr(torch.optim, kind)(
                [{"params": [tps[0]], "lr": 0.1}, {"params": [tps[1]], "lr": 0.05}],
                **({"momentum": 0.9} if kind == "SGD" else {}))
            a, b = mk(S, opt), mk(T, topt)
            for e in range(N):
                if e:
                    a.step()
                    b.step()
                assert a.get_last_lr() == b.get_last_lr(), (name, kind, e)
                key = "momentum" if kind == "SGD" else "betas"
                assert opt.param_groups[0][key] == topt.param_groups[0][key], (name, e)
    for kw in [dict(patience=3), dict(mode="max", factor=0.5, patience=2, threshold=0.1,
                                      threshold_mode="abs", cooldown=2, min_lr=0.01)]:
        opt = make_opt()
        topt = torch.optim.SGD([{"params": [torch.zeros(1)], "lr": 0.1},
                                {"params": [torch.zeros(1)], "lr": 0.05}])
        a, b = S.ReduceLROnPlateau(opt, **kw), T.ReduceLROnPlateau(topt, **kw)
        for m in [1, .9, .95, .95, .95, .95, .8, .8, .8, .8, .8, .8, .8, .8, 2, 2, 2, 2, 2, 2]:
            a.step(m)
            b.step(m)
            assert a.get_last_lr() == b.get_last_lr()

