"""flowlite.optim: every optimizer against PyTorch's documented update equations.

The references below are written here in float64 numpy straight from the pseudo-code in
PyTorch's documentation (torch.optim.SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, NAdam) and from
the Lion paper (Chen et al. 2023, Algorithm 2; PyTorch has no Lion).  Each test runs a few
steps of a small regression problem with a matrix, a vector and a 0-d parameter through
flowlite (float32, forward + backward + update in one executable per step) and compares the
whole trajectory.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite import metrics, optim

# Many optimizers step at the same lines of this file (fl_trajectory): the executor's
# "step() at <line> has recompiled N times" advice is expected here; recompiles that matter
# are asserted with flowlite.metrics.
pytestmark = pytest.mark.filterwarnings("ignore:.*has recompiled")

# ---- the problem ------------------------------------------------------------------------------
_R = np.random.default_rng(1234)
X = _R.standard_normal((8, 3))
Y = _R.standard_normal((8, 2))
INIT = [_R.standard_normal((3, 2)), _R.standard_normal((2,)), np.array(0.7)]


def np_grads(ps):
    """d/dp of  mean((X W + b - Y)^2) + (s - 0.5)^2  (float64)."""
    W, b, s = ps
    r = X @ W + b - Y
    n = r.size
    return [2.0 / n * X.T @ r, 2.0 / n * r.sum(0), 2.0 * (s - 0.5)]


def fl_params(init=INIT):
    return [fl.tensor(p.astype(np.float32), requires_grad=True) for p in init]


_XY = []


def xy():
    """The data as flowlite tensors (kept alive: a user's dataset outlives the step)."""
    if not _XY:
        _XY.extend([fl.tensor(X.astype(np.float32)), fl.tensor(Y.astype(np.float32))])
    return _XY


def fl_loss(ps):
    xt, yt = xy()
    W, b, s = ps
    return ((xt @ W + b - yt) ** 2).mean() + (s - 0.5) ** 2


def fl_trajectory(opt, ps, steps, before_step=None):
    out = []
    for i in range(steps):
        if before_step is not None:
            before_step(i)
        opt.zero_grad()
        fl_loss(ps).backward()
        opt.step()
        out.append([p.numpy().astype(np.float64) for p in ps])
    return out


# ---- references: PyTorch's documented algorithms, one function per optimizer -------------------
# Each takes (p, g, state: dict, t: 1-based step, **hyper) for ONE parameter and returns new p.
def ref_sgd(p, g, st, t, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
            nesterov=False, maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        if "b" not in st:
            st["b"] = g.copy()
        else:
            st["b"] = momentum * st["b"] + (1 - dampening) * g
        g = g + momentum * st["b"] if nesterov else st["b"]
    return p - lr * g


def ref_adam(p, g, st, t, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
             amsgrad=False, maximize=False, decoupled=False):
    b1, b2 = betas
    g = -g if maximize else g
    if decoupled:
        p = p * (1 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    m = st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
    v = st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
    m_hat = m / (1 - b1 ** t)
    if amsgrad:
        v = st["vmax"] = np.maximum(st.get("vmax", 0.0), v)
    v_hat = v / (1 - b2 ** t)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps)


def ref_adamw(p, g, st, t, weight_decay=1e-2, **kw):
    return ref_adam(p, g, st, t, weight_decay=weight_decay, decoupled=True, **kw)


def ref_rmsprop(p, g, st, t, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                centered=False, maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    v = st["v"] = alpha * st.get("v", 0.0) + (1 - alpha) * g * g
    if centered:
        ga = st["ga"] = alpha * st.get("ga", 0.0) + (1 - alpha) * g
        v = v - ga * ga
    d = g / (np.sqrt(v) + eps)
    if momentum > 0:
        d = st["b"] = momentum * st.get("b", 0.0) + d
    return p - lr * d


def ref_adagrad(p, g, st, t, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                initial_accumulator_value=0.0, eps=1e-10, maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    clr = lr / (1 + (t - 1) * lr_decay)
    s = st["s"] = st.get("s", initial_accumulator_value) + g * g
    return p - clr * g / (np.sqrt(s) + eps)


def ref_adamax(p, g, st, t, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
               maximize=False):
    b1, b2 = betas
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    m = st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
    u = st["u"] = np.maximum(b2 * st.get("u", 0.0), np.abs(g) + eps)
    return p - lr / (1 - b1 ** t) * m / u


def ref_nadam(p, g, st, t, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
              momentum_decay=4e-3, decoupled_weight_decay=False, maximize=False):
    b1, b2 = betas
    g = -g if maximize else g
    if weight_decay:
        if decoupled_weight_decay:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
    mu = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
    mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
    prod = st["prod"] = st.get("prod", 1.0) * mu
    m = st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
    v = st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
    v_hat = v / (1 - b2 ** t)
    denom = np.sqrt(v_hat) + eps
    return (p - lr * (1 - mu) / (1 - prod) * g / denom
            - lr * mu_next / (1 - prod * mu_next) * m / denom)


def ref_lion(p, g, st, t, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, maximize=False):
    b1, b2 = betas
    g = -g if maximize else g
    m = st.get("m", 0.0)
    c = b1 * m + (1 - b1) * g
    p = p - lr * (np.sign(c) + weight_decay * p)
    st["m"] = b2 * m + (1 - b2) * g
    return p


REFS = {"SGD": ref_sgd, "Adam": ref_adam, "AdamW": ref_adamw, "RMSprop": ref_rmsprop,
        "Adagrad": ref_adagrad, "Adamax": ref_adamax, "NAdam": ref_nadam, "Lion": ref_lion}


def ref_trajectory(name, steps, kw_per_step=None, per_param=None, init=INIT, **kw):
    """`kw_per_step(t)`: extra options at step t (0-based); `per_param[i]`: options of
    parameter i (param groups)."""
    ps = [p.copy() for p in init]
    states = [{} for _ in ps]
    out = []
    for t in range(1, steps + 1):
        k = dict(kw, **(kw_per_step(t - 1) if kw_per_step else {}))
        gs = np_grads(ps)
        ps = [REFS[name](p, g, st, t, **dict(k, **(per_param[i] if per_param else {})))
              for i, (p, g, st) in enumerate(zip(ps, gs, states))]
        out.append([np.asarray(p, np.float64) for p in ps])
    return out


def assert_same_trajectory(got, want, init=INIT, rtol=1e-4, atol=1e-6):
    """Compare displacements from the start, so tiny learning rates are still checked."""
    for t, (g, w) in enumerate(zip(got, want)):
        for i, (a, b, p0) in enumerate(zip(g, w, init)):
            np.testing.assert_allclose(a - p0, b - p0, rtol=rtol, atol=atol,
                                       err_msg=f"step {t + 1}, parameter {i}")


CASES = [
    ("SGD", {}),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01, maximize=True)),
    ("Adam", {}),
    ("Adam", dict(lr=0.05, amsgrad=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.95), eps=1e-3, maximize=True)),
    ("AdamW", {}),
    ("AdamW", dict(lr=0.05, amsgrad=True, weight_decay=0.2)),
    ("RMSprop", {}),
    ("RMSprop", dict(momentum=0.9, centered=True)),
    ("RMSprop", dict(lr=5e-3, alpha=0.9, weight_decay=0.1, centered=True, maximize=True)),
    ("Adagrad", {}),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.3,
                     eps=1e-6)),
    ("Adamax", {}),
    ("Adamax", dict(lr=0.05, betas=(0.8, 0.99), weight_decay=0.1, maximize=True)),
    ("NAdam", {}),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    ("Lion", {}),
    ("Lion", dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1)),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{'-'.join(k) or 'defaults'}"
                                                for n, k in CASES])
