"""RAdam — PyTorch's algorithm (Liu et al. 2019), with optional decoupled weight decay.

    g <- -g if maximize;  g <- g + weight_decay * p   (or p <- p (1 - lr wd) if decoupled)
    m_t = b1 m + (1-b1) g,  v_t = b2 v + (1-b2) g^2,  m_hat = m_t / (1 - b1^t)
    rho_inf = 2/(1-b2) - 1,  rho_t = rho_inf - 2 t b2^t / (1 - b2^t)
    rho_t > 5:  p <- p - lr * m_hat * r_t * sqrt(1 - b2^t) / (sqrt(v_t) + eps)
    else:       p <- p - lr * m_hat

optax: add_decayed_weights -> transforms.scale_by_radam (PyTorch's eps placement and
threshold; optax's scale_by_radam differs in both) -> [add_decayed_weights] ->
scale_by_learning_rate.  PyTorch state names: exp_avg, exp_avg_sq, step.
"""
from __future__ import annotations

import math

from .adam import adam_family_hyper, check_adam_family, with_weight_decay
from . import _checks as C
from .optimizer import Optimizer
from .transforms import scale_by_radam


def _radam(learning_rate, b1, b2, eps, weight_decay, log_b1, log_b2, rho_inf, *, decoupled):
    return with_weight_decay(scale_by_radam(b1, b2, eps, log_b1, log_b2, rho_inf),
                             learning_rate, weight_decay, decoupled)


def _log(b):
    return math.log(b) if b > 0 else -1e30     # b = 0: b^t = 0 for every t >= 1


class RAdam(Optimizer):
    _torch_state_names = {"mu": "exp_avg", "nu": "exp_avg_sq"}

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _validate(self, group):
        check_adam_family(group)
        C.check_differentiable(group, "RAdam")

    def _transform(self, group):
        hyper = adam_family_hyper(group)
        # step-dependent scalars need 1 - b^t to full precision: logs and rho_inf computed
        # here in double, then passed as (float32) data like every hyper-parameter
        hyper["log_b1"] = _log(hyper["b1"])
        hyper["log_b2"] = _log(hyper["b2"])
        hyper["rho_inf"] = 2.0 / (1.0 - hyper["b2"]) - 1.0
        return _radam, hyper, dict(decoupled=bool(group["decoupled_weight_decay"]))
