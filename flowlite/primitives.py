"""The primitive table.

Layer: primitives — imports ir, tape and tensor (`apply`, to record a VJP's own
primitives).  Each primitive is one entry: its lowering to `jax.lax`/`jax.numpy` (run only
while an executable is being built) and its VJP written in flowlite ops (so backward is
lazy and differentiable again).  Shape/dtype rules come from the front end (`flowlite.ops`)
for hot ops, or from the lowering run abstractly once per signature (`tensor.infer`).

The VJPs are written against the op front end, which is built from this table and so
sits above it: `flowlite.ops` binds itself in as `F` when it loads (`bind_front_end`), and
a VJP reads `F` only when it runs, during a backward pass.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import buckets as B, fusion, layout
from .ir import Prim
from .matmul_precision import for_operands as _precision
from .linspace_values import linspace_values
from .tape import _TupleCotangent
from .tensor import apply


class _UnboundFrontEnd:
    def __getattr__(self, name):
        raise RuntimeError(f"flowlite.primitives: a VJP needs the op front end ('{name}'), "
                           "but flowlite.ops has not been imported")


F = _UnboundFrontEnd()   # the op front end, once flowlite.ops has loaded


def bind_front_end(ops) -> None:
    """Called once by flowlite.ops: the namespace VJPs build their cotangents with."""
    global F
    F = ops


def prim(name, lower, vjp=None, **kw) -> Prim:
    return Prim(name, lower, vjp, **kw)


def nondiff(name, lower, **kw) -> Prim:
    return prim(name, lower, None, nondiff=True, **kw)


def pointwise(name, lower, vjp=None, **kw) -> Prim:
    """An elementwise primitive (Prim.elementwise): fused by XLA, padded freely by buckets."""
    return prim(name, lower, vjp, elementwise=True, **kw)


def pointwise_nondiff(name, lower, **kw) -> Prim:
    return nondiff(name, lower, elementwise=True, **kw)


def _st(g, x):
    """Sum a broadcast cotangent back to x's shape."""
    return F.sum_to(g, x.shape)


# ---- elementwise unary -----------------------------------------------------------------
neg = pointwise("neg", lambda a, x: -x, lambda a, i, o, g: (-g,))
abs_ = pointwise("abs", lambda a, x: jnp.abs(x), lambda a, i, o, g: (g * F.sign(i[0]),))
sign = pointwise("sign", lambda a, x: jnp.sign(x), lambda a, i, o, g: (None,))
exp = pointwise("exp", lambda a, x: jnp.exp(x), lambda a, i, o, g: (g * o,))
log = pointwise("log", lambda a, x: jnp.log(x), lambda a, i, o, g: (g / i[0],))
log1p = pointwise("log1p", lambda a, x: jnp.log1p(x), lambda a, i, o, g: (g / (i[0] + 1),))
expm1 = pointwise("expm1", lambda a, x: jnp.expm1(x), lambda a, i, o, g: (g * (o + 1),))
sqrt = pointwise("sqrt", lambda a, x: jnp.sqrt(x), lambda a, i, o, g: (g * 0.5 / o,))
rsqrt = pointwise("rsqrt", lambda a, x: lax.rsqrt(x), lambda a, i, o, g: (g * -0.5 * o / i[0],))
sin = pointwise("sin", lambda a, x: jnp.sin(x), lambda a, i, o, g: (g * F.cos(i[0]),))
cos = pointwise("cos", lambda a, x: jnp.cos(x), lambda a, i, o, g: (-(g * F.sin(i[0])),))
tan = pointwise("tan", lambda a, x: jnp.tan(x), lambda a, i, o, g: (g * (1 + o * o),))
tanh = pointwise("tanh", lambda a, x: jnp.tanh(x), lambda a, i, o, g: (g * (1 - o * o),))
sigmoid = pointwise("sigmoid", lambda a, x: jax.nn.sigmoid(x),
                    lambda a, i, o, g: (g * o * (1 - o),))
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
erf = pointwise("erf", lambda a, x: lax.erf(x),
                lambda a, i, o, g: (g * _TWO_OVER_SQRT_PI * F.exp(-(i[0] * i[0])),))
floor = pointwise("floor", lambda a, x: jnp.floor(x), lambda a, i, o, g: (None,))
ceil = pointwise("ceil", lambda a, x: jnp.ceil(x), lambda a, i, o, g: (None,))
round_ = pointwise("round", lambda a, x: jnp.round(x, a[0]), lambda a, i, o, g: (None,))
relu = pointwise("relu", lambda a, x: jnp.maximum(x, jnp.zeros((), x.dtype)),
                 lambda a, i, o, g: (g * (i[0] > 0).to(g.dtype),))
logical_not = pointwise_nondiff("logical_not", lambda a, x: jnp.logical_not(x) if x.dtype == bool
                                else jnp.invert(x))
isfinite = pointwise_nondiff("isfinite", lambda a, x: jnp.isfinite(x))
isnan = pointwise_nondiff("isnan", lambda a, x: jnp.isnan(x))
isinf = pointwise_nondiff("isinf", lambda a, x: jnp.isinf(x))


def _convert_vjp(a, i, o, g):
    x = i[0]
    return (F.to_dtype(g, x.dtype),) if x.dtype.is_floating_point else (None,)


# (exponent, mantissa) bits of the floats a cast can narrow to
_FLOAT_BITS = {np.dtype(jnp.bfloat16): (8, 7), np.dtype(np.float16): (5, 10),
               np.dtype(np.float32): (8, 23)}


def _convert_lower(a, x):
    d = np.dtype(a[0].np)
    bits = _FLOAT_BITS.get(d)
    if bits is not None and jnp.issubdtype(x.dtype, jnp.floating) and \
            x.dtype.itemsize > d.itemsize:
        # a narrowing cast rounds, as in PyTorch: XLA:GPU's default excess precision may
        # otherwise drop a convert pair (`x.bfloat16().float()` would return x unrounded);
        # reduce_precision is kept.  XLA:CPU keeps the pair: its programs stay as they were
        return lax.platform_dependent(
            x, cpu=lambda x: x.astype(d),
            default=lambda x: lax.reduce_precision(x, *bits).astype(d))
    return x.astype(d)


convert = pointwise("convert", _convert_lower, _convert_vjp)

# ---- elementwise binary (inputs already share a dtype; jnp broadcasts) ---------------------
add = pointwise("add", lambda a, x, y: x + y, lambda a, i, o, g: (_st(g, i[0]), _st(g, i[1])))
sub = pointwise("sub", lambda a, x, y: x - y, lambda a, i, o, g: (_st(g, i[0]), _st(-g, i[1])))
mul = pointwise("mul", lambda a, x, y: x * y,
                lambda a, i, o, g: (_st(g * i[1], i[0]), _st(g * i[0], i[1])))
div = pointwise("div", lambda a, x, y: x / y,
                lambda a, i, o, g: (_st(g / i[1], i[0]), _st(-(g * o) / i[1], i[1])))


def _pow_vjp(a, i, o, g):
    x, y = i
    gx = F.where(y == 0, 0.0, g * y * F.pow(x, y - 1))
    gy = F.where(x == 0, 0.0, g * o * F.log(x))
    return _st(gx, x), _st(gy, y)


pow_ = pointwise("pow", lambda a, x, y: jnp.power(x, y), _pow_vjp)


def _ipow_vjp(a, i, o, g):
    n = a[0]
    if n == 0:
        return (None,)
    if n == 1:
        return (g,)
    if n == 2:
        return (g * (i[0] * 2),)
    return (g * (F.integer_pow(i[0], n - 1) * n),)


integer_pow = pointwise("integer_pow", lambda a, x: lax.integer_pow(x, a[0]), _ipow_vjp)


