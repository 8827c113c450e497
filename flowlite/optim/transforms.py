"""Custom optax transformations for the pieces of PyTorch's algorithms optax lacks.

Every flowlite optimizer is an `optax.chain` of transformations.  Where optax
already computes exactly what PyTorch computes it is used as is (scale_by_adam,
scale_by_adamax, scale_by_rms/scale_by_stddev with eps outside the sqrt,
scale_by_lion, trace, add_decayed_weights, scale_by_schedule,
scale_by_learning_rate).  This module holds only the pieces whose PyTorch
definition differs from every optax transformation; each is a plain
`optax.GradientTransformation` (init/update in jax.numpy) that can be chained
with optax's own and is usable outside flowlite:

- `scale_by_dampening`   SGD's dampening: the momentum buffer starts as the raw
                         gradient, later gradients are scaled by (1 - dampening).
- `scale_by_amsgrad`     PyTorch's AMSGrad: the running maximum is taken over the
                         *raw* second moment and bias-corrected afterwards
                         (optax's `scale_by_amsgrad` maximises the corrected one).
- `scale_by_rss`         PyTorch's Adagrad denominator: sqrt(sum g^2) + eps, eps
                         outside the root (optax adds eps inside).
- `scale_by_nadam`       PyTorch's NAdam with the momentum-decay schedule
                         mu_t = b1 (1 - 0.5 * 0.96^(t * momentum_decay)).

All hyper-parameters may be traced values (they arrive through
`optax.inject_hyperparams`), so no Python control flow depends on them.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ["scale_by_dampening", "scale_by_amsgrad", "scale_by_rss", "scale_by_nadam",
           "ScaleByDampeningState", "ScaleByAmsgradState", "ScaleByRssState",
           "ScaleByNadamState"]


# ---- SGD dampening -------------------------------------------------------------------------
class ScaleByDampeningState(NamedTuple):
    count: Any  # int32 scalar: steps taken


def scale_by_dampening(dampening=0.0) -> optax.GradientTransformation:
    """Scale updates by (1 - dampening), except on the first step.

    Chained before `optax.trace(momentum)` this is PyTorch's SGD momentum buffer:
    buf_1 = g_1, buf_t = momentum * buf_{t-1} + (1 - dampening) * g_t.
    """

    def init_fn(params):
        del params
        return ScaleByDampeningState(count=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None):
        del params
        scale = jnp.where(state.count == 0, 1.0, 1.0 - dampening)
        updates = jax.tree.map(lambda g: g * scale.astype(g.dtype), updates)
        return updates, ScaleByDampeningState(count=optax.safe_increment(state.count))

    return optax.GradientTransformation(init_fn, update_fn)


# ---- AMSGrad as PyTorch defines it ------------------------------------------------------------
class ScaleByAmsgradState(NamedTuple):
    count: Any
    mu: Any       # exp_avg
    nu: Any       # exp_avg_sq
    nu_max: Any   # max_exp_avg_sq (running max of the raw, uncorrected nu)


def scale_by_amsgrad(b1=0.9, b2=0.999, eps=1e-8) -> optax.GradientTransformation:
    """PyTorch's Adam(amsgrad=True) direction:
    m_hat / (sqrt(max_{s<=t} v_s) / sqrt(1 - b2^t) + eps), m_hat = m_t / (1 - b1^t)."""

    def init_fn(params):
        return ScaleByAmsgradState(count=jnp.zeros([], jnp.int32),
                                   mu=optax.tree.zeros_like(params),
                                   nu=optax.tree.zeros_like(params),
                                   nu_max=optax.tree.zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        nu_max = jax.tree.map(jnp.maximum, state.nu_max, nu)
        mu_hat = optax.tree.bias_correction(mu, b1, count)
        bc2_sqrt = jnp.sqrt(1 - b2 ** count)
        updates = jax.tree.map(
            lambda m, v: m / (jnp.sqrt(v) / bc2_sqrt.astype(v.dtype) + eps), mu_hat, nu_max)
        return updates, ScaleByAmsgradState(count=count, mu=mu, nu=nu, nu_max=nu_max)

    return optax.GradientTransformation(init_fn, update_fn)


# ---- Adagrad's accumulator with eps outside the root -------------------------------------------
class ScaleByRssState(NamedTuple):
    sum_of_squares: Any


def scale_by_rss(initial_accumulator_value=0.0, eps=1e-10) -> optax.GradientTransformation:
    """PyTorch's Adagrad direction: sum_t = sum_{t-1} + g^2; g / (sqrt(sum_t) + eps)."""

    def init_fn(params):
        return ScaleByRssState(
            sum_of_squares=optax.tree.full_like(params, initial_accumulator_value))

    def update_fn(updates, state, params=None):
        del params
        sos = jax.tree.map(lambda g, s: s + g * g, updates, state.sum_of_squares)
        updates = jax.tree.map(lambda g, s: g / (jnp.sqrt(s) + eps), updates, sos)
        return updates, ScaleByRssState(sum_of_squares=sos)

    return optax.GradientTransformation(init_fn, update_fn)


# ---- NAdam with PyTorch's momentum-decay schedule -------------------------------------------
class ScaleByNadamState(NamedTuple):
    count: Any
    mu_product: Any  # prod_{s<=t} mu_s (float32 scalar, starts at 1)
    mu: Any          # exp_avg
    nu: Any          # exp_avg_sq


def scale_by_nadam(b1=0.9, b2=0.999, eps=1e-8, momentum_decay=4e-3
                   ) -> optax.GradientTransformation:
    """PyTorch's NAdam direction (Dozat 2016 with momentum decay):

    mu_t = b1 (1 - 0.5 * 0.96^(t psi)),  mu_{t+1} likewise,  P_t = prod_{s<=t} mu_s
    m_t = b1 m + (1-b1) g,  v_t = b2 v + (1-b2) g^2,  d = sqrt(v_t / (1 - b2^t)) + eps
    direction = (1-mu_t)/(1-P_t) * g/d + mu_{t+1}/(1-P_t mu_{t+1}) * m_t/d
    """

    def init_fn(params):
        return ScaleByNadamState(count=jnp.zeros([], jnp.int32),
                                 mu_product=jnp.ones([], jnp.float32),
                                 mu=optax.tree.zeros_like(params),
                                 nu=optax.tree.zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        count = optax.safe_increment(state.count)
        t = count.astype(jnp.float32)
        mom = b1 * (1.0 - 0.5 * 0.96 ** (t * momentum_decay))
        mom_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1.0) * momentum_decay))
        mu_product = state.mu_product * mom
        mu_product_next = mu_product * mom_next
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        bc2 = 1.0 - b2 ** t
        c_grad = (1.0 - mom) / (1.0 - mu_product)
        c_avg = mom_next / (1.0 - mu_product_next)

        def direction(g, m, v):
            denom = jnp.sqrt(v / bc2.astype(v.dtype)) + eps
            return (c_grad.astype(g.dtype) * g / denom
                    + c_avg.astype(m.dtype) * m / denom)

        updates = jax.tree.map(direction, updates, mu, nu)
        return updates, ScaleByNadamState(count=count, mu_product=mu_product, mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)
