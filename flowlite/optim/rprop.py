"""Rprop (resilient backpropagation) — PyTorch's algorithm.

    g <- -g if maximize;  s = sign(g * prev)
    step_size <- clamp(step_size * (etaplus if s > 0, etaminus if s < 0, else 1), min, max)
                 (step_size = lr before the first step)
    g <- 0 where s < 0;   p <- p - sign(g) * step_size;   prev <- g

optax: transforms.rprop (optax's rprop differs in the first step and the masking).
PyTorch state names: step, prev, step_size.
"""
from __future__ import annotations

from . import _checks as C
from .optimizer import Optimizer
from .transforms import rprop


def _rprop(learning_rate, etaminus, etaplus, step_size_min, step_size_max):
    return rprop(learning_rate, etaminus, etaplus, step_size_min, step_size_max)


class Rprop(Optimizer):
    _torch_state_names = {"prev": "prev", "step_size": "step_size"}

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        defaults = dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _validate(self, group):
        C.check_lr(group)
        etaminus, etaplus = C.check_pair(group, "etas", "eta values")
        if not 0.0 < etaminus < 1.0 < etaplus:
            raise ValueError(f"Invalid eta values: {etaminus}, {etaplus}")
        C.check_pair(group, "step_sizes", "step sizes")
        C.check_differentiable(group, "Rprop")

    def _transform(self, group):
        etaminus, etaplus = C.check_pair(group, "etas", "eta values")
        lo, hi = C.check_pair(group, "step_sizes", "step sizes")
        hyper = dict(learning_rate=float(C._num(group["lr"])), etaminus=etaminus,
                     etaplus=etaplus, step_size_min=lo, step_size_max=hi)
        return _rprop, hyper, {}
