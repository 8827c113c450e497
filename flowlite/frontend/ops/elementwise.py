"""Elementwise ops: arithmetic, comparisons, logic, unary math, `clamp`, `where`.

Layer: frontend — imports checks, engine.dtypes, engine.errors, engine.ir, ops._core,
ops._registry, tensor. The family's primitives (`<name>_p`) are declared here, beside the front
end that records them: their gradient rules call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...engine.errors import ArgumentError, DTypeError, UnsupportedError
from ...engine import dtypes as D, ir
from ..checks import IntegerDivisionByZeroError, nonzero_divisor
from ..tensor import apply, name_grad_fn, Tensor
from ._core import (_binary, _promote_nodes, _scalar, _scalar_result, _scalar_types, _st, _unary,
                    as_tensor, broadcast_shapes, broadcast_to, full_p, nonzero, pointwise,
                    pointwise_nondiff, to_dtype)
from ._registry import register, torch_op


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------



# ---- elementwise unary -----------------------------------------------------------------
neg_p = pointwise("neg", lambda a, x: -x, lambda a, i, o, g: (-g,))


abs_p = pointwise("abs", lambda a, x: jnp.abs(x), lambda a, i, o, g: (g * sign(i[0]),))


def _zero_vjp(a, i, o, g):
    """The gradient of a piecewise-constant op (sign, floor, x ** 0, ...): zeros, as PyTorch
    gives (a None cotangent would leave `.grad` unset)."""
    z = apply(full_p, (), ((*g._node.shape,), 0, g.dtype), g._node.shape, g.dtype)
    z._node.device = g._node.device
    return (z,) + (None,) * (len(i) - 1)


def _sign_lower(a, x):
    # PyTorch's (0 < x) - (x < 0): 0 for NaN and for -0.0, where jnp.sign gives NaN and -0.0
    if jnp.issubdtype(x.dtype, jnp.floating):
        return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)
    return jnp.sign(x)


sign_p = pointwise("sign", _sign_lower, _zero_vjp)


exp_p = pointwise("exp", lambda a, x: jnp.exp(x), lambda a, i, o, g: (g * o,))


log_p = pointwise("log", lambda a, x: jnp.log(x), lambda a, i, o, g: (g / i[0],))


log1p_p = pointwise("log1p", lambda a, x: jnp.log1p(x), lambda a, i, o, g: (g / (i[0] + 1),))


expm1_p = pointwise("expm1", lambda a, x: jnp.expm1(x), lambda a, i, o, g: (g * (o + 1),))


sqrt_p = pointwise("sqrt", lambda a, x: jnp.sqrt(x), lambda a, i, o, g: (g * 0.5 / o,))


rsqrt_p = pointwise("rsqrt", lambda a, x: lax.rsqrt(x), lambda a, i, o, g: (g * -0.5 * o / i[0],))


sin_p = pointwise("sin", lambda a, x: jnp.sin(x), lambda a, i, o, g: (g * cos(i[0]),))


cos_p = pointwise("cos", lambda a, x: jnp.cos(x), lambda a, i, o, g: (-(g * sin(i[0])),))


tan_p = pointwise("tan", lambda a, x: jnp.tan(x), lambda a, i, o, g: (g * (1 + o * o),))


tanh_p = pointwise("tanh", lambda a, x: jnp.tanh(x), lambda a, i, o, g: (g * (1 - o * o),))


sigmoid_p = pointwise("sigmoid", lambda a, x: jax.nn.sigmoid(x),
                      lambda a, i, o, g: (g * o * (1 - o),))


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


erf_p = pointwise("erf", lambda a, x: lax.erf(x),
                  lambda a, i, o, g: (g * _TWO_OVER_SQRT_PI * exp(-(i[0] * i[0])),))


floor_p = pointwise("floor", lambda a, x: jnp.floor(x), _zero_vjp)


ceil_p = pointwise("ceil", lambda a, x: jnp.ceil(x), _zero_vjp)


round_p = pointwise("round", lambda a, x: jnp.round(x, a[0]), _zero_vjp)


relu_p = pointwise("relu", lambda a, x: jnp.maximum(x, jnp.zeros((), x.dtype)),
                   lambda a, i, o, g: (g * (i[0] > 0).to(g.dtype),))


logical_not_p = pointwise_nondiff("logical_not", lambda a, x: jnp.logical_not(x) if x.dtype == bool
                                  else jnp.invert(x))


isfinite_p = pointwise_nondiff("isfinite", lambda a, x: jnp.isfinite(x))


isnan_p = pointwise_nondiff("isnan", lambda a, x: jnp.isnan(x))


isinf_p = pointwise_nondiff("isinf", lambda a, x: jnp.isinf(x))


# ---- elementwise binary (inputs already share a dtype; jnp broadcasts) ---------------------
add_p = pointwise("add", lambda a, x, y: x + y, lambda a, i, o, g: (_st(g, i[0]), _st(g, i[1])))


sub_p = pointwise("sub", lambda a, x, y: x - y, lambda a, i, o, g: (_st(g, i[0]), _st(-g, i[1])))


mul_p = pointwise("mul", lambda a, x, y: x * y,
                  lambda a, i, o, g: (_st(g * i[1], i[0]), _st(g * i[0], i[1])))


div_p = pointwise("div", lambda a, x, y: x / y,
                  lambda a, i, o, g: (_st(g / i[1], i[0]), _st(-(g * o) / i[1], i[1])))


def _pow_vjp(a, i, o, g):
    x, y = i
    gx = where(y == 0, 0.0, g * y * pow(x, y - 1))
    gy = where(x == 0, 0.0, g * o * log(x))
    return _st(gx, x), _st(gy, y)


pow_p = pointwise("pow", lambda a, x, y: jnp.power(x, y), _pow_vjp)


def _ipow_vjp(a, i, o, g):
    n = a[0]
    if n == 0:
        return _zero_vjp(a, i, o, g)
    if n == 1:
        return (g,)
    if n == 2:
        return (g * (i[0] * 2),)
    return (g * (integer_pow(i[0], n - 1) * n),)


integer_pow_p = pointwise("integer_pow", lambda a, x: lax.integer_pow(x, a[0]), _ipow_vjp)


def _minmax_vjp(pick):
    def vjp(a, i, o, g):
        x, y = i
        # ties split the gradient evenly, as in PyTorch
        wx = where(pick(x, y), 1.0, where(x == y, 0.5, 0.0)).to(g.dtype)
        return _st(g * wx, x), _st(g * (1 - wx), y)
    return vjp


maximum_p = pointwise("maximum", lambda a, x, y: jnp.maximum(x, y), _minmax_vjp(lambda x, y: x > y))


minimum_p = pointwise("minimum", lambda a, x, y: jnp.minimum(x, y), _minmax_vjp(lambda x, y: x < y))


floor_divide_p = pointwise("floor_divide", lambda a, x, y: jnp.floor_divide(x, y),
                           lambda a, i, o, g: (None, None))


remainder_p = pointwise("remainder", lambda a, x, y: jnp.remainder(x, y),
                        lambda a, i, o, g: (_st(g, i[0]),
                                            _st(-g * floor_divide(i[0], i[1]), i[1])))


fmod_p = pointwise("fmod", lambda a, x, y: jnp.fmod(x, y),
                   lambda a, i, o, g: (_st(g, i[0]), _st(-g * trunc(i[0] / i[1]), i[1])))


trunc_p = pointwise("trunc", lambda a, x: jnp.trunc(x), _zero_vjp)


def _atan2_vjp(a, i, o, g):
    x, y = i
    r2 = x * x + y * y
    r2 = where(r2 == 0, 1.0, r2)    # at (0, 0) the gradient is 0, as in PyTorch (not nan)
    return _st(g * y / r2, x), _st(-g * x / r2, y)


atan2_p = pointwise("atan2", lambda a, x, y: jnp.arctan2(x, y), _atan2_vjp)


eq_p = pointwise_nondiff("eq", lambda a, x, y: x == y)


ne_p = pointwise_nondiff("ne", lambda a, x, y: x != y)


lt_p = pointwise_nondiff("lt", lambda a, x, y: x < y)


le_p = pointwise_nondiff("le", lambda a, x, y: x <= y)


gt_p = pointwise_nondiff("gt", lambda a, x, y: x > y)


ge_p = pointwise_nondiff("ge", lambda a, x, y: x >= y)


bit_and_p = pointwise_nondiff("and", lambda a, x, y: x & y)


bit_or_p = pointwise_nondiff("or", lambda a, x, y: x | y)


bit_xor_p = pointwise_nondiff("xor", lambda a, x, y: x ^ y)


def _where_vjp(a, i, o, g):
    c, x, y = i
    return None, _st(where(c, g, 0.0), x), _st(where(c, 0.0, g), y)


where_p = pointwise("where", lambda a, c, x, y: jnp.where(c, x, y), _where_vjp)


# ---- more elementwise math -------------------------------------------------------------------
asin_p = pointwise("asin", lambda a, x: jnp.arcsin(x),
                   lambda a, i, o, g: (g * rsqrt(1 - i[0] * i[0]),))


acos_p = pointwise("acos", lambda a, x: jnp.arccos(x),
                   lambda a, i, o, g: (-(g * rsqrt(1 - i[0] * i[0])),))


atan_p = pointwise("atan", lambda a, x: jnp.arctan(x), lambda a, i, o, g: (g / (1 + i[0] * i[0]),))


sinh_p = pointwise("sinh", lambda a, x: jnp.sinh(x), lambda a, i, o, g: (g * cosh(i[0]),))


cosh_p = pointwise("cosh", lambda a, x: jnp.cosh(x), lambda a, i, o, g: (g * sinh(i[0]),))


asinh_p = pointwise("asinh", lambda a, x: jnp.arcsinh(x),
                    lambda a, i, o, g: (g * rsqrt(i[0] * i[0] + 1),))


acosh_p = pointwise("acosh", lambda a, x: jnp.arccosh(x),
                    lambda a, i, o, g: (g * rsqrt(i[0] * i[0] - 1),))


atanh_p = pointwise("atanh", lambda a, x: jnp.arctanh(x),
                    lambda a, i, o, g: (g / (1 - i[0] * i[0]),))


_LN2 = math.log(2.0)


exp2_p = pointwise("exp2", lambda a, x: jnp.exp2(x), lambda a, i, o, g: (g * o * _LN2,))


log2_p = pointwise("log2", lambda a, x: jnp.log2(x), lambda a, i, o, g: (g / (i[0] * _LN2),))


# integer shifts; XLA's semantics for a shift by < 0 or >= the bit width (0 for <<, the sign
# fill for >>) are PyTorch's
shift_left_p = pointwise_nondiff("shift_left", lambda a, x, y: jnp.left_shift(x, y))


shift_right_p = pointwise_nondiff("shift_right", lambda a, x, y: jnp.right_shift(x, y))



# ---- elementwise -----------------------------------------------------------------------------
@torch_op(inplace=True)
def add(x, y, alpha=1):
    if alpha != 1:
        y = mul(y, alpha)
    return _binary(add_p, x, y)


@torch_op(inplace=True)
def sub(x, y, alpha=1):
    if isinstance(x, Tensor) and isinstance(y, Tensor) and x.dtype is D.bool_ \
            and y.dtype is D.bool_:
        raise DTypeError("sub: subtraction, the `-` operator, with two bool tensors is not "
                         "supported; use the `^` or logical_xor() operator instead")
    if alpha != 1:
        y = mul(y, alpha)
    return _binary(sub_p, x, y)


def rsub(x, y):
    if isinstance(y, Tensor):
        return name_grad_fn(_binary(sub_p, y, x), "RsubBackward0")
    return name_grad_fn(_binary(sub_p, _lift(y, x), x), "RsubBackward1")


def _lift(s, like):
    return _scalar(s, _scalar_result(like.dtype, s)) if isinstance(s, _scalar_types) \
        else as_tensor(s, device=like.device)


@torch_op(inplace=True)
def mul(x, y):
    return _binary(mul_p, x, y)


@torch_op(inplace=True)
def div(x, y, rounding_mode=None):
    if rounding_mode == "floor":
        return floor_divide(x, y)
    if rounding_mode == "trunc":
        q = _binary(div_p, x, y, "float")
        r = trunc(q)
        if x.dtype.kind == "f":
            return r
        r = to_dtype(r, x.dtype)
        _check_divisor(y, r, "div(rounding_mode='trunc')")
        return r
    return _binary(div_p, x, y, "float")


def rdiv(x, y):
    # PyTorch computes `2 / x` as x.reciprocal() * 2
    return name_grad_fn(_binary(div_p, _lift(y, x), x, "float"), "MulBackward0")


@torch_op(inplace=True)
def floor_divide(x, y):
    return _check_divisor(y, _binary(floor_divide_p, x, y), "floor_divide")


@torch_op(inplace=True)
def remainder(x, y):
    return _check_divisor(y, _binary(remainder_p, x, y), "remainder")


@torch_op(inplace=True)
def fmod(x, y):
    return _check_divisor(y, _binary(fmod_p, x, y), "fmod")


def _check_divisor(y, out, op):
    """Integer division/modulo by zero raises, as in PyTorch: now for a Python or host-scalar
    divisor, inside the executable for a tensor one (flowlite.checks).  Float division by
    zero is inf/nan, as in PyTorch."""
    if out._node.dtype.kind not in "iu":
        return out
    if isinstance(y, Tensor):
        n = y._node
        if n.op is ir.SCALAR:
            known = n.value
        elif n.op is full_p and not n.inputs and n.device is None:   # a baked constant
            known = n.attrs[1]
        else:
            nonzero_divisor(y, op, out)
            return out
    else:
        known = y
    if isinstance(known, (int, float, bool, np.number, np.bool_)) and known == 0 and \
            out.numel():
        raise IntegerDivisionByZeroError(f"ZeroDivisionError: {op}: integer division by zero "
                                         f"({out.dtype} tensor of shape {tuple(out.shape)})")
    return out


@torch_op(inplace=True)
def atan2(x, y):
    return _binary(atan2_p, x, y, "float")


@torch_op(inplace=True)
def pow(x, y):  # noqa: A001 - PyTorch name
    if isinstance(x, Tensor) and isinstance(y, (int, np.integer)) and not isinstance(y, bool) \
            and y < 0 and x.dtype.kind in "biu":
        raise ArgumentError(f"pow: integers to negative integer powers are not allowed "
                            f"({x.dtype} tensor of shape {tuple(x.shape)} ** {y})")
    if isinstance(x, Tensor) and isinstance(y, (int, np.integer)) and not isinstance(y, bool) \
            and -16 <= y <= 16:
        y = builtins.int(y)
        if y == 1:
            return x
        return apply(integer_pow_p, (x,), (y,), x._node.shape, x._node.dtype) if y >= 0 or \
            x.dtype.kind == "f" else _binary(pow_p, x, y)
    # PyTorch's three pow overloads: tensor ** scalar, tensor ** tensor, scalar ** tensor
    if not isinstance(x, Tensor):
        return name_grad_fn(_binary(pow_p, _lift(x, y), y), "PowBackward2")
    return name_grad_fn(_binary(pow_p, x, y),
                        "PowBackward1" if isinstance(y, Tensor) else "PowBackward0")


def integer_pow(x, n):
    return apply(integer_pow_p, (x,), (n,), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def maximum(x, y):
    return _binary(maximum_p, x, y)


@torch_op(inplace=True)
def minimum(x, y):
    return _binary(minimum_p, x, y)


@torch_op(inplace=True)
def eq(x, y):
    return _binary(eq_p, x, y, "bool")


@torch_op(inplace=True)
def ne(x, y):
    return _binary(ne_p, x, y, "bool")


@torch_op(inplace=True)
def lt(x, y):
    return _binary(lt_p, x, y, "bool")


@torch_op(inplace=True)
def le(x, y):
    return _binary(le_p, x, y, "bool")


@torch_op(inplace=True)
def gt(x, y):
    return _binary(gt_p, x, y, "bool")


@torch_op(inplace=True)
def ge(x, y):
    return _binary(ge_p, x, y, "bool")


def _logical(prim, name, x, y):
    xd = x.dtype if isinstance(x, Tensor) else None
    yd = y.dtype if isinstance(y, Tensor) else None
    for d in (xd, yd):
        if d is not None and d.kind == "f":
            raise UnsupportedError(f"{name}: not supported for floating-point tensors ({d}); "
                                   "use bool or integer tensors")
    return _binary(prim, x, y)


@torch_op(inplace=True)
def logical_and(x, y):
    return _binary(bit_and_p, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


@torch_op(inplace=True)
def logical_or(x, y):
    return _binary(bit_or_p, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


@torch_op(inplace=True)
def logical_xor(x, y):
    return _binary(bit_xor_p, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


@torch_op(inplace=True)
def logical_not(x):
    return apply(logical_not_p, (to_dtype(x, D.bool_),), (), x._node.shape, D.bool_)


@torch_op(inplace=True)
def bitwise_and(x, y):
    return _logical(bit_and_p, "bitwise_and (&)", x, y)


@torch_op(inplace=True)
def bitwise_or(x, y):
    return _logical(bit_or_p, "bitwise_or (|)", x, y)


@torch_op(inplace=True)
def bitwise_xor(x, y):
    return _logical(bit_xor_p, "bitwise_xor (^)", x, y)


@torch_op(inplace=True)
def bitwise_not(x):
    if x.dtype.kind == "f":
        raise UnsupportedError(f"bitwise_not (~): not supported for floating-point tensors "
                               f"({x.dtype})")
    return apply(logical_not_p, (x,), (), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def neg(x):
    if x.dtype is D.bool_:
        raise DTypeError("neg: negation, the `-` operator, on a bool tensor is not supported; "
                         "use `~` or logical_not()")
    return _unary(neg_p, x)


@torch_op(inplace=True)
def abs(x):  # noqa: A001
    return _unary(abs_p, x)


@torch_op(inplace=True)
def sign(x):
    return x if x.dtype is D.bool_ else _unary(sign_p, x)


# Float math: one declaration each.  Integer and bool inputs are promoted to the default
# float first (PyTorch's rule); each is `flowlite.x`, `Tensor.x` and the in-place `Tensor.x_`.
def _float_unary(name, prim, aliases=()):
    def op(x):
        return _unary(prim, x, True)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name} (PyTorch's torch.{name}); integer inputs become float."
    globals()[name] = register(name, op, inplace=True, aliases=aliases)


for _name, _prim in (("exp", exp_p), ("log", log_p), ("log1p", log1p_p), ("expm1", expm1_p),
                     ("sqrt", sqrt_p), ("rsqrt", rsqrt_p), ("sin", sin_p), ("cos", cos_p),
                     ("tanh", tanh_p), ("sigmoid", sigmoid_p), ("erf", erf_p), ("tan", tan_p)):
    _float_unary(_name, _prim)


@torch_op(inplace=True)
def floor(x):
    return x if x.dtype.kind != "f" else _unary(floor_p, x)


@torch_op(inplace=True)
def ceil(x):
    return x if x.dtype.kind != "f" else _unary(ceil_p, x)


@torch_op(inplace=True)
def trunc(x):
    return x if x.dtype.kind != "f" else _unary(trunc_p, x)


@torch_op(inplace=True)
def round(x, decimals=0):  # noqa: A001
    if x.dtype.kind != "f":
        return x
    return apply(round_p, (x,), (decimals,), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def square(x):
    return name_grad_fn(mul(x, x), "PowBackward0")


@torch_op(inplace=True)
def reciprocal(x):
    return name_grad_fn(rdiv(x, 1.0), "ReciprocalBackward0")


@torch_op(inplace=True)
def relu(x):
    return _unary(relu_p, x)


@torch_op
def isfinite(x):
    return apply(isfinite_p, (x,), (), x._node.shape, D.bool_)


@torch_op
def isnan(x):
    return apply(isnan_p, (x,), (), x._node.shape, D.bool_)


@torch_op
def isinf(x):
    return apply(isinf_p, (x,), (), x._node.shape, D.bool_)


@torch_op
def isposinf(x):
    return eq(x, math.inf)


@torch_op
def isneginf(x):
    return eq(x, -math.inf)


@torch_op(inplace=True, aliases=("clip",))
def clamp(x, min=None, max=None):  # noqa: A002
    if min is None and max is None:
        raise ArgumentError("clamp: at least one of 'min' or 'max' must not be None")
    # where, not maximum/minimum: like PyTorch, a value at a bound keeps its full gradient
    if min is not None:
        x = where(lt(x, min), min, x)
    if max is not None:
        x = where(gt(x, max), max, x)
    return name_grad_fn(x, "ClampBackward1")




@torch_op(method=False)
def where(cond, x=None, y=None):
    if x is None and y is None:
        return nonzero(cond, as_tuple=True)
    if x is None or y is None:
        # PyTorch: TypeError (no overload takes a condition and one value)
        raise TypeError("where(): expected a condition and both values x and y (or the "
                        "condition alone), got only one value")
    if not isinstance(cond, Tensor):
        cond = as_tensor(cond)
    if cond.dtype is not D.bool_:
        cond = to_dtype(cond, D.bool_)
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    if xt and yt:
        dt = _promote_nodes(x._node, y._node)
    elif xt:
        dt = _scalar_result(x.dtype, y) if isinstance(y, _scalar_types) else x.dtype
    elif yt:
        dt = _scalar_result(y.dtype, x) if isinstance(x, _scalar_types) else y.dtype
    else:
        dt = D.promote(D.of_python_value(x), D.of_python_value(y))
    x = to_dtype(as_tensor(x, dtype=dt) if not xt else x, dt)
    y = to_dtype(as_tensor(y, dtype=dt) if not yt else y, dt)
    shape = broadcast_shapes(cond._node.shape, x._node.shape, op="where")
    shape = broadcast_shapes(shape, y._node.shape, op="where")
    return apply(where_p, (cond, x, y), (), shape, dt)


# ---- more float math: the inverse trigonometric/hyperbolic family (with the numpy-style
# aliases PyTorch also has), exp2/log2 --------------------------------------------------------
for _name, _prim, _alias in (("asin", asin_p, "arcsin"), ("acos", acos_p, "arccos"),
                             ("atan", atan_p, "arctan"), ("sinh", sinh_p, None),
                             ("cosh", cosh_p, None), ("asinh", asinh_p, "arcsinh"),
                             ("acosh", acosh_p, "arccosh"), ("atanh", atanh_p, "arctanh"),
                             ("exp2", exp2_p, None), ("log2", log2_p, None)):
    _float_unary(_name, _prim, (_alias,) if _alias else ())


@torch_op(inplace=True)
def lerp(x, end, weight):
    """x + weight * (end - x), evaluated as PyTorch does: from `end` when |weight| >= 0.5
    (so lerp(a, b, 1) == b exactly); weight a Python number or a tensor."""
    if not isinstance(x, Tensor) or not isinstance(end, Tensor):
        raise DTypeError("lerp(): input and end must be tensors")
    if x.dtype.kind != "f" or end.dtype is not x.dtype:
        raise RuntimeError(f"lerp(): expected input and end to be floating tensors of one dtype, "
                           f"got {x.dtype} and {end.dtype}")
    if isinstance(weight, Tensor) and weight.dtype is not x.dtype:
        raise RuntimeError(f"lerp(): expected dtype {x.dtype} for `weight` but got dtype "
                           f"{weight.dtype}")
    # PyTorch's kernel: base + coeff * (end - x) with (base, coeff) = (x, w) for a small
    # weight and (end, w - 1) otherwise
    diff = sub(end, x)
    if not isinstance(weight, Tensor):
        if builtins.abs(weight) < 0.5:
            return add(x, mul(diff, weight))
        return add(end, mul(diff, weight - 1))
    small = lt(abs(weight), 0.5)
    return where(small, add(x, mul(diff, weight)), add(end, mul(diff, sub(weight, 1))))


def _shift(prim, name, x, y):
    for v in (x, y):
        d = v.dtype if isinstance(v, Tensor) else None
        if (d is not None and d.kind == "f") or isinstance(v, float):
            shown = d if d is not None else "float"
            raise UnsupportedError(f"{name}: not implemented for floating-point operands "
                                   f"({shown}); shifts need integer tensors")
    return _binary(prim, x, y)


@torch_op(inplace=True)
def bitwise_left_shift(x, y):
    """x << y for integer tensors (0 when y < 0 or y >= the bit width, as in PyTorch)."""
    return _shift(shift_left_p, "bitwise_left_shift (<<)", x, y)


@torch_op(inplace=True)
def bitwise_right_shift(x, y):
    """x >> y for integer tensors (arithmetic for signed ones, as in PyTorch)."""
    return _shift(shift_right_p, "bitwise_right_shift (>>)", x, y)


# ---- hypot: primitive, gradient and front end in one place ----------------------------------
def _hypot_vjp(a, i, o, g):
    # d/dx sqrt(x^2 + y^2) = x / out (nan at the origin, as in PyTorch); the operands were
    # broadcast to one shape before the primitive, so no cotangent needs unbroadcasting
    x, y = i
    return mul(g, div(x, o)), mul(g, div(y, o))


hypot_p = pointwise("hypot", lambda a, x, y: jnp.hypot(x, y), _hypot_vjp)


@torch_op(inplace=True)
def hypot(x, other):
    """sqrt(x**2 + other**2) elementwise, without overflow for large operands (PyTorch's
    torch.hypot); float tensors, broadcast and promoted together."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"hypot(): argument 'input' must be Tensor, not {type(x).__name__}")
    y = other if isinstance(other, Tensor) else _lift(other, x)
    if x.dtype.kind != "f" and y.dtype.kind != "f":
        raise NotImplementedError(f"hypot(): not implemented for integer or bool operands "
                                  f"({x.dtype} of shape {tuple(x.shape)} and {y.dtype} of shape "
                                  f"{tuple(y.shape)}); convert them to a float dtype")
    shape = broadcast_shapes(x._node.shape, y._node.shape, op="hypot")
    return _binary(hypot_p, broadcast_to(x, shape), broadcast_to(y, shape), "float")
