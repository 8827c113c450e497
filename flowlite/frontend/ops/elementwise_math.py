"""More pointwise math: log10, logaddexp/logaddexp2, xlogy/xlog1py, logit, sinc, copysign,
ldexp, frexp, float_power, nan_to_num, heaviside, frac, sgn/signbit, nextafter, fmax/fmin,
gcd/lcm, deg2rad/rad2deg, addcmul/addcdiv, angle, the comparison and arithmetic aliases PyTorch
also has (greater, not_equal, divide, multiply, ...) and the identities of a real tensor (conj,
real, resolve_conj, ...).

Layer: frontend — imports engine.dtypes, engine.errors, ops._core, ops._registry, ops.creation,
ops.elementwise, tensor. The family's primitives (`<name>_p`) are declared here, beside the
front end that records them: their gradient rules call the ops of this module and of those
before it. Most ops here are compositions of the elementwise family (their gradients come from
it); the rest are primitives whose lowering jax.numpy provides.
"""
from __future__ import annotations

import builtins
import collections
import math

import jax.numpy as jnp
import numpy as np

from ...engine.errors import DTypeError
from ...engine import dtypes as D
from ..tensor import apply, Tensor
from ._core import (_promote_nodes, _unary, as_tensor, broadcast_shapes, broadcast_to, pointwise,
                    pointwise_nondiff, prim, to_dtype)
from ._registry import register, torch_op
from .creation import full_like
from .elementwise import (_LN2, _lift, abs, add, atan2, clamp, div, eq, exp2, ge, gt, isnan, le,
                          log, log1p, logical_or, lt, mul, ne, neg, pow, sigmoid, sign, sin, sub,
                          trunc, where)

_LN10 = math.log(10.0)


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
log10_p = pointwise("log10", lambda a, x: jnp.log10(x), lambda a, i, o, g: (g / (i[0] * _LN10),))


def _logaddexp_vjp(scale):
    # d/dx log(e^x + e^y) = sigmoid(x - y) (in base 2: sigmoid((x - y) ln 2)); the operands were
    # broadcast to one shape before the primitive
    def vjp(a, i, o, g):
        d = (i[0] - i[1]) * scale if scale != 1 else i[0] - i[1]
        return g * sigmoid(d), g * sigmoid(-d)
    return vjp


logaddexp_p = pointwise("logaddexp", lambda a, x, y: jnp.logaddexp(x, y), _logaddexp_vjp(1))


logaddexp2_p = pointwise("logaddexp2", lambda a, x, y: jnp.logaddexp2(x, y),
                         _logaddexp_vjp(_LN2))


def _xlog_lower(logf):
    def lower(a, x, y):
        # 0 where x == 0, NaN wherever y is NaN (PyTorch's kernel)
        return jnp.where(jnp.isnan(y), y, jnp.where(x == 0, jnp.zeros((), x.dtype),
                                                    x * logf(y)))
    return lower


# PyTorch's gradients: g * log(y) (also where x == 0) and g * x / y
xlogy_p = pointwise("xlogy", _xlog_lower(jnp.log),
                    lambda a, i, o, g: (g * log(i[1]), g * i[0] / i[1]))


xlog1py_p = pointwise("xlog1py", _xlog_lower(jnp.log1p),
                      lambda a, i, o, g: (g * log1p(i[1]), g * i[0] / (i[1] + 1)))


signbit_p = pointwise_nondiff("signbit", lambda a, x: jnp.signbit(x))


def _no_derivative(name):
    def vjp(a, i, o, g):
        raise RuntimeError(f"the derivative of {name} is not implemented (as in PyTorch); "
                           "detach its inputs, or compute the gradient another way")
    return vjp


nextafter_p = pointwise("nextafter", lambda a, x, y: jnp.nextafter(x, y),
                        _no_derivative("nextafter"))


gcd_p = pointwise_nondiff("gcd", lambda a, x, y: jnp.gcd(x, y))


lcm_p = pointwise_nondiff("lcm", lambda a, x, y: jnp.lcm(x, y))


frexp_exponent_p = pointwise_nondiff("frexp_exponent",
                                     lambda a, x: jnp.frexp(x)[1].astype(a[0].np))


frexp_mantissa_p = pointwise(
    "frexp_mantissa", lambda a, x: jnp.frexp(x)[0],
    lambda a, i, o, g: (g / exp2(to_dtype(frexp(i[0]).exponent, g.dtype)),))


def _underivable_vjp(a, i, o, g):
    raise RuntimeError(f"the derivative of {a[0]} is not implemented (as in PyTorch); detach "
                       "that input, or compute the gradient another way")


# an identity whose gradient is an error: put on an input PyTorch does not differentiate
underivable_p = prim("underivable", lambda a, x: x, _underivable_vjp)