def _minmax_vjp(pick):
    def vjp(a, i, o, g):
        x, y = i
        # ties split the gradient evenly, as in PyTorch
        wx = F.where(pick(x, y), 1.0, F.where(x == y, 0.5, 0.0)).to(g.dtype)
        return _st(g * wx, x), _st(g * (1 - wx), y)
    return vjp


maximum = pointwise("maximum", lambda a, x, y: jnp.maximum(x, y), _minmax_vjp(lambda x, y: x > y))
minimum = pointwise("minimum", lambda a, x, y: jnp.minimum(x, y), _minmax_vjp(lambda x, y: x < y))
floor_divide = pointwise("floor_divide", lambda a, x, y: jnp.floor_divide(x, y),
                         lambda a, i, o, g: (None, None))
remainder = pointwise("remainder", lambda a, x, y: jnp.remainder(x, y),
                      lambda a, i, o, g: (_st(g, i[0]),
                                          _st(-g * F.floor_divide(i[0], i[1]), i[1])))
fmod = pointwise("fmod", lambda a, x, y: jnp.fmod(x, y),
                 lambda a, i, o, g: (_st(g, i[0]), _st(-g * F.trunc(i[0] / i[1]), i[1])))
trunc = pointwise("trunc", lambda a, x: jnp.trunc(x), lambda a, i, o, g: (None,))


def _atan2_vjp(a, i, o, g):
    x, y = i
    r2 = x * x + y * y
    r2 = F.where(r2 == 0, 1.0, r2)    # at (0, 0) the gradient is 0, as in PyTorch (not nan)
    return _st(g * y / r2, x), _st(-g * x / r2, y)


atan2 = pointwise("atan2", lambda a, x, y: jnp.arctan2(x, y), _atan2_vjp)
eq = pointwise_nondiff("eq", lambda a, x, y: x == y)
ne = pointwise_nondiff("ne", lambda a, x, y: x != y)
lt = pointwise_nondiff("lt", lambda a, x, y: x < y)
le = pointwise_nondiff("le", lambda a, x, y: x <= y)
gt = pointwise_nondiff("gt", lambda a, x, y: x > y)
ge = pointwise_nondiff("ge", lambda a, x, y: x >= y)
bit_and = pointwise_nondiff("and", lambda a, x, y: x & y)
bit_or = pointwise_nondiff("or", lambda a, x, y: x | y)
bit_xor = pointwise_nondiff("xor", lambda a, x, y: x ^ y)


def _where_vjp(a, i, o, g):
    c, x, y = i
    z = F.zeros_like(g)
    return None, _st(F.where(c, g, z), x), _st(F.where(c, z, g), y)


where = pointwise("where", lambda a, c, x, y: jnp.where(c, x, y), _where_vjp)

# ---- reductions (attrs: axes, keepdims) -----------------------------------------------------


def _expand_back(g, a, x):
    """Broadcast a reduced cotangent back over the reduced axes."""
    axes, keep = a[0], a[1]
    if not keep:
        shape = list(x.shape)
        for ax in axes:
            shape[ax] = 1
        g = F.reshape(g, tuple(shape))
    return F.broadcast_to(g, x.shape)


reduce_sum = prim("sum", lambda a, x: jnp.sum(x, axis=a[0], keepdims=a[1]),
                  lambda a, i, o, g: (_expand_back(g, a, i[0]),), bucket=B.rule_reduce(None))


def _extreme_vjp(a, i, o, g):
    x = i[0]
    ob = _expand_back(o, a, x)
    mask = (x == ob).to(g.dtype)
    count = _expand_back(F.sum(mask, dim=a[0], keepdim=a[1]), a, x)
    return (_expand_back(g, a, x) * mask / count,)


reduce_max = prim("amax", lambda a, x: jnp.max(x, axis=a[0], keepdims=a[1]), _extreme_vjp,
                  bucket=B.rule_reduce(True))
reduce_min = prim("amin", lambda a, x: jnp.min(x, axis=a[0], keepdims=a[1]), _extreme_vjp,
                  bucket=B.rule_reduce(False))


def _prod_vjp(a, i, o, g):
    x = i[0]
    axes = a[0]
    # product of all *other* elements, zero-safe: exclusive cumprods from both ends.
    rest = [d for d in range(x.ndim) if d not in axes]
    perm = rest + list(axes)
    xt = F.permute(x, perm)
    lead = tuple(xt.shape[:len(rest)])
    k = 1
    for ax in axes:
        k *= x.shape[ax]
    flat = F.reshape(xt, lead + (k,))
    one = F.ones_like(F.narrow(flat, -1, 0, 1))
    left = F.cumprod(F.cat([one, F.narrow(flat, -1, 0, k - 1)], -1), -1)
    right = F.flip(F.cumprod(F.flip(F.cat([F.narrow(flat, -1, 1, k - 1), one], -1), [-1]), -1), [-1])
    others = F.reshape(left * right, tuple(xt.shape))
    inv = [0] * len(perm)
    for j, p in enumerate(perm):
        inv[p] = j
    others = F.permute(others, inv)
    return (_expand_back(g, a, x) * others,)


reduce_prod = prim("prod", lambda a, x: jnp.prod(x, axis=a[0], keepdims=a[1]), _prod_vjp)
argmax = nondiff("argmax", lambda a, x: jnp.argmax(x, axis=a[0], keepdims=a[1]))
argmin = nondiff("argmin", lambda a, x: jnp.argmin(x, axis=a[0], keepdims=a[1]))
reduce_all = nondiff("all", lambda a, x: jnp.all(x, axis=a[0], keepdims=a[1]))
reduce_any = nondiff("any", lambda a, x: jnp.any(x, axis=a[0], keepdims=a[1]))
cumsum = prim("cumsum", lambda a, x: lax.cumsum(x, axis=a[0], reverse=a[1]),
              lambda a, i, o, g: (F.cumsum(g, a[0], reverse=not a[1]),))


def _cumprod_vjp(a, i, o, g):
    # d out_j / d x_i = out_j / x_i only while no zero precedes i; zero-safe, like PyTorch:
    # before a slice's first zero use that formula, at the first zero the reverse sum of
    # g * cumprod(x with that zero set to 1), after it 0.
    x, axis = i[0], a[0]
    zero = x == 0
    seen = F.cumsum(zero, axis)
    first = F.logical_and(zero, seen == 1)
    regular = F.cumsum(g * o, axis, reverse=True) / F.where(zero, 1.0, x)
    at_zero = F.cumsum(g * F.cumprod(F.where(first, 1.0, x), axis), axis, reverse=True)
    return (F.where(seen == 0, regular, F.where(first, at_zero, 0.0)),)


cumprod = prim("cumprod", lambda a, x: lax.cumprod(x, axis=a[0]), _cumprod_vjp)
cummax = nondiff("cummax", lambda a, x: lax.cummax(x, axis=a[0]))

# ---- shape -----------------------------------------------------------------------------------
reshape = prim("reshape", lambda a, x: jnp.reshape(x, a[0]),
               lambda a, i, o, g: (F.reshape(g, i[0].shape),), bucket=B.rule_reshape)
broadcast_to = prim("broadcast_to", lambda a, x: jnp.broadcast_to(x, a[0]),
                    lambda a, i, o, g: (F.sum_to(g, i[0].shape),), bucket=B.rule_broadcast_to)


def _inverse_perm(p):
    inv = [0] * len(p)
    for j, q in enumerate(p):
        inv[q] = j
    return tuple(inv)


transpose = prim("transpose", lambda a, x: jnp.transpose(x, a[0]),
                 lambda a, i, o, g: (F.permute(g, _inverse_perm(a[0])),), bucket=B.rule_transpose)


