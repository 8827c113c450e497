"""`nn.utils`: gradient clipping and flat parameter vectors, all recorded in-graph.

`clip_grad_norm_` returns the total norm as a lazy 0-d tensor: clipping never forces a host
sync, so a training step with clipping is still one executable.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ... import extend
from ...extend import Tensor, no_grad, ops as F
from . import rnn


def _tensors(parameters):
    if isinstance(parameters, Tensor):
        return [parameters]
    return list(parameters)


def _norm(t, p):
    if p == math.inf:
        return F.amax(F.abs(t))
    if p == -math.inf:
        return F.amin(F.abs(t))
    return F.norm(t, p)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The p-norm of the concatenation of `tensors` (a lazy 0-d tensor)."""
    ts = [t for t in _tensors(tensors) if t is not None]
    p = float(norm_type)
    if not ts:
        return F.zeros(())
    with no_grad():
        if p == 2.0:
            # Σ ‖g‖² summed directly: one reduction per tensor, then sqrt once
            total = None
            for t in ts:
                s = F.sum(t * t)
                total = s if total is None else total + s
            total = F.sqrt(total)
        elif p == math.inf:
            total = F.amax(F.stack([_norm(t, p) for t in ts]))
        elif p == -math.inf:
            total = F.amin(F.stack([_norm(t, p) for t in ts]))
        else:
            total = F.norm(F.stack([_norm(t, p) for t in ts]), p)
    if error_if_nonfinite:
        # this check needs the value on the host: it costs a sync (off by default, as PyTorch)
        if not bool(F.isfinite(total)):
            raise RuntimeError(f"The total norm of order {p} for gradients from `parameters` is "
                               f"non-finite, so it cannot be clipped. To disable this error "
                               f"and scale the gradients by the non-finite norm anyway, set "
                               f"`error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients by min(1, max_norm / (total_norm + 1e-6)), in place, in-graph."""
    grads = [p.grad for p in _tensors(parameters) if p.grad is not None]
    if not grads:
        return
    with no_grad():
        coef = F.minimum(float(max_norm) / (total_norm + 1e-6), 1.0)
        for g in grads:
            g.mul_(F.to_dtype(coef, g.dtype))


def _lower_clip(attrs, *xs):
    n, p = attrs
    gs, max_norm = xs[:n], xs[n]
    if p == 2.0:        # as get_total_norm: Σ ‖g‖² in order, then one sqrt
        total = jnp.sqrt(sum(jnp.sum(g * g) for g in gs))
    else:
        total = jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in gs]))
    coef = jnp.minimum(max_norm / (total + jnp.asarray(1e-6, total.dtype)),
                       jnp.asarray(1.0, total.dtype))
    return tuple(g * coef for g in gs) + (total,)


# every gradient clipped by their total norm, and that norm: one node for all of them (the
# gradients are rebound to its outputs, as mul_ rebinds them), not five per parameter
clip_grad_norm_p = extend.primitive("clip_grad_norm", _lower_clip, None, multi=True,
                                    nondiff=True,
                                    inplace=lambda a, j: j if j < a[0] else None)
_clip_memos: dict = {}


def _clip_fused(grads, max_norm, p):
    """clip_grad_norm_ as one node, or None where it can't be (mixed or low-precision dtypes,
    gradients with a graph of their own, other norms)."""
    if p not in (2.0, math.inf) or not grads:
        return None
    dt = grads[0].dtype
    if dt.name not in ("float32", "float64"):
        return None
    dev = grads[0]._node.device
    for g in grads:
        if g.dtype is not dt or g._edge is not None or g._node.device is not dev:
            return None
    total = extend.host_scalar(0.0, dt)           # (a placeholder: rebound to the norm)
    attrs = (len(grads), p)
    memo = _clip_memos.setdefault(attrs, {})
    extend.record_into([*grads, total], clip_grad_norm_p,
                       (*grads, extend.host_scalar(float(max_norm), dt)), attrs, memo)
    return total


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Clip the gradients' total p-norm to `max_norm`; returns the total norm before clipping
    (a lazy 0-d tensor — reading it with `.item()` is the caller's choice)."""
    params = _tensors(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not error_if_nonfinite:
        total = _clip_fused(grads, max_norm, float(norm_type))
        if total is not None:
            return total
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(params, max_norm, total, foreach)
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient to [-clip_value, clip_value] in place."""
    v = float(clip_value)
    with no_grad():
        for p in _tensors(parameters):
            if p.grad is not None:
                p.grad.clamp_(-v, v)


def parameters_to_vector(parameters):
    """Concatenate the flattened parameters into one 1-D tensor (differentiable)."""
    ps = _tensors(parameters)
    if not ps:
        raise ValueError("parameters_to_vector: no parameters given")
    device = ps[0].device
    for p in ps:
        if p.device is not device:
            raise RuntimeError(f"parameters_to_vector: found parameters on different devices "
                               f"({device} and {p.device})")
    return F.cat([F.reshape(p, (-1,)) for p in ps])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of the 1-D `vec` into the parameters (their `.data`)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected a flowlite Tensor, but got: {type(vec).__name__}")
    ps = _tensors(parameters)
    total = sum(p.numel() for p in ps)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ValueError(f"vector_to_parameters: vec of shape {tuple(vec.shape)} doesn't hold "
                         f"the parameters' {total} elements")
    offset = 0
    with no_grad():
        for p in ps:
            n = p.numel()
            p.data = F.reshape(F.narrow(vec.detach(), 0, offset, n), tuple(p.shape))
            offset += n