def test_trajectory_matches_reference(name, kw):
    ps = fl_params()
    opt = getattr(optim, name)(ps, **kw)
    got = fl_trajectory(opt, ps, 6)
    assert_same_trajectory(got, ref_trajectory(name, 6, **kw))


def test_defaults_are_pytorchs():
    p = [fl.tensor(np.zeros(2, np.float32), requires_grad=True)]
    d = lambda cls, **kw: cls(p, **kw).defaults  # noqa: E731
    assert d(optim.SGD)["lr"] == 1e-3 and d(optim.SGD)["momentum"] == 0
    assert d(optim.Adam)["betas"] == (0.9, 0.999) and d(optim.Adam)["eps"] == 1e-8
    assert d(optim.AdamW)["weight_decay"] == 1e-2
    assert d(optim.RMSprop)["lr"] == 1e-2 and d(optim.RMSprop)["alpha"] == 0.99
    assert d(optim.Adagrad)["eps"] == 1e-10 and d(optim.Adagrad)["lr"] == 1e-2
    assert d(optim.Adamax)["lr"] == 2e-3
    assert d(optim.NAdam)["momentum_decay"] == 4e-3
    assert d(optim.Lion)["betas"] == (0.9, 0.99) and d(optim.Lion)["lr"] == 1e-4