def _slice_vjp(a, i, o, g):
    starts, stops, steps = a
    x = i[0]
    if g.numel() == 0:
        return (F.zeros_like(x),)
    lo, hi, interior = [], [], []
    for d, (s, e, k) in enumerate(zip(starts, stops, steps)):
        n = g.shape[d]
        lo.append(s)
        interior.append(k - 1)
        hi.append(x.shape[d] - (s + (n - 1) * k + 1))
    return (F._pad_prim(g, tuple(lo), tuple(hi), tuple(interior), 0),)


slice_ = prim("slice", lambda a, x: lax.slice(x, a[0], a[1], a[2]), _slice_vjp,
              bucket=B.rule_slice)


# a slice whose start is data (host scalars): `data[i:i + block_size]` with `i` read from a
# tensor reuses one program for every offset; its gradient puts g back at the same offset
def _dyn_slice_vjp(a, i, o, g):
    return (F._dyn_pad(g, i[1:], i[0].shape),) + (None,) * (len(i) - 1)


def _dyn_pad_vjp(a, i, o, g):
    return (F._dyn_slice(g, i[1:], i[0].shape),) + (None,) * (len(i) - 1)


dyn_slice = prim("dyn_slice", lambda a, x, *s: lax.dynamic_slice(x, s, a[0]), _dyn_slice_vjp)
dyn_pad = prim("dyn_pad", lambda a, g, *s: lax.dynamic_update_slice(
    jnp.zeros(a[0], g.dtype), g, s), _dyn_pad_vjp)



# ---- strided views: reading and writing a root through a layout (flowlite.views) -------------
def _flat_index(shape, off, strides):
    idx = jnp.full(shape, off, jnp.int32)
    for d, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s:
            idx = idx + lax.broadcasted_iota(jnp.int32, shape, d) * s
    return idx


def _view_read_lower(a, x):
    root_shape, shape, off, strides = a
    p = layout.plan(root_shape, shape, off, strides)
    if p[0] == "identity":
        return jnp.reshape(x, shape)
    if p[0] == "box":
        _, starts, limits, steps, dims, perm = p
        y = lax.slice(x, starts, limits, steps)
        y = jnp.reshape(y, tuple(y.shape[d] for d in dims))
        return jnp.reshape(jnp.transpose(y, perm), shape)
    return jnp.reshape(x, (-1,))[_flat_index(shape, off, strides)]


def _view_write_lower(a, x, v):
    root_shape, shape, off, strides, accumulate = a
    p = layout.plan(root_shape, shape, off, strides)
    if p[0] == "identity":
        v = jnp.reshape(v, root_shape)
        return x + v if accumulate else v
    if p[0] == "box":
        _, starts, limits, steps, dims, perm = p
        sizes = [1] * len(root_shape)
        for d in dims:
            sizes[d] = len(range(starts[d], limits[d], steps[d]))
        kept = tuple(n for n in shape if n > 1)
        v = jnp.transpose(jnp.reshape(v, kept), _inverse_perm(perm))
        v = jnp.reshape(v, sizes)
        if not accumulate and all(k == 1 for k in steps):
            return lax.dynamic_update_slice(x, v, starts)
        at = x.at[tuple(slice(b, e, k) for b, e, k in zip(starts, limits, steps))]
        return at.add(v) if accumulate else at.set(v)
    at = jnp.reshape(x, (-1,)).at[jnp.reshape(_flat_index(shape, off, strides), (-1,))]
    v = jnp.reshape(v, (-1,))
    return jnp.reshape(at.add(v) if accumulate else at.set(v), root_shape)


def _view_read_vjp(a, i, o, g):
    root_shape, shape, off, strides = a
    return (F._view_write(F.zeros(root_shape, dtype=g.dtype, device=g.device), g,
                          off, strides, accumulate=True),)


def _view_write_vjp(a, i, o, g):
    root_shape, shape, off, strides, accumulate = a
    gv = F._view_read(g, shape, off, strides)
    if accumulate:
        return g, gv
    return F._view_write(g, F.zeros(shape, dtype=g.dtype, device=g.device), off, strides), gv


view_read = prim("view_read", _view_read_lower, _view_read_vjp)
view_write = prim("view_write", _view_write_lower, _view_write_vjp)


def _pad_vjp(a, i, o, g):
    lo, hi, interior, _ = a
    x = i[0]
    starts = tuple(lo)
    steps = tuple(k + 1 for k in interior)
    stops = tuple(s + (n - 1) * k + 1 if n else s for s, n, k in zip(starts, x.shape, steps))
    return (F._slice_prim(g, starts, stops, steps),)


pad = prim("pad", lambda a, x: lax.pad(x, jnp.asarray(a[3], x.dtype),
                                       tuple(zip(a[0], a[1], a[2]))), _pad_vjp)


def _concat_vjp(a, i, o, g):
    axis = a[0]
    out, start = [], 0
    for x in i:
        n = x.shape[axis]
        out.append(F.narrow(g, axis, start, n))
        start += n
    return tuple(out)


concatenate = prim("concatenate", lambda a, *xs: jnp.concatenate(xs, axis=a[0]), _concat_vjp,
                   bucket=B.rule_concatenate)
rev = prim("rev", lambda a, x: lax.rev(x, a[0]), lambda a, i, o, g: (F._rev_prim(g, a[0]),))
tril = prim("tril", lambda a, x: jnp.tril(x, a[0]), lambda a, i, o, g: (F.tril(g, a[0]),),
            bucket=B.rule_tri)
triu = prim("triu", lambda a, x: jnp.triu(x, a[0]), lambda a, i, o, g: (F.triu(g, a[0]),),
            bucket=B.rule_tri)

# ---- indexing --------------------------------------------------------------------------------
# An index spec is a tuple of items: ("s", start, stop, step) | ("i", int) | ("n",) for None |
# ("e",) for Ellipsis | ("t",) for an index tensor taken from the extra inputs, in order.


def _build_index(spec, tensors):
    it = iter(tensors)
    out = []
    for item in spec:
        k = item[0]
        if k == "s":
            out.append(slice(item[1], item[2], item[3]))
        elif k == "i":
            out.append(item[1])
        elif k == "n":
            out.append(None)
        elif k == "e":
            out.append(Ellipsis)
        else:
            out.append(next(it))
    return tuple(out)


def _index_vjp(a, i, o, g):
    x, idx = i[0], i[1:]
    return (F._index_add(F.zeros_like(x), a[0], idx, g),) + (None,) * len(idx)


index = prim("index", lambda a, x, *t: x[_build_index(a[0], t)], _index_vjp, bucket=B.rule_index)


def _index_add_vjp(a, i, o, g):
    x, v, idx = i[0], i[1], i[2:]
    return (g, _st(F._index(g, a[0], idx), v)) + (None,) * len(idx)


def _index_set_vjp(a, i, o, g):
    x, v, idx = i[0], i[1], i[2:]
    gx = F._index_set(g, a[0], idx, F.zeros((), dtype=g.dtype, device=g.device))
    return (gx, _st(F._index(g, a[0], idx), v)) + (None,) * len(idx)


index_add = prim("index_add", lambda a, x, v, *t: x.at[_build_index(a[0], t)].add(v),
                 _index_add_vjp)
index_set = prim("index_set", lambda a, x, v, *t: x.at[_build_index(a[0], t)].set(v),
                 _index_set_vjp)


def _along(idx, axis):
    grids = list(jnp.indices(idx.shape, sparse=True))
    grids[axis] = idx
    return tuple(grids)


def _take_along_vjp(a, i, o, g):
    x, idx = i
    return F._scatter_add_prim(F.zeros_like(x), idx, g, a[0]), None


take_along = prim("gather", lambda a, x, idx: x[_along(idx, a[0])], _take_along_vjp)


