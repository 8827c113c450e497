"""Special functions: the gamma family (lgamma, digamma, polygamma, mvlgamma, igamma/igammac),
the error-function family (erfc, erfinv, erfcx, ndtr, ndtri, log_ndtr), modified Bessel
functions (i0, i0e, i1, i1e), entr, zeta, spherical_bessel_j0 — PyTorch's torch.* and
torch.special.* names.

Layer: frontend — imports ops._core, ops._registry, ops.elementwise, ops.elementwise_math,
ops.reduction, tensor. The family's primitives (`<name>_p`) are declared here, beside the front
end that records them: their gradient rules call the ops of this module and of those before it.
Integer inputs become the default float, as in PyTorch. Gradients follow PyTorch's formulas;
where PyTorch has none (igamma with respect to its first argument, zeta) a backward pass raises,
as PyTorch's does.
"""
from __future__ import annotations

import builtins
import math

import jax.numpy as jnp
import jax.scipy.special as jss
from jax import lax

from ..tensor import apply, Tensor
from ._core import _unary, as_tensor, broadcast_shapes, broadcast_to, pointwise
from ._registry import torch_op
from .elementwise import eq, exp, log, sign, sin, where
from .elementwise_math import _float_pair, _floating, _no_derivative, underivable
from .reduction import all as _all

_SQRT_PI = math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / _SQRT_PI


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _lgamma_lower(a, x):
    # exactly 0 at 1 and 2, as C's lgamma (XLA's approximation is a few ulp off there)
    return jnp.where((x == 1) | (x == 2), jnp.zeros((), x.dtype), lax.lgamma(x))


lgamma_p = pointwise("lgamma", _lgamma_lower, lambda a, i, o, g: (g * digamma(i[0]),))


def _digamma_lower(a, x):
    # PyTorch's pole at zero: -inf at +0.0, +inf at -0.0 (XLA gives NaN)
    pole = jnp.where(jnp.signbit(x), jnp.array(jnp.inf, x.dtype), jnp.array(-jnp.inf, x.dtype))
    return jnp.where(x == 0, pole, lax.digamma(x))


digamma_p = pointwise("digamma", _digamma_lower, lambda a, i, o, g: (g * polygamma(1, i[0]),))


def _polygamma_lower(a, x):
    n = a[0]
    if n == 0:
        return lax.digamma(x)
    return jss.polygamma(jnp.full(x.shape, n, jnp.int32), x).astype(x.dtype)


polygamma_p = pointwise("polygamma", _polygamma_lower,
                        lambda a, i, o, g: (g * polygamma(a[0] + 1, i[0]),))


erfc_p = pointwise("erfc", lambda a, x: lax.erfc(x),
                   lambda a, i, o, g: (g * (-_TWO_OVER_SQRT_PI) * exp(-(i[0] * i[0])),))


erfinv_p = pointwise("erfinv", lambda a, x: lax.erf_inv(x),
                     lambda a, i, o, g: (g * (0.5 * _SQRT_PI) * exp(o * o),))


erfcx_p = pointwise("erfcx", lambda a, x: jss.erfcx(x),
                    lambda a, i, o, g: (g * (2 * i[0] * o - _TWO_OVER_SQRT_PI),))


i0_p = pointwise("i0", lambda a, x: jss.i0(x), lambda a, i, o, g: (g * i1(i[0]),))


i0e_p = pointwise("i0e", lambda a, x: lax.bessel_i0e(x),
                  lambda a, i, o, g: (g * (i1e(i[0]) - sign(i[0]) * o),))


def _i1_vjp(a, i, o, g):
    x = i[0]
    zero = eq(x, 0)
    safe = where(zero, 1.0, x)
    return (g * where(zero, 0.5, i0(x) - o / safe),)


i1_p = pointwise("i1", lambda a, x: jss.i1(x), _i1_vjp)


def _i1e_vjp(a, i, o, g):
    x = i[0]
    zero = eq(x, 0)
    safe = where(zero, 1.0, x)
    return (g * where(zero, 0.5, i0e(x) - o * (sign(x) + 1 / safe)),)


i1e_p = pointwise("i1e", lambda a, x: lax.bessel_i1e(x), _i1e_vjp)


def _igamma_x_grad(a, x):
    # d/dx P(a, x) = x^(a-1) e^(-x) / Gamma(a)
    return exp((a - 1) * log(x) - x - lgamma(a))


igamma_p = pointwise("igamma", lambda a, s, x: lax.igamma(s, x),
                     lambda a, i, o, g: (g * 0, g * _igamma_x_grad(i[0], i[1])))


igammac_p = pointwise("igammac", lambda a, s, x: lax.igammac(s, x),
                      lambda a, i, o, g: (g * 0, -(g * _igamma_x_grad(i[0], i[1]))))


ndtr_p = pointwise("ndtr", lambda a, x: jss.ndtr(x),
                   lambda a, i, o, g: (g * exp(i[0] * i[0] * -0.5) / _SQRT_2PI,))


ndtri_p = pointwise("ndtri", lambda a, x: jss.ndtri(x),
                    lambda a, i, o, g: (g * _SQRT_2PI * exp(o * o * 0.5),))


log_ndtr_p = pointwise("log_ndtr", lambda a, x: jss.log_ndtr(x),
                       lambda a, i, o, g: (g * exp(i[0] * i[0] * -0.5 - o) / _SQRT_2PI,))


entr_p = pointwise("entr", lambda a, x: jss.entr(x),
                   lambda a, i, o, g: (g * -(log(i[0]) + 1),))


