"""SGD with momentum, dampening, Nesterov, weight decay and maximize — PyTorch's algorithm.

    g <- -g if maximize;  g <- g + weight_decay * p
    if momentum != 0:  b_1 = g,  b_t = momentum * b_{t-1} + (1 - dampening) * g
                       g <- g + momentum * b_t if nesterov else b_t
    p <- p - lr * g

optax: add_decayed_weights -> [scale_by_dampening -> trace(nesterov)] -> scale_by_learning_rate.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .optimizer import Optimizer
from .transforms import scale_by_dampening


def _sgd(learning_rate, momentum, dampening, weight_decay, *, use_momentum, nesterov):
    parts = [optax.add_decayed_weights(weight_decay)]
    if use_momentum:
        parts += [scale_by_dampening(dampening), optax.trace(decay=momentum, nesterov=nesterov)]
    parts.append(optax.scale_by_learning_rate(learning_rate))
    return optax.chain(*parts)


class SGD(Optimizer):
    _param_state_names = {"trace": "momentum_buffer"}

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        C.check_nonneg(group, "momentum")
        C.check_nonneg(group, "weight_decay")
        if group["nesterov"] and (C._num(group["momentum"]) <= 0
                                  or C._num(group["dampening"]) != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _transform(self, group):
        hyper = C.hyper(group, "momentum", "dampening", "weight_decay")
        hyper["learning_rate"] = float(C._num(group["lr"]))
        static = dict(use_momentum=C._num(group["momentum"]) != 0,
                      nesterov=bool(group["nesterov"]))
        return _sgd, hyper, static