def _src_grad(g, idx, src, axis):
    """Cotangent of a scatter's src: gathered at idx, zero beyond idx's extent (PyTorch lets
    src be larger than the index and uses only its leading block)."""
    gs = F._take_along_prim(g, idx, axis)
    if tuple(idx.shape) != tuple(src.shape):
        hi = tuple(s - n for s, n in zip(src.shape, idx.shape))
        gs = F._pad_prim(gs, (0,) * len(hi), hi, (0,) * len(hi), 0)
    return gs


def _scatter_add_vjp(a, i, o, g):
    x, idx, src = i
    return g, None, _src_grad(g, idx, src, a[0])


def _scatter_vjp(a, i, o, g):
    x, idx, src = i
    gx = F._scatter_prim(g, idx, F.zeros_like(src), a[0])
    return gx, None, _src_grad(g, idx, src, a[0])


scatter_add = prim("scatter_add",
                   lambda a, x, idx, src: x.at[_along(idx, a[0])].add(
                       src[tuple(slice(0, n) for n in idx.shape)]), _scatter_add_vjp)
scatter = prim("scatter",
               lambda a, x, idx, src: x.at[_along(idx, a[0])].set(
                   src[tuple(slice(0, n) for n in idx.shape)]), _scatter_vjp)

# ---- linear algebra ------------------------------------------------------------------------


def _matmul_vjp(a, i, o, g):
    x, y = i
    return _st(F.matmul(g, F.mT(y)), x), _st(F.matmul(F.mT(x), g), y)


matmul = prim("matmul", lambda a, x, y: jnp.matmul(
    x, y, precision=a[0] if a else _precision(x, y)), _matmul_vjp, bucket=B.rule_matmul)


def _einsum_vjp(a, i, o, g):
    eq = a[0]
    ins, out = eq.split("->")
    specs = ins.split(",")
    grads = []
    for k, x in enumerate(i):
        others = [s for j, s in enumerate(specs) if j != k]
        available = set(out).union(*others) if others else set(out)
        target = specs[k]
        keep = "".join(c for c in target if c in available)
        sub_eq = ",".join([out] + others) + "->" + keep
        gk = F.einsum(sub_eq, g, *[t for j, t in enumerate(i) if j != k])
        if keep != target:  # indices summed only inside operand k: broadcast back
            shape = [x.shape[target.index(c)] if c in keep else 1 for c in target]
            order = [c for c in target if c in keep]
            gk = F.reshape(gk, tuple(x.shape[target.index(c)] for c in order))
            gk = F.reshape(gk, tuple(shape)) if order == [c for c in target if c in keep] else gk
            gk = F.broadcast_to(gk, x.shape)
        grads.append(gk)
    return tuple(grads)


einsum = prim("einsum", lambda a, *xs: jnp.einsum(a[0], *xs, precision=_precision(*xs)),
              _einsum_vjp, bucket=B.rule_einsum)


def _linear_lower(a, x, w, *b):
    y = lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())), precision=_precision(x, w))
    return y + b[0] if b else y


def _linear_vjp(a, i, o, g):
    x, w = i[0], i[1]
    # the weight's cotangent is one (out, in) matmul over every leading dim of x
    g2 = g if g.ndim == 2 else F.reshape(g, (-1, g.shape[-1]))
    x2 = x if x.ndim == 2 else F.reshape(x, (-1, x.shape[-1]))
    gx = F.matmul(g, w) if x._edge is not None else None   # a network's input needs none
    grads = (gx, F.matmul(F.mT(g2), x2) if w._edge is not None else None)
    return grads + (F.sum(g2, 0) if i[2]._edge is not None else None,) if len(i) == 3 \
        else grads


# y = x Wᵀ (+ b): nn.Linear's whole forward as one node
linear = prim("linear", _linear_lower, _linear_vjp, bucket=B.rule_last_static(lambda a: 1))


def _nll_lower(a, logp, t):
    ignore_index, reduction = a
    t1 = jnp.expand_dims(t, 1)
    keep = t1 != ignore_index
    picked = jnp.take_along_axis(logp, jnp.where(keep, t1, 0), axis=1)     # (N, 1, *)
    loss = jnp.where(keep, -picked, jnp.zeros((), logp.dtype))
    if reduction == "none":
        return loss[:, 0]
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / jnp.sum(keep).astype(logp.dtype)


def _nll_vjp(a, i, o, g):
    logp, t = i
    return apply(nll_t, (g, t), a + (logp.shape,), logp.shape, logp.dtype), None


def _nll_t_lower(a, g, t):
    """The transpose of nll (it is linear in logp): -g / denom scattered onto the targets."""
    ignore_index, reduction, shape = a
    t1 = jnp.expand_dims(t, 1)
    keep = t1 != ignore_index
    w = keep.astype(g.dtype)
    if reduction == "none":
        w = w * jnp.expand_dims(g, 1)
    elif reduction == "mean":
        w = w * (g / jnp.sum(w))
    else:
        w = w * g
    onehot = lax.broadcasted_iota(t.dtype, shape, 1) == jnp.where(keep, t1, -1)
    return jnp.where(onehot, -w, jnp.zeros((), g.dtype))


def _nll_t_vjp(a, i, o, g):
    ct, t = i
    return apply(nll, (g, t), a[:2], ct.shape, g.dtype), None


def _layer_norm_lower(a, x, *wb):
    k, eps, has_w, has_b = a
    axes = tuple(range(x.ndim - k, x.ndim))
    n = math.prod(x.shape[x.ndim - k:])
    mean = jnp.sum(x, axes, keepdims=True) / n
    d = x - mean
    y = d * lax.rsqrt(jnp.sum(d * d, axes, keepdims=True) / n + eps)
    if has_w:
        y = y * wb[0]
    if has_b:
        y = y + wb[-1]
    return y


def _layer_norm_vjp(a, i, o, g):
    k, eps, has_w, has_b = a
    x = i[0]
    axes = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))

    def over_lead(t):      # sum over the leading (batch) dims: a weight/bias cotangent
        return F.sum(t, lead) if lead else t

    d = x - F.mean(x, axes, keepdim=True)
    rstd = F.rsqrt(F.mean(d * d, axes, keepdim=True) + eps)
    xhat = d * rstd
    grads = [None]
    gxhat = g
    if has_w:
        w = i[1]
        gxhat = g * w
        grads.append(over_lead(g * xhat) if w._edge is not None else None)
    if has_b:
        grads.append(over_lead(g) if i[-1]._edge is not None else None)
    if x._edge is not None:
        m1 = F.mean(gxhat, axes, keepdim=True)
        m2 = F.mean(gxhat * xhat, axes, keepdim=True)
        grads[0] = rstd * (gxhat - m1 - xhat * m2)
    return tuple(grads)


# LayerNorm over the trailing k dims (affine weight/bias optional): one node per call
layer_norm = prim("layer_norm", _layer_norm_lower, _layer_norm_vjp,
                  bucket=B.rule_last_static(lambda a: a[0]))


# negative log-likelihood of integer class targets (class dim 1), PyTorch's ignore_index
nll = prim("nll", _nll_lower, _nll_vjp)
nll_t = prim("nll_t", _nll_t_lower, _nll_t_vjp)

# ---- neural-network primitives -----------------------------------------------------------
# conv attrs: (strides, padding pairs, lhs_dilation, rhs_dilation, groups)


def _conv(a, x, w, *b):
    strides, padding, lhs_dil, rhs_dil, groups = a[:5]

    def xla_conv(x, w):
        return lax.conv_general_dilated(x, w, strides, padding, lhs_dil, rhs_dil,
                                        feature_group_count=groups,
                                        precision=_precision(x, w))

    def bias(y):
        # an optional per-channel bias (nn.Conv*'s): one node instead of reshape + add
        return y + b[0].reshape((1, -1) + (1,) * (y.ndim - 2)) if b else y
    if _taps_pay(a, x, w):
        # measured (bench/lowering_choices.py): on CPU a convolution with few input taps is
        # 3-10x faster as one fused sum of shifted slices than as XLA:CPU's convolution.  The
        # barrier materialises it: fused into its consumers (a max-pool's gradient compares
        # every window element with it) XLA would recompute every tap per use
        return lax.platform_dependent(
            x, w, cpu=lambda x, w: fusion.barrier(bias(_conv_taps(a, x, w))),
            default=lambda x, w: bias(xla_conv(x, w)))
    return bias(xla_conv(x, w))


