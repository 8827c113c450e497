"""Losses (modules and functionals): values and input gradients against jax.numpy
transcriptions of PyTorch's documented formulas, every reduction, in float64."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
import flowlite.nn as nn
import flowlite.nn.functional as F
from _nn_helpers import Case, check_many

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")
R = np.random.default_rng(3)


def _reduce(loss, reduction, denom=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / denom if denom is not None else loss.mean()


def ref_nll(logp, t, w=None, ignore=-100, reduction="mean"):
    """PyTorch's NLLLoss: l_n = -w[t_n] * logp[n, t_n], ignored targets contribute 0;
    'mean' divides by the summed weights of the non-ignored targets."""
    keep = t != ignore
    ts = np.where(keep, t, 0)
    picked = jnp.take_along_axis(logp, ts[:, None], 1)[:, 0]
    wt = (np.ones(logp.shape[1]) if w is None else w)[ts] * keep
    return _reduce(-picked * wt, reduction, wt.sum())


def _to_2d(x, t):
    """(N, C, d1, ...) -> (N*d..., C) and targets to match."""
    c = x.shape[1]
    return jnp.moveaxis(x, 1, -1).reshape(-1, c), np.asarray(t).reshape(-1)


def ref_cross_entropy(x, t, w=None, ignore=-100, reduction="mean", ls=0.0):
    shape = np.shape(t)
    x2, t2 = _to_2d(x, t)
    c = x2.shape[1]
    logp = jax.nn.log_softmax(x2, 1)
    nll = ref_nll(logp, t2, w, ignore, "none" if reduction == "none" else "sum")
    keep = t2 != ignore
    ww = np.ones(c) if w is None else w
    denom = (ww[np.where(keep, t2, 0)] * keep).sum()
    smooth = -(logp * ww).sum(1) * keep
    if reduction == "mean":
        nll, smooth = nll / denom, smooth.sum() / denom
    elif reduction == "sum":
        smooth = smooth.sum()
    out = (1 - ls) * nll + ls / c * smooth
    return out.reshape(shape) if reduction == "none" else out


def ref_cross_entropy_probs(x, p, w=None, reduction="mean", ls=0.0):
    c = x.shape[1]
    p = p * (1 - ls) + ls / c
    ww = np.ones(c) if w is None else w
    loss = -(jax.nn.log_softmax(x, 1) * p * ww.reshape((c,) + (1,) * (x.ndim - 2))).sum(1)
    return _reduce(loss, reduction, x.size // c)


def loss_case(module, ref, x, target, label, grad_target=False):
    """A module-form loss: input differentiated; target constant unless grad_target."""
    if grad_target:
        return Case(module, lambda p, x, t: ref(x, t), (x, target), label=label)
    return Case(module, lambda p, x: ref(x, target), (x,),
                call=lambda m, x: m(x, fl.from_numpy(np.array(target))), label=label)


def test_cross_entropy_and_nll(x64):
    x = R.standard_normal((6, 5))
    t = np.array([0, 4, -100, 2, 2, 1])
    w = R.uniform(0.5, 2.0, 5)
    x4 = R.standard_normal((2, 5, 3, 2))
    t4 = R.integers(0, 5, (2, 3, 2))
    t4[0, 1, 1] = 3
    probs = R.dirichlet(np.ones(5), 6)
    probs4 = np.moveaxis(R.dirichlet(np.ones(5), (2, 3, 2)), -1, 1)
    wt = fl.from_numpy(w)
    cases = []
    for red in ("mean", "sum", "none"):
        cases.append(loss_case(nn.CrossEntropyLoss(reduction=red),
                               lambda x, t, red=red: ref_cross_entropy(x, t, reduction=red),
                               x, t, f"ce {red}"))
        cases.append(loss_case(nn.CrossEntropyLoss(weight=wt, reduction=red, label_smoothing=0.2),
                               lambda x, t, red=red: ref_cross_entropy(x, t, w, reduction=red,
                                                                       ls=0.2),
                               x, t, f"ce weight+smoothing {red}"))
        cases.append(loss_case(nn.NLLLoss(weight=wt, reduction=red),
                               lambda x, t, red=red: ref_nll(x, t, w, reduction=red),
                               x, t, f"nll {red}"))
    cases += [
        loss_case(nn.CrossEntropyLoss(weight=wt, ignore_index=3, label_smoothing=0.3),
                  lambda x, t: ref_cross_entropy(x, t, w, ignore=3, ls=0.3), x4, t4,
                  "ce (N,C,d1,d2) ignore_index"),
        loss_case(nn.CrossEntropyLoss(ignore_index=3),
                  lambda x, t: ref_cross_entropy(x, t, ignore=3), x4, t4,
                  "ce (N,C,d1,d2) ignore_index, no weight"),
        loss_case(nn.NLLLoss(reduction="sum", ignore_index=3),
                  lambda x, t: ref_nll(*_to_2d(x, t), ignore=3, reduction="sum"),
                  x4, t4, "nll (N,C,d1,d2) sum ignore_index"),
        loss_case(nn.CrossEntropyLoss(reduction="none", label_smoothing=0.1),
                  lambda x, t: ref_cross_entropy(x, t, reduction="none", ls=0.1), x4, t4,
                  "ce (N,C,d1,d2) none"),
        loss_case(nn.CrossEntropyLoss(), lambda x, t: ref_cross_entropy(x[None], t[None]),
                  x[0], np.array(3), "ce unbatched"),
        loss_case(nn.CrossEntropyLoss(weight=wt, label_smoothing=0.2),
                  lambda x, p: ref_cross_entropy_probs(x, p, w, ls=0.2), x, probs,
                  "ce probabilities", grad_target=True),
        loss_case(nn.CrossEntropyLoss(reduction="none"),
                  lambda x, p: ref_cross_entropy_probs(x, p, reduction="none"), x4, probs4,
                  "ce probabilities (N,C,d1,d2)"),
        loss_case(nn.NLLLoss(ignore_index=1), lambda x, t: ref_nll(x, t, ignore=1),
                  jax.nn.log_softmax(x, 1), np.array([0, 4, 1, 2, 1, 1]), "nll ignore_index"),
    ]
    check_many(cases)


def test_regression_and_binary_losses(x64):
    a, b = R.standard_normal((4, 3)) * 2, R.standard_normal((4, 3))
    p = R.uniform(0.05, 0.95, (4, 3))
    y = R.uniform(0, 1, (4, 3))
    w = R.uniform(0.5, 2, 3)
    pw = R.uniform(0.5, 2, 3)
    logits = R.standard_normal((4, 3)) * 4
    logits[0, 0] = 60.0       # the stable formulation must not overflow

    def smooth_l1(x, t, beta):
        d = jnp.abs(x - t)
        return jnp.where(d < beta, 0.5 * d ** 2 / beta, d - 0.5 * beta)

    def huber(x, t, delta):
        d = jnp.abs(x - t)
        return jnp.where(d < delta, 0.5 * d ** 2, delta * (d - 0.5 * delta))

    def bce(x, t, w=1.0):
        return -w * (t * jnp.log(x) + (1 - t) * jnp.log(1 - x))

    def bce_logits(x, t, w=1.0, pw=1.0):
        return -w * (pw * t * jax.nn.log_sigmoid(x) + (1 - t) * jax.nn.log_sigmoid(-x))

    wt, pwt = fl.from_numpy(w), fl.from_numpy(pw)
    cases = []
    for red in ("mean", "sum", "none"):
        cases += [
            Case(nn.MSELoss(reduction=red), lambda p_, x, t, red=red: _reduce((x - t) ** 2, red),
                 (a, b), label=f"mse {red}"),
            Case(nn.L1Loss(reduction=red), lambda p_, x, t, red=red: _reduce(jnp.abs(x - t), red),
                 (a, b), label=f"l1 {red}"),
            Case(nn.SmoothL1Loss(reduction=red, beta=0.5),
                 lambda p_, x, t, red=red: _reduce(smooth_l1(x, t, 0.5), red), (a, b),
                 label=f"smooth_l1 {red}"),
            Case(nn.HuberLoss(reduction=red, delta=0.7),
                 lambda p_, x, t, red=red: _reduce(huber(x, t, 0.7), red), (a, b),
                 label=f"huber {red}"),
            Case(nn.BCELoss(weight=wt, reduction=red),
                 lambda p_, x, t, red=red: _reduce(bce(x, t, w), red), (p, y),
                 label=f"bce {red}"),
            Case(nn.BCEWithLogitsLoss(weight=wt, pos_weight=pwt, reduction=red),
                 lambda p_, x, t, red=red: _reduce(bce_logits(x, t, w, pw), red), (logits, y),
                 label=f"bce_with_logits {red}"),
        ]
    cases += [
        Case(nn.SmoothL1Loss(beta=0.0), lambda p_, x, t: jnp.abs(x - t).mean(), (a, b),
             label="smooth_l1 beta=0"),
        Case(nn.BCELoss(), lambda p_, x, t: bce(x, t).mean(), (p, y), label="bce"),
        Case(nn.BCEWithLogitsLoss(), lambda p_, x, t: bce_logits(x, t).mean(), (logits, y),
             label="bce_with_logits"),
    ]
    check_many(cases)


def test_kl_div(x64):
    logp = np.log(R.dirichlet(np.ones(3), 4))
    q = R.dirichlet(np.ones(3), 4)
    q[0, 1] = 0.0                     # 0 * log 0 = 0
    logq = np.log(R.dirichlet(np.ones(3), 4))

    def kl(x, t, log_target=False):
        if log_target:
            return jnp.exp(t) * (t - x)
        return jnp.where(t > 0, t * jnp.log(jnp.where(t > 0, t, 1.0)), 0.0) - t * x
    cases = []
    for red in ("batchmean", "mean", "sum", "none"):
        div = {"batchmean": 4, "mean": 12}.get(red)
        cases.append(Case(nn.KLDivLoss(reduction=red),
                          lambda p_, x, red=red, div=div: (kl(x, q).sum() / div if div else
                                                           _reduce(kl(x, q), red)),
                          (logp,), call=lambda m, x: m(x, fl.from_numpy(q)), label=f"kl {red}"))
    cases.append(Case(nn.KLDivLoss(reduction="batchmean", log_target=True),
                      lambda p_, x, t: kl(x, t, True).sum() / 4, (logp, logq),
                      label="kl log_target"))
    check_many(cases)


def test_loss_buffers_reprs_and_errors():
    w = fl.tensor([1.0, 2.0, 3.0])
    ce = nn.CrossEntropyLoss(weight=w)
    assert list(ce.state_dict()) == ["weight"] and repr(ce) == "CrossEntropyLoss()"
    assert list(nn.BCEWithLogitsLoss(pos_weight=w).state_dict()) == ["pos_weight"]
    assert nn.MSELoss(size_average=False).reduction == "sum"
    assert nn.L1Loss(reduce=False).reduction == "none"
    x = fl.zeros(4, 3)
    with pytest.raises(ValueError, match=r"target of shape \(4,\).*\(4, 2\)"):
        F.cross_entropy(x, fl.zeros(4, 2, dtype=fl.int64))
    with pytest.raises(ValueError, match="weight"):
        F.cross_entropy(x, fl.tensor([0, 1, 2, 0]), weight=fl.ones(4))
    with pytest.raises(ValueError, match="same as input size"):
        F.binary_cross_entropy(x, fl.zeros(4, 2))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, fl.tensor([0, 1, 2, 0]), label_smoothing=1.5)
    with pytest.raises(TypeError, match="integer class-index"):
        F.nll_loss(x, fl.zeros(4))


def test_cross_entropy_records_few_ops():
    """The default path is log_softmax + gather + a masked mean (ignore_index=-100)."""
    from flowlite.engine import executor
    x = fl.zeros(8, 10, requires_grad=True)
    t = fl.tensor([1] * 8)
    before = len(executor._pending)
    F.cross_entropy(x, t)
    recorded = len(executor._pending) - before
    assert recorded <= 12, recorded
