"""Adadelta — PyTorch's algorithm (Zeiler 2012, with a learning rate).

    g <- -g if maximize;  g <- g + weight_decay * p
    v_t = rho v + (1-rho) g^2
    d = sqrt(u + eps) / sqrt(v_t + eps) * g;   u_t = rho u + (1-rho) d^2
    p <- p - lr * d

optax: add_decayed_weights -> scale_by_adadelta (the same recurrences) -> scale_by_learning_rate.
PyTorch state names: square_avg (v), acc_delta (u), step.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .optimizer import Optimizer


def _adadelta(learning_rate, rho, eps, weight_decay):
    return optax.chain(optax.add_decayed_weights(weight_decay),
                       optax.scale_by_adadelta(rho=rho, eps=eps),
                       optax.scale_by_learning_rate(learning_rate))


class Adadelta(Optimizer):
    _torch_state_names = {"e_g": "square_avg", "e_x": "acc_delta"}

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        rho = C._num(group["rho"])
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        C.check_eps(group)
        C.check_nonneg(group, "weight_decay")
        C.check_differentiable(group, "Adadelta")

    def _transform(self, group):
        hyper = C.hyper(group, "rho", "eps", "weight_decay")
        hyper["learning_rate"] = float(C._num(group["lr"]))
        return _adadelta, hyper, {}
