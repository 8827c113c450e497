"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").

PyTorch has no Lion; this follows the paper's Algorithm 2 (and the reference
lion-pytorch implementation), with decoupled weight decay:

    g <- -g if maximize
    c = b1 m + (1-b1) g;   p <- p - lr (sign(c) + weight_decay p);   m <- b2 m + (1-b2) g

optax: scale_by_lion -> add_decayed_weights -> scale_by_learning_rate.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .adam import betas_hyper
from .optimizer import Optimizer


def _lion(learning_rate, b1, b2, weight_decay):
    return optax.chain(optax.scale_by_lion(b1, b2),
                       optax.add_decayed_weights(weight_decay),
                       optax.scale_by_learning_rate(learning_rate))


class Lion(Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, *,
                 maximize=False):
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay,
                        maximize=maximize)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        C.check_betas(group)
        C.check_nonneg(group, "weight_decay")

    def _transform(self, group):
        hyper = dict(betas_hyper(group), **C.hyper(group, "weight_decay"))
        hyper["learning_rate"] = float(C._num(group["lr"]))
        return _lion, hyper, {}
