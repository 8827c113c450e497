"""RMSprop (optionally centered, with momentum) — PyTorch's algorithm.

    g <- -g if maximize;  g <- g + weight_decay * p
    v_t = alpha v + (1-alpha) g^2;   centered: a_t = alpha a + (1-alpha) g, v~ = v_t - a_t^2
    d = g / (sqrt(v~) + eps)                      (eps outside the root)
    momentum > 0: b_t = momentum b + d;  p <- p - lr b_t       else p <- p - lr d

optax: add_decayed_weights -> scale_by_rms | scale_by_stddev (eps_in_sqrt=False) ->
       [trace] -> scale_by_learning_rate.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .optimizer import Optimizer


def _rmsprop(learning_rate, alpha, eps, weight_decay, momentum, *, centered, use_momentum):
    scale = optax.scale_by_stddev if centered else optax.scale_by_rms
    parts = [optax.add_decayed_weights(weight_decay),
             scale(decay=alpha, eps=eps, initial_scale=0.0, eps_in_sqrt=False)]
    if use_momentum:
        parts.append(optax.trace(decay=momentum))
    parts.append(optax.scale_by_learning_rate(learning_rate))
    return optax.chain(*parts)


class RMSprop(Optimizer):
    _param_state_names = {"nu": "square_avg", "trace": "momentum_buffer", "mu": "grad_avg"}

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, maximize=False):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered, maximize=maximize)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        C.check_eps(group)
        C.check_nonneg(group, "momentum")
        C.check_nonneg(group, "weight_decay")
        C.check_nonneg(group, "alpha")

    def _transform(self, group):
        hyper = C.hyper(group, "alpha", "eps", "weight_decay", "momentum")
        hyper["learning_rate"] = float(C._num(group["lr"]))
        static = dict(centered=bool(group["centered"]),
                      use_momentum=C._num(group["momentum"]) > 0)
        return _rmsprop, hyper, static
