"""Argument checks shared by the optimizers, with PyTorch's messages."""
from __future__ import annotations

from ..extend import Tensor


def _num(v):
    return v.item() if isinstance(v, Tensor) else v


def check_lr(group):
    lr = _num(group["lr"])
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")


def check_nonneg(group, name, label=None):
    v = _num(group[name])
    if not 0.0 <= v:
        raise ValueError(f"Invalid {label or name} value: {v}")


def check_eps(group):
    eps = _num(group["eps"])
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")


def check_betas(group):
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"Invalid betas: expected a pair (beta1, beta2), got {betas!r}")
    for i, b in enumerate(betas):
        b = _num(b)
        if not 0.0 <= b < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {b}")


def hyper(group, *names):
    """The named numeric entries of a param group as floats."""
    return {n: float(_num(group[n])) for n in names}


def check_differentiable(group, name):
    """PyTorch's `differentiable=True` records the update on the autograd tape; flowlite's
    update is one fused, non-differentiable node, so it is refused rather than ignored.
    (`foreach` and `capturable` choose kernels in PyTorch and change no result: accepted.)"""
    if group.get("differentiable", False):
        raise ValueError(f"{name}: differentiable=True is not supported (flowlite records the "
                         "optimizer update as one fused node outside the autograd tape)")


def check_pair(group, name, label):
    v = group[name]
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise ValueError(f"Invalid {label}: expected a pair, got {v!r}")
    return float(_num(v[0])), float(_num(v[1]))
