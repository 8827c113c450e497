"""NAdam with PyTorch's momentum-decay schedule.

    g <- -g if maximize;  g <- g + weight_decay * p   (or p <- p(1 - lr*wd) if decoupled)
    mu_t = b1 (1 - 0.5 * 0.96^(t * momentum_decay))
    p <- p - lr * [(1-mu_t)/(1-prod mu) g + mu_{t+1}/(1-prod mu * mu_{t+1}) m_t]
              / (sqrt(v_t / (1-b2^t)) + eps)

optax: add_decayed_weights -> transforms.scale_by_nadam -> [add_decayed_weights] ->
       scale_by_learning_rate.
"""
from __future__ import annotations

from .adam import adam_family_hyper, check_adam_family, with_weight_decay
from .optimizer import Optimizer
from .transforms import scale_by_nadam


def _nadam(learning_rate, b1, b2, eps, weight_decay, momentum_decay, *, decoupled):
    return with_weight_decay(scale_by_nadam(b1, b2, eps, momentum_decay), learning_rate,
                             weight_decay, decoupled)


class NAdam(Optimizer):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, maximize=False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _validate(self, group):
        check_adam_family(group, "momentum_decay")

    def _transform(self, group):
        hyper = adam_family_hyper(group, "momentum_decay")
        return _nadam, hyper, dict(decoupled=bool(group["decoupled_weight_decay"]))