zeta_p = pointwise("zeta", lambda a, x, q: jss.zeta(x, q), _no_derivative("zeta"))


# ---- front ends ------------------------------------------------------------------------------
def _float_unary(prim, x):
    return _unary(prim, as_tensor(x), True)


@torch_op(inplace=True)
def lgamma(x):
    """log |Gamma(x)| (torch.lgamma, torch.special.gammaln)."""
    return _float_unary(lgamma_p, x)


@torch_op(inplace=True)
def digamma(x):
    """d/dx log Gamma(x) (torch.digamma, torch.special.digamma / psi)."""
    return _float_unary(digamma_p, x)


@torch_op(inplace=True)
def polygamma(n, x):
    """The n-th derivative of digamma (torch.polygamma(n, input)); as a method,
    `x.polygamma(n)`."""
    if isinstance(n, Tensor) and not isinstance(x, Tensor):      # Tensor.polygamma(self, n)
        n, x = x, n
    n = builtins.int(n)
    if n < 0:
        raise RuntimeError(f"polygamma(n, x) does not support negative n (got {n})")
    x = _floating(x)
    return apply(polygamma_p, (x,), (n,), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def mvlgamma(x, p):
    """The multivariate log-gamma of dimension p: sum_j lgamma(x - j/2) + p(p-1)/4 log(pi).
    Like PyTorch's CPU kernel it checks that every element exceeds (p - 1) / 2, which reads
    that check on the host (a sync)."""
    x = _floating(x)
    if p < 1:
        raise RuntimeError(f"p has to be greater than or equal to 1 (got {p})")
    if x.numel() and not builtins.bool(_all(x > (p - 1) / 2).item()):
        raise RuntimeError(f"All elements must be greater than (p-1)/2 (p = {p})")
    total = lgamma(x)
    for j in range(1, p):
        total = total + lgamma(x - j / 2)
    return total + p * (p - 1) / 4 * math.log(math.pi)


@torch_op(inplace=True)
def erfc(x):
    """1 - erf(x), accurate for large x (torch.erfc)."""
    return _float_unary(erfc_p, x)


@torch_op(inplace=True)
def erfinv(x):
    """The inverse of erf on (-1, 1) (torch.erfinv)."""
    return _float_unary(erfinv_p, x)


def erfcx(x):
    """exp(x**2) * erfc(x) (torch.special.erfcx)."""
    return _float_unary(erfcx_p, x)


@torch_op(inplace=True)
def i0(x):
    """The modified Bessel function of the first kind, order 0 (torch.i0)."""
    return _float_unary(i0_p, x)


def i0e(x):
    """exp(-|x|) * i0(x) (torch.special.i0e)."""
    return _float_unary(i0e_p, x)


def i1(x):
    """The modified Bessel function of the first kind, order 1 (torch.special.i1)."""
    return _float_unary(i1_p, x)


def i1e(x):
    """exp(-|x|) * i1(x) (torch.special.i1e)."""
    return _float_unary(i1e_p, x)


def _igamma(prim, a, x, op):
    for t in (a, x):
        if isinstance(t, Tensor) and t.dtype.kind != "f":
            raise NotImplementedError(f'"{op}_cpu" not implemented for \'{t.dtype}\' tensors, '
                                      "as in PyTorch; convert to a float dtype")
    a, x = _float_pair(a, x, op)
    # PyTorch differentiates only with respect to x: a backward pass into `a` raises
    return apply(prim, (underivable(a, f"{op} with respect to its first argument"), x), (),
                 a._node.shape, a._node.dtype)


@torch_op(inplace=True)
def igamma(x, other):
    """The regularized lower incomplete gamma function P(x, other) (torch.igamma,
    torch.special.gammainc); differentiable with respect to `other` only, as in PyTorch."""
    return _igamma(igamma_p, x, other, "igamma")


@torch_op(inplace=True)
def igammac(x, other):
    """The regularized upper incomplete gamma function Q(x, other) = 1 - P(x, other)
    (torch.igammac, torch.special.gammaincc); differentiable with respect to `other` only."""
    return _igamma(igammac_p, x, other, "igammac")


def ndtr(x):
    """The standard normal CDF (torch.special.ndtr)."""
    return _float_unary(ndtr_p, x)


def ndtri(x):
    """The inverse of the standard normal CDF (torch.special.ndtri)."""
    return _float_unary(ndtri_p, x)


def log_ndtr(x):
    """log of the standard normal CDF, accurate in the far left tail (torch.special.log_ndtr)."""
    return _float_unary(log_ndtr_p, x)


def entr(x):
    """-x log x for x > 0, 0 at 0, -inf for x < 0 (torch.special.entr)."""
    return _float_unary(entr_p, x)


def zeta(x, other):
    """The Hurwitz zeta function sum_k (k + other) ** -x (torch.special.zeta); not
    differentiable, as in PyTorch."""
    x, q = _float_pair(x, other, "zeta")
    shape = broadcast_shapes(x._node.shape, q._node.shape, op="zeta")
    x, q = broadcast_to(x, shape), broadcast_to(q, shape)
    return apply(zeta_p, (x, q), (), shape, x._node.dtype)


def spherical_bessel_j0(x):
    """sin(x) / x, 1 at 0 (torch.special.spherical_bessel_j0)."""
    x = _floating(x)
    zero = eq(x, 0)
    safe = where(zero, 1.0, x)
    return where(zero, 1.0, sin(safe) / safe)


def multigammaln(x, p):
    """torch.special.multigammaln: mvlgamma(x, p)."""
    return mvlgamma(x, p)

