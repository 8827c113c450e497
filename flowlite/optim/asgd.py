"""ASGD (averaged SGD, Polyak & Juditsky 1992) — PyTorch's algorithm.

    g <- -g if maximize;  g <- g + weight_decay * p
    p <- p (1 - lambd eta) - eta g                 (eta = lr at the first step)
    ax <- p if mu == 1 else ax + mu (p - ax)       (the average, PyTorch's state `ax`)
    eta <- lr / (1 + lambd lr t)^alpha,  mu <- 1 / max(1, t - t0)

optax: add_decayed_weights -> transforms.asgd (optax has no ASGD).  PyTorch state names:
step, eta, mu, ax.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .optimizer import Optimizer
from .transforms import asgd


def _asgd(learning_rate, lambd, alpha, t0, weight_decay):
    return optax.chain(optax.add_decayed_weights(weight_decay),
                       asgd(learning_rate, lambd, alpha, t0))


class ASGD(Optimizer):
    _torch_state_names = {"eta": "eta", "mu": "mu", "ax": "ax"}

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        C.check_nonneg(group, "weight_decay")
        C.check_differentiable(group, "ASGD")

    def _transform(self, group):
        hyper = C.hyper(group, "lambd", "alpha", "t0", "weight_decay")
        hyper["learning_rate"] = float(C._num(group["lr"]))
        return _asgd, hyper, {}
