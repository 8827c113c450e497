"""The front-end: every Tensor operation, built from the primitive table.

Hot paths (elementwise binary ops, reductions, reshapes) compute their
shape/dtype rule here with small caches, so recording an op costs a few
dict lookups and one node; rarer ops let `tensor.infer` derive the rule from
the lowering once per signature.  User errors are raised here, naming the op
and the shapes involved.
"""
from __future__ import annotations

import builtins
import collections
import math
import numbers

import numpy as np

from . import dtypes as D
from . import primitives as P
from . import ir
from .tensor import Tensor, apply, tensor, from_numpy, _norm_dim, Size
from .device import default_device

_scalar_types = (int, float, bool, np.number, np.bool_)
_Node = ir.Node
_SCALAR = ir.SCALAR
_promote = D.promote
_scalar_result = D.scalar_result
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}


def _promote_nodes(nx, ny):
    """PyTorch's tensor-tensor promotion: a 0-d tensor only decides the result dtype when its
    category (bool < integer < floating) is higher than the dimensioned operand's."""
    dx, dy = nx.dtype, ny.dtype
    if dx is dy:
        return dx
    if bool(nx.shape) != bool(ny.shape):
        dim, zero = (dx, dy) if nx.shape else (dy, dx)
        return zero if _CATEGORY[zero.kind] > _CATEGORY[dim.kind] else dim
    return _promote(dx, dy)

# ---- scalars -------------------------------------------------------------------------------
# A few constants are baked into graphs (XLA simplifies x*1, x+0, x*2 ...); every other Python
# scalar enters as data (packed per dtype at the sync), so a changing value never recompiles.
_BAKED = {0, 1, 2, -1, 0.5}
_const_cache: dict = {}


def _scalar(value, dtype) -> Tensor:
    v = value.item() if isinstance(value, (np.number, np.bool_)) else value
    if type(v) is bool or dtype is D.bool_:
        v = builtins.bool(v) if dtype is D.bool_ else v
    if type(v) is bool or (v in _BAKED) or (type(v) is float and not math.isfinite(v)):
        key = (v, type(v), dtype)
        node = _const_cache.get(key)
        if node is None:
            cv = v if dtype.kind == "f" else (builtins.int(v) if dtype.kind in "iu" else v)
            node = _const_cache[key] = _Node(P.full, (), ((), cv, dtype), (), dtype, None)
        return Tensor(node)
    if dtype.kind in "iu":
        v = builtins.int(v)
    return Tensor(ir.scalar_node(v, dtype))


def as_tensor(x, dtype=None, device=None) -> Tensor:
    if isinstance(x, Tensor):
        if dtype is not None and x.dtype is not D.canonical(D.from_any(dtype)):
            return to_dtype(x, dtype)
        return x
    if isinstance(x, _scalar_types):
        d = D.canonical(D.from_any(dtype)) if dtype is not None else D.of_python_value(x)
        return _scalar(x, d)
    return tensor(x, dtype=dtype, device=device)


# ---- broadcasting ------------------------------------------------------------------------------
_bcast_cache: dict = {}


def broadcast_shapes(*shapes, op="broadcast_shapes"):
    if len(shapes) == 2:
        key = shapes
        r = _bcast_cache.get(key)
        if r is not None:
            return r
    out = []
    ndim = builtins.max(len(s) for s in shapes)
    for i in range(ndim):
        size = 1
        for s in shapes:
            k = len(s) - ndim + i
            if k < 0:
                continue
            d = s[k]
            if d == 1:
                continue
            if size == 1:
                size = d
            elif d != size:
                shown = " and ".join(str(tuple(s)) for s in shapes)
                raise ValueError(f"{op}: shapes {shown} cannot be broadcast together "
                                 f"(dimension {i - ndim}: {size} vs {d})")
        out.append(size)
    r = tuple(out)
    if len(shapes) == 2:
        _bcast_cache[shapes] = r
    return r


def _binary(prim, x, y, result="promote"):
    """Record an elementwise binary op with PyTorch promotion and broadcasting."""
    if type(x) is not Tensor:
        if isinstance(x, Tensor):
            pass
        elif type(y) is Tensor or isinstance(y, Tensor):
            nd = y._node.dtype
            x = _scalar(x, _scalar_result(nd, x)) if isinstance(x, _scalar_types) else \
                as_tensor(x)
        else:
            raise TypeError(f"{prim.name}: expected a Tensor")
    nx = x._node
    if type(y) is Tensor or isinstance(y, Tensor):
        ny = y._node
        dt = nx.dtype
        if ny.dtype is not dt:
            dt = _promote_nodes(nx, ny)
    elif isinstance(y, _scalar_types):
        dt = _scalar_result(nx.dtype, y)
        y = _scalar(y, dt)
        ny = y._node
    else:
        if y is None:
            raise TypeError(f"{prim.name}: unsupported operand None")
        y = as_tensor(y, device=x.device)
        ny = y._node
        dt = _promote(nx.dtype, ny.dtype)
    if result == "float" and dt.kind != "f":
        dt = D.default_float()
    if nx.dtype is not dt:
        x = to_dtype(x, dt)
    if ny.dtype is not dt:
        y = to_dtype(y, dt)
    sx, sy = nx.shape, ny.shape
    shape = sx if sx == sy else broadcast_shapes(sx, sy, op=prim.name)
    return apply(prim, (x, y), (), shape, D.bool_ if result == "bool" else dt)


def _unary(prim, x, float_only=False):
    if not isinstance(x, Tensor):
        x = as_tensor(x)
    n = x._node
    if float_only and n.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
        n = x._node
    return apply(prim, (x,), (), n.shape, n.dtype)


# ---- elementwise -----------------------------------------------------------------------------
def add(x, y, alpha=1):
    if alpha != 1:
        y = mul(y, alpha)
    return _binary(P.add, x, y)


def sub(x, y, alpha=1):
    if alpha != 1:
        y = mul(y, alpha)
    return _binary(P.sub, x, y)


def rsub(x, y):
    return _binary(P.sub, y, x) if isinstance(y, Tensor) else _binary(P.sub, _lift(y, x), x)


def _lift(s, like):
    return _scalar(s, _scalar_result(like.dtype, s)) if isinstance(s, _scalar_types) \
        else as_tensor(s, device=like.device)


def mul(x, y):
    return _binary(P.mul, x, y)


def div(x, y, rounding_mode=None):
    if rounding_mode == "floor":
        return floor_divide(x, y)
    if rounding_mode == "trunc":
        q = _binary(P.div, x, y, "float")
        r = trunc(q)
        return r if x.dtype.kind == "f" else to_dtype(r, x.dtype)
    return _binary(P.div, x, y, "float")


def rdiv(x, y):
    return _binary(P.div, _lift(y, x), x, "float")


def floor_divide(x, y):
    return _binary(P.floor_divide, x, y)


def remainder(x, y):
    return _binary(P.remainder, x, y)


def fmod(x, y):
    return _binary(P.fmod, x, y)