def underivable(x, what):
    """x, marked so that a backward pass through it raises, naming `what` (PyTorch's "the
    derivative for ... is not implemented"); free when x needs no gradient."""
    if isinstance(x, Tensor) and x.requires_grad:
        return apply(underivable_p, (x,), (what,), x._node.shape, x._node.dtype)
    return x


# ---- helpers ---------------------------------------------------------------------------------
def _tensor_pair(x, y, op):
    """Both operands as tensors of one dtype (PyTorch's promotion, a Python number adapting to
    the tensor), broadcast to one shape."""
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        raise DTypeError(f"{op}(): expected at least one tensor argument")
    if not isinstance(x, Tensor):
        x = _lift(x, y)
    if not isinstance(y, Tensor):
        y = _lift(y, x)
    dt = _promote_nodes(x._node, y._node)
    x, y = to_dtype(x, dt), to_dtype(y, dt)
    shape = broadcast_shapes(x._node.shape, y._node.shape, op=op)
    return broadcast_to(x, shape), broadcast_to(y, shape)


def _float_pair(x, y, op):
    x, y = _tensor_pair(x, y, op)
    if x.dtype.kind != "f":
        x, y = to_dtype(x, D.default_float()), to_dtype(y, D.default_float())
    return x, y


def _floating(x):
    x = as_tensor(x)
    return x if x.dtype.kind == "f" else to_dtype(x, D.default_float())


def _require_float(x, op):
    if x.dtype.kind != "f":
        raise NotImplementedError(f"{op}(): not implemented for {x.dtype} tensors (shape "
                                  f"{tuple(x.shape)}), as in PyTorch; convert to a float dtype")


def _require_integer(x, op):
    if x.dtype.kind not in "iu":
        raise RuntimeError(f"{op}(): only integer tensors are supported, got {x.dtype} (shape "
                           f"{tuple(x.shape)})")


# ---- logarithms and exponentials ---------------------------------------------------------------
@torch_op(inplace=True)
def log10(x):
    """Elementwise base-10 logarithm (PyTorch's torch.log10); integer inputs become float."""
    return _unary(log10_p, x, True)


@torch_op
def logaddexp(x, other):
    """log(exp(x) + exp(other)) without overflow (PyTorch's torch.logaddexp); float tensors."""
    x, y = _tensor_pair(x, other, "logaddexp")
    _require_float(x, "logaddexp")
    return apply(logaddexp_p, (x, y), (), x._node.shape, x._node.dtype)


@torch_op
def logaddexp2(x, other):
    """log2(2**x + 2**other) without overflow (PyTorch's torch.logaddexp2); float tensors."""
    x, y = _tensor_pair(x, other, "logaddexp2")
    _require_float(x, "logaddexp2")
    return apply(logaddexp2_p, (x, y), (), x._node.shape, x._node.dtype)


