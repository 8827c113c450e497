"""optim.Adadelta, RAdam, ASGD, Rprop and LBFGS against torch.optim itself.

The first four run the small regression problem of tests/test_optim.py (a matrix, a vector and
a 0-d parameter) in float32 and follow torch.optim's float64 trajectory; their state dicts have
torch.optim's layout, so state moves across in both directions mid-run.  LBFGS follows
torch.optim.LBFGS's iterates on Rosenbrock (strong Wolfe line search, float64) and on a
least-squares regression (fixed step, float32), with the executables per step counted.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite import metrics, optim

pytestmark = pytest.mark.filterwarnings("ignore:.*has recompiled")

_R = np.random.default_rng(1234)
X = _R.standard_normal((8, 3))
Y = _R.standard_normal((8, 2))
INIT = [_R.standard_normal((3, 2)), _R.standard_normal((2,)), np.array(0.7)]
_XY = []


def _xy():
    if not _XY:
        _XY.extend([fl.tensor(X.astype(np.float32)), fl.tensor(Y.astype(np.float32))])
    return _XY


def _fl_loss(ps):
    xt, yt = _xy()
    W, b, s = ps
    return ((xt @ W + b - yt) ** 2).mean() + (s - 0.5) ** 2


def _torch_loss(ps):
    W, b, s = ps
    return ((torch.tensor(X) @ W + b - torch.tensor(Y)) ** 2).mean() + (s - 0.5) ** 2


def _fl_steps(opt, ps, n):
    out = []
    for _ in range(n):
        opt.zero_grad()
        _fl_loss(ps).backward()
        opt.step()
        out.append([p.numpy().astype(np.float64) for p in ps])
    return out


def _torch_steps(opt, ps, n):
    out = []
    for _ in range(n):
        opt.zero_grad()
        _torch_loss(ps).backward()
        opt.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out


def _same(got, want, start, rtol=2e-5, atol=1e-6):
    """Displacements from the start agree (so small learning rates are still checked)."""
    for t, (g, w) in enumerate(zip(got, want)):
        for i, (a, b, p0) in enumerate(zip(g, w, start)):
            np.testing.assert_allclose(a - p0, b - p0, rtol=rtol, atol=atol,
                                       err_msg=f"step {t + 1}, parameter {i}")


CASES = [
    ("Adadelta", {}),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True)),
    ("RAdam", {}),
    ("RAdam", dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1)),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    ("ASGD", dict(lr=0.05, lambd=0.1, alpha=0.5, t0=3, weight_decay=0.1)),
    ("Rprop", {}),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{'-'.join(k) or 'defaults'}"
                                                for n, k in CASES])
def test_trajectory_matches_torch(name, kw):
    ps = [fl.tensor(p.astype(np.float32), requires_grad=True) for p in INIT]
    tps = [torch.tensor(p, requires_grad=True) for p in INIT]
    # 12 steps: RAdam's rectification starts at step 6 with betas (0.9, 0.999)
    got = _fl_steps(getattr(optim, name)(ps, **kw), ps, 12)
    want = _torch_steps(getattr(torch.optim, name)(tps, **kw), tps, 12)
    _same(got, want, INIT)


@pytest.mark.parametrize("name,kw", [("RAdam", dict(lr=0.05)),
                                     ("ASGD", dict(lr=0.05, lambd=0.1, t0=2)),
                                     ("Rprop", dict(lr=0.05)),
                                     ("Adadelta", dict(lr=0.5))])
def test_state_dict_is_torchs_both_ways(name, kw):
    """3 steps in flowlite, state into torch.optim, 3 more in both; and the reverse."""
    ps = [fl.tensor(p.astype(np.float32), requires_grad=True) for p in INIT]
    opt = getattr(optim, name)(ps, **kw)
    assert opt.state_dict()["state"] == {}               # torch: no state before a step
    _fl_steps(opt, ps, 3)
    sd = opt.state_dict()
    tref = getattr(torch.optim, name)([torch.zeros(1, requires_grad=True)], **kw)
    assert sorted(sd["param_groups"][0]) == sorted(tref.state_dict()["param_groups"][0])
    tps = [torch.tensor(p.numpy().astype(np.float64), requires_grad=True) for p in ps]
    topt = getattr(torch.optim, name)(tps, **kw)
    topt.load_state_dict({"param_groups": sd["param_groups"],
                          "state": {i: {k: torch.tensor(v.numpy().astype(np.float64))
                                        for k, v in e.items()}
                                    for i, e in sd["state"].items()}})
    start = [p.detach().numpy().copy() for p in tps]
    _same(_fl_steps(opt, ps, 3), _torch_steps(topt, tps, 3), start)

    # torch -> flowlite
    tsd = topt.state_dict()
    ps2 = [fl.tensor(p.detach().numpy().astype(np.float32), requires_grad=True) for p in tps]
    opt2 = getattr(optim, name)(ps2, lr=123.0)
    opt2.load_state_dict(tsd)
    assert opt2.param_groups[0]["lr"] == kw["lr"]
    start = [p.detach().numpy().copy() for p in tps]
    _same(_fl_steps(opt2, ps2, 3), _torch_steps(topt, tps, 3), start)


def test_one_executable_per_step_and_lr_changes_never_recompile():
    ps = [fl.tensor(p.astype(np.float32), requires_grad=True) for p in INIT]
    opts = [optim.RAdam(ps[:1], lr=0.05), optim.Rprop(ps[1:2]), optim.ASGD(ps[2:])]
    for _ in range(2):
        for o in opts:
            o.zero_grad()
        _fl_loss(ps).backward()
        for o in opts:
            o.step()
    c0 = metrics.counters()
    for i in range(4):
        for o in opts:
            o.param_groups[0]["lr"] = 0.01 * (i + 1)
            o.zero_grad()
        _fl_loss(ps).backward()
        for o in opts:
            o.step()
    c1 = metrics.counters()
    assert c1["compiles"] == c0["compiles"]
    assert c1["executions"] - c0["executions"] == 4 * len(opts)


def test_update_keys_compare_by_value_and_say_nothing_changed():
    # the update's key (in its attrs) is its transformation, no registry: equal options make
    # equal keys (one program for two optimizers), and a recompile explanation reports no
    # change to the update when only the batch changed and the key was rebuilt (lr set)
    import optax
    a, b = (optim.Adam([fl.zeros(3, requires_grad=True)], lr=lr) for lr in (0.1, 0.2))
    ka, kb = a.update_transform(0)[0], b.update_transform(0)[0]
    assert ka == kb and hash(ka) == hash(kb) and repr(ka) == repr(kb)
    assert ka != optim.Adam([fl.zeros(3, requires_grad=True)], amsgrad=True).update_transform(0)[0]
    tx = optax.sgd(0.1)
    k1, k2 = (optim.Optax([fl.zeros(3, requires_grad=True)], tx).update_transform(0)[0]
              for _ in range(2))
    assert k1 == k2 and k1 != optim.Optax([fl.zeros(3, requires_grad=True)],
                                          optax.sgd(0.1)).update_transform(0)[0]
    w = fl.zeros(4, 3, requires_grad=True)
    opt = optim.Adam([w], lr=1e-3)
    for bs, lr in ((2, 1e-3), (3, 2e-3)):
        opt.param_groups[0]["lr"] = lr
        (fl.ones(bs, 4) @ w).sum().backward()
        opt.step()
        opt.zero_grad()
    last = fl.debug.recompile_explanations()[-1]     # the step at batch 3
    assert "test_optim_more.py" in last and "optax_update" not in last


BAD = [
    (optim.Adadelta, dict(rho=1.5), "Invalid rho value: 1.5"),
    (optim.Adadelta, dict(lr=-1.0), "Invalid learning rate"),
    (optim.RAdam, dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1"),
    (optim.RAdam, dict(differentiable=True), "differentiable=True is not supported"),
    (optim.ASGD, dict(weight_decay=-1.0), "Invalid weight_decay value"),
    (optim.Rprop, dict(etas=(1.5, 1.2)), "Invalid eta values: 1.5, 1.2"),
    (optim.LBFGS, dict(line_search_fn="armijo"), "only 'strong_wolfe'"),
    (optim.LBFGS, dict(lr=-1), "Invalid learning rate"),
]


@pytest.mark.parametrize("cls,kw,msg", BAD, ids=[f"{c.__name__}-{next(iter(k))}"
                                                 for c, k, _ in BAD])
def test_bad_arguments(cls, kw, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(".", r"\.")):
        cls([fl.zeros(2, requires_grad=True)], **kw)


# ---- LBFGS ---------------------------------------------------------------------------------
def _rosenbrock(p):
    return (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2


def _lbfgs_run(lib, loss_fn, p0, steps, **kw):
    if lib == "torch":
        ps = [torch.tensor(p, requires_grad=True) for p in p0]
        opt = torch.optim.LBFGS(ps, **kw)
    else:
        ps = [fl.tensor(p, requires_grad=True) for p in p0]
        opt = optim.LBFGS(ps, **kw)

    def closure():
        opt.zero_grad()
        loss = loss_fn(ps)
        loss.backward()
        return loss
    out, execs = [], []
    for _ in range(steps):
        c0 = metrics.counters()["executions"]
        opt.step(closure)
        execs.append(metrics.counters()["executions"] - c0)
        out.append([np.array(p.detach().numpy() if lib == "torch" else p.numpy(), np.float64)
                    for p in ps])
    return out, opt, execs


def test_lbfgs_strong_wolfe_follows_torch_on_rosenbrock(x64):
    kw = dict(lr=1, line_search_fn="strong_wolfe", history_size=4)
    p0 = [np.array([-1.5, 2.0])]
    got, fopt, _ = _lbfgs_run("fl", lambda ps: _rosenbrock(ps[0]), p0, 3, **kw)
    want, topt, _ = _lbfgs_run("torch", lambda ps: _rosenbrock(ps[0]), p0, 3, **kw)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[-1][0], [1.0, 1.0], atol=1e-4)
    tstate = topt.state[topt.param_groups[0]["params"][0]]
    assert fopt._lbfgs["func_evals"] == tstate["func_evals"]
    assert fopt._lbfgs["n_iter"] == tstate["n_iter"]


def _lsq(lib):
    Xl = torch.tensor(X, dtype=torch.float32) if lib == "torch" else fl.tensor(X, dtype=fl.float32)
    Yl = torch.tensor(Y, dtype=torch.float32) if lib == "torch" else fl.tensor(Y, dtype=fl.float32)
    return lambda ps: ((Xl @ ps[0] + ps[1] - Yl) ** 2).mean() + 0.1 * (ps[0] ** 2).sum()


def test_lbfgs_fixed_step_follows_torch_and_counts_executables():
    kw = dict(lr=0.5, max_iter=6, history_size=3)
    p0 = [INIT[0].astype(np.float32), INIT[1].astype(np.float32)]
    # two steps: near the optimum float32 noise in y·s dominates both libraries' iterates
    c0 = metrics.counters()
    got, fopt, execs = _lbfgs_run("fl", _lsq("fl"), p0, 2, **kw)
    c1 = metrics.counters()
    want, topt, _ = _lbfgs_run("torch", _lsq("torch"), p0, 2, **kw)
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    # max_iter iterations and closure evaluations per step: one executable per evaluation
    # (the convergence tests and the next direction ride along), plus the final update
    tstate = topt.state[topt.param_groups[0]["params"][0]]
    assert fopt._lbfgs["func_evals"] == tstate["func_evals"] == 2 * kw["max_iter"]
    assert execs == [kw["max_iter"] + 1] * 2
    # fixed graph structure while the history fills and wraps: a second run of the same
    # problem compiles nothing
    c2 = metrics.counters()
    _lbfgs_run("fl", _lsq("fl"), p0, 2, **kw)
    assert metrics.counters()["compiles"] == c2["compiles"]
    assert c1["compiles"] > c0["compiles"]


def test_lbfgs_big_closure_compiles_once_and_only_the_direction_has_variants(monkeypatch):
    # a closure with a big graph (time_sequence_prediction: an LSTM over 999 steps) runs apart
    # from the direction: the first iterations' direction variants then recompile only the
    # small direction program (they recompiled the whole closure, ~20 s each)
    from flowlite.optim import lbfgs
    monkeypatch.setattr(lbfgs, "SPLIT_AT", 0)
    kw = dict(lr=0.5, max_iter=6, history_size=3)
    p0 = [INIT[0].astype(np.float32), INIT[1].astype(np.float32)]
    n0 = len(metrics._compile_log)
    got, fopt, execs = _lbfgs_run("fl", _lsq("fl"), p0, 2, **kw)
    want, _, _ = _lbfgs_run("torch", _lsq("torch"), p0, 2, **kw)
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert execs == [2 * kw["max_iter"] + 1] * 2     # closure, then direction; final update
    causes = [e[0] for e in metrics._compile_log[n0:]]
    closure = [c for c in causes if "closure's gradient" in c]
    # two structures (the first evaluation has no update before it; one compiled again for
    # another set of donated buffers), however many direction variants (5 programs held the
    # closure before)
    assert 1 <= len(closure) <= 3, causes
    assert len(causes) - len(closure) >= 3


def test_lbfgs_state_dict_continues_in_torch(x64):
    kw = dict(lr=1, line_search_fn="strong_wolfe", history_size=3, max_iter=4)
    p0 = [np.array([-1.5, 2.0])]
    _, fopt, _ = _lbfgs_run("fl", lambda ps: _rosenbrock(ps[0]), p0, 2, **kw)
    sd = fopt.state_dict()
    st = sd["state"][0]
    assert {"d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss",
            "func_evals", "n_iter"} <= set(st)
    conv = lambda v: torch.tensor(v.numpy()) if isinstance(v, fl.Tensor) else v  # noqa: E731
    tsd = {"param_groups": sd["param_groups"],
           "state": {0: {k: [conv(x) for x in v] if isinstance(v, list) else conv(v)
                         for k, v in st.items()}}}
    tp = torch.tensor(fopt._params[0].numpy(), requires_grad=True)
    topt = torch.optim.LBFGS([tp], **kw)
    topt.load_state_dict(tsd)
    fp = fl.tensor(fopt._params[0].numpy(), requires_grad=True)
    fopt2 = optim.LBFGS([fp], **kw)
    fopt2.load_state_dict(topt.state_dict())
    for opt, p, lib in ((topt, tp, "torch"), (fopt2, fp, "fl")):
        def closure(opt=opt, p=p):
            opt.zero_grad()
            loss = _rosenbrock(p)
            loss.backward()
            return loss
        opt.step(closure)
    np.testing.assert_allclose(fp.numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-8)


def test_lbfgs_errors():
    p = fl.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="doesn't support per-parameter options"):
        optim.LBFGS([{"params": [p]}, {"params": [fl.zeros(1, requires_grad=True)]}])
    with pytest.raises(TypeError, match="needs a closure"):
        optim.LBFGS([p]).step()