# ---- param groups ------------------------------------------------------------------------------
def test_per_group_hyperparameters():
    ps = fl_params()
    opt = optim.Adam([{"params": ps[:1], "lr": 0.05, "betas": (0.8, 0.9)},
                      {"params": ps[1:], "weight_decay": 0.1, "amsgrad": True}], lr=0.01)
    assert opt.param_groups[1]["lr"] == 0.01 and opt.param_groups[0]["weight_decay"] == 0
    got = fl_trajectory(opt, ps, 5)
    g1 = dict(lr=0.01, weight_decay=0.1, amsgrad=True)
    want = ref_trajectory("Adam", 5, per_param=[dict(lr=0.05, betas=(0.8, 0.9)), g1, g1])
    assert_same_trajectory(got, want)


def test_add_param_group():
    ps = fl_params()
    opt = optim.SGD(ps[:2], lr=0.1, momentum=0.9)
    got = fl_trajectory(opt, ps, 2)           # s has a gradient but is not optimized yet
    opt.add_param_group({"params": [ps[2]], "lr": 0.3, "momentum": 0.5, "nesterov": True})
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["dampening"] == 0
    got += fl_trajectory(opt, ps, 3)
    # reference: W, b stepped 5 times; s fixed for 2 steps, then 3 nesterov steps
    ref = [p.copy() for p in INIT]
    st = [{}, {}, {}]
    want = []
    for t in range(1, 6):
        gs = np_grads(ref)
        ref[0] = ref_sgd(ref[0], gs[0], st[0], t, lr=0.1, momentum=0.9)
        ref[1] = ref_sgd(ref[1], gs[1], st[1], t, lr=0.1, momentum=0.9)
        if t > 2:
            ref[2] = ref_sgd(ref[2], gs[2], st[2], t - 2, lr=0.3, momentum=0.5, nesterov=True)
        want.append([r.copy() for r in ref])
    assert_same_trajectory(got, want)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [ps[0]]})
    with pytest.raises(ValueError, match="Invalid learning rate"):
        opt.add_param_group({"params": [fl.zeros(2, requires_grad=True)], "lr": -1.0})


def test_param_without_grad_is_left_alone():
    ps = fl_params()
    opt = optim.Adam(ps, lr=0.1, weight_decay=0.5)
    W0, s0 = ps[0].numpy().copy(), ps[2].numpy().copy()
    xt, yt = xy()
    for _ in range(2):
        opt.zero_grad()
        ((xt @ ps[0] - yt) ** 2).mean().backward()   # b and s get no gradient
        opt.step()
    assert ps[1].grad is None
    np.testing.assert_array_equal(ps[2].numpy(), s0)
    np.testing.assert_array_equal(ps[1].numpy(), INIT[1].astype(np.float32))
    assert not np.allclose(ps[0].numpy(), W0)