def _xlog(prim, x, y, op):
    x, y = _float_pair(x, y, op)
    return apply(prim, (x, y), (), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def xlogy(x, other):
    """x * log(other), 0 where x == 0 (NaN where other is NaN) — PyTorch's torch.xlogy."""
    return _xlog(xlogy_p, x, other, "xlogy")


def xlog1py(x, other):
    """x * log1p(other), 0 where x == 0 (NaN where other is NaN) — torch.special.xlog1py."""
    return _xlog(xlog1py_p, x, other, "xlog1py")


@torch_op(inplace=True)
def logit(x, eps=None):
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given (the gradient is
    zero outside it, as in PyTorch)."""
    x = _floating(x)
    if eps is not None:
        x = clamp(x, eps, 1.0 - eps)
    return log(x / (1 - x))


@torch_op(inplace=True)
def sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (PyTorch's torch.sinc); the gradient at 0 is 0."""
    x = _floating(x)
    zero = eq(x, 0)
    px = where(zero, 1.0, x) * math.pi
    return where(zero, 1.0, sin(px) / px)


@torch_op(inplace=True)
def float_power(x, exponent):
    """x ** exponent in double precision (PyTorch's torch.float_power: the result is float64;
    float32 when JAX's x64 mode is off, as every float64 is then)."""
    d = D.canonical(D.float64)
    if isinstance(x, Tensor):
        x = to_dtype(x, d)
        return pow(x, to_dtype(exponent, d) if isinstance(exponent, Tensor) else
                   float(exponent))
    return pow(as_tensor(float(x), dtype=d), to_dtype(exponent, d))


@torch_op(inplace=True)
def ldexp(x, other):
    """x * 2 ** other (PyTorch's torch.ldexp); the result is float."""
    return mul(x, exp2(other if isinstance(other, Tensor) else as_tensor(other)))


Frexp = collections.namedtuple("frexp", ["mantissa", "exponent"])


@torch_op
def frexp(x):
    """(mantissa, exponent) with x == mantissa * 2 ** exponent and |mantissa| in [0.5, 1);
    the exponent is int32, as in PyTorch. Float tensors only."""
    if x.dtype.kind != "f":
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes, got {x.dtype}")
    e = apply(frexp_exponent_p, (x,), (D.int32,), x._node.shape, D.int32)
    m = apply(frexp_mantissa_p, (x,), (), x._node.shape, x._node.dtype)
    return Frexp(m, e)


# ---- signs, rounding pieces, replacements -----------------------------------------------------
@torch_op(inplace=True)
def frac(x):
    """x - trunc(x), with the sign of x (PyTorch's torch.frac); float tensors."""
    _require_float(x, "frac")
    return x - trunc(x)


@torch_op(inplace=True)
def sgn(x):
    """sign(x) — for real tensors PyTorch's torch.sgn is torch.sign."""
    return sign(x)


@torch_op
def signbit(x):
    """True where the sign bit is set (-0.0 and negative NaNs included), as torch.signbit."""
    x = as_tensor(x)
    if x.dtype is D.bool_:
        return eq(x, 2)                     # all False
    if x.dtype.kind in "iu":
        return lt(x, 0)
    return apply(signbit_p, (x,), (), x._node.shape, D.bool_)


@torch_op(inplace=True)
def copysign(x, other):
    """|x| with the sign (bit) of other; the result is float, and the gradient with respect to
    other is zero, as in PyTorch."""
    x, y = _float_pair(x, other, "copysign")
    a = abs(x)
    return where(signbit(y), neg(a), a)


@torch_op(inplace=True)
def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf, -inf -> neginf (the dtype's largest / lowest finite value
    by default); integer and bool tensors come back unchanged. Replaced elements get zero
    gradient."""
    if x.dtype.kind != "f":
        return x
    info = np.finfo(x.dtype.np)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    out = where(isnan(x), nan, x)
    out = where(eq(x, math.inf), hi, out)
    return where(eq(x, -math.inf), lo, out)


@torch_op(inplace=True)
def heaviside(x, values):
    """0 where x < 0, `values` where x == 0, 1 where x > 0 (NaN counts as neither, giving 0)
    — PyTorch's torch.heaviside; x and values share one dtype."""
    if not isinstance(values, Tensor):
        raise DTypeError("heaviside(): argument 'values' must be Tensor")
    if x.dtype is not values.dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different "
                           f"dtypes ({x.dtype} and {values.dtype})")
    step = to_dtype(gt(x, 0), x.dtype)
    return where(eq(x, 0), values, step)


@torch_op(inplace=True)
def nextafter(x, other):
    """The next representable float after x towards other (PyTorch's torch.nextafter); not
    differentiable."""
    x, y = _tensor_pair(x, other, "nextafter")
    _require_float(x, "nextafter")
    return apply(nextafter_p, (x, y), (), x._node.shape, x._node.dtype)


def _fminmax(x, other, keep, op):
    x, y = _tensor_pair(x, other, op)
    # PyTorch's kernel and gradient: x wins where keep(x, y) or y is NaN (ties go to x)
    return where(logical_or(keep(x, y), isnan(y)), x, y)


@torch_op
def fmax(x, other):
    """Elementwise maximum ignoring NaN (NaN only where both are NaN), as torch.fmax."""
    return _fminmax(x, other, ge, "fmax")


@torch_op
def fmin(x, other):
    """Elementwise minimum ignoring NaN (NaN only where both are NaN), as torch.fmin."""
    return _fminmax(x, other, le, "fmin")