def atan2(x, y):
    return _binary(P.atan2, x, y, "float")


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


def maximum(x, y):
    return _binary(P.maximum, x, y)


def minimum(x, y):
    return _binary(P.minimum, x, y)


def eq(x, y):
    return _binary(P.eq, x, y, "bool")


def ne(x, y):
    return _binary(P.ne, x, y, "bool")


def lt(x, y):
    return _binary(P.lt, x, y, "bool")


def le(x, y):
    return _binary(P.le, x, y, "bool")


def gt(x, y):
    return _binary(P.gt, x, y, "bool")


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


def logical_and(x, y):
    return _binary(P.bit_and, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


def logical_or(x, y):
    return _binary(P.bit_or, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


def logical_xor(x, y):
    return _binary(P.bit_xor, to_dtype(as_tensor(x), D.bool_), to_dtype(as_tensor(y), D.bool_))


def logical_not(x):
    return apply(P.logical_not, (to_dtype(x, D.bool_),), (), x._node.shape, D.bool_)


def bitwise_not(x):
    if x.dtype.kind == "f":
        raise TypeError(f"bitwise_not (~): not supported for floating-point tensors ({x.dtype})")
    return apply(P.logical_not, (x,), (), x._node.shape, x._node.dtype)


def neg(x):
    if x.dtype is D.bool_:
        raise TypeError("neg: negation, the `-` operator, on a bool tensor is not supported; "
                        "use `~` or logical_not()")
    return _unary(P.neg, x)


def abs(x):  # noqa: A001
    return _unary(P.abs_, x)


def sign(x):
    return x if x.dtype is D.bool_ else _unary(P.sign, x)


def exp(x):
    return _unary(P.exp, x, True)


def log(x):
    return _unary(P.log, x, True)


def log1p(x):
    return _unary(P.log1p, x, True)


def expm1(x):
    return _unary(P.expm1, x, True)


def sqrt(x):
    return _unary(P.sqrt, x, True)


def rsqrt(x):
    return _unary(P.rsqrt, x, True)


def sin(x):
    return _unary(P.sin, x, True)


def cos(x):
    return _unary(P.cos, x, True)


def tanh(x):
    return _unary(P.tanh, x, True)


def sigmoid(x):
    return _unary(P.sigmoid, x, True)


def erf(x):
    return _unary(P.erf, x, True)


def floor(x):
    return x if x.dtype.kind != "f" else _unary(P.floor, x)


def ceil(x):
    return x if x.dtype.kind != "f" else _unary(P.ceil, x)


def trunc(x):
    return x if x.dtype.kind != "f" else _unary(P.trunc, x)


def round(x, decimals=0):  # noqa: A001
    if x.dtype.kind != "f":
        return x
    return apply(P.round_, (x,), (decimals,), x._node.shape, x._node.dtype)


def square(x):
    return mul(x, x)


def reciprocal(x):
    return rdiv(x, 1.0)


def relu(x):
    return _unary(P.relu, x)


def isfinite(x):
    return apply(P.isfinite, (x,), (), x._node.shape, D.bool_)


def isnan(x):
    return apply(P.isnan, (x,), (), x._node.shape, D.bool_)


def isinf(x):
    return apply(P.isinf, (x,), (), x._node.shape, D.bool_)


def clamp(x, min=None, max=None):  # noqa: A002
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
    # where, not maximum/minimum: like PyTorch, a value at a bound keeps its full gradient
    if min is not None:
        x = where(lt(x, min), min, x)
    if max is not None:
        x = where(gt(x, max), max, x)
    return x


clip = clamp


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


def to_dtype(x, dtype):
    d = D.canonical(D.from_any(dtype))
    if x._node.dtype is d:
        return x
    return apply(P.convert, (x,), (d,), x._node.shape, d)


# ---- reductions --------------------------------------------------------------------------------
def _axes(x, dim, op):
    nd = len(x._node.shape)
    if dim is None:
        return tuple(range(nd))
    if isinstance(dim, (list, tuple)):
        axes = tuple(sorted({_norm_dim(d, nd, op) for d in dim}))
        if not axes and dim is not None:
            return tuple(range(nd)) if isinstance(dim, list) and not dim and False else axes
        return axes if nd else ()
    ax = _norm_dim(dim, nd, op)
    return (ax,) if nd else ()  # a 0-d tensor accepts dim 0 / -1 and reduces nothing


def _reduced_shape(shape, axes, keepdim):
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001
    axes = _axes(x, dim, "sum")
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu" and x.dtype is not D.canonical(D.int64):
        x = to_dtype(x, D.int64)
    shape = _reduced_shape(x._node.shape, axes, keepdim)
    return apply(P.reduce_sum, (x,), (axes, keepdim), shape, x._node.dtype)


def sum_to(g, shape):
    """Sum a broadcast result back down to `shape` (the unbroadcast in every VJP)."""
    gs = g._node.shape
    if gs == tuple(shape):
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                      if s == 1 and gs[i + lead] != 1)
    r = apply(P.reduce_sum, (g,), (axes, False), _reduced_shape(gs, axes, False), g.dtype)
    if r._node.shape != tuple(shape):
        r = reshape(r, tuple(shape))
    return r


def mean(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    if x.dtype.kind != "f":
        raise TypeError(f"mean(): could not infer output dtype. Input dtype must be floating "
                        f"point, but got {x.dtype}")
    axes = _axes(x, dim, "mean")
    n = 1
    for a in axes:
        n *= x._node.shape[a]
    s = sum(x, axes, keepdim)
    return s / n if n != 1 else s


def _reduce_extreme(prim, x, axes, keepdim):
    if x.numel() == 0:
        raise RuntimeError(f"{prim.name}(): expected a non-empty tensor")
    shape = _reduced_shape(x._node.shape, axes, keepdim)
    return apply(prim, (x,), (axes, keepdim), shape, x._node.dtype)


MinMax = collections.namedtuple("MinMax", ["values", "indices"])


def amax(x, dim=None, keepdim=False):
    return _reduce_extreme(P.reduce_max, x, _axes(x, dim, "amax"), keepdim)


def amin(x, dim=None, keepdim=False):
    return _reduce_extreme(P.reduce_min, x, _axes(x, dim, "amin"), keepdim)


def max(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    if dim is None:
        return amax(x)
    return _minmax_dim(x, dim, keepdim, argmax, "max")


def min(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    if dim is None:
        return amin(x)
    return _minmax_dim(x, dim, keepdim, argmin, "min")


def _minmax_dim(x, dim, keepdim, argfn, op):
    """Per-dim max/min: the values are gathered at the returned indices, so (as in PyTorch)
    the gradient goes to that one element even when several tie."""
    d = _norm_dim(dim, x.ndim, op)
    if x.numel() == 0:
        raise RuntimeError(f"{op}(): expected a non-empty tensor (shape {tuple(x.shape)})")
    idx = argfn(x, d, True)
    if x.ndim == 0:
        return MinMax(x, idx)
    values = _take_along_prim(x, idx, d)
    if not keepdim:
        values, idx = squeeze(values, d), squeeze(idx, d)
    return MinMax(values, idx)


def _arg(prim, x, dim, keepdim):
    if dim is None:
        if keepdim:  # PyTorch: every dim kept, of size 1
            return reshape(_arg(prim, x, None, False), (1,) * x.ndim)
        x = reshape(x, (-1,))
        dim = 0
    elif x.ndim == 0:
        _norm_dim(dim, 0, prim.name)
        return _arg(prim, x, None, False)
    ax = _norm_dim(dim, len(x._node.shape), prim.name)
    shape = _reduced_shape(x._node.shape, (ax,), keepdim)
    return apply(prim, (x,), (ax, keepdim), shape, D.canonical(D.int64))


def argmax(x, dim=None, keepdim=False):
    return _arg(P.argmax, x, dim, keepdim)


def argmin(x, dim=None, keepdim=False):
    return _arg(P.argmin, x, dim, keepdim)


def prod(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu":
        x = to_dtype(x, D.int64)
    axes = _axes(x, dim, "prod")
    return apply(P.reduce_prod, (x,), (axes, keepdim),
                 _reduced_shape(x._node.shape, axes, keepdim), x._node.dtype)


def all(x, dim=None, keepdim=False):  # noqa: A001
    x = to_dtype(x, D.bool_)
    axes = _axes(x, dim, "all")
    return apply(P.reduce_all, (x,), (axes, keepdim),
                 _reduced_shape(x._node.shape, axes, keepdim), D.bool_)


def any(x, dim=None, keepdim=False):  # noqa: A001
    x = to_dtype(x, D.bool_)
    axes = _axes(x, dim, "any")
    return apply(P.reduce_any, (x,), (axes, keepdim),
                 _reduced_shape(x._node.shape, axes, keepdim), D.bool_)


def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = _axes(x, dim, "var")
    n = 1
    for a in axes:
        n *= x._node.shape[a]
    mu = mean(x, axes, keepdim=True)
    d = x - mu
    return sum(d * d, axes, keepdim) / builtins.max(n - correction, 0)


def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return sqrt(var(x, dim, unbiased, keepdim, correction))


def logsumexp(x, dim, keepdim=False):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    axes = _axes(x, dim, "logsumexp")
    m = amax(x, axes, keepdim=True).detach()
    m = where(isfinite(m), m, 0.0)
    s = log(sum(exp(x - m), axes, keepdim=True)) + m
    return s if keepdim else reshape(s, _reduced_shape(x._node.shape, axes, False))


def cumsum(x, dim, reverse=False, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.kind in "biu":
        x = to_dtype(x, D.int64)
    ax = _norm_dim(dim, len(x._node.shape), "cumsum")
    if not x._node.shape:
        return x
    return apply(P.cumsum, (x,), (ax, reverse), x._node.shape, x._node.dtype)


def cumprod(x, dim):
    ax = _norm_dim(dim, len(x._node.shape), "cumprod")
    if not x._node.shape:
        return x
    return apply(P.cumprod, (x,), (ax,), x._node.shape, x._node.dtype)


def norm(x, p="fro", dim=None, keepdim=False):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    if p in ("fro", 2, 2.0):
        return _zero_safe_root(sum(x * x, dim, keepdim), sqrt)
    if p in (float("inf"), "inf"):
        return amax(abs(x), dim, keepdim)
    if p in (float("-inf"), "-inf"):
        return amin(abs(x), dim, keepdim)
    if p == 1:
        return sum(abs(x), dim, keepdim)
    if p == 0:
        return sum(to_dtype(ne(x, 0), x.dtype), dim, keepdim)
    return _zero_safe_root(sum(pow(abs(x), p), dim, keepdim), lambda s: pow(s, 1.0 / p))


def _zero_safe_root(s, root):
    """root(s) whose gradient is 0 where s == 0 (PyTorch's subgradient for a zero norm)
    instead of inf * 0 = nan: the root never sees a zero."""
    zero = eq(s, 0)
    return where(zero, 0.0, root(where(zero, 1.0, s)))


# ---- shape -----------------------------------------------------------------------------------
def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
        shape = shape[0]
    return tuple(builtins.int(s) for s in shape)


_reshape_cache: dict = {}


def reshape(x, *shape):
    old = x._node.shape
    if len(shape) == 1 and type(shape[0]) is not int:
        shape = tuple(shape[0])
    key = (old, shape)
    hit = _reshape_cache.get(key)
    if hit is not None:
        return x if hit == old else apply(P.reshape, (x,), (hit,), hit, x._node.dtype)
    r = _reshape_slow(x, shape)
    _reshape_cache[key] = r._node.shape
    return r


def _reshape_slow(x, shape):
    shape = _shape_arg(shape)
    old = x._node.shape
    if shape == old:
        return x
    n = 1
    for s in old:
        n *= s
    if -1 in shape:
        if shape.count(-1) > 1:
            raise ValueError(f"reshape: only one dimension can be inferred, got {shape}")
        known = 1
        for s in shape:
            if s != -1:
                known *= s
        if known == 0 or n % known:
            raise ValueError(f"reshape: shape {list(shape)} is invalid for input of size {n} "
                             f"(shape {tuple(old)})")
        shape = tuple(n // known if s == -1 else s for s in shape)
    m = 1
    for s in shape:
        if s < 0:
            raise ValueError(f"reshape: invalid shape dimension {s} in {list(shape)}")
        m *= s
    if m != n:
        raise ValueError(f"reshape: shape {list(shape)} is invalid for input of size {n} "
                         f"(shape {tuple(old)})")
    if shape == old:          # e.g. view(-1) of a vector: no op recorded
        return x
    return apply(P.reshape, (x,), (shape,), shape, x._node.dtype)


view = reshape


def flatten(x, start_dim=0, end_dim=-1):
    nd = len(x._node.shape)
    if nd == 0:
        return reshape(x, (1,))
    s = _norm_dim(start_dim, nd, "flatten")
    e = _norm_dim(end_dim, nd, "flatten")
    if s > e:
        raise ValueError("flatten: start_dim cannot come after end_dim")
    shp = x._node.shape
    n = 1
    for d in shp[s:e + 1]:
        n *= d
    return reshape(x, shp[:s] + (n,) + shp[e + 1:])


def unflatten(x, dim, sizes):
    d = _norm_dim(dim, len(x._node.shape), "unflatten")
    shp = x._node.shape
    sizes = tuple(sizes)
    if -1 in sizes:
        known = 1
        for s in sizes:
            if s != -1:
                known *= s
        sizes = tuple(shp[d] // known if s == -1 else s for s in sizes)
    if math.prod(sizes) != shp[d]:
        raise ValueError(f"unflatten: sizes {sizes} don't multiply up to the size of dim {dim} "
                         f"({shp[d]}) in shape {tuple(shp)}")
    return reshape(x, shp[:d] + sizes + shp[d + 1:])


def squeeze(x, dim=None):
    shp = x._node.shape
    if dim is None:
        return reshape(x, tuple(s for s in shp if s != 1))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    dims = {_norm_dim(d, len(shp), "squeeze") for d in dims} if shp else set()
    return reshape(x, tuple(s for i, s in enumerate(shp) if not (i in dims and s == 1)))


def unsqueeze(x, dim):
    shp = x._node.shape
    d = _norm_dim(dim, len(shp) + 1, "unsqueeze")
    return reshape(x, shp[:d] + (1,) + shp[d:])


_perm_cache: dict = {}


def permute(x, *dims):
    shp = x._node.shape
    if len(dims) == 1 and type(dims[0]) is not int:
        dims = tuple(dims[0])
    key = (shp, dims)
    hit = _perm_cache.get(key)
    if hit is not None:            # validated before: (perm, out shape) or True for identity
        return x if hit is True else apply(P.transpose, (x,), (hit[0],), hit[1], x._node.dtype)
    r = _permute_slow(x, dims)
    if r is x:
        _perm_cache[key] = True
    else:
        perm = tuple(_norm_dim(d, len(shp), "permute") for d in _shape_arg(dims))
        _perm_cache[key] = (perm, tuple(shp[d] for d in perm))
    return r


def _permute_slow(x, dims):
    dims = _shape_arg(dims)
    nd = len(x._node.shape)
    if len(dims) != nd:
        raise ValueError(f"permute: number of dims {len(dims)} doesn't match the tensor's "
                         f"{nd} dims (shape {tuple(x.shape)})")
    dims = tuple(_norm_dim(d, nd, "permute") for d in dims)
    if sorted(dims) != list(range(nd)):
        raise ValueError(f"permute: dims {dims} are not a permutation of {nd} dims")
    if dims == tuple(range(nd)):
        return x
    shp = x._node.shape
    return apply(P.transpose, (x,), (dims,), tuple(shp[d] for d in dims), x._node.dtype)


def transpose(x, dim0, dim1):
    nd = len(x._node.shape)
    if nd == 0:
        return x
    a, b = _norm_dim(dim0, nd, "transpose"), _norm_dim(dim1, nd, "transpose")
    p = list(range(nd))
    p[a], p[b] = p[b], p[a]
    return permute(x, tuple(p))


def t(x):
    if x.ndim > 2:
        raise ValueError(f"t() expects a tensor with <= 2 dimensions, but got {x.ndim}")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def mT(x):
    if x.ndim < 2:
        raise ValueError(f"mT: tensor of shape {tuple(x.shape)} has fewer than 2 dimensions")
    return transpose(x, -2, -1)


def T(x):
    return permute(x, tuple(reversed(range(x.ndim))))


def broadcast_to(x, shape):
    shape = tuple(shape)
    if x._node.shape == shape:
        return x
    try:
        r = broadcast_shapes(x._node.shape, shape, op="broadcast_to")
    except ValueError:
        raise ValueError(f"broadcast_to: the tensor of shape {tuple(x.shape)} can't be "
                         f"expanded to {shape}") from None
    if r != shape:
        raise ValueError(f"broadcast_to: the tensor of shape {tuple(x.shape)} can't be expanded "
                         f"to {shape}")
    return apply(P.broadcast_to, (x,), (shape,), shape, x._node.dtype)


def expand(x, *sizes):
    sizes = _shape_arg(sizes)
    shp = x._node.shape
    if len(sizes) < len(shp):
        raise ValueError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                         f"or equal to the number of dimensions in the tensor ({len(shp)})")
    lead = len(sizes) - len(shp)
    if -1 in sizes[:lead]:
        raise ValueError(f"expand: the expanded size -1 isn't allowed in a leading, new "
                         f"dimension (sizes {tuple(sizes)}, tensor shape {tuple(shp)})")
    full = tuple(shp[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return broadcast_to(x, full)


def expand_as(x, other):
    return broadcast_to(x, other._node.shape)


def repeat(x, *reps):
    reps = _shape_arg(reps)
    shp = x._node.shape
    if len(reps) < len(shp):
        raise ValueError(f"repeat: number of repeat dims ({len(reps)}) can not be smaller than "
                         f"the number of dimensions of the tensor ({len(shp)})")
    shp = (1,) * (len(reps) - len(shp)) + tuple(shp)
    x = reshape(x, shp)
    inter = []
    for s, r in zip(shp, reps):
        inter += [r, s]
    y = broadcast_to(reshape(x, tuple(v for s in shp for v in (1, s))), tuple(inter))
    return reshape(y, tuple(s * r for s, r in zip(shp, reps)))


def _slice_prim(x, starts, stops, steps):
    shape = tuple(builtins.max(0, -(-(e - s) // k)) for s, e, k in zip(starts, stops, steps))
    return apply(P.slice_, (x,), (tuple(starts), tuple(stops), tuple(steps)), shape,
                 x._node.dtype)


def _pad_prim(x, lo, hi, interior, value):
    shape = tuple(l_ + h + n + builtins.max(n - 1, 0) * i
                  for n, l_, h, i in zip(x._node.shape, lo, hi, interior))
    return apply(P.pad, (x,), (tuple(lo), tuple(hi), tuple(interior), value), shape,
                 x._node.dtype)


def _rev_prim(x, axes):
    return apply(P.rev, (x,), (tuple(axes),), x._node.shape, x._node.dtype)


def narrow(x, dim, start, length):
    shp = x._node.shape
    d = _norm_dim(dim, len(shp), "narrow")
    if start < 0:
        start += shp[d]
    if not (0 <= start and start + length <= shp[d] and length >= 0):
        raise IndexError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                         f"({shp[d]}) of dim {dim} in shape {tuple(shp)}")
    if start == 0 and length == shp[d]:
        return x
    starts = [0] * len(shp)
    stops = list(shp)
    starts[d] = start
    stops[d] = start + length
    return _slice_prim(x, starts, stops, [1] * len(shp))


def flip(x, dims):
    if isinstance(dims, int):
        dims = (dims,)
    nd = len(x._node.shape)
    axes = tuple(sorted(_norm_dim(d, nd, "flip") for d in dims))
    return _rev_prim(x, axes) if nd else x


def _check_cat(tensors, dim, op):
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{op}: expected a non-empty list of tensors")
    tensors = [as_tensor(t) for t in tensors]
    return tensors


def cat(tensors, dim=0):
    tensors = _check_cat(tensors, dim, "cat")
    tensors = [t for t in tensors if not (t.ndim == 1 and t._node.shape[0] == 0)] or tensors[:1]
    ref = tensors[0]._node.shape
    nd = len(ref)
    if nd == 0:
        raise ValueError("cat: zero-dimensional tensor cannot be concatenated")
    d = _norm_dim(dim, nd, "cat")
    dt = tensors[0].dtype
    for i, t in enumerate(tensors):
        s = t._node.shape
        dt = _promote(dt, t.dtype)
        if len(s) != nd or builtins.any(a != b for j, (a, b) in enumerate(zip(s, ref)) if j != d):
            raise ValueError(f"cat: sizes of tensors must match except in dimension {d}; "
                             f"tensor 0 has shape {tuple(ref)} but tensor {i} has shape "
                             f"{tuple(s)}")
    if len(tensors) == 1:
        return tensors[0]
    tensors = [to_dtype(t, dt) for t in tensors]
    total = builtins.sum(t._node.shape[d] for t in tensors)
    shape = ref[:d] + (total,) + ref[d + 1:]
    return apply(P.concatenate, tuple(tensors), (d,), shape, dt)


concat = cat


def stack(tensors, dim=0):
    tensors = _check_cat(tensors, dim, "stack")
    ref = tensors[0]._node.shape
    for i, t in enumerate(tensors):
        if t._node.shape != ref:
            raise ValueError(f"stack: expects each tensor to be equal size, but got "
                             f"{tuple(ref)} at entry 0 and {tuple(t.shape)} at entry {i}")
    d = _norm_dim(dim, len(ref) + 1, "stack")
    return cat([unsqueeze(t, d) for t in tensors], d)


def split(x, split_size_or_sections, dim=0):
    shp = x._node.shape
    d = _norm_dim(dim, len(shp), "split")
    n = shp[d]
    if isinstance(split_size_or_sections, int):
        k = split_size_or_sections
        if k <= 0:
            raise ValueError(f"split: split_size must be positive, got {k}")
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
        if not sizes:
            sizes = [0]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise ValueError(f"split: split_sizes {sizes} don't sum to the size of dim {dim} "
                             f"({n}) in shape {tuple(shp)}")
    out, start = [], 0
    for s in sizes:
        out.append(narrow(x, d, start, s))
        start += s
    return tuple(out)


def chunk(x, chunks, dim=0):
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    n = x._node.shape[_norm_dim(dim, x.ndim, "chunk")]
    k = -(-n // chunks)
    return split(x, builtins.max(k, 1), dim)


def unbind(x, dim=0):
    d = _norm_dim(dim, x.ndim, "unbind")
    return tuple(squeeze(narrow(x, d, i, 1), d) for i in range(x._node.shape[d]))


def tril(x, diagonal=0):
    if x.ndim < 2:
        raise ValueError(f"tril: input tensor must have at least 2 dimensions (got {x.ndim})")
    return apply(P.tril, (x,), (diagonal,), x._node.shape, x._node.dtype)


def triu(x, diagonal=0):
    if x.ndim < 2:
        raise ValueError(f"triu: input tensor must have at least 2 dimensions (got {x.ndim})")
    return apply(P.triu, (x,), (diagonal,), x._node.shape, x._node.dtype)


def pad(x, pad, mode="constant", value=0.0):
    """PyTorch's F.pad: `pad` lists (left, right) pairs starting from the LAST dim."""
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: padding length {len(pad)} must be even and at most twice the "
                         f"number of dims ({x.ndim})")
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r}; only 'constant' padding is supported")
    nd = x.ndim
    lo, hi = [0] * nd, [0] * nd
    for i in range(len(pad) // 2):
        lo[nd - 1 - i] = pad[2 * i]
        hi[nd - 1 - i] = pad[2 * i + 1]
    # negative padding crops
    if builtins.any(v < 0 for v in lo + hi):
        starts = [-builtins.min(v, 0) for v in lo]
        stops = [s + builtins.min(h, 0) for s, h in zip(x._node.shape, hi)]
        x = _slice_prim(x, starts, stops, [1] * nd)
        lo = [builtins.max(v, 0) for v in lo]
        hi = [builtins.max(v, 0) for v in hi]
    v = value if x.dtype.kind == "f" else builtins.int(value)
    return _pad_prim(x, lo, hi, [0] * nd, v)


def contiguous(x):
    return x


def clone(x):
    return mul(x, 1) if x.requires_grad else Tensor(x._node)


# ---- indexing --------------------------------------------------------------------------------
def _parse_index(x, idx):
    """-> (spec, index tensors, basic) with PyTorch semantics; bool masks sync to host."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    items = []
    tensors = []
    basic = True
    shp = x._node.shape
    n_consumed = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis and not (
        isinstance(i, Tensor) and i.dtype is D.bool_) and not (isinstance(i, np.ndarray) and
                                                              i.dtype == bool))
    n_consumed += builtins.sum(i.ndim for i in idx if (isinstance(i, Tensor) and i.dtype is
                                                      D.bool_) or (isinstance(i, np.ndarray)
                                                                   and i.dtype == bool))
    if builtins.sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_consumed > len(shp):
        raise IndexError(f"too many indices for tensor of dimension {len(shp)} "
                         f"(shape {tuple(shp)}, index {idx!r})")
    dim = 0
    for it in idx:
        if it is None:
            items.append(("n",))
        elif it is Ellipsis:
            items.append(("e",))
            dim += len(shp) - n_consumed
        elif isinstance(it, slice):
            size = shp[dim]
            start, stop, step = it.start, it.stop, it.step
            step = 1 if step is None else builtins.int(step)
            if step <= 0:
                raise ValueError(f"index: slice step must be positive (got {step})")
            s, e, k = slice(start, stop, step).indices(size)
            items.append(("s", s, builtins.max(e, s), k))
            dim += 1
        elif isinstance(it, (bool, np.bool_)):
            raise IndexError("indexing with a Python bool is not supported")
        elif isinstance(it, (int, np.integer)):
            size = shp[dim]
            i = builtins.int(it)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size "
                                 f"{size}")
            items.append(("i", i + size if i < 0 else i))
            dim += 1
        else:
            t = it
            if not isinstance(t, Tensor):
                arr = np.asarray(t)
                if arr.dtype == object or arr.dtype.kind not in "biu":
                    raise IndexError(f"index: tensors used as indices must be long, int or bool "
                                     f"(got {arr.dtype} from {type(it).__name__})")
                t = from_numpy(arr if arr.dtype == bool else arr.astype(np.int64),
                               device=x.device)
            if t.dtype is D.bool_:
                mask = t.numpy()
                if mask.shape != tuple(shp[dim:dim + mask.ndim]):
                    raise IndexError(f"index: the shape of the mask {mask.shape} does not match "
                                     f"the shape of the indexed tensor {tuple(shp)} at dim {dim}")
                for nz in np.nonzero(mask):
                    items.append(("t",))
                    tensors.append(from_numpy(nz.astype(np.int32), device=x.device))
                dim += mask.ndim
                basic = False
                continue
            if t.dtype.kind not in "iu":
                raise IndexError(f"index: tensors used as indices must be long, int or bool "
                                 f"tensors (got {t.dtype})")
            items.append(("t",))
            tensors.append(t)
            basic = False
            dim += 1
    return tuple(items), tuple(tensors), basic


def _basic_plan(shp, spec):
    """(slice attrs or None, sliced shape, result shape) for ints/slices/None/Ellipsis."""
    nd = len(shp)
    starts, stops, steps = [0] * nd, list(shp), [1] * nd
    out_shape = []
    n_real = builtins.sum(1 for it in spec if it[0] in "si")
    dim = 0
    for it in spec:
        k = it[0]
        if k == "n":
            out_shape.append(1)
        elif k == "e":
            for _ in range(nd - n_real):
                out_shape.append(shp[dim])
                dim += 1
        elif k == "s":
            starts[dim], stops[dim], steps[dim] = it[1], it[2], it[3]
            out_shape.append(builtins.max(0, -(-(it[2] - it[1]) // it[3])))
            dim += 1
        else:
            starts[dim], stops[dim] = it[1], it[1] + 1
            dim += 1
    while dim < nd:
        out_shape.append(shp[dim])
        dim += 1
    if (starts, stops, steps) == ([0] * nd, list(shp), [1] * nd):
        return None, tuple(shp), tuple(out_shape)
    sliced = tuple(builtins.max(0, -(-(e - b) // k)) for b, e, k in zip(starts, stops, steps))
    return (tuple(starts), tuple(stops), tuple(steps)), sliced, tuple(out_shape)


def _apply_basic_plan(x, plan):
    sl, sliced, out_shape = plan
    dt = x._node.dtype
    if sl is not None:
        x = apply(P.slice_, (x,), sl, sliced, dt)
    if sliced != out_shape:
        x = apply(P.reshape, (x,), (out_shape,), out_shape, dt)
    return x


def _basic_index(x, spec):
    """Ints, positive-step slices, None and Ellipsis: a slice + reshape, never a gather."""
    return _apply_basic_plan(x, _basic_plan(x._node.shape, spec))


_basic_cache: dict = {}
_BASIC_TYPES = (int, slice, type(None), type(Ellipsis))


def _basic_key(idx):
    """A hashable key for an index made only of ints, slices, None and Ellipsis (else None)."""
    if type(idx) is not tuple:
        idx = (idx,)
    key = []
    for i in idx:
        t = type(i)
        if t is slice:
            key.append((i.start, i.stop, i.step))
        elif t is int or i is None or i is Ellipsis:
            key.append(i)
        else:
            return None
    return tuple(key)


def getitem(x, idx):
    key = _basic_key(idx)
    if key is not None:
        ck = (x._node.shape, key)
        plan = _basic_cache.get(ck)
        if plan is None:
            spec, _, _ = _parse_index(x, idx)
            plan = _basic_cache[ck] = _basic_plan(x._node.shape, spec)
        return _apply_basic_plan(x, plan)
    spec, tensors, basic = _parse_index(x, idx)
    if basic:
        return _basic_index(x, spec)
    split = _split_int_indices(x, spec)
    if split is not None:
        ints, rest = split
        return _index(_basic_index(x, ints), rest, tensors)
    return _index(x, spec, tensors)


def _split_int_indices(x, spec):
    """PyTorch applies integer indices before index tensors (x[1, :, idx] is x[1][:, idx]);
    numpy/jax would treat the int as one more advanced index and may move the result's dims.
    -> (spec selecting the ints, the rest of the spec) or None when no int meets a tensor."""
    if not builtins.any(it[0] == "i" for it in spec) or \
            not builtins.any(it[0] == "t" for it in spec):
        return None
    shp = x._node.shape
    n_consumed = builtins.sum(1 for it in spec if it[0] in "sit")
    ints, rest, dim = [], [], 0
    for it in spec:
        k = it[0]
        if k == "n":
            rest.append(it)
        elif k == "e":
            ints.append(it)
            rest.append(it)
            dim += len(shp) - n_consumed
        elif k == "i":
            ints.append(it)
            dim += 1
        else:
            ints.append(("s", 0, shp[dim], 1))
            rest.append(it)
            dim += 1
    return tuple(ints), tuple(rest)


def _index(x, spec, tensors):
    return apply(P.index, (x,) + tuple(tensors), (spec,))


def _index_add(x, spec, tensors, v):
    return apply(P.index_add, (x, v) + tuple(tensors), (spec,), x._node.shape, x._node.dtype)


def _index_set(x, spec, tensors, v):
    return apply(P.index_set, (x, v) + tuple(tensors), (spec,), x._node.shape, x._node.dtype)


def index_put(x, idx, value, accumulate=False):
    spec, tensors, _ = _parse_index(x, idx)
    v = to_dtype(as_tensor(value, dtype=x.dtype), x.dtype) if not isinstance(value, Tensor) \
        else to_dtype(value, x.dtype)
    split = _split_int_indices(x, spec) if tensors else None
    if split is not None:   # ints first, as in getitem: update x[ints], then write it back
        ints, rest = split
        sub = _basic_index(x, ints)
        return _index_set(x, ints, (), _put(sub, rest, tensors, v, accumulate))
    return _put(x, spec, tensors, v, accumulate)


def _put(x, spec, tensors, v, accumulate):
    target = _index(x, spec, tensors) if tensors else _basic_index(x, spec)
    try:
        broadcast_to(v, target._node.shape)
    except ValueError:
        raise ValueError(f"setitem: value of shape {tuple(v.shape)} cannot be broadcast to the "
                         f"indexed shape {tuple(target.shape)}") from None
    if accumulate:
        return _index_add(x, spec, tensors, v)
    return _index_set(x, spec, tensors, v)


def setitem(x, idx, value):
    x._rebind(index_put(x, idx, value), "__setitem__")


def _check_index_tensor(index, op):
    if not isinstance(index, Tensor):
        index = as_tensor(index)
    if index.dtype.kind not in "iu":
        raise TypeError(f"{op}(): Expected dtype int64 (or int32) for index, got {index.dtype}")
    return index


def gather(x, dim, index):
    index = _check_index_tensor(index, "gather")
    d = _norm_dim(dim, x.ndim, "gather")
    if index.ndim != x.ndim:
        raise ValueError(f"gather: index tensor must have the same number of dimensions as the "
                         f"input (index {tuple(index.shape)}, input {tuple(x.shape)})")
    for i, (a, b) in enumerate(zip(index._node.shape, x._node.shape)):
        if i != d and a > b:
            raise ValueError(f"gather: size of index {tuple(index.shape)} exceeds the input "
                             f"{tuple(x.shape)} at dimension {i}")
    return _take_along_prim(x, index, d)


def _take_along_prim(x, index, d):
    return apply(P.take_along, (x, index), (d,), index._node.shape, x._node.dtype)


def take_along_dim(x, indices, dim):
    indices = _check_index_tensor(indices, "take_along_dim")
    d = _norm_dim(dim, x.ndim, "take_along_dim")
    shape = list(broadcast_shapes(tuple(s for i, s in enumerate(x.shape) if i != d),
                                  tuple(s for i, s in enumerate(indices.shape) if i != d),
                                  op="take_along_dim"))
    xs = list(shape)
    xs.insert(d, x.shape[d])
    ish = list(shape)
    ish.insert(d, indices.shape[d])
    return _take_along_prim(broadcast_to(x, tuple(xs)), broadcast_to(indices, tuple(ish)), d)


def _scatter_add_prim(x, index, src, d):
    return apply(P.scatter_add, (x, index, src), (d,), x._node.shape, x._node.dtype)


def _scatter_prim(x, index, src, d):
    return apply(P.scatter, (x, index, src), (d,), x._node.shape, x._node.dtype)


def _scatter_args(x, dim, index, src, op):
    index = _check_index_tensor(index, op)
    d = _norm_dim(dim, x.ndim, op)
    if not isinstance(src, Tensor):
        src = broadcast_to(as_tensor(src, dtype=x.dtype), index._node.shape)
    src = to_dtype(src, x.dtype)
    if index.ndim != x.ndim or src.ndim != x.ndim:
        raise ValueError(f"{op}: index {tuple(index.shape)}, src {tuple(src.shape)} and self "
                         f"{tuple(x.shape)} must have the same number of dimensions")
    for i in range(x.ndim):
        if index.shape[i] > src.shape[i] or (i != d and index.shape[i] > x.shape[i]):
            raise ValueError(f"{op}: index {tuple(index.shape)} is larger than src "
                             f"{tuple(src.shape)} or self {tuple(x.shape)} at dimension {i}")
    return index, d, src


def scatter(x, dim, index, src=None, value=None, reduce=None):
    if src is None:
        src = value
    index, d, src = _scatter_args(x, dim, index, src, "scatter")
    if reduce == "add":
        return _scatter_add_prim(x, index, src, d)
    if reduce is not None:
        raise ValueError(f"scatter: unsupported reduce {reduce!r}")
    return _scatter_prim(x, index, src, d)


def scatter_add(x, dim, index, src):
    index, d, src = _scatter_args(x, dim, index, src, "scatter_add")
    return _scatter_add_prim(x, index, src, d)


def index_select(x, dim, index):
    index = _check_index_tensor(index, "index_select")
    if index.ndim > 1:
        raise ValueError(f"index_select: index must be 1-D or 0-D (got shape "
                         f"{tuple(index.shape)})")
    d = _norm_dim(dim, x.ndim, "index_select")
    index = reshape(index, (-1,))
    spec = tuple(("s", 0, s, 1) for s in x._node.shape[:d]) + (("t",),)
    return _index(x, spec, (index,))


def index_add(x, dim, index, source, alpha=1):
    index = _check_index_tensor(index, "index_add")
    d = _norm_dim(dim, x.ndim, "index_add")
    spec = tuple(("s", 0, s, 1) for s in x._node.shape[:d]) + (("t",),)
    if alpha != 1:
        source = source * alpha
    return _index_add(x, spec, (index,), to_dtype(source, x.dtype))


def masked_fill(x, mask, value):
    if not isinstance(mask, Tensor) or mask.dtype is not D.bool_:
        got = f"{mask.dtype} tensor of shape {tuple(mask.shape)}" if isinstance(mask, Tensor) \
            else type(mask).__name__
        raise TypeError(f"masked_fill: expected a bool mask tensor, got a {got}")
    broadcast_shapes(x._node.shape, mask._node.shape, op="masked_fill")
    if isinstance(value, Tensor):
        value = to_dtype(value, x.dtype)
    else:
        value = _scalar(value, x.dtype)
    r = where(mask, value, x)
    return r if r._node.shape == x._node.shape else broadcast_to(r, x._node.shape)


def one_hot(x, num_classes=-1):
    if x.dtype.kind not in "iu":
        raise TypeError(f"one_hot is only applicable to index tensors (got {x.dtype})")
    if num_classes < 0:
        num_classes = builtins.int(amax(x).item()) + 1
    classes = arange(num_classes, device=x.device, dtype=x.dtype)
    return to_dtype(eq(unsqueeze(x, -1), classes), D.int64)


def nonzero(x, as_tuple=False):
    """Data-dependent shape: reads the mask on the host (a sync)."""
    idx = np.nonzero(x.numpy())
    ts = [from_numpy(i.astype(np.int64), device=x.device) for i in idx]
    if as_tuple:
        return tuple(ts)
    return stack(ts, 1) if ts else from_numpy(np.zeros((0, 0), np.int64))


# ---- linear algebra ----------------------------------------------------------------------------
def matmul(a, b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul: both arguments must be tensors")
    sa, sb = a._node.shape, b._node.shape
    if not sa or not sb:
        raise ValueError(f"matmul: both arguments need at least 1 dimension, got shapes "
                         f"{tuple(sa)} and {tuple(sb)}")
    ka = sa[-1]
    kb = sb[-2] if len(sb) >= 2 else sb[0]
    if ka != kb:
        raise ValueError(f"matmul: shapes {tuple(sa)} and {tuple(sb)} are not aligned "
                         f"({ka} (dim {len(sa) - 1}) != {kb} (dim {builtins.max(len(sb) - 2, 0)}))")
    dt = a.dtype if a.dtype is b.dtype else _promote(a.dtype, b.dtype)
    if a.dtype is not dt:
        a = to_dtype(a, dt)
    if b.dtype is not dt:
        b = to_dtype(b, dt)
    squeeze_a = len(sa) == 1
    squeeze_b = len(sb) == 1
    if squeeze_a:
        a = reshape(a, (1, ka))
        sa = (1, ka)
    if squeeze_b:
        b = reshape(b, (kb, 1))
        sb = (kb, 1)
    try:
        batch = broadcast_shapes(sa[:-2], sb[:-2], op="matmul") if len(sa) > 2 or \
            len(sb) > 2 else ()
    except ValueError:
        raise ValueError(f"matmul: batch dimensions of shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)} cannot be broadcast together") from None
    shape = batch + (sa[-2], sb[-1])
    out = apply(P.matmul, (a, b), (), shape, dt)
    if squeeze_a or squeeze_b:
        shape = batch + ((sa[-2],) if not squeeze_a else ()) + ((sb[-1],) if not squeeze_b else ())
        out = reshape(out, shape)
    return out


def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError(f"bmm: expected 3-D tensors, got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm: batch sizes differ: {tuple(a.shape)} and {tuple(b.shape)}")
    return matmul(a, b)


mm = matmul


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"dot: 1D tensors expected, but got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    return matmul(a, b)


def outer(a, b):
    return mul(unsqueeze(a, 1), unsqueeze(b, 0))


def _explicit_einsum(eq, operands):
    eq = eq.replace(" ", "")
    if "->" in eq:
        ins, out = eq.split("->")
    else:
        ins, out = eq, None
    specs = ins.split(",")
    if len(specs) != len(operands):
        raise ValueError(f"einsum: equation {eq!r} names {len(specs)} operands but "
                         f"{len(operands)} were given")
    used = set(c for c in eq if c.isalpha())
    free = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
    ell = None
    new_specs = []
    for s, t in zip(specs, operands):
        if "..." in s:
            n = t.ndim - (len(s) - 3)
            if ell is None or len(ell) < n:
                ell = "".join(free[:n]) if ell is None or len(ell) < n else ell
            s = s.replace("...", ell[len(ell) - n:] if n else "")
        if len(s) != t.ndim:
            raise ValueError(f"einsum: operand spec {s!r} has {len(s)} indices but the operand "
                             f"has shape {tuple(t.shape)}")
        if len(set(s)) != len(s):
            raise ValueError(f"einsum: repeated index in {s!r} (diagonals) is not supported")
        new_specs.append(s)
    if out is None:
        counts = collections.Counter("".join(new_specs))
        out = (ell or "") + "".join(sorted(c for c, k in counts.items() if k == 1 and
                                           (ell is None or c not in ell)))
    else:
        out = out.replace("...", ell or "")
    sizes = {}
    for s, t in zip(new_specs, operands):
        for c, n in zip(s, t.shape):
            if c in sizes and sizes[c] != n and 1 not in (sizes[c], n):
                raise ValueError(f"einsum: index {c!r} has sizes {sizes[c]} and {n} in "
                                 f"{eq!r} (shapes {[tuple(o.shape) for o in operands]})")
            sizes[c] = builtins.max(sizes.get(c, 1), n)
    operands = [broadcast_to(t, tuple(sizes[c] for c in s)) for s, t in zip(new_specs, operands)]
    return ",".join(new_specs) + "->" + out, operands, tuple(sizes[c] for c in out)


_einsum_cache: dict = {}


def einsum(eq, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    operands = [o if type(o) is Tensor or isinstance(o, Tensor) else as_tensor(o)
                for o in operands]
    key = (eq,) + tuple(o._node.shape for o in operands)
    hit = _einsum_cache.get(key)
    if hit is not None and builtins.all(o.dtype is operands[0].dtype for o in operands):
        # same equation and shapes as before: explicit equation and output shape are known
        eq2, shape, bshapes = hit
        ops_ = [o if o._node.shape == bs else broadcast_to(o, bs)
                for o, bs in zip(operands, bshapes)]
        return apply(P.einsum, tuple(ops_), (eq2,), shape, operands[0].dtype)
    eq, operands, shape = _explicit_einsum(eq, operands)
    _einsum_cache[key] = (eq, shape, tuple(o._node.shape for o in operands))
    dt = operands[0].dtype
    for o in operands[1:]:
        dt = _promote(dt, o.dtype)
    operands = [to_dtype(o, dt) for o in operands]
    return apply(P.einsum, tuple(operands), (eq,), shape, dt)


# ---- neural-network primitives ---------------------------------------------------------------
def _conv_raw(x, w, attrs, bias=None):
    return apply(P.conv, (x, w) if bias is None else (x, w, bias), tuple(attrs))


def _conv_input_grad(g, w, attrs, x_shape):
    return apply(P.conv_input_grad, (g, w), tuple(attrs[:5]) + (tuple(x_shape),))


def _conv_weight_grad(x, g, attrs, w_shape):
    return apply(P.conv_weight_grad, (x, g), tuple(attrs[:5]) + (tuple(w_shape),))


def _window_raw(x, attrs):
    return apply(P.reduce_window, (x,), tuple(attrs))


def _sum_window_transpose(g, attrs, x_shape):
    return apply(P.sum_window_transpose, (g,), tuple(attrs[:4]) + (tuple(x_shape),))


def _max_window_grad(x, g, attrs):
    return apply(P.max_window_grad, (x, g), tuple(attrs[:4]), x._node.shape, x._node.dtype)


def _max_window_select(x, gg, attrs):
    return apply(P.max_window_select, (x, gg), tuple(attrs[:4]))


def softmax(x, dim):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    d = _norm_dim(dim, builtins.max(x.ndim, 1), "softmax") if x.ndim else 0
    if x.ndim == 0:
        return ones_like(x)
    return apply(P.softmax, (x,), (d,), x._node.shape, x._node.dtype)


def log_softmax(x, dim):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    if x.ndim == 0:
        return zeros_like(x)
    d = _norm_dim(dim, x.ndim, "log_softmax")
    return apply(P.log_softmax, (x,), (d,), x._node.shape, x._node.dtype)


# ---- creation ------------------------------------------------------------------------------------
def _dev(device):
    if device is None:
        return default_device()
    from .device import device as mk
    return mk(device)


def _creation_dtype(dtype, fill=None):
    if dtype is not None:
        return D.canonical(D.from_any(dtype))
    if fill is None:
        return D.default_float()
    return D.of_python_value(fill)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if isinstance(size, int):
        size = (size,)
    shape = tuple(builtins.int(s) for s in size)
    if builtins.any(s < 0 for s in shape):
        raise ValueError(f"full: negative dimension in size {shape}")
    d = _creation_dtype(dtype, fill_value)
    dev = _dev(device)
    if isinstance(fill_value, Tensor):
        out = broadcast_to(to_dtype(fill_value, d), shape)
    elif isinstance(fill_value, (bool, np.bool_)) or fill_value in _BAKED or d is D.bool_:
        v = fill_value if d.kind == "f" else (builtins.bool(fill_value) if d is D.bool_
                                              else builtins.int(fill_value))
        out = apply(P.full, (), (shape, v, d), shape, d) if True else None
        out._node.device = dev
    else:
        s = _scalar(fill_value, d)
        out = apply(P.broadcast_to, (s,), (shape,), shape, d)
        out._node.device = dev
    if requires_grad:
        out.requires_grad_(True)
    return out


def _size_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        return tuple(size[0])
    return tuple(size)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_size_arg(size), 0, dtype=dtype or D.default_float(), device=device,
                requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_size_arg(size), 1, dtype=dtype or D.default_float(), device=device,
                requires_grad=requires_grad)


empty = zeros


def zeros_like(x, dtype=None, device=None, requires_grad=False):
    return full(x._node.shape, 0, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)


def ones_like(x, dtype=None, device=None, requires_grad=False):
    return full(x._node.shape, 1, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)


empty_like = zeros_like


def full_like(x, fill_value, dtype=None, device=None, requires_grad=False):
    return full(x._node.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    vals = (start, end, step)
    if dtype is None:
        d = D.default_float() if builtins.any(isinstance(v, float) for v in vals) \
            else D.canonical(D.int64)
    else:
        d = D.canonical(D.from_any(dtype))
    n = builtins.max(0, math.ceil((end - start) / step))
    attrs = (start, end, step, n, d)
    out = apply(P.iota, (), attrs, (n,), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    d = _creation_dtype(dtype)
    out = apply(P.linspace, (), (float(start), float(end), builtins.int(steps), d),
                (builtins.int(steps),), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    m = n if m is None else m
    d = _creation_dtype(dtype)
    out = apply(P.eye, (), (builtins.int(n), builtins.int(m), d), (n, m), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out