def test_momentum_switched_on_later_creates_the_buffer_then():
    # PyTorch creates SGD's momentum buffer at the first step with momentum != 0
    # (what OneCycleLR does to an SGD built with momentum=0)
    ps = fl_params()
    opt = optim.SGD(ps, lr=0.1)
    got = fl_trajectory(opt, ps, 2)
    opt.param_groups[0]["momentum"] = 0.9
    opt.param_groups[0]["dampening"] = 0.5
    got += fl_trajectory(opt, ps, 3)
    ref = [p.copy() for p in INIT]
    st = [{}, {}, {}]
    want = []
    for t in range(1, 6):
        kw = dict(lr=0.1) if t <= 2 else dict(lr=0.1, momentum=0.9, dampening=0.5)
        ref = [ref_sgd(p, g, s, t, **kw) for p, g, s in zip(ref, np_grads(ref), st)]
        want.append([r.copy() for r in ref])
    assert_same_trajectory(got, want)


# ---- one executable per step, no recompiles, donation -------------------------------------------
def _train_steps(opt, ps, n, before=None):
    for i in range(n):
        if before is not None:
            before(i)
        opt.zero_grad()
        loss = fl_loss(ps)
        loss.backward()
        opt.step()
        loss.item()     # already materialised by the step's sync: no second execution


def test_changing_hyperparameters_never_recompiles():
    ps = fl_params()
    opt = optim.Adam(ps, lr=0.01)
    _train_steps(opt, ps, 2)
    c0 = metrics.counters()
    lrs = [0.0, 1.0, 0.5, 2.0, 1e-3, 0.0]     # 0, 1, 0.5 included: no baked constants
    wds = [0.0, 0.1, 0.0, 1.0, 0.5, 0.0]

    def change(i):
        g = opt.param_groups[0]
        g["lr"] = lrs[i]
        g["weight_decay"] = wds[i]
        g["betas"] = (0.9 - 0.1 * (i % 2), 0.999)
        g["eps"] = 10.0 ** -(i + 3)
    _train_steps(opt, ps, len(lrs), before=change)
    c1 = metrics.counters()
    assert c1["compiles"] == c0["compiles"]
    assert c1["executions"] - c0["executions"] == len(lrs)
    # and the values took effect: compare with the reference under the same schedule
    ps2 = fl_params()
    opt2 = optim.Adam(ps2, lr=0.01)
    fl_trajectory(opt2, ps2, 2)

    def kw_at(t):
        if t < 2:
            return dict(lr=0.01)
        i = t - 2
        return dict(lr=lrs[i], weight_decay=wds[i], betas=(0.9 - 0.1 * (i % 2), 0.999),
                    eps=10.0 ** -(i + 3))
    want = ref_trajectory("Adam", 2 + len(lrs), kw_per_step=kw_at)[-1]
    for a, b, p0 in zip(ps, want, INIT):
        np.testing.assert_allclose(a.numpy() - p0, b - p0, rtol=1e-4, atol=1e-5)


def test_one_execution_per_step_and_buffers_donated():
    ps = fl_params()
    opt = optim.AdamW([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.1}], amsgrad=True)
    _train_steps(opt, ps, 2)
    n_state = sum(len(s) for s in opt._opt_state)
    c0 = metrics.counters()
    _train_steps(opt, ps, 4)
    c1 = metrics.counters()
    assert c1["compiles"] == c0["compiles"]
    assert c1["executions"] - c0["executions"] == 4
    # the old parameter and optimizer-state buffers of every step went to the executable
    assert c1["donated_buffers"] - c0["donated_buffers"] >= 4 * (len(ps) + n_state)


# ---- checkpoints ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9, dampening=0.2)),
                                     ("Adam", dict(lr=0.05, amsgrad=True)),
                                     ("NAdam", dict(lr=0.05))])