@torch_op(inplace=True)
def gcd(x, other):
    """Greatest common divisor (non-negative; gcd(0, 0) == 0) of integer tensors."""
    x, y = _tensor_pair(x, other, "gcd")
    _require_integer(x, "gcd")
    return apply(gcd_p, (x, y), (), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def lcm(x, other):
    """Least common multiple (non-negative) of integer tensors."""
    x, y = _tensor_pair(x, other, "lcm")
    _require_integer(x, "lcm")
    return apply(lcm_p, (x, y), (), x._node.shape, x._node.dtype)


# PyTorch's constants (c10's M_PI_180 / M_180_PI), rounded to the tensor's dtype as a scalar
_PI_180 = 0.017453292519943295769236907684886127134428718885417
_180_PI = 57.295779513082320876798154814105170332405472466564


@torch_op(inplace=True)
def deg2rad(x):
    """Degrees to radians; integer inputs become float."""
    return mul(_floating(x), _PI_180)


@torch_op(inplace=True)
def rad2deg(x):
    """Radians to degrees; integer inputs become float."""
    return mul(_floating(x), _180_PI)


@torch_op
def angle(x):
    """The argument of a real number: 0 for x >= 0, pi for x < 0, NaN for NaN (its gradient is
    zero, as in PyTorch); integer inputs become float."""
    x = _floating(x)
    return where(isnan(x), x, where(lt(x, 0), full_like(x, math.pi), 0.0))


# ---- fused multiply-adds ---------------------------------------------------------------------
@torch_op(inplace=True)
def addcmul(x, tensor1, tensor2, value=1):
    """x + value * tensor1 * tensor2 (PyTorch's torch.addcmul)."""
    prod = mul(tensor1, tensor2)
    return add(x, prod if value == 1 else mul(prod, value))


@torch_op(inplace=True)
def addcdiv(x, tensor1, tensor2, value=1):
    """x + value * tensor1 / tensor2 (PyTorch's torch.addcdiv); integer division is an error,
    as in PyTorch."""
    for t in (tensor1, tensor2):
        if isinstance(t, Tensor) and t.dtype.kind in "biu" and not (
                isinstance(tensor1, Tensor) and tensor1.dtype.kind == "f") and not (
                isinstance(tensor2, Tensor) and tensor2.dtype.kind == "f"):
            raise RuntimeError("Integer division with addcdiv is no longer supported, and in a "
                               "future release addcdiv will perform a true division of tensor1 "
                               "and tensor2. Use torch.div instead")
    q = div(tensor1, tensor2)
    return add(x, q if value == 1 else mul(q, value))


# ---- PyTorch's other names for elementwise ops ------------------------------------------------
def _alias(name, fn, *, top=True, method=True, inplace=False):
    def op(*args, **kwargs):
        return fn(*args, **kwargs)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"PyTorch's torch.{name}: the same as {fn.__name__}."
    return register(name, op, top=top, method=method, inplace=inplace)


for _name, _fn, _inpl in (("absolute", abs, True), ("negative", neg, True),
                          ("multiply", mul, True), ("divide", div, True),
                          ("subtract", sub, True), ("true_divide", div, True),
                          ("arctan2", atan2, True), ("fix", trunc, True),
                          ("greater", gt, True), ("greater_equal", ge, True),
                          ("less", lt, True), ("less_equal", le, True),
                          ("not_equal", ne, True)):
    globals()[_name] = _alias(_name, _fn, inplace=_inpl)


@torch_op
def positive(x):
    """x itself (PyTorch's torch.positive); an error for bool tensors, as in PyTorch."""
    if x.dtype is D.bool_:
        raise TypeError("The `+` operator, on a bool tensor is not supported.")
    return x


@torch_op(inplace=True)
def clamp_min(x, min):  # noqa: A002 - PyTorch's name
    """clamp(x, min=min)."""
    return clamp(x, min=min)


@torch_op(inplace=True)
def clamp_max(x, max):  # noqa: A002 - PyTorch's name
    """clamp(x, max=max)."""
    return clamp(x, max=max)


# ---- a real tensor's complex-number views: the tensor itself ----------------------------------
@torch_op
def conj(x):
    """x itself: flowlite's tensors are real, and the conjugate of a real number is itself."""
    return x


@torch_op(inplace=True)
def conj_physical(x):
    """x itself (a real tensor is its own conjugate)."""
    return x


@torch_op
def resolve_conj(x):
    """x itself (a real tensor carries no conjugate bit)."""
    return x


@torch_op
def resolve_neg(x):
    """x itself (flowlite has no lazy negation bit)."""
    return x


@torch_op(method=False)
def real(x):
    """x itself: the real part of a real tensor."""
    return x


@torch_op(method=False)
def imag(x):
    """An error, as in PyTorch: a real tensor has no imaginary part."""
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


@torch_op
def isreal(x):
    """All True: every element of a real tensor is real."""
    return eq(x, x) if x.dtype.kind != "f" else logical_or(eq(x, x), isnan(x))


@torch_op
def is_complex(x) -> bool:
    """False: flowlite has no complex dtypes."""
    return False


@torch_op
def is_conj(x) -> bool:
    """False: a real tensor never carries a conjugate bit."""
    return False


@torch_op
def is_neg(x) -> bool:
    """False: flowlite has no lazy negation bit."""
    return False


@torch_op(method=False)
def is_floating_point(x) -> bool:
    return x.dtype.kind == "f"


@torch_op
def is_signed(x) -> bool:
    return x.dtype.kind in "if"


@torch_op
def is_nonzero(x) -> bool:
    """bool(x) of a one-element tensor (a host read); an error for any other size."""
    if x.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous" if
                           x.numel() == 0 else "Boolean value of Tensor with more than one "
                           "value is ambiguous")
    return builtins.bool(x.item())


@torch_op
def is_same_size(x, other) -> bool:
    return tuple(x.shape) == tuple(other.shape)

