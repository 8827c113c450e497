"""Elementwise ops: arithmetic, comparisons, logic, unary math, `clamp`, `where`.

Layer: op front end (flowlite.ops) — imports dtypes, device, ir, tensor, primitives and
the op modules listed before it in ops/__init__.py.
"""
from __future__ import annotations

import builtins

import jax.numpy as jnp
import numpy as np

from .. import dtypes as D
from .. import ir
from .. import primitives as P
from ..checks import IntegerDivisionByZeroError, nonzero_divisor
from ..tensor import Tensor, apply, tensor
from ._core import (_binary, _promote_nodes, _scalar, _scalar_result, _scalar_types, _unary,
                    as_tensor, broadcast_shapes, broadcast_to, nonzero, to_dtype)
from ._registry import register, torch_op


# ---- elementwise -----------------------------------------------------------------------------
@torch_op(inplace=True)
def add(x, y, alpha=1):
    if alpha != 1:
        y = mul(y, alpha)
    return _binary(P.add, x, y)


@torch_op(inplace=True)
def sub(x, y, alpha=1):
    if alpha != 1:
        y = mul(y, alpha)
    return _binary(P.sub, x, y)


def rsub(x, y):
    return _binary(P.sub, y, x) if isinstance(y, Tensor) else _binary(P.sub, _lift(y, x), x)


def _lift(s, like):
    return _scalar(s, _scalar_result(like.dtype, s)) if isinstance(s, _scalar_types) \
        else as_tensor(s, device=like.device)


@torch_op(inplace=True)
def mul(x, y):
    return _binary(P.mul, x, y)


@torch_op(inplace=True)
def div(x, y, rounding_mode=None):
    if rounding_mode == "floor":
        return floor_divide(x, y)
    if rounding_mode == "trunc":
        q = _binary(P.div, x, y, "float")
        r = trunc(q)
        if x.dtype.kind == "f":
            return r
        r = to_dtype(r, x.dtype)
        _check_divisor(y, r, "div(rounding_mode='trunc')")
        return r
    return _binary(P.div, x, y, "float")


def rdiv(x, y):
    return _binary(P.div, _lift(y, x), x, "float")


@torch_op(inplace=True)
def floor_divide(x, y):
    return _check_divisor(y, _binary(P.floor_divide, x, y), "floor_divide")


@torch_op(inplace=True)
def remainder(x, y):
    return _check_divisor(y, _binary(P.remainder, x, y), "remainder")


@torch_op(inplace=True)
def fmod(x, y):
    return _check_divisor(y, _binary(P.fmod, x, y), "fmod")


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
        elif n.op is P.full and not n.inputs and n.device is None:   # a baked constant
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
    return _binary(P.atan2, x, y, "float")


@torch_op(inplace=True)
def pow(x, y):  # noqa: A001 - PyTorch name
    if isinstance(x, Tensor) and isinstance(y, (int, np.integer)) and not isinstance(y, bool) \
            and y < 0 and x.dtype.kind in "biu":
        raise ValueError(f"pow: integers to negative integer powers are not allowed "
                         f"({x.dtype} tensor of shape {tuple(x.shape)} ** {y})")
    if isinstance(x, Tensor) and isinstance(y, (int, np.integer)) and not isinstance(y, bool) \
            and -16 <= y <= 16:
        y = builtins.int(y)
        if y == 1:
            return x
        return apply(P.integer_pow, (x,), (y,), x._node.shape, x._node.dtype) if y >= 0 or \
            x.dtype.kind == "f" else _binary(P.pow_, x, y)
    if not isinstance(x, Tensor):
        return _binary(P.pow_, _lift(x, y), y)
    return _binary(P.pow_, x, y)


