"""Shape ops: reshape/view, flatten, squeeze, permute/transpose, expand, repeat, slicing
primitives, cat/stack/split/chunk, tril/triu, pad.

Layer: frontend — imports engine.buckets, engine.cuts, engine.errors, engine.host_data,
engine.layout, engine.runtime, ops._core, ops._registry, ops.creation, ops.elementwise, tensor.
The family's primitives (`<name>_p`) are declared here, beside the front end that records them:
their gradient rules call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...engine.errors import ArgumentError, IndexRangeError
from ...engine import buckets as B, layout
from ...engine.host_data import HostNode, host_array, host_node, on_host
from ...engine.cuts import _state as _cuts, cut, extends_sequence, note_cat
from ...engine.runtime import rt
from ..tensor import _norm_dim, apply, name_grad_fn, Tensor
from ._core import _promote, _shape_arg, as_tensor, broadcast_to, prim, reshape_p, to_dtype
from .elementwise import mul
from ._registry import register, torch_op
from .creation import zeros, zeros_like


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _inverse_perm(p):
    inv = [0] * len(p)
    for j, q in enumerate(p):
        inv[q] = j
    return tuple(inv)


transpose_p = prim("transpose", lambda a, x: jnp.transpose(x, a[0]),
                   lambda a, i, o, g: (permute(g, _inverse_perm(a[0])),), bucket=B.rule_transpose)


def _slice_vjp(a, i, o, g):
    starts, stops, steps = a
    x = i[0]
    if g.numel() == 0:
        return (zeros_like(x),)
    lo, hi, interior = [], [], []
    for d, (s, e, k) in enumerate(zip(starts, stops, steps)):
        n = g.shape[d]
        lo.append(s)
        interior.append(k - 1)
        hi.append(x.shape[d] - (s + (n - 1) * k + 1))
    return (_pad_prim(g, tuple(lo), tuple(hi), tuple(interior), 0),)


slice_p = prim("slice", lambda a, x: lax.slice(x, a[0], a[1], a[2]), _slice_vjp,
               bucket=B.rule_slice)


# a slice whose start is data (host scalars): `data[i:i + block_size]` with `i` read from a
# tensor reuses one program for every offset; its gradient puts g back at the same offset
def _dyn_slice_vjp(a, i, o, g):
    return (_dyn_pad(g, i[1:], i[0].shape),) + (None,) * (len(i) - 1)


def _dyn_pad_vjp(a, i, o, g):
    return (_dyn_slice(g, i[1:], i[0].shape),) + (None,) * (len(i) - 1)


dyn_slice_p = prim("dyn_slice", lambda a, x, *s: lax.dynamic_slice(x, s, a[0]), _dyn_slice_vjp)


dyn_pad_p = prim("dyn_pad", lambda a, g, *s: lax.dynamic_update_slice(
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
    return (_view_write(zeros(root_shape, dtype=g.dtype, device=g.device), g,
                          off, strides, accumulate=True),)


def _view_write_vjp(a, i, o, g):
    root_shape, shape, off, strides, accumulate = a
    gv = _view_read(g, shape, off, strides)
    if accumulate:
        return g, gv
    return _view_write(g, zeros(shape, dtype=g.dtype, device=g.device), off, strides), gv


view_read_p = prim("view_read", _view_read_lower, _view_read_vjp)


view_write_p = prim("view_write", _view_write_lower, _view_write_vjp)


def _pad_vjp(a, i, o, g):
    lo, hi, interior, _ = a
    x = i[0]
    starts = tuple(lo)
    steps = tuple(k + 1 for k in interior)
    stops = tuple(s + (n - 1) * k + 1 if n else s for s, n, k in zip(starts, x.shape, steps))
    return (_slice_prim(g, starts, stops, steps),)


def _pad_lower(a, x):
    return lax.pad(x, jnp.asarray(a[3], x.dtype), tuple(zip(a[0], a[1], a[2])))


def _pad_bucket(ctx, op, a, shape, ins, vals):
    """Padding along a padded length: its padding is filled with the value first, so the
    logical high edge (lo + n .. lo + n + hi) reads the value; sizes must be static."""
    lo, hi, interior, value = a
    xs = ins[0]
    if B._syms(a) or any(isinstance(d, B.Sym) and (l < 0 or h < 0 or k)
                         for d, l, h, k in zip(xs, lo, hi, interior)):
        raise B.Unsupported("pad of a padded length by a size that follows it, or a crop")
    return _pad_lower(a, B._fill(vals[0], ctx, xs, None, value))


pad_p = prim("pad", _pad_lower, _pad_vjp, bucket=_pad_bucket)


def _concat_vjp(a, i, o, g):
    axis = a[0]
    out, start = [], 0
    for x in i:
        n = x.shape[axis]
        out.append(narrow(g, axis, start, n))
        start += n
    return tuple(out)


concatenate_p = prim("concatenate", lambda a, *xs: jnp.concatenate(xs, axis=a[0]), _concat_vjp,
                     bucket=B.rule_concatenate)


# ---- cotangents of a tensor taken apart: one concatenate, not a chain of pad + add --------
class PadSum:
    """A cotangent summed from zero pads of disjoint pieces along one dim — what the backward
    of split/chunk/narrow/unbind gives the tensor they were taken from — kept as its pieces
    and joined by one concatenate (zeros in the gaps) when backward reads it.  Summed as
    pad + add, XLA:CPU computes every element through selects and adds, and in bfloat16
    converts around each add (nanoGPT's q, k, v split: 6.5 ms a step under autocast)."""
    __slots__ = ("d", "shape", "dtype", "pieces")

    def __init__(self, d, shape, dtype, pieces):
        self.d, self.shape, self.dtype, self.pieces = d, shape, dtype, pieces

    def tensor(self):
        d, shape = self.d, self.shape
        dev = self.pieces[0][1].device

        def gap(n):
            return zeros(shape[:d] + (n,) + shape[d + 1:], dtype=self.dtype, device=dev)
        parts, at = [], 0
        for start, t in sorted(self.pieces, key=lambda p: p[0]):
            if start > at:
                parts.append(gap(start - at))
            parts.append(t)
            at = start + t._node.shape[d]
        if at < shape[d]:
            parts.append(gap(shape[d] - at))
        if len(parts) == 1:
            return parts[0]
        return apply(concatenate_p, tuple(parts), (d,), shape, self.dtype)


def _pad_piece(t):
    """(dim, start, the padded tensor) when t is a pending zero pad along one dim, else None."""
    if type(t) is not Tensor or t._edge is not None:     # create_graph: keep the plain sum
        return None
    n = t._node
    if n.op is not pad_p or n.value is not None:
        return None
    lo, hi, interior, value = n.attrs
    if value != 0 or builtins.any(interior):
        return None
    dims = [j for j, (l_, h) in enumerate(zip(lo, hi)) if l_ or h]
    if len(dims) != 1 or lo[dims[0]] < 0 or hi[dims[0]] < 0:
        return None
    return dims[0], lo[dims[0]], Tensor(n.inputs[0])


def add_cotangents(a, b):
    """a + b for backward's accumulation; disjoint zero pads along one dim stay a PadSum."""
    pa = a if type(a) is PadSum else _pad_piece(a)
    pb = _pad_piece(b)
    if pa is not None and pb is not None:
        if type(pa) is not PadSum:
            pa = PadSum(pa[0], a._node.shape, a._node.dtype, [(pa[1], pa[2])])
        d, start, t = pb
        n = t._node.shape[d]
        if (d == pa.d and b._node.shape == pa.shape and b._node.dtype is pa.dtype
                and builtins.all(start + n <= s or s + p._node.shape[d] <= start
                                 for s, p in pa.pieces)):
            return PadSum(d, pa.shape, pa.dtype, pa.pieces + [(start, t)])
    if type(a) is PadSum:
        a = a.tensor()
    if type(b) is PadSum:
        b = b.tensor()
    return a + b


rev_p = prim("rev", lambda a, x: lax.rev(x, a[0]), lambda a, i, o, g: (_rev_prim(g, a[0]),))


tril_p = prim("tril", lambda a, x: jnp.tril(x, a[0]), lambda a, i, o, g: (tril(g, a[0]),),
              bucket=B.rule_tri)


triu_p = prim("triu", lambda a, x: jnp.triu(x, a[0]), lambda a, i, o, g: (triu(g, a[0]),),
              bucket=B.rule_tri)



_reshape_cache: dict = {}


@torch_op(top=False, aliases=("view",))
def reshape(x, *shape):
    old = x._node.shape
    if len(shape) == 1 and type(shape[0]) is not int:
        shape = tuple(shape[0])
    key = (old, shape)
    hit = _reshape_cache.get(key)
    if hit is not None and float not in map(type, shape):   # view(2.0, 3) equals (2, 3)
        return x if hit == old else apply(reshape_p, (x,), (hit,), hit, x._node.dtype)
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
            raise ArgumentError(f"reshape: only one dimension can be inferred, got {shape}")
        known = 1
        for s in shape:
            if s != -1:
                known *= s
        if known == 0 or n % known:
            raise ArgumentError(f"reshape: shape {list(shape)} is invalid for input of size {n} "
                                f"(shape {tuple(old)})")
        shape = tuple(n // known if s == -1 else s for s in shape)
    m = 1
    for s in shape:
        if s < 0:
            raise ArgumentError(f"reshape: invalid shape dimension {s} in {list(shape)}")
        m *= s
    if m != n:
        raise ArgumentError(f"reshape: shape {list(shape)} is invalid for input of size {n} "
                            f"(shape {tuple(old)})")
    if shape == old:          # e.g. view(-1) of a vector: no op recorded
        return x
    return apply(reshape_p, (x,), (shape,), shape, x._node.dtype)




@torch_op(top=False)
def flatten(x, start_dim=0, end_dim=-1):
    nd = len(x._node.shape)
    if nd == 0:
        return reshape(x, (1,))
    s = _norm_dim(start_dim, nd, "flatten")
    e = _norm_dim(end_dim, nd, "flatten")
    if s > e:
        raise ArgumentError("flatten: start_dim cannot come after end_dim")
    shp = x._node.shape
    n = 1
    for d in shp[s:e + 1]:
        n *= d
    return reshape(x, shp[:s] + (n,) + shp[e + 1:])


@torch_op(top=False)
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
        raise ArgumentError(f"unflatten: sizes {sizes} don't multiply up to the size of dim {dim} "
                            f"({shp[d]}) in shape {tuple(shp)}")
    return reshape(x, shp[:d] + sizes + shp[d + 1:])


@torch_op(top=False)
def squeeze(x, dim=None):
    shp = x._node.shape
    if dim is None:
        return reshape(x, tuple(s for s in shp if s != 1))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    # a 0-d tensor takes dim 0 or -1, as PyTorch (which checks the dim either way)
    dims = {_norm_dim(d, builtins.max(len(shp), 1), "squeeze") for d in dims}
    return reshape(x, tuple(s for i, s in enumerate(shp) if not (i in dims and s == 1)))


@torch_op(top=False)
def unsqueeze(x, dim):
    shp = x._node.shape
    d = _norm_dim(dim, len(shp) + 1, "unsqueeze")
    return reshape(x, shp[:d] + (1,) + shp[d:])


_perm_cache: dict = {}


@torch_op(top=False)
def permute(x, *dims):
    shp = x._node.shape
    if len(dims) == 1 and type(dims[0]) is not int:
        dims = tuple(dims[0])
    key = (shp, dims)
    hit = _perm_cache.get(key)
    if hit is not None:            # validated before: (perm, out shape) or True for identity
        return x if hit is True else apply(transpose_p, (x,), (hit[0],), hit[1], x._node.dtype)
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
        raise ArgumentError(f"permute: number of dims {len(dims)} doesn't match the tensor's "
                            f"{nd} dims (shape {tuple(x.shape)})")
    dims = tuple(_norm_dim(d, nd, "permute") for d in dims)
    if sorted(dims) != list(range(nd)):
        raise ArgumentError(f"permute: dims {dims} are not a permutation of {nd} dims")
    if dims == tuple(range(nd)):
        return x
    shp = x._node.shape
    return apply(transpose_p, (x,), (dims,), tuple(shp[d] for d in dims), x._node.dtype)


def transpose_family(permute):
    """transpose, t, mT and T built on a given `permute` (the raw one here; flowlite.views
    passes its view-recording one), so both share one set of rules and errors."""
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
            raise ArgumentError(f"t() expects a tensor with <= 2 dimensions, but got {x.ndim}")
        return transpose(x, 0, 1) if x.ndim == 2 else x

    def mT(x):
        if x.ndim < 2:
            raise ArgumentError(f"mT: tensor of shape {tuple(x.shape)} has fewer than 2 "
                                "dimensions")
        return transpose(x, -2, -1)

    def T(x):
        return permute(x, tuple(reversed(range(x.ndim))))

    return transpose, t, mT, T


transpose, t, mT, T = transpose_family(permute)
register("transpose", transpose)
register("t", t)


@torch_op(top=False)
def expand(x, *sizes):
    sizes = _shape_arg(sizes)
    shp = x._node.shape
    if len(sizes) < len(shp):
        raise ArgumentError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                            f"or equal to the number of dimensions in the tensor ({len(shp)})")
    lead = len(sizes) - len(shp)
    if -1 in sizes[:lead]:
        raise ArgumentError(f"expand: the expanded size -1 isn't allowed in a leading, new "
                            f"dimension (sizes {tuple(sizes)}, tensor shape {tuple(shp)})")
    full = tuple(shp[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return broadcast_to(x, full)


@torch_op(top=False)
def expand_as(x, other):
    return broadcast_to(x, other._node.shape)


@torch_op(top=False)
def repeat(x, *reps):
    reps = _shape_arg(reps)
    shp = x._node.shape
    if len(reps) < len(shp):
        raise ArgumentError(f"repeat: number of repeat dims ({len(reps)}) can not be smaller than "
                            f"the number of dimensions of the tensor ({len(shp)})")
    shp = (1,) * (len(reps) - len(shp)) + tuple(shp)
    x = reshape(x, shp)
    inter = []
    for s, r in zip(shp, reps):
        inter += [r, s]
    y = broadcast_to(reshape(x, tuple(v for s in shp for v in (1, s))), tuple(inter))
    return name_grad_fn(reshape(y, tuple(s * r for s, r in zip(shp, reps))), "RepeatBackward0",
                        x)


def _slice_prim(x, starts, stops, steps):
    shape = tuple(builtins.max(0, -(-(e - s) // k)) for s, e, k in zip(starts, stops, steps))
    return apply(slice_p, (x,), (tuple(starts), tuple(stops), tuple(steps)), shape,
                 x._node.dtype)


def _dyn_slice(x, starts, sizes):
    """x[starts : starts + sizes] with the starts as data (0-d int32 tensors, host scalars)."""
    return apply(dyn_slice_p, (x,) + tuple(starts), (tuple(sizes),), tuple(sizes),
                 x._node.dtype)


def _dyn_pad(g, starts, shape):
    """Zeros of `shape` holding g at the data offsets `starts` (dyn_slice's gradient)."""
    return apply(dyn_pad_p, (g,) + tuple(starts), (tuple(shape),), tuple(shape), g._node.dtype)


def _pad_prim(x, lo, hi, interior, value):
    shape = tuple(l_ + h + n + builtins.max(n - 1, 0) * i
                  for n, l_, h, i in zip(x._node.shape, lo, hi, interior))
    return apply(pad_p, (x,), (tuple(lo), tuple(hi), tuple(interior), value), shape,
                 x._node.dtype)


def _rev_prim(x, axes):
    return apply(rev_p, (x,), (tuple(axes),), x._node.shape, x._node.dtype)


def _view_read(x, shape, off, strides):
    """x's elements at layout (off, strides) of x's contiguous order (flowlite.views)."""
    shape = tuple(shape)
    return apply(view_read_p, (x,), (x._node.shape, shape, off, tuple(strides)), shape,
                 x._node.dtype)


def _view_write(x, v, off, strides, accumulate=False):
    """x with the elements at layout (off, strides) replaced by (or, accumulating,
    increased by) v's."""
    return apply(view_write_p, (x, v), (x._node.shape, v._node.shape, off, tuple(strides),
                                        accumulate), x._node.shape, x._node.dtype)


@torch_op(top=False)
def narrow(x, dim, start, length):
    shp = x._node.shape
    d = _norm_dim(dim, len(shp), "narrow")
    if start < 0:
        start += shp[d]
    if not (0 <= start and start + length <= shp[d] and length >= 0):
        raise IndexRangeError(f"narrow: start ({start}) + length ({length}) exceeds dimension "
                              f"size ({shp[d]}) of dim {dim} in shape {tuple(shp)}")
    if start == 0 and length == shp[d]:
        return x
    starts = [0] * len(shp)
    stops = list(shp)
    starts[d] = start
    stops[d] = start + length
    return _slice_prim(x, starts, stops, [1] * len(shp))


@torch_op
def flip(x, *dims_args, dims=None):
    # torch.flip(x, dims) / x.flip(0, 1) / x.flip(dims=[0])
    if dims is None:
        dims = dims_args[0] if len(dims_args) == 1 else dims_args
    if isinstance(dims, int):
        dims = (dims,)
    nd = len(x._node.shape)
    axes = tuple(sorted(_norm_dim(d, nd, "flip") for d in dims))
    if len(set(axes)) != len(axes):
        raise ArgumentError(f"flip: dims {list(dims)} name a dim more than once (input of "
                            f"shape {tuple(x._node.shape)})")
    return _rev_prim(x, axes) if nd else x


def _check_cat(tensors, dim, op):
    if not isinstance(tensors, (list, tuple)):
        # PyTorch: TypeError (the argument must be a sequence of Tensors)
        raise TypeError(f"{op}(): argument 'tensors' must be a tuple or list of Tensors, not "
                        f"{type(tensors).__name__}")
    if not tensors:
        raise ArgumentError(f"{op}: expected a non-empty list of tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}(): expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
    return list(tensors)


@torch_op(method=False, aliases=("concat",))
def cat(tensors, dim=0):
    tensors = _check_cat(tensors, dim, "cat")
    tensors = [t for t in tensors if not (t.ndim == 1 and t._node.shape[0] == 0)] or tensors[:1]
    ref = tensors[0]._node.shape
    nd = len(ref)
    if nd == 0:
        raise ArgumentError("cat: zero-dimensional tensor cannot be concatenated")
    d = _norm_dim(dim, nd, "cat")
    dt = tensors[0].dtype
    for i, t in enumerate(tensors):
        s = t._node.shape
        dt = _promote(dt, t.dtype)
        if len(s) != nd or builtins.any(a != b for j, (a, b) in enumerate(zip(s, ref)) if j != d):
            raise ArgumentError(f"cat: sizes of tensors must match except in dimension {d}; "
                                f"tensor 0 has shape {tuple(ref)} but tensor {i} has shape "
                                f"{tuple(s)}")
    if len(tensors) == 1:
        return tensors[0]
    host = _host_join(tensors, d, dt, np.concatenate)
    if host is not None:
        return host
    nodes = [t._node for t in tensors]
    tensors = [to_dtype(t, dt) for t in tensors]
    total = builtins.sum(t._node.shape[d] for t in tensors)
    shape = ref[:d] + (total,) + ref[d + 1:]
    out = apply(concatenate_p, tuple(tensors), (d,), shape, dt)
    if _cuts["on"] and out._edge is None:
        if extends_sequence(nodes, concatenate_p, d):
            cut(out._node, "a sequence grown by cat")    # a loop that grows without a read
        else:
            note_cat(out._node, nodes, d)
    return out




@torch_op(method=False)
def stack(tensors, dim=0):
    if dim.__class__ is int and tensors.__class__ in (list, tuple) and tensors:
        host = _host_stack(tensors, dim)      # a batch of host rows: numpy, at once
        if host is not None:
            return host
    tensors = _check_cat(tensors, dim, "stack")
    ref = tensors[0]._node.shape
    for i, t in enumerate(tensors):
        if t._node.shape != ref:
            raise ArgumentError(f"stack: expects each tensor to be equal size, but got "
                                f"{tuple(ref)} at entry 0 and {tuple(t.shape)} at entry {i}")
    d = _norm_dim(dim, len(ref) + 1, "stack")
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = _promote(dt, t.dtype)
    host = _host_join(tensors, d, dt, np.stack)
    if host is not None:
        return host
    return name_grad_fn(cat([unsqueeze(t, d) for t in tensors], d), "StackBackward0")


# cat/stack of host data (or materialised CPU tensors) at most this big is done on the host
_HOST_JOIN_MAX_BYTES = 64 << 20


def _host_join(tensors, d, dt, join):
    """cat/stack of tensors whose values are all on the host (host data, or materialised CPU
    arrays read in place) and need no gradient — a batch assembled from host rows
    (`torch.stack([data[i:i + n] for i in ix])`, `torch.stack([torch.from_numpy(...) ...])`)
    — as host data at once: an exact copy done by numpy (each input converted to the result
    dtype first, as the recorded op does), so the step that reads the batch sees one argument
    whether it was assembled before the last sync or after it (the same program either way).
    None when it must be recorded (pending or accelerator inputs, autograd, flowlite.compile
    / scan tracing)."""
    dev = tensors[0]._node.device
    if dev is None or not on_host(dev) or rt.observers or rt.local.tracing_body:
        return None
    arrays = []
    total = 0
    want = dt.np
    for t in tensors:
        n = t._node
        if t._edge is not None or n.device is not dev:
            return None
        a = host_array(n)
        if a is None:
            return None
        total += a.nbytes
        arrays.append(a if a.dtype == want else a.astype(want))
    if total > _HOST_JOIN_MAX_BYTES:
        return None
    return Tensor(host_node(join(arrays, axis=d), dt, dev))


def _host_stack(tensors, dim):
    """stack's _host_join for its usual call — tensors of one shape, all on the host — checked
    inline (the batch of `get_batch`); None for anything else (stack checks and reports)."""
    t0 = tensors[0]
    if t0.__class__ is not Tensor:
        return None
    n0 = t0._node
    dev, shape, dt = n0.device, n0.shape, n0.dtype
    nd = len(shape)
    if dev is None or not on_host(dev) or not -nd - 1 <= dim <= nd or rt.observers or \
            rt.local.tracing_body:
        return None
    arrays = []
    append = arrays.append
    mixed = False
    for t in tensors:
        if t.__class__ is not Tensor or t._edge is not None:
            return None
        n = t._node
        if n.shape != shape or n.device is not dev:
            return None
        a = n.host if n.__class__ is HostNode else host_array(n)
        if a is None:
            return None
        if n.dtype is not dt:
            mixed = True
        append(a)
    if mixed:
        for t in tensors[1:]:
            dt = _promote(dt, t._node.dtype)
        want = dt.np
        arrays = [a if a.dtype == want else a.astype(want) for a in arrays]
    if arrays[0].nbytes * len(arrays) > _HOST_JOIN_MAX_BYTES:
        return None
    if dim < 0:
        dim += nd + 1
    if dim == 0 and nd:     # (numpy's stack pays an expand_dims per array)
        out = np.concatenate(arrays).reshape((len(arrays),) + shape)
    else:
        out = np.stack(arrays, dim)
    return Tensor(host_node(out, dt, dev))


@torch_op(top=False)
def split(x, split_size_or_sections, dim=0):
    shp = x._node.shape
    d = _norm_dim(dim, len(shp), "split")
    n = shp[d]
    if isinstance(split_size_or_sections, int):
        k = split_size_or_sections
        if k <= 0:
            raise ArgumentError(f"split: split_size must be positive, got {k}")
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
        if not sizes:
            sizes = [0]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise ArgumentError(f"split: split_sizes {sizes} don't sum to the size of dim {dim} "
                                f"({n}) in shape {tuple(shp)}")
    out, start = [], 0
    for s in sizes:
        out.append(narrow(x, d, start, s))
        start += s
    return tuple(out)


@torch_op(top=False)
def chunk(x, chunks, dim=0):
    if chunks <= 0:
        raise ArgumentError(f"chunk: chunks must be positive, got {chunks}")
    if not x._node.shape:
        raise ArgumentError("chunk: expects at least a 1-dimensional tensor (got a 0-d tensor)")
    n = x._node.shape[_norm_dim(dim, x.ndim, "chunk")]
    k = -(-n // chunks)
    return split(x, builtins.max(k, 1), dim)


@torch_op(top=False)
def unbind(x, dim=0):
    d = _norm_dim(dim, x.ndim, "unbind")
    return tuple(squeeze(narrow(x, d, i, 1), d) for i in range(x._node.shape[d]))


@torch_op(inplace=True)
def tril(x, diagonal=0):
    if x.ndim < 2:
        raise ArgumentError(f"tril: input tensor must have at least 2 dimensions (got {x.ndim})")
    return apply(tril_p, (x,), (diagonal,), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
def triu(x, diagonal=0):
    if x.ndim < 2:
        raise ArgumentError(f"triu: input tensor must have at least 2 dimensions (got {x.ndim})")
    return apply(triu_p, (x,), (diagonal,), x._node.shape, x._node.dtype)


def pad(x, pad, mode="constant", value=0.0):
    """PyTorch's F.pad: `pad` lists (left, right) pairs starting from the LAST dim."""
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ArgumentError(f"pad: padding length {len(pad)} must be even and at most twice the "
                            f"number of dims ({x.ndim})")
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r}; only 'constant' padding is supported")
    nd = x.ndim
    lo, hi = [0] * nd, [0] * nd
    for i in range(len(pad) // 2):
        lo[nd - 1 - i] = pad[2 * i]
        hi[nd - 1 - i] = pad[2 * i + 1]
    # negative padding crops
    for d, (n, a, b) in enumerate(zip(x._node.shape, lo, hi)):
        if n + builtins.min(a, 0) + builtins.min(b, 0) < 0:
            raise ArgumentError(f"pad: negative padding ({a}, {b}) crops more than the "
                                f"{n} elements of dim {d} (input of shape "
                                f"{tuple(x._node.shape)})")
    if builtins.any(v < 0 for v in lo + hi):
        starts = [-builtins.min(v, 0) for v in lo]
        stops = [s + builtins.min(h, 0) for s, h in zip(x._node.shape, hi)]
        x = _slice_prim(x, starts, stops, [1] * nd)
        lo = [builtins.max(v, 0) for v in lo]
        hi = [builtins.max(v, 0) for v in hi]
    v = value if x.dtype.kind == "f" else builtins.int(value)
    return _pad_prim(x, lo, hi, [0] * nd, v)


@torch_op(top=False)
def contiguous(x):
    return x


@torch_op
def clone(x, *, memory_format=None):
    # memory_format: flowlite tensors have no strides of their own to preserve
    return name_grad_fn(mul(x, 1), "CloneBackward0") if x.requires_grad else Tensor(x._node)


# ---- gather / scatter-add along an axis (a pair: each is the other's gradient) ----------
def _along(idx, axis):
    grids = list(jnp.indices(idx.shape, sparse=True))
    grids[axis] = idx
    return tuple(grids)


def _take_along_vjp(a, i, o, g):
    x, idx = i
    return _scatter_add_prim(zeros_like(x), idx, g, a[0]), None


take_along_p = prim("gather", lambda a, x, idx: x[_along(idx, a[0])], _take_along_vjp)


def _src_grad(g, idx, src, axis):
    """Cotangent of a scatter's src: gathered at idx, zero beyond idx's extent (PyTorch lets
    src be larger than the index and uses only its leading block)."""
    gs = _take_along_prim(g, idx, axis)
    if tuple(idx.shape) != tuple(src.shape):
        hi = tuple(s - n for s, n in zip(src.shape, idx.shape))
        gs = _pad_prim(gs, (0,) * len(hi), hi, (0,) * len(hi), 0)
    return gs


def _scatter_add_vjp(a, i, o, g):
    x, idx, src = i
    return g, None, _src_grad(g, idx, src, a[0])


def _take_along_prim(x, index, d):
    return apply(take_along_p, (x, index), (d,), index._node.shape, x._node.dtype)


def _scatter_add_prim(x, index, src, d):
    return apply(scatter_add_p, (x, index, src), (d,), x._node.shape, x._node.dtype)


scatter_add_p = prim("scatter_add",
                     lambda a, x, idx, src: x.at[_along(idx, a[0])].add(
                         src[tuple(slice(0, n) for n in idx.shape)]), _scatter_add_vjp)
