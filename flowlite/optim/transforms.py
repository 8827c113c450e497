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
- `scale_by_radam`       PyTorch's RAdam: eps added to sqrt(v) (optax: to sqrt(v_hat)),
                         rectified only when rho_t > 5 (optax: >= 5), step scalars
                         computed without float32 cancellation.
- `asgd`, `rprop`        PyTorch's ASGD and Rprop as whole updates (optax has no ASGD; its
                         rprop differs in when step sizes start and how they are masked).

All hyper-parameters may be traced values (flowlite builds each transformation inside the
step's lowering from the step's hyper-parameter inputs, as `optax.inject_hyperparams`
does), so no Python control flow depends on them.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ["scale_by_dampening", "scale_by_amsgrad", "scale_by_rss", "scale_by_nadam",
           "scale_by_radam", "asgd", "rprop", "ScaleByDampeningState", "ScaleByAmsgradState",
           "ScaleByRssState", "ScaleByNadamState", "ScaleByRadamState", "AsgdState",
           "RpropState"]


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
        # the product is kept, and used, in its state's dtype (float32, PyTorch's scalar dtype):
        # PyTorch multiplies its float32 tensor in place and reads that value back
        mu_product = state.mu_product * mom.astype(state.mu_product.dtype)
        prod = mu_product.astype(mom.dtype)       # read back into the step's precision
        mu_product_next = prod * mom_next
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        bc2 = 1.0 - b2 ** t
        c_grad = (1.0 - mom) / (1.0 - prod)
        c_avg = mom_next / (1.0 - mu_product_next)

        def direction(g, m, v):
            denom = jnp.sqrt(v / bc2.astype(v.dtype)) + eps
            return (c_grad.astype(g.dtype) * g / denom
                    + c_avg.astype(m.dtype) * m / denom)

        updates = jax.tree.map(direction, updates, mu, nu)
        return updates, ScaleByNadamState(count=count, mu_product=mu_product, mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


# ---- RAdam with PyTorch's eps placement and threshold -------------------------------------------
class ScaleByRadamState(NamedTuple):
    count: Any
    mu: Any   # exp_avg
    nu: Any   # exp_avg_sq


def _rho_t(t, log_b2, rho_inf):
    """RAdam's rho_t = rho_inf - 2 t b2^t / (1 - b2^t), accurate in float32.

    Written directly it cancels catastrophically for small t (rho_inf ~ 2/(1-b2) ~ 2000 minus
    almost as much); with L = -log(b2) its series t - (t^2-1) L/6 + (t^4-1) L^3/360
    - (t^6-1) L^5/15120 has no cancellation while tL is small, and the direct form is
    accurate once tL is not."""
    L = -log_b2
    x = t * L
    t2 = t * t
    series = t - (t2 - 1.0) * L / 6.0 + (t2 * t2 - 1.0) * L ** 3 / 360.0 \
        - (t2 * t2 * t2 - 1.0) * L ** 5 / 15120.0
    direct = rho_inf + 2.0 * t * jnp.exp(-x) / jnp.expm1(-x)
    return jnp.where(x < 0.5, series, direct)


def scale_by_radam(b1=0.9, b2=0.999, eps=1e-8, log_b1=None, log_b2=None, rho_inf=None
                   ) -> optax.GradientTransformation:
    """PyTorch's RAdam direction (Liu et al. 2019):

    m_t = b1 m + (1-b1) g,  v_t = b2 v + (1-b2) g^2,  m_hat = m_t / (1 - b1^t)
    rho_t > 5:  m_hat * sqrt(1 - b2^t) / (sqrt(v_t) + eps) * r_t,
                r_t = sqrt((rho_t-4)(rho_t-2) rho_inf / ((rho_inf-4)(rho_inf-2) rho_t))
    else:       m_hat
    `log_b1`, `log_b2`, `rho_inf` are log(b1), log(b2), 2/(1-b2)-1 computed by the caller in
    double precision: 1 - b^t from a float32 b loses digits (b2=0.999 rounds 1-b2 by 1e-5)."""
    log_b1 = jnp.log(b1) if log_b1 is None else log_b1
    log_b2 = jnp.log(b2) if log_b2 is None else log_b2
    rho_inf = 2.0 / (1.0 - b2) - 1.0 if rho_inf is None else rho_inf

    def init_fn(params):
        return ScaleByRadamState(count=jnp.zeros([], jnp.int32),
                                 mu=optax.tree.zeros_like(params),
                                 nu=optax.tree.zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        count = optax.safe_increment(state.count)
        t = count.astype(jnp.float32)
        omb1 = -jnp.expm1(log_b1)
        omb2 = -jnp.expm1(log_b2)
        mu = jax.tree.map(lambda g, m: b1 * m + omb1 * g, updates, state.mu)
        nu = jax.tree.map(lambda g, v: b2 * v + omb2 * g * g, updates, state.nu)
        bc1 = -jnp.expm1(t * log_b1)
        bc2 = -jnp.expm1(t * log_b2)
        rho = _rho_t(t, log_b2, rho_inf)
        rect = jnp.sqrt(jnp.maximum((rho - 4.0) * (rho - 2.0) * rho_inf, 0.0)
                        / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho))
        rectify = rho > 5.0

        def direction(m, v):
            m_hat = m / bc1.astype(m.dtype)
            adaptive = jnp.sqrt(bc2).astype(v.dtype) / (jnp.sqrt(v) + eps)
            return jnp.where(rectify, m_hat * adaptive * rect.astype(m.dtype), m_hat)

        return jax.tree.map(direction, mu, nu), ScaleByRadamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


# ---- ASGD (averaged SGD) --------------------------------------------------------------------
class AsgdState(NamedTuple):
    count: Any   # steps taken
    eta: Any     # step size of the next step (PyTorch's `eta`; lr before the first step)
    mu: Any      # averaging coefficient of the next step (PyTorch's `mu`, starts at 1)
    ax: Any      # the averaged parameters


def asgd(learning_rate, lambd=1e-4, alpha=0.75, t0=1e6) -> optax.GradientTransformation:
    """PyTorch's ASGD (Polyak-Ruppert averaging), the full update (learning rate included):

    p <- p (1 - lambd eta) - eta g;  ax <- p if mu == 1 else ax + mu (p - ax)
    then eta = lr / (1 + lambd lr t)^alpha,  mu = 1 / max(1, t - t0)."""

    def init_fn(params):
        return AsgdState(count=jnp.zeros([], jnp.int32), eta=jnp.zeros([], jnp.float32),
                         mu=jnp.ones([], jnp.float32), ax=optax.tree.zeros_like(params))

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError(optax.NO_PARAMS_MSG)
        # in the state's dtype from the first step on (PyTorch's eta is a float32 tensor
        # holding lr, then each new value)
        eta = jnp.where(state.count == 0, learning_rate, state.eta).astype(state.eta.dtype)
        count = optax.safe_increment(state.count)
        t = count.astype(jnp.float32)
        new_p = jax.tree.map(
            lambda g, p: p * (1 - lambd * eta).astype(p.dtype) - eta.astype(p.dtype) * g,
            updates, params)
        ax = jax.tree.map(
            lambda q, a: jnp.where(state.mu == 1, q, a + (q - a) * state.mu.astype(q.dtype)),
            new_p, state.ax)
        new_eta = learning_rate / (1 + lambd * learning_rate * t) ** alpha
        new_mu = 1.0 / jnp.maximum(1.0, t - t0)
        updates = jax.tree.map(lambda q, p: q - p, new_p, params)
        return updates, AsgdState(count=count, eta=new_eta.astype(jnp.float32),
                                  mu=new_mu.astype(jnp.float32), ax=ax)

    return optax.GradientTransformation(init_fn, update_fn)


# ---- Rprop as PyTorch defines it --------------------------------------------------------------
class RpropState(NamedTuple):
    count: Any
    prev: Any        # the previous (masked) gradient
    step_size: Any   # per-element step sizes (lr before the first step)


def rprop(learning_rate, etaminus=0.5, etaplus=1.2, step_size_min=1e-6, step_size_max=50.0
          ) -> optax.GradientTransformation:
    """PyTorch's Rprop, the full update: s = sign(g * prev); step sizes times etaplus (s > 0),
    etaminus (s < 0) or 1, clamped to [min, max]; where s < 0 the gradient is taken as 0;
    p <- p - sign(g) * step_size; prev <- g."""

    def init_fn(params):
        return RpropState(count=jnp.zeros([], jnp.int32), prev=optax.tree.zeros_like(params),
                          step_size=optax.tree.zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        first = state.count == 0

        def one(g, prev, size):
            s = jnp.sign(g * prev)
            factor = jnp.where(s > 0, etaplus, jnp.where(s < 0, etaminus, 1.0)).astype(g.dtype)
            size = jnp.where(first, jnp.asarray(learning_rate, g.dtype), size)
            size = jnp.clip(size * factor, step_size_min, step_size_max).astype(g.dtype)
            g = jnp.where(factor == jnp.asarray(etaminus, g.dtype), 0, g)
            return -jnp.sign(g) * size, g, size

        out = jax.tree.map(one, updates, state.prev, state.step_size)
        upd = jax.tree.map(lambda o: o[0], out, is_leaf=lambda o: isinstance(o, tuple))
        prev = jax.tree.map(lambda o: o[1], out, is_leaf=lambda o: isinstance(o, tuple))
        size = jax.tree.map(lambda o: o[2], out, is_leaf=lambda o: isinstance(o, tuple))
        return upd, RpropState(count=optax.safe_increment(state.count), prev=prev,
                               step_size=size)

    return optax.GradientTransformation(init_fn, update_fn)
