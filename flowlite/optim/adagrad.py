"""Adagrad — PyTorch's algorithm.

    g <- -g if maximize;  g <- g + weight_decay * p
    s_t = s_{t-1} + g^2   (s_0 = initial_accumulator_value)
    p <- p - lr / (1 + (t-1) lr_decay) * g / (sqrt(s_t) + eps)

optax: add_decayed_weights -> transforms.scale_by_rss (eps outside the root) ->
       scale_by_schedule(1 / (1 + count * lr_decay)) -> scale_by_learning_rate.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .optimizer import Optimizer
from .transforms import scale_by_rss


def _adagrad(learning_rate, lr_decay, weight_decay, eps, *, initial_accumulator_value):
    return optax.chain(
        optax.add_decayed_weights(weight_decay),
        scale_by_rss(initial_accumulator_value, eps),
        optax.scale_by_schedule(lambda count: 1.0 / (1.0 + count * lr_decay)),
        optax.scale_by_learning_rate(learning_rate))


class Adagrad(Optimizer):
    _param_state_names = {"sum_of_squares": "sum"}

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, *, maximize=False):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps,
                        maximize=maximize)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        C.check_nonneg(group, "lr_decay")
        C.check_nonneg(group, "weight_decay")
        C.check_nonneg(group, "initial_accumulator_value")
        C.check_eps(group)

    def _transform(self, group):
        hyper = C.hyper(group, "lr_decay", "weight_decay", "eps")
        hyper["learning_rate"] = float(C._num(group["lr"]))
        static = dict(initial_accumulator_value=float(C._num(group["initial_accumulator_value"])))
        return _adagrad, hyper, static
