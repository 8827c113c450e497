"""NAdam with PyTorch's momentum-decay schedule.

    g <- -g if maximize;  g <- g + weight_decay * p   (or p <- p(1 - lr*wd) if decoupled)
    mu_t = b1 (1 - 0.5 * 0.96^(t * momentum_decay))
    p <- p - lr * [(1-mu_t)/(1-prod mu) g + mu_{t+1}/(1-prod mu * mu_{t+1}) m_t]
              / (sqrt(v_t / (1-b2^t)) + eps)

optax: add_decayed_weights -> transforms.scale_by_nadam -> [add_decayed_weights] ->
       scale_by_learning_rate.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .adam import betas_hyper
from .optimizer import Optimizer
from .transforms import scale_by_nadam


def _nadam(learning_rate, b1, b2, eps, weight_decay, momentum_decay, *, decoupled):
    direction = scale_by_nadam(b1, b2, eps, momentum_decay)
    if decoupled:
        parts = [direction, optax.add_decayed_weights(weight_decay)]
    else:
        parts = [optax.add_decayed_weights(weight_decay), direction]
    return optax.chain(*parts, optax.scale_by_learning_rate(learning_rate))


class NAdam(Optimizer):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, maximize=False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        C.check_eps(group)
        C.check_betas(group)
        C.check_nonneg(group, "weight_decay")
        C.check_nonneg(group, "momentum_decay")

    def _transform(self, group):
        hyper = dict(betas_hyper(group),
                     **C.hyper(group, "eps", "weight_decay", "momentum_decay"))
        hyper["learning_rate"] = float(C._num(group["lr"]))
        return _nadam, hyper, dict(decoupled=bool(group["decoupled_weight_decay"]))