def integer_pow(x, n):
    return apply(P.integer_pow, (x,), (n,), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def maximum(x, y):
    return _binary(P.maximum, x, y)


@torch_op(inplace=True)
def minimum(x, y):
    return _binary(P.minimum, x, y)


@torch_op(inplace=True)
def eq(x, y):
    return _binary(P.eq, x, y, "bool")


@torch_op(inplace=True)
def ne(x, y):
    return _binary(P.ne, x, y, "bool")


@torch_op(inplace=True)
def lt(x, y):
    return _binary(P.lt, x, y, "bool")


@torch_op(inplace=True)
def le(x, y):
    return _binary(P.le, x, y, "bool")


@torch_op(inplace=True)
def gt(x, y):
    return _binary(P.gt, x, y, "bool")


@torch_op(inplace=True)
def ge(x, y):
    return _binary(P.ge, x, y, "bool")


def _logical(prim, name, x, y):
    xd = x.dtype if isinstance(x, Tensor) else None
    yd = y.dtype if isinstance(y, Tensor) else None
    for d in (xd, yd):
        if d is not None and d.kind == "f":
            raise TypeError(f"{name}: not supported for floating-point tensors ({d}); "
                            "use bool or integer tensors")
    return _binary(prim, x, y)


@torch_op(inplace=True)
def logical_and(x, y):
    return _binary(P.bit_and, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


@torch_op(inplace=True)
def logical_or(x, y):
    return _binary(P.bit_or, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


@torch_op(inplace=True)
def logical_xor(x, y):
    return _binary(P.bit_xor, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


@torch_op(inplace=True)
def logical_not(x):
    return apply(P.logical_not, (to_dtype(x, D.bool_),), (), x._node.shape, D.bool_)


@torch_op(inplace=True)
def bitwise_not(x):
    if x.dtype.kind == "f":
        raise TypeError(f"bitwise_not (~): not supported for floating-point tensors ({x.dtype})")
    return apply(P.logical_not, (x,), (), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def neg(x):
    if x.dtype is D.bool_:
        raise TypeError("neg: negation, the `-` operator, on a bool tensor is not supported; "
                        "use `~` or logical_not()")
    return _unary(P.neg, x)


@torch_op(inplace=True)
def abs(x):  # noqa: A001
    return _unary(P.abs_, x)


@torch_op(inplace=True)
def sign(x):
    return x if x.dtype is D.bool_ else _unary(P.sign, x)


# Float math: one declaration each.  Integer and bool inputs are promoted to the default
# float first (PyTorch's rule); each is `flowlite.x`, `Tensor.x` and the in-place `Tensor.x_`.
def _float_unary(name, prim, aliases=()):
    def op(x):
        return _unary(prim, x, True)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name} (PyTorch's torch.{name}); integer inputs become float."
    globals()[name] = register(name, op, inplace=True, aliases=aliases)


for _name, _prim in (("exp", P.exp), ("log", P.log), ("log1p", P.log1p), ("expm1", P.expm1),
                     ("sqrt", P.sqrt), ("rsqrt", P.rsqrt), ("sin", P.sin), ("cos", P.cos),
                     ("tanh", P.tanh), ("sigmoid", P.sigmoid), ("erf", P.erf), ("tan", P.tan)):
    _float_unary(_name, _prim)


@torch_op(inplace=True)
def floor(x):
    return x if x.dtype.kind != "f" else _unary(P.floor, x)


@torch_op(inplace=True)
def ceil(x):
    return x if x.dtype.kind != "f" else _unary(P.ceil, x)


@torch_op(inplace=True)
def trunc(x):
    return x if x.dtype.kind != "f" else _unary(P.trunc, x)


@torch_op(inplace=True)
def round(x, decimals=0):  # noqa: A001
    if x.dtype.kind != "f":
        return x
    return apply(P.round_, (x,), (decimals,), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def square(x):
    return mul(x, x)


@torch_op(inplace=True)
def reciprocal(x):
    return rdiv(x, 1.0)


@torch_op(inplace=True)
def relu(x):
    return _unary(P.relu, x)


@torch_op
def isfinite(x):
    return apply(P.isfinite, (x,), (), x._node.shape, D.bool_)


@torch_op
def isnan(x):
    return apply(P.isnan, (x,), (), x._node.shape, D.bool_)


@torch_op
def isinf(x):
    return apply(P.isinf, (x,), (), x._node.shape, D.bool_)


@torch_op(inplace=True, aliases=("clip",))
def clamp(x, min=None, max=None):  # noqa: A002
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
    # where, not maximum/minimum: like PyTorch, a value at a bound keeps its full gradient
    if min is not None:
        x = where(lt(x, min), min, x)
    if max is not None:
        x = where(gt(x, max), max, x)
    return x




@torch_op(method=False)
def where(cond, x=None, y=None):
    if x is None and y is None:
        return nonzero(cond, as_tuple=True)
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
    return apply(P.where, (cond, x, y), (), shape, dt)


# ---- more float math: the inverse trigonometric/hyperbolic family (with the numpy-style
# aliases PyTorch also has), exp2/log2 --------------------------------------------------------
for _name, _prim, _alias in (("asin", P.asin, "arcsin"), ("acos", P.acos, "arccos"),
                             ("atan", P.atan, "arctan"), ("sinh", P.sinh, None),
                             ("cosh", P.cosh, None), ("asinh", P.asinh, "arcsinh"),
                             ("acosh", P.acosh, "arccosh"), ("atanh", P.atanh, "arctanh"),
                             ("exp2", P.exp2, None), ("log2", P.log2, None)):
    _float_unary(_name, _prim, (_alias,) if _alias else ())


@torch_op(inplace=True)
def lerp(x, end, weight):
    """x + weight * (end - x), evaluated as PyTorch does: from `end` when |weight| >= 0.5
    (so lerp(a, b, 1) == b exactly); weight a Python number or a tensor."""
    if not isinstance(x, Tensor) or not isinstance(end, Tensor):
        raise TypeError("lerp(): input and end must be tensors")
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
            raise TypeError(f"{name}: not implemented for floating-point operands ({shown}); "
                            "shifts need integer tensors")
    return _binary(prim, x, y)


@torch_op(inplace=True)
def bitwise_left_shift(x, y):
    """x << y for integer tensors (0 when y < 0 or y >= the bit width, as in PyTorch)."""
    return _shift(P.shift_left, "bitwise_left_shift (<<)", x, y)


@torch_op(inplace=True)
def bitwise_right_shift(x, y):
    """x >> y for integer tensors (arithmetic for signed ones, as in PyTorch)."""
    return _shift(P.shift_right, "bitwise_right_shift (>>)", x, y)


# ---- hypot: primitive, gradient and front end in one place ----------------------------------
def _hypot_vjp(a, i, o, g):
    # d/dx sqrt(x^2 + y^2) = x / out (nan at the origin, as in PyTorch); the operands were
    # broadcast to one shape before the primitive, so no cotangent needs unbroadcasting
    x, y = i
    return mul(g, div(x, o)), mul(g, div(y, o))


_hypot = ir.Prim("hypot", lambda a, x, y: jnp.hypot(x, y), _hypot_vjp, elementwise=True)


@torch_op(inplace=True)
def hypot(x, other):
    """sqrt(x**2 + other**2) elementwise, without overflow for large operands (PyTorch's
    torch.hypot); float tensors, broadcast and promoted together."""
    if not isinstance(x, Tensor):
        raise TypeError(f"hypot(): argument 'input' must be Tensor, not {type(x).__name__}")
    y = other if isinstance(other, Tensor) else _lift(other, x)
    if x.dtype.kind != "f" and y.dtype.kind != "f":
        raise NotImplementedError(f"hypot(): not implemented for integer or bool operands "
                                  f"({x.dtype} of shape {tuple(x.shape)} and {y.dtype} of shape "
                                  f"{tuple(y.shape)}); convert them to a float dtype")
    shape = broadcast_shapes(x._node.shape, y._node.shape, op="hypot")
    return _binary(_hypot, broadcast_to(x, shape), broadcast_to(y, shape), "float")
