"""Adamax (Adam with the infinity norm) — PyTorch's algorithm.

    g <- -g if maximize;  g <- g + weight_decay * p
    m_t = b1 m + (1-b1) g,   u_t = max(b2 u, |g| + eps)
    p <- p - lr / (1 - b1^t) * m_t / u_t

optax: add_decayed_weights -> scale_by_adamax (same eps placement) -> scale_by_learning_rate.
"""
from __future__ import annotations

import optax

from .adam import adam_family_hyper, check_adam_family, with_weight_decay
from .optimizer import Optimizer


def _adamax(learning_rate, b1, b2, eps, weight_decay):
    return with_weight_decay(optax.scale_by_adamax(b1, b2, eps), learning_rate, weight_decay)


class Adamax(Optimizer):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 maximize=False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        maximize=maximize)
        super().__init__(params, defaults)

    def _validate(self, group):
        check_adam_family(group)

    def _transform(self, group):
        return _adamax, adam_family_hyper(group), {}