def _cpu_materialized(v):
    """`v`, computed once in a CPU program (fusion.barrier); as it is elsewhere."""
    return lax.platform_dependent(v, cpu=fusion.barrier, default=lambda v: v)


# At most this many input taps (input channels x kernel elements) per output element for the
# CPU's shifted-slices convolution: LeNet's first layer (1 x 3x3) 0.25 ms vs 2.8 ms as a
# convolution, 3 x 3x3 1.5 vs 4.4 ms; a 3 x 7x7 stem (147 taps) is 4.5x slower that way.
_MAX_TAPS = 32


def _taps_pay(a, x, w):
    strides, padding, lhs_dil, rhs_dil, groups = a[:5]
    return (groups == 1 and all(d == 1 for d in lhs_dil) and x.dtype == w.dtype
            and x.dtype in (np.float32, np.float64) and 0 not in x.shape + w.shape
            and all(lo >= 0 and hi >= 0 for lo, hi in padding)
            and w.shape[1] * math.prod(w.shape[2:]) <= _MAX_TAPS)


def _conv_taps(a, x, w):
    """The convolution as sum over (input channel, kernel offset) of a strided slice of the
    padded input times that tap's weights: one elementwise loop XLA fuses whole."""
    strides, padding, _, rhs_dil, _ = a[:5]
    if any(lo or hi for lo, hi in padding):
        x = lax.pad(x, np.zeros((), x.dtype), [(0, 0, 0), (0, 0, 0)] +
                    [(lo, hi, 0) for lo, hi in padding])
    n, cin = x.shape[:2]
    cout, ks = w.shape[0], w.shape[2:]
    sp = x.shape[2:]
    out = [(s - d * (k - 1) - 1) // st + 1 for s, k, d, st in zip(sp, ks, rhs_dil, strides)]
    bshape = (1, cout) + (1,) * len(ks)
    y = None
    for c in range(cin):
        for off in np.ndindex(*ks):
            start = [o * d for o, d in zip(off, rhs_dil)]
            tap = _tap(x, [0, c] + start, [n, 1] + out, [1, 1] + list(strides))
            term = tap * lax.reshape(w[(slice(None), c) + off], bshape)
            y = term if y is None else y + term
    return y


def _conv_vjp(a, i, o, g):
    x, w = i[0], i[1]
    grads = (F._conv_input_grad(g, w, a, tuple(x.shape)) if x._edge is not None else None,
             F._conv_weight_grad(x, g, a, tuple(w.shape)) if w._edge is not None else None)
    if len(i) == 2:
        return grads
    return grads + (F.sum(g, (0,) + tuple(range(2, g.ndim))) if i[2]._edge is not None
                    else None,)


conv = prim("conv", _conv, _conv_vjp)


def _conv_transpose_kwargs(a, lhs_shape, rhs_shape, out_shape):
    # the geometry both gradient convolutions are built from (layouts NC..., OI..., NC...):
    # the forward's attrs plus the dilated extents of its input, kernel and output
    strides, padding, lhs_dil, rhs_dil, groups = a[:5]

    def dilated(shape, dil):
        return [0 if n == 0 else 1 + d * (n - 1) for n, d in zip(shape[2:], dil)]
    return dict(strides=tuple(strides), lo=[p[0] for p in padding], lhs_dil=tuple(lhs_dil),
                rhs_dil=tuple(rhs_dil), groups=groups, x_d=dilated(lhs_shape, lhs_dil),
                w_d=dilated(rhs_shape, rhs_dil), y_d=dilated(out_shape, strides),
                spatial=tuple(range(2, len(lhs_shape))))


def _conv_input_grad_lower(a, g, w):
    # the transposed convolution (public lax only): g, dilated by the forward strides,
    # convolved with the spatially flipped kernel whose in/out feature dims are swapped
    x_shape = a[5]
    k = _conv_transpose_kwargs(a, x_shape, w.shape, g.shape)
    groups, sp = k["groups"], k["spatial"]
    if groups > 1:
        # (O, I, *k) -> (G, O/G, I, *k) -> (O/G, G*I, *k): group j's kernels become output
        # features j*I..(j+1)*I-1 of the transposed convolution
        o, i = w.shape[:2]
        w = lax.reshape(w, (groups, o // groups) + tuple(w.shape[1:]))
        w = lax.reshape(w, (o // groups, groups * i) + tuple(w.shape[3:]),
                        dimensions=(1, 0) + tuple(range(2, w.ndim)))
    before = [wd - lo - 1 for wd, lo in zip(k["w_d"], k["lo"])]
    pads = [(b, xd + wd - 1 - yd - b)
            for b, xd, wd, yd in zip(before, k["x_d"], k["w_d"], k["y_d"])]
    w = lax.rev(w, sp)
    if w.dtype != g.dtype:
        w = lax.convert_element_type(w, g.dtype)
    spec = (0, 1) + sp
    dn = lax.ConvDimensionNumbers(lhs_spec=spec, rhs_spec=(1, 0) + sp, out_spec=spec)
    return lax.conv_general_dilated(g, w, window_strides=k["lhs_dil"], padding=pads,
                                    lhs_dilation=k["strides"], rhs_dilation=k["rhs_dil"],
                                    dimension_numbers=dn, feature_group_count=groups,
                                    precision=_precision(g, w))


def _conv_weight_grad_lower(a, x, g):
    # the weight-gradient convolution (public lax only): x (batch and feature dims swapped)
    # convolved with g as the kernel, the forward strides as its dilation; groups split x's
    # channels (batch_group_count) so each group's kernels see only their own channels
    w_shape = a[5]
    dtype = x.dtype
    if 0 in g.shape:
        return jnp.zeros(w_shape, dtype)
    k = _conv_transpose_kwargs(a, x.shape, w_shape, g.shape)
    sp = k["spatial"]
    pads = [(lo, yd - xd + wd - lo - 1)
            for lo, xd, wd, yd in zip(k["lo"], k["x_d"], k["w_d"], k["y_d"])]
    if x.dtype != g.dtype:
        x = lax.convert_element_type(x, g.dtype)
    t = (1, 0) + sp
    dn = lax.ConvDimensionNumbers(lhs_spec=t, rhs_spec=t, out_spec=t)
    out = lax.conv_general_dilated(x, g, window_strides=k["rhs_dil"], padding=pads,
                                   lhs_dilation=k["lhs_dil"], rhs_dilation=k["strides"],
                                   dimension_numbers=dn, batch_group_count=k["groups"],
                                   precision=_precision(x, g))
    return out if out.dtype == dtype else lax.convert_element_type(out, dtype)


conv_input_grad = prim(
    "conv_input_grad", _conv_input_grad_lower,
    lambda a, i, o, gg: (F._conv_raw(gg, i[1], a[:5]), F._conv_weight_grad(gg, i[0], a[:5],
                                                                          tuple(i[1].shape))))
conv_weight_grad = prim(
    "conv_weight_grad", _conv_weight_grad_lower,
    lambda a, i, o, gg: (F._conv_input_grad(i[1], gg, a[:5], tuple(i[0].shape)),
                         F._conv_raw(i[0], gg, a[:5])))

# window reductions: attrs (kind, dims, strides, padding pairs)


def _window(a, x):
    kind, dims, strides, padding = a
    # numpy init values keep these the monoid reductions jax can differentiate/transpose
    if kind == "max":
        init = -np.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
        return _reduce_window(x, np.array(init, x.dtype), lax.max, dims, strides, padding)
    return _reduce_window(x, np.array(0, x.dtype), lax.add, dims, strides, padding)


def _reduce_window(x, init, op, dims, strides, padding):
    """lax.reduce_window; in a CPU program, for a small window, `op` over the window's
    strided slices instead: one fused loop, LeNet's 2x2 max-pools 1.8-2.8x and sum windows
    3-6x faster than XLA:CPU's reduce_window (bench/lowering_choices.py)."""
    def xla_window(x):
        return lax.reduce_window(x, init, op, dims, strides, padding)
    if math.prod(dims) <= _MAX_TAPS and 0 not in x.shape:
        return lax.platform_dependent(
            x, cpu=lambda x: _window_slices(x, init, op, dims, strides, padding),
            default=xla_window)
    return xla_window(x)


def _window_out(shape, dims, strides, padding):
    """A window reduction's output shape."""
    return tuple(max(0, (n + lo + hi - k) // s + 1)
                 for n, k, s, (lo, hi) in zip(shape, dims, strides, padding))


def _tap(x, offset, out, strides):
    """The elements at `offset` in every window: a strided slice of shape `out`."""
    return lax.slice(x, offset, [o + s * (m - 1) + 1 for o, m, s in zip(offset, out, strides)],
                     strides)


def _window_slices(x, init, op, dims, strides, padding):
    out = _window_out(x.shape, dims, strides, padding)
    if 0 in out:
        return jnp.zeros(out, x.dtype)
    if any(lo or hi for lo, hi in padding):
        x = lax.pad(x, init, [(lo, hi, 0) for lo, hi in padding])
    m = None
    for o in np.ndindex(*dims):
        v = _tap(x, o, out, strides)
        m = v if m is None else op(m, v)
    return m


def _window_vjp(a, i, o, g):
    if a[0] == "max":
        return (F._max_window_grad(i[0], g, a),)
    return (F._sum_window_transpose(g, a, tuple(i[0].shape)),)


reduce_window = prim("reduce_window", _window, _window_vjp)


def _sum_window_transpose_lower(a, g):
    # each input element receives the sum of the cotangents of the windows covering it:
    # pad the cotangent (interior padding undoes the stride), then sum-window it again
    _, dims, strides, padding, x_shape = a
    pads = []
    for n, k, st, (lo, hi), m in zip(x_shape, dims, strides, padding, g.shape):
        before = k - 1 - lo
        after = n + lo + hi - k - (m - 1) * st + (k - 1 - hi)
        pads.append((before, after, st - 1))
    padded = lax.pad(g, np.array(0, g.dtype), pads)
    ones = (1,) * len(dims)
    return _reduce_window(padded, np.array(0, g.dtype), lax.add, dims, ones,
                          ((0, 0),) * len(dims))


sum_window_transpose = prim(
    "sum_window_transpose", _sum_window_transpose_lower,
    lambda a, i, o, gg: (F._window_raw(gg, a[:4]),))


def _window_choice(x, dims, strides, padding):
    # Which element of each window PyTorch's max-pool gradient goes to, from public ops:
    # scanning the window's elements in row-major order, padding skipped, the running
    # choice c gives way to the next element v when v > c or v is NaN (PyTorch's CPU rule:
    # the first maximum, or the last NaN).
    # Returns the index into the window of each choice (int32, output-shaped; None for an
    # empty output), the window offsets in that order, and the output shape.
    out = _window_out(x.shape, dims, strides, padding)
    offs = list(np.ndindex(*dims))
    if 0 in out or 0 in x.shape:
        return None, offs, out
    shape = x.shape
    padded = any(lo or hi for lo, hi in padding)
    if padded:
        x = lax.pad(x, np.zeros((), x.dtype), [(lo, hi, 0) for lo, hi in padding])
    floating = jnp.issubdtype(x.dtype, jnp.floating)
    sel = idx = have = None
    for j, o in enumerate(offs):
        v = _tap(x, o, out, strides)
        # which windows' element at this offset is input, not padding (static)
        valid = _unpadded(shape, o, out, strides, padding) if padded else None
        if j == 0:
            sel, idx, have = v, jnp.zeros(out, jnp.int32), valid
            continue
        take = v > sel
        if floating:
            take = take | jnp.isnan(v)
        if have is not None:          # a window whose choice so far is padding takes v
            take = take | ~have
        if valid is None:
            have = None
        else:
            take = take & valid
            if have is not None:
                have = have | valid
                if have.all():
                    have = None
        sel = jnp.where(take, v, sel)
        idx = jnp.where(take, jnp.int32(j), idx)
    # materialised on CPU: fused into every element of the gradient XLA would recompute each
    # window's choice once per element (LeNet's first pool gradient 3.4x faster)
    return _cpu_materialized(idx), offs, out


def _unpadded(shape, offset, out, strides, padding):
    """Per window, whether its element at `offset` lies inside the unpadded input: a numpy
    bool array broadcastable to the output shape (None: everywhere)."""
    mask = np.ones((1,) * len(shape), bool)
    for d, (n, o, m, s, (lo, _)) in enumerate(zip(shape, offset, out, strides, padding)):
        pos = o + s * np.arange(m)
        inside = (pos >= lo) & (pos < lo + n)
        if not inside.all():
            mask = mask & inside.reshape((1,) * d + (m,) + (1,) * (len(shape) - d - 1))
    return None if mask.all() else mask


def _max_window_grad_lower(a, x, g):
    # scatter g onto each window's (first) maximum -- select-and-scatter from public ops (no
    # autodiff of the forward)
    _, dims, strides, padding = a
    idx, offs, out = _window_choice(x, dims, strides, padding)
    zero = np.array(0, g.dtype)
    if idx is None:
        return jnp.zeros(x.shape, g.dtype)
    if tuple(dims) == tuple(strides):
        # non-overlapping windows: every input element lies in at most one window, so the
        # scatter is a broadcast of g over (out_i, k_i) pairs, masked by the choice, then a
        # reshape back (and a crop/zero-fill of the padding and the uncovered tail)
        pair = tuple(v for m, k in zip(out, dims) for v in (m, k))
        bd = tuple(range(0, 2 * len(dims), 2))
        local = np.arange(len(offs), dtype=np.int32).reshape(
            tuple(v for k in dims for v in (1, k)))
        c = jnp.where(lax.broadcast_in_dim(idx, pair, bd) == local,
                      lax.broadcast_in_dim(g, pair, bd), zero)
        c = lax.reshape(c, tuple(m * k for m, k in zip(out, dims)))
        pads = [(-lo, n - m * k + lo, 0)
                for n, k, m, (lo, _) in zip(x.shape, dims, out, padding)]
        return lax.pad(c, zero, pads) if any(p[:2] != (0, 0) for p in pads) else c
    # overlapping windows: each window offset's share lands on a strided grid of x (interior
    # padding undoes the stride); sum the shares
    total = None
    for j, o in enumerate(offs):
        pads = []
        for n, s, (lo, _), st, m in zip(x.shape, strides, padding, o, out):
            before = st - lo
            pads.append((before, n - before - (m - 1) * s - 1, s - 1))
        c = lax.pad(jnp.where(idx == j, g, zero), zero, pads)
        total = c if total is None else total + c
    return total


def _max_window_grad_vjp(a, i, o, gg):
    # linear in g: its transpose gathers gg at each window's selected maximum
    x = i[0]
    return None, F._max_window_select(x, gg, a)


max_window_grad = prim("max_window_grad", _max_window_grad_lower, _max_window_grad_vjp)


def _max_window_select_lower(a, x, gg):
    # gather gg at each window's chosen maximum (the transpose of _max_window_grad_lower, the
    # same choice): select-and-gather from public ops
    _, dims, strides, padding = a
    idx, offs, out = _window_choice(x, dims, strides, padding)
    zero = np.array(0, gg.dtype)
    if idx is None:
        return jnp.zeros(out, gg.dtype)
    if any(lo or hi for lo, hi in padding):
        gg = lax.pad(gg, zero, [(lo, hi, 0) for lo, hi in padding])
    total = None
    for j, o in enumerate(offs):
        v = _tap(gg, o, out, strides)
        v = jnp.where(idx == j, v, zero)
        total = v if total is None else total + v
    return total


max_window_select = prim("max_window_select", _max_window_select_lower,
                         lambda a, i, o, g: (None, F._max_window_grad(i[0], g, a)))

softmax = prim("softmax", lambda a, x: jax.nn.softmax(x, axis=a[0]),
               lambda a, i, o, g: (o * (g - F.sum(g * o, dim=a[0], keepdim=True)),),
                                   bucket=B.rule_softmax)
log_softmax = prim("log_softmax", lambda a, x: jax.nn.log_softmax(x, axis=a[0]),
                   lambda a, i, o, g: (g - F.exp(o) * F.sum(g, dim=a[0], keepdim=True),),
                                       bucket=B.rule_softmax)

# ---- creation and randomness (no inputs except an RNG key) ------------------------------------
full = nondiff("full", lambda a, *s: jnp.full(a[0], a[1], a[2].np), bucket=B.rule_full)
def _iota(a):
    start, end, step, n, d = a
    if d.kind == "f":
        # start + i * step in the widest float available (asking for float64 with x64 off
        # would warn at every compile), then cast
        wide = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
        return (start + step * jnp.arange(n, dtype=wide)).astype(d.np)
    return jnp.arange(start, end, step, dtype=d.np)


iota = nondiff("arange", _iota, bucket=B.rule_arange)
# PyTorch's exact values (fused multiply-adds, two halves), computed once on the host per
# (start, end, steps, dtype): a constant of the program
linspace = nondiff("linspace", lambda a: jnp.asarray(linspace_values(a[0], a[1], a[2], a[3].np)))
eye = nondiff("eye", lambda a: jnp.eye(a[0], a[1], dtype=a[2].np))


# Counter-based random numbers: element i of the n-th draw is a hash of (seed key, n, i) —
# two rounds of murmur3's 32-bit finaliser.  One fused elementwise computation per draw: it
# compiles ~4x faster and runs ~4x faster on XLA:CPU than jax.random's threefry, and is
# statistically fine for initialisation, dropout and sampling (it is not cryptographic).
_M1, _M2, _M3, _GOLD = 0x85EBCA6B, 0xCC9E2D51, 0x1B873593, 0x9E3779B9


def _bits(k, n, shape):
    size = 1
    for d in shape:
        size *= d
    i = lax.iota(jnp.uint32, size)
    k0 = k[0]
    k1 = k[1] ^ (n.astype(jnp.uint32) * jnp.uint32(_GOLD))
    x = (i * jnp.uint32(_M1)) ^ k0
    for c in (_M2, _M3):
        x = x ^ k1
        x = x ^ (x >> 16)
        x = x * jnp.uint32(_M1)
        x = x ^ (x >> 13)
        x = x * jnp.uint32(c)
        x = x ^ (x >> 16)
    return x.reshape(shape)


def _unit(bits, open_interval=False):
    """float32 in [0, 1) (or (0, 1) when open_interval) from the top 23 bits."""
    m = (bits >> 9).astype(jnp.float32)
    return (m + 0.5) * (1.0 / 8388608.0) if open_interval else m * (1.0 / 8388608.0)


def _uniform(a, k, n):
    shape, dt = a[0], a[1]
    return _unit(_bits(k, n, shape)).astype(dt.np)


def _normal(a, k, n):
    shape, dt = a[0], a[1]
    u = _unit(_bits(k, n, shape), open_interval=True)
    return (jnp.float32(np.sqrt(2.0)) * lax.erf_inv(2.0 * u - 1.0)).astype(dt.np)


def _randint(a, k, n):
    shape, dt, low, high = a
    span = high - low
    if span <= 1 << 23:
        r = jnp.floor(_unit(_bits(k, n, shape)) * span).astype(jnp.int32)
        return (r + low).astype(dt.np)
    b = _bits(k, n, shape)
    return (low + (b % jnp.uint32(span)).astype(jnp.int64 if span > 2 ** 31 - 1 else jnp.int32)
            ).astype(dt.np)


def _permutation(a, k, n):
    size, dt = a
    b = _bits(k, n, (size,))
    return jnp.argsort(b, stable=True).astype(dt.np)


def _trunc_normal(a, k, n):
    shape, dt, lo, hi = a
    from jax.scipy.special import ndtr, ndtri
    u = _unit(_bits(k, n, shape), open_interval=True)
    plo, phi = ndtr(jnp.float32(lo)), ndtr(jnp.float32(hi))
    return jnp.clip(ndtri(plo + u * (phi - plo)), lo, hi).astype(dt.np)


def _multinomial(a, k, n, p):
    # p: (B, K) non-negative weights, not necessarily normalised.  With replacement: inverse
    # CDF, one uniform per sample, searched in the running sum (made monotone, and flat across
    # zero weights, by a running max: a zero-weight category can never be drawn).  Without:
    # an exponential race (the S largest p / E, E ~ Exp(1)), which draws S categories in turn,
    # each with probability proportional to its weight among those not yet drawn.
    num, replacement, out = a
    wide = jnp.float64 if p.dtype == jnp.float64 else jnp.float32
    p = p.astype(wide)
    B, K = p.shape
    if replacement:
        u = _unit(_bits(k, n, (B, num))).astype(wide)
        cdf = lax.cummax(jnp.where(p > 0, jnp.cumsum(p, axis=1), 0), axis=1)
        r = u * cdf[:, -1:]
        idx = jax.vmap(lambda c, x: jnp.searchsorted(c, x, side="right"))(cdf, r)
        return jnp.minimum(idx, K - 1).astype(out.np)
    e = -jnp.log(_unit(_bits(k, n, (B, K)), open_interval=True)).astype(wide)
    return lax.top_k(p / e, num)[1].astype(out.np)


rng_multinomial = nondiff("rng_multinomial", _multinomial)
rng_uniform = nondiff("rng_uniform", _uniform)
rng_normal = nondiff("rng_normal", _normal)
rng_randint = nondiff("rng_randint", _randint)
rng_permutation = nondiff("rng_permutation", _permutation)
rng_trunc_normal = nondiff("rng_trunc_normal", _trunc_normal)

# ---- multi-output plumbing ---------------------------------------------------------------


def _tuple_get_vjp(a, i, o, g):
    n = a[1]
    ct = _TupleCotangent([None] * n)
    ct[a[0]] = g
    return (ct,)


tuple_get = prim("tuple_get", lambda a, t: t[a[0]], _tuple_get_vjp)
stop_gradient = pointwise_nondiff("stop_gradient", lambda a, x: lax.stop_gradient(x))

# ---- more elementwise math -------------------------------------------------------------------
asin = pointwise("asin", lambda a, x: jnp.arcsin(x),
                 lambda a, i, o, g: (g * F.rsqrt(1 - i[0] * i[0]),))
acos = pointwise("acos", lambda a, x: jnp.arccos(x),
                 lambda a, i, o, g: (-(g * F.rsqrt(1 - i[0] * i[0])),))
atan = pointwise("atan", lambda a, x: jnp.arctan(x), lambda a, i, o, g: (g / (1 + i[0] * i[0]),))
sinh = pointwise("sinh", lambda a, x: jnp.sinh(x), lambda a, i, o, g: (g * F.cosh(i[0]),))
cosh = pointwise("cosh", lambda a, x: jnp.cosh(x), lambda a, i, o, g: (g * F.sinh(i[0]),))
asinh = pointwise("asinh", lambda a, x: jnp.arcsinh(x),
                  lambda a, i, o, g: (g * F.rsqrt(i[0] * i[0] + 1),))
acosh = pointwise("acosh", lambda a, x: jnp.arccosh(x),
                  lambda a, i, o, g: (g * F.rsqrt(i[0] * i[0] - 1),))
atanh = pointwise("atanh", lambda a, x: jnp.arctanh(x),
                  lambda a, i, o, g: (g / (1 - i[0] * i[0]),))
_LN2 = math.log(2.0)
exp2 = pointwise("exp2", lambda a, x: jnp.exp2(x), lambda a, i, o, g: (g * o * _LN2,))
log2 = pointwise("log2", lambda a, x: jnp.log2(x), lambda a, i, o, g: (g / (i[0] * _LN2),))
# integer shifts; XLA's semantics for a shift by < 0 or >= the bit width (0 for <<, the sign
# fill for >>) are PyTorch's
shift_left = pointwise_nondiff("shift_left", lambda a, x, y: jnp.left_shift(x, y))
shift_right = pointwise_nondiff("shift_right", lambda a, x, y: jnp.right_shift(x, y))


def _scatter_mul_vjp(a, i, o, g):
    raise RuntimeError("scatter(reduce='multiply'): the derivative is not implemented "
                       "(as in PyTorch, whose scatter with a reduce argument has no backward); "
                       "detach its inputs, or build the update from differentiable ops")


scatter_mul = prim("scatter_mul",
                   lambda a, x, idx, src: x.at[_along(idx, a[0])].multiply(
                       src[tuple(slice(0, n) for n in idx.shape)]), _scatter_mul_vjp)

# ---- ordering: sort / top-k / selection indices (values are gathered at them, so gradients
# are scatters of the incoming gradient at the selected indices) -------------------------------


def _order_key(x, descending):
    """An integer key whose order is PyTorch's order of x: for floats -0.0 == 0.0 and every NaN
    above +inf (the IEEE bits of a float, sign-folded, sort as signed integers); bools as 0/1.
    Descending order is the key's bitwise complement (exact, no overflow)."""
    if x.dtype == jnp.bool_:
        k = x.astype(jnp.int8)
    elif jnp.issubdtype(x.dtype, jnp.floating):
        x = jnp.where(x == 0, jnp.zeros((), x.dtype), x)
        x = jnp.where(jnp.isnan(x), jnp.array(np.nan, x.dtype), x)
        bits = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[x.dtype.itemsize]
        b = lax.bitcast_convert_type(x, bits)
        k = b ^ ((b >> (8 * x.dtype.itemsize - 1)) & jnp.array(np.iinfo(bits).max, bits))
    else:
        k = x
    return ~k if descending else k


def _argsort_lower(a, x):
    axis, descending, out = a
    key = _order_key(x, descending)
    iota = lax.broadcasted_iota(out.np, x.shape, axis)
    return lax.sort((key, iota), dimension=axis, is_stable=True, num_keys=1)[1]


def _topk_lower(a, x):
    k, axis, largest, out = a
    key = jnp.moveaxis(_order_key(x, not largest), axis, -1)   # top_k takes the largest keys
    return jnp.moveaxis(lax.top_k(key, k)[1].astype(out.np), -1, axis)


argsort = nondiff("argsort", _argsort_lower)
topk_indices = nondiff("topk_indices", _topk_lower)


def _cum_extreme_lower(a, x):
    # index of the running max (min) along axis: ties go to the later element, a NaN wins and
    # stays (PyTorch's cummax/cummin); an associative scan over (is-nan, key, index) pairs
    axis, largest, out = a
    nan = jnp.isnan(x) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.zeros(x.shape, bool)
    key = _order_key(x, largest)      # the running pick is the minimum of this key
    idx = lax.broadcasted_iota(out.np, x.shape, axis)

    def pick(earlier, later):
        n0, k0, i0 = earlier
        n1, k1, i1 = later
        take = n1 | (~n0 & (k1 <= k0))
        return (jnp.where(take, n1, n0), jnp.where(take, k1, k0), jnp.where(take, i1, i0))
    return lax.associative_scan(pick, (nan, key, idx), axis=axis)[2]


cum_extreme_indices = nondiff("cum_extreme_indices", _cum_extreme_lower)


def _mode_lower(a, x):
    # the most frequent value along axis (the smallest among equally frequent ones) and, as in
    # PyTorch, the index of its last occurrence: a stable sort makes equal values one run in
    # original order; each run's length comes from running max/min of its boundaries
    axis, out = a
    n = x.shape[axis]
    order = _argsort_lower((axis, False, out), x)
    s = jnp.take_along_axis(x, order, axis)
    pos = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    first = lax.slice_in_dim(s, 0, 1, axis=axis)
    lead = jnp.concatenate([jnp.ones_like(first, bool),
                            lax.slice_in_dim(s, 1, n, axis=axis)
                            != lax.slice_in_dim(s, 0, n - 1, axis=axis)], axis)
    tail = jnp.concatenate([lax.slice_in_dim(lead, 1, n, axis=axis),
                            jnp.ones_like(first, bool)], axis)
    start = lax.cummax(jnp.where(lead, pos, 0), axis=axis)
    end = lax.cummin(jnp.where(tail, pos, n), axis=axis, reverse=True)
    best = jnp.argmax(end - start, axis=axis, keepdims=True)    # first longest run
    last = jnp.take_along_axis(end, best, axis)
    return jnp.take_along_axis(order, last, axis)


mode_index = nondiff("mode_index", _mode_lower)


def _searchsorted_lower(a, seq, v):
    right, out = a
    side = "right" if right else "left"
    if seq.ndim == 1:
        r = jnp.searchsorted(seq, v, side=side)
    else:   # one sorted row per leading index
        lead = seq.shape[:-1]
        f = jax.vmap(lambda s, x: jnp.searchsorted(s, x, side=side))
        r = f(seq.reshape((-1, seq.shape[-1])), v.reshape((-1, v.shape[-1]))).reshape(
            lead + (v.shape[-1],))
    return r.astype(out.np)


searchsorted = nondiff("searchsorted", _searchsorted_lower)


def _logcumsumexp_vjp(a, i, o, g):
    # d out_j / d x_i = exp(x_i - out_j) for i <= j (the scan's direction): the gradient is
    # a reverse log-cum-sum-exp of log|g| - out, kept apart for g's two signs so nothing
    # overflows (the same split as PyTorch's backward)
    x = i[0]
    axis, reverse = a
    lowest = float(np.finfo(x.dtype.np).min)
    parts = []
    for mask in (g > 0, g < 0):
        mag = F.where(mask, F.abs(g), 1.0)
        logg = F.where(mask, F.log(mag), lowest)
        parts.append(F.exp(F._logcumsumexp_prim(logg - o, axis, not reverse) + x))
    return (parts[0] - parts[1],)


logcumsumexp = prim("logcumsumexp",
                    lambda a, x: lax.cumlogsumexp(x, axis=a[0], reverse=a[1]), _logcumsumexp_vjp)


def _distribute_vjp(a, i, o, g):
    # the gradient of a global median (PyTorch's evenly_distribute_backward): shared evenly
    # by every element equal to the result (every NaN when the result is NaN)
    x = i[0]
    mask = F.eq(x, o)
    if x.dtype.is_floating_point:
        mask = F.logical_or(mask, F.logical_and(F.isnan(x), F.isnan(o)))
    w = mask.to(g.dtype)
    return g * w / F.sum(w), None


# value v chosen from x, differentiated as above (forward: v itself)
distribute_grad = prim("distribute_grad", lambda a, x, v: v, _distribute_vjp)