def test_state_dict_round_trip_continues_identically(tmp_path, name, kw):
    cls = getattr(optim, name)
    ps = fl_params()
    opt = cls(ps, **kw)
    fl_trajectory(opt, ps, 3)
    path = tmp_path / "ckpt.fl"
    fl.save({"params": [p.detach() for p in ps], "optim": opt.state_dict()}, path)
    want = fl_trajectory(opt, ps, 3)

    ck = fl.load(path)
    ps2 = [fl.tensor(p.numpy(), requires_grad=True) for p in ck["params"]]
    opt2 = cls(ps2, lr=123.0)                        # lr and options come from the state dict
    opt2.load_state_dict(ck["optim"])
    assert opt2.param_groups[0]["lr"] == kw["lr"]
    got = fl_trajectory(opt2, ps2, 3)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_state_dict_saved_with_hyperparameters_in_the_state_still_loads():
    # flowlite's layout used to keep optax.inject_hyperparams' state: leaf0 the count, then
    # one leaf per hyper-parameter (sorted by name), then the transformation's state
    ps = fl_params()
    opt = optim.Adam(ps, lr=0.05, weight_decay=0.1)
    fl_trajectory(opt, ps, 3)
    sd = opt.state_dict()
    entry = sd["state"][0]
    hyper = [0.9, 0.999, 1e-8, 0.05, 0.1]        # b1, b2, eps, learning_rate, weight_decay
    old = {"leaf0": entry["leaf0"]}
    old.update({f"leaf{1 + j}": fl.tensor(v, dtype=fl.float32) for j, v in enumerate(hyper)})
    old.update({f"leaf{j + len(hyper)}": entry[f"leaf{j}"] for j in range(1, len(entry))})
    legacy = dict(sd, state={0: old})
    saved = [p.numpy().copy() for p in ps]
    want = fl_trajectory(opt, ps, 3)
    ps2 = [fl.tensor(v, requires_grad=True) for v in saved]
    opt2 = optim.Adam(ps2)
    opt2.load_state_dict(legacy)
    got = fl_trajectory(opt2, ps2, 3)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_load_state_dict_mismatch_errors():
    ps = fl_params()
    sd = optim.Adam(ps).state_dict()
    with pytest.raises(ValueError, match="parameter groups"):
        optim.Adam([{"params": ps[:1]}, {"params": ps[1:]}]).load_state_dict(sd)
    with pytest.raises(ValueError, match="size"):
        optim.Adam(ps[:2]).load_state_dict(sd)


