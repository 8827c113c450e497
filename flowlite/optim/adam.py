"""Adam and AdamW — PyTorch's algorithms (amsgrad as PyTorch defines it).

    g <- -g if maximize;  g <- g + weight_decay * p          (Adam: L2 penalty in the gradient)
    m_t = b1 m + (1-b1) g,   v_t = b2 v + (1-b2) g^2
    p <- p - lr * m_t/(1-b1^t) / (sqrt(v'_t)/sqrt(1-b2^t) + eps),
         v'_t = v_t, or max_{s<=t} v_s with amsgrad
    AdamW: p <- p - lr * weight_decay * p  (decoupled) and no L2 term.

optax: add_decayed_weights -> scale_by_adam | transforms.scale_by_amsgrad ->
       [add_decayed_weights (decoupled)] -> scale_by_learning_rate.
"""
from __future__ import annotations

import optax

from . import _checks as C
from .optimizer import Optimizer
from .transforms import scale_by_amsgrad


def with_weight_decay(direction, learning_rate, weight_decay, decoupled=False):
    """PyTorch's weight decay around an update direction: an L2 term added to the gradient
    before it, or (decoupled, AdamW-style) a decay of the parameters after it."""
    decay = optax.add_decayed_weights(weight_decay)
    parts = [direction, decay] if decoupled else [decay, direction]
    return optax.chain(*parts, optax.scale_by_learning_rate(learning_rate))


def _adam(learning_rate, b1, b2, eps, weight_decay, *, amsgrad, decoupled):
    direction = scale_by_amsgrad(b1, b2, eps) if amsgrad else optax.scale_by_adam(b1, b2, eps)
    return with_weight_decay(direction, learning_rate, weight_decay, decoupled)


def betas_hyper(group):
    b1, b2 = group["betas"]
    return {"b1": float(C._num(b1)), "b2": float(C._num(b2))}


def adam_family_hyper(group, *extra):
    """lr, betas, eps, weight_decay (+ extra names) of an Adam-like group, as floats."""
    hyper = dict(betas_hyper(group), **C.hyper(group, "eps", "weight_decay", *extra))
    hyper["learning_rate"] = float(C._num(group["lr"]))
    return hyper


def check_adam_family(group, *extra_nonneg):
    C.check_lr(group)
    C.check_eps(group)
    C.check_betas(group)
    C.check_nonneg(group, "weight_decay")
    for name in extra_nonneg:
        C.check_nonneg(group, name)


class Adam(Optimizer):
    _param_state_names = {"mu": "exp_avg", "nu": "exp_avg_sq"}

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False, decoupled_weight_decay=False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _validate(self, group):
        check_adam_family(group)

    def _transform(self, group):
        hyper = adam_family_hyper(group)
        static = dict(amsgrad=bool(group["amsgrad"]),
                      decoupled=bool(group.get("decoupled_weight_decay", False)))
        return _adam, hyper, static


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p <- p - lr*wd*p."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, decoupled_weight_decay=True)