# ---- argument checks -----------------------------------------------------------------------------
BAD = [
    (optim.SGD, dict(lr=-0.1), "Invalid learning rate: -0.1"),
    (optim.SGD, dict(momentum=-0.5), "Invalid momentum value: -0.5"),
    (optim.SGD, dict(weight_decay=-1.0), "Invalid weight_decay value"),
    (optim.SGD, dict(nesterov=True), "Nesterov momentum requires a momentum"),
    (optim.SGD, dict(nesterov=True, momentum=0.9, dampening=0.1), "zero dampening"),
    (optim.Adam, dict(lr=-1e-3), "Invalid learning rate"),
    (optim.Adam, dict(betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
    (optim.Adam, dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
    (optim.Adam, dict(eps=-1e-8), "Invalid epsilon value"),
    (optim.AdamW, dict(weight_decay=-0.01), "Invalid weight_decay value"),
    (optim.RMSprop, dict(alpha=-0.9), "Invalid alpha value"),
    (optim.RMSprop, dict(momentum=-0.9), "Invalid momentum value"),
    (optim.RMSprop, dict(eps=-1.0), "Invalid epsilon value"),
    (optim.Adagrad, dict(lr_decay=-1.0), "Invalid lr_decay value"),
    (optim.Adagrad, dict(initial_accumulator_value=-1.0),
     "Invalid initial_accumulator_value value"),
    (optim.Adamax, dict(betas=(0.9, 1.5)), "Invalid beta parameter at index 1"),
    (optim.NAdam, dict(momentum_decay=-1.0), "Invalid momentum_decay value"),
    (optim.Lion, dict(betas=(-0.1, 0.99)), "Invalid beta parameter at index 0"),
    (optim.Lion, dict(lr=-1.0), "Invalid learning rate"),
]


@pytest.mark.parametrize("cls,kw,msg", BAD, ids=[f"{c.__name__}-{next(iter(k))}"
                                                 for c, k, _ in BAD])
def test_bad_arguments(cls, kw, msg):
    p = [fl.tensor(np.zeros(2, np.float32), requires_grad=True)]
    with pytest.raises(ValueError, match=msg.replace(".", r"\.").replace("(", r"\(")):
        cls(p, **kw)


def test_bad_params():
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    x = fl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([x * 2], lr=0.1)


# ---- bfloat16 parameters -------------------------------------------------------------------------
def test_bfloat16_params_keep_bfloat16_state_and_float32_hyperparameters():
    # optax would build hyper-parameters in the params' dtype: b2=0.999 -> 1.0 in bfloat16
    w = fl.tensor(np.array([1.0, -2.0, 3.0], np.float32), dtype=fl.bfloat16, requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (w.float() ** 2).sum().backward()
        opt.step()
    assert w.dtype is fl.bfloat16
    assert all(s.dtype in (fl.bfloat16, fl.float32, fl.int32) for s in opt._opt_state[0])
    ref = ref_trajectory_single(np.array([1.0, -2.0, 3.0]), lambda p: 2 * p, 3, lr=0.1)
    np.testing.assert_allclose(w.float().numpy(), ref, rtol=2e-2, atol=2e-2)


def ref_trajectory_single(p, grad, steps, **kw):
    st = {}
    for t in range(1, steps + 1):
        p = ref_adam(p, grad(p), st, t, **kw)
    return p


# ---- gradient accumulation -----------------------------------------------------------------------
def test_gradient_accumulation_matches_the_large_batch():
    from flowlite import nn
    rng = np.random.default_rng(7)
    xb = rng.standard_normal((8, 4)).astype(np.float32)
    yb = rng.standard_normal((8, 3)).astype(np.float32)
    init = {"weight": fl.tensor(rng.standard_normal((3, 4)).astype(np.float32) * 0.5),
            "bias": fl.tensor(rng.standard_normal((3,)).astype(np.float32) * 0.5)}
    mse = nn.MSELoss()
    results = []
    for micro in (1, 2):
        model = nn.Linear(4, 3)
        model.load_state_dict(init)
        opt = optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
        for _ in range(3):
            c0 = metrics.counters()["executions"]
            opt.zero_grad()
            for xs, ys in zip(np.split(xb, micro), np.split(yb, micro)):
                (mse(model(fl.tensor(xs)), fl.tensor(ys)) / micro).backward()
            opt.step()
            assert metrics.counters()["executions"] - c0 == 1   # both micro-batches, one program
        results.append([p.numpy() for p in model.parameters()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ---- cross-check against PyTorch itself (a required test-only dependency) ------------------------
def test_cross_check_with_torch():
    for name, kw in [("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05)),
                     ("Adam", dict(lr=0.05, amsgrad=True, weight_decay=0.1)),
                     ("RMSprop", dict(momentum=0.9, centered=True)),
                     ("NAdam", dict(lr=0.05, weight_decay=0.1, momentum_decay=0.01))]:
        tps = [torch.tensor(p, requires_grad=True) for p in INIT]
        topt = getattr(torch.optim, name)(tps, **kw)
        want = []
        for _ in range(6):
            topt.zero_grad()
            W, b, s = tps
            loss = ((torch.tensor(X) @ W + b - torch.tensor(Y)) ** 2).mean() + (s - 0.5) ** 2
            loss.backward()
            topt.step()
            want.append([p.detach().numpy().copy() for p in tps])
        ps = fl_params()
        got = fl_trajectory(getattr(optim, name)(ps, **kw), ps, 6)
        assert_same_trajectory(got, want)
