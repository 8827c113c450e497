"""Indexing: `getitem`/`setitem`, gather/scatter, index_select/index_add/index_put,
masked_fill, one_hot.

Layer: frontend — imports checks, engine.buckets, engine.dtypes, engine.errors,
engine.host_data, engine.host_reads, engine.ir, engine.runtime, ops._core, ops._registry,
ops.creation, ops.elementwise, ops.reduction, ops.shape, tensor. The family's primitives
(`<name>_p`) are declared here, beside the front end that records them: their gradient rules
call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import operator

import jax.numpy as jnp
import numpy as np

from ...engine.errors import (ArgumentError, DTypeError, IndexDTypeError, IndexRangeError,
                               IndexShapeError)
from ...engine import buckets as B, dtypes as D
from ...engine.host_data import HostNode as _HostNode, host_node, host_value, uploaded
from ...engine.host_reads import host_view
from ...engine.ir import DATA as _DATA, scalar_node as _scalar_node
from ...engine.runtime import rt
from ..checks import index_in_range
from ..tensor import _norm_dim, apply, from_numpy, name_grad_fn, Tensor
from ._core import _scalar, as_tensor, broadcast_shapes, broadcast_to, prim, reshape_p, to_dtype
from .elementwise import _st, eq, where
from .creation import arange, zeros, zeros_like
from .shape import (_along, _dyn_slice, _scatter_add_prim, _src_grad, _take_along_prim, reshape,
                    slice_p, unsqueeze)
from .reduction import amax
from ._registry import torch_op


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
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
    return (_index_add(zeros_like(x), a[0], idx, g),) + (None,) * len(idx)


index_p = prim("index", lambda a, x, *t: x[_build_index(a[0], t)], _index_vjp, bucket=B.rule_index)


def _index_add_vjp(a, i, o, g):
    v, idx = i[1], i[2:]
    return (g, _st(_index(g, a[0], idx), v)) + (None,) * len(idx)


def _index_set_vjp(a, i, o, g):
    v, idx = i[1], i[2:]
    gx = _index_set(g, a[0], idx, zeros((), dtype=g.dtype, device=g.device))
    return (gx, _st(_index(g, a[0], idx), v)) + (None,) * len(idx)


def _scatter_bucket(ctx, op, a, shape, ins, vals):
    """A write into an unpadded tensor through index tensors that have the padded length
    (an embedding's gradient): the padding's indices point past the end, and XLA's scatter
    drops them."""
    if B._syms(ins[0]) or B._syms(a):
        raise B.Unsupported(op.name + " into a padded tensor")
    x, v, *t = vals
    for j, (s, ti) in enumerate(zip(ins[2:], t)):
        m = ctx.valid(s)
        if m is not None:
            t[j] = jnp.where(m, ti, jnp.iinfo(ti.dtype).max if ti.dtype != bool else False)
    return op.lower(a, x, v, *t)


index_add_p = prim("index_add", lambda a, x, v, *t: x.at[_build_index(a[0], t)].add(v),
                   _index_add_vjp, bucket=_scatter_bucket)


index_set_p = prim("index_set", lambda a, x, v, *t: x.at[_build_index(a[0], t)].set(v),
                   _index_set_vjp, bucket=_scatter_bucket)





def _scatter_vjp(a, i, o, g):
    x, idx, src = i
    gx = _scatter_prim(g, idx, zeros_like(src), a[0])
    return gx, None, _src_grad(g, idx, src, a[0])


scatter_p = prim("scatter",
                 lambda a, x, idx, src: x.at[_along(idx, a[0])].set(
                     src[tuple(slice(0, n) for n in idx.shape)]), _scatter_vjp)


def _scatter_mul_vjp(a, i, o, g):
    raise RuntimeError("scatter(reduce='multiply'): the derivative is not implemented "
                       "(as in PyTorch, whose scatter with a reduce argument has no backward); "
                       "detach its inputs, or build the update from differentiable ops")


scatter_mul_p = prim("scatter_mul",
                     lambda a, x, idx, src: x.at[_along(idx, a[0])].multiply(
                         src[tuple(slice(0, n) for n in idx.shape)]), _scatter_mul_vjp)



# ---- indexing --------------------------------------------------------------------------------
def _sequence_as_tuple(idx):
    """PyTorch reads a list holding a tensor, a sequence, a slice, None or Ellipsis (fewer than
    32 items) as a tuple of indices, as old NumPy did: x[[t]] is x[t], x[[[0, 1]]] is x[[0, 1]];
    a list of ints stays one advanced index."""
    if isinstance(idx, list) and len(idx) < 32 and builtins.any(
            i is None or i is Ellipsis or isinstance(i, (Tensor, list, tuple, slice, np.ndarray))
            for i in idx):
        return tuple(idx)
    return idx


def _parse_index(x, idx):
    """-> (spec, index tensors, basic) with PyTorch semantics; bool masks sync to host."""
    idx = _sequence_as_tuple(idx)
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
        raise IndexRangeError("an index can only have a single ellipsis ('...')")
    if n_consumed > len(shp):
        raise IndexRangeError(f"too many indices for tensor of dimension {len(shp)} "
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
                raise ArgumentError(f"index: slice step must be positive (got {step})")
            s, e, k = slice(start, stop, step).indices(size)
            items.append(("s", s, builtins.max(e, s), k))
            dim += 1
        elif isinstance(it, (bool, np.bool_)):
            raise IndexRangeError("indexing with a Python bool is not supported")
        elif isinstance(it, (int, np.integer)):
            size = shp[dim]
            i = builtins.int(it)
            if not -size <= i < size:
                raise IndexRangeError(f"index {i} is out of bounds for dimension {dim} with size "
                                      f"{size}")
            items.append(("i", i + size if i < 0 else i))
            dim += 1
        else:
            t = it
            if not isinstance(t, Tensor):
                arr = np.asarray(t)
                if arr.dtype == object or arr.dtype.kind in "USV":
                    # PyTorch: TypeError (a string or object is no index at all)
                    raise DTypeError(f"index: a {type(it).__name__} is not a valid index (only "
                                     f"integers, slices, None, Ellipsis, and long, int or "
                                     f"bool tensors)")
                if arr.dtype.kind not in "biu":
                    raise IndexRangeError(f"index: tensors used as indices must be long, int or "
                                          f"bool (got {arr.dtype} from {type(it).__name__})")
                t = from_numpy(arr if arr.dtype == bool else arr.astype(np.int64),
                               device=x.device)
            if t.dtype is D.bool_:
                mask = t.numpy()
                if mask.shape != tuple(shp[dim:dim + mask.ndim]):
                    raise IndexRangeError(f"index: the shape of the mask {mask.shape} does not "
                                          f"match the shape of the indexed tensor {tuple(shp)} at "
                                          f"dim {dim}")
                for nz in np.nonzero(mask):
                    items.append(("t",))
                    tensors.append(from_numpy(nz.astype(np.int32), device=x.device))
                dim += mask.ndim
                basic = False
                continue
            if t.dtype.kind not in "iu":
                raise IndexRangeError(f"index: tensors used as indices must be long, int or bool "
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


def _kept_bounds(plan, key):
    """`plan`, with its slice kept when it takes the whole tensor but a stop was written
    (`mask[:T, :T]` at T == the mask's size): the graph keeps the structure it has at every
    other T, so a growing T stays one length family (buckets.py) through its last size."""
    if plan[0] is None and plan[1] and any(type(k) is tuple and k[1] is not None for k in key):
        n = len(plan[1])
        return ((0,) * n, tuple(plan[1]), (1,) * n), plan[1], plan[2]
    return plan


def _apply_basic_plan(x, plan):
    sl, sliced, out_shape = plan
    dt = x._node.dtype
    if sl is not None:
        x = apply(slice_p, (x,), sl, sliced, dt)
    if sliced != out_shape:
        x = apply(reshape_p, (x,), (out_shape,), out_shape, dt)
    return x


def _tensor_bounds(idx) -> bool:
    """A slice bounded by a tensor (`data[i:i + n]`, i read from a tensor)."""
    for i in idx if type(idx) is tuple else (idx,):
        if type(i) is slice and (isinstance(i.start, Tensor) or isinstance(i.stop, Tensor)):
            return True
    return False


def _data_window(x, plan) -> bool:
    """A window into materialised data that needs no gradient — a batch of a dataset tensor
    (`source[i:i + bptt]`, `data[i]` in a loop over Python ints): at most half of a dimension
    taken, at a nonzero offset.  Its offsets change from call to call, so they are data, not
    program.  (Windows at 0 stay static slices: a length family — `mask[:T, :T]` as T grows —
    is bucketed, buckets.py, and the first window of a loop costs one more program.)"""
    n = x._node
    if n.op is not _DATA or x.requires_grad:
        return False
    starts, stops, steps = plan[0]
    for b, e, k, size in zip(starts, stops, steps, n.shape):
        if k != 1:
            return False
        if b > 0 and 2 * (e - b) <= size:
            return True
    return False


def _apply_dynamic_plan(x, plan):
    """_apply_basic_plan with the slice's starts as data: the offsets come from tensors and
    change from call to call, so they enter the program as inputs (one program for every
    offset) instead of as its constants.  Strided slices keep the static form."""
    sl, sliced, out_shape = plan
    if sl is None or builtins.any(k != 1 for k in sl[2]):
        return _apply_basic_plan(x, plan)
    starts = [Tensor(_scalar_node(builtins.int(s), D.int32)) for s in sl[0]]
    y = _dyn_slice(x, starts, sliced)
    if sliced != out_shape:
        y = apply(reshape_p, (y,), (out_shape,), out_shape, x._node.dtype)
    return y


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
            a, b, c = i.start, i.stop, i.step
            if (a is not None and type(a) is not int) or (b is not None and type(b) is not int) \
                    or (c is not None and type(c) is not int):
                return None        # a tensor bound (or numpy int): parsed, never cached
            key.append((a, b, c))
        elif t is int or i is None or i is Ellipsis:
            key.append(i)
        else:
            return None
    return tuple(key)


def getitem(x, idx):
    return getitem_plan(x, idx)[0]


def getitem_plan(x, idx, write=False):
    """-> (x[idx], the basic plan or None): a plan means the result is a view of x (ints,
    slices, None and Ellipsis only), None that advanced indexing made a copy.  `write`: the
    view is the target of `x[idx] = value` (taken on the host whenever x's value is there)."""
    if x._edge is None:
        got = _host_getitem(x, idx, write)
        if got is not None:
            return got
    key = _basic_key(idx)
    if key is not None:
        ck = (x._node.shape, key)
        plan = _basic_cache.get(ck)
        if plan is None:
            spec, _, _ = _parse_index(x, idx)
            plan = _basic_cache[ck] = _kept_bounds(_basic_plan(x._node.shape, spec), key)
        if plan[0] is not None and _data_window(x, plan):
            return _apply_dynamic_plan(x, plan), plan
        return _apply_basic_plan(x, plan), plan
    spec, tensors, basic = _parse_index(x, idx)
    if basic:
        plan = _basic_plan(x._node.shape, spec)
        if plan[0] is not None and (_tensor_bounds(idx) or _data_window(x, plan)):
            return _apply_dynamic_plan(x, plan), plan
        return _apply_basic_plan(x, plan), plan
    split = _split_int_indices(x, spec)
    if split is not None:
        ints, rest = split
        sub = _basic_index(x, ints)
        return _check_spec(sub, rest, tensors, "index", _index(sub, rest, tensors)), None
    return _check_spec(x, spec, tensors, "index", _index(x, spec, tensors)), None


# a window of a CPU device array (not host data itself) is taken on the host when it has at
# most this many elements: bigger ones stay slices inside the program (no copy in per step)
_HOST_WINDOW_MAX = 1 << 16


def _host_getitem(x, idx, write=False):
    """(x[idx], its plan) for x whose value is on the host (host_data.host_value) and a basic
    index at offsets read on the host from tensors or numpy — slice bounds, 0-d integer host
    tensors (integers, as PyTorch reads them), numpy integers: `data[i:i + n]` for i in a
    drawn index tensor — as a numpy view, host data; None when it is recorded.  An index of
    Python ints only stays a recorded slice (a program's own view: `mask[:t, :t]` of a
    growing t is one length family, flowlite.buckets), except as the target of a write or
    as a crop from the end of host data no program has read yet (_fresh_host).
    Errors are the recorded path's (the same parser)."""
    if idx.__class__ is slice:
        return host_window(x, x._node, idx, write)
    items = idx if idx.__class__ is tuple else (idx,)
    key = []
    ell = False
    known = False           # (offsets read from tensors / numpy: a new window every call)
    for it in items:
        t = it.__class__
        if t is slice:
            a, b, c = it.start, it.stop, it.step
            if (a is not None and a.__class__ is not int) or (
                    b is not None and b.__class__ is not int) or (
                    c is not None and c.__class__ is not int):
                a, b, c = _bound(a), _bound(b), _bound(c)
                known = True
            key.append((a, b, c))
        elif t is int or it is None:
            key.append(it)
        elif it is Ellipsis:
            key.append(it)
            ell = True
        elif isinstance(it, Tensor):
            m = it._node
            if m.shape or m.dtype.kind not in "iu" or it._edge is not None:
                return None
            v = m.host if m.__class__ is _HostNode else host_view(m)  # (no program)
            if v is None:
                return None
            key.append(builtins.int(v))
            known = True
        elif isinstance(it, np.integer):
            key.append(builtins.int(it))
            known = True
        else:
            return None
    n = x._node
    if not (known or write or _fresh_host(n) and any(
            k.__class__ is tuple and k[0] is not None and k[0] < 0 for k in key)) or \
            rt.observers or rt.local.tracing_body:
        return None
    arr = host_value(n)
    if arr is None:
        return None
    key = tuple(key)
    np_idx = tuple([slice(*k) if k.__class__ is tuple else k for k in key])
    plan = None if known else _basic_cache.get((n.shape, key))
    if plan is None:
        spec, _, _ = _parse_index(x, np_idx)
        plan = _basic_plan(n.shape, spec)
        if not known:               # (constant indices: `losses[k] = ...`)
            _basic_cache[(n.shape, key)] = plan
    if plan[0] is None and plan[1] == plan[2]:
        return x, plan            # all of x: views.getitem aliases it
    v = arr[np_idx if ell else np_idx + (Ellipsis,)]    # (an array even for x[i] of 1-d x)
    if v.shape != plan[2] or (n.op is _DATA and n.__class__ is not _HostNode and
                              v.size > _HOST_WINDOW_MAX):
        return None
    return Tensor(host_node(v, n.dtype, n.device, False)), plan


def _fresh_host(n) -> bool:
    """Host data no program has read yet (a sequence grown on the host — a generation loop's
    `idx = cat((idx, sampled))` — rather than a buffer kept for every step): a slice of it
    from its end at Python-int offsets (the crop `idx[:, -block_size:]`) is taken on the host,
    so the program reading it sees a fixed shape rather than a length that grows every token
    (a slice from the start, `mask[:t, :t]`, stays recorded: one length family)."""
    return n.__class__ is _HostNode and not n.used and not uploaded(n)


def host_window(x, n, it, write=False):
    """_host_getitem of one slice (`data[i:i + block_size]`) of x (node n)."""
    a, b, k = it.start, it.stop, it.step
    if not write and a.__class__ is not Tensor and b.__class__ is not Tensor and not (
            isinstance(a, (Tensor, np.integer)) or isinstance(b, (Tensor, np.integer))) \
            and not (a is not None and a < 0 and _fresh_host(n)):
        return None               # Python ints: recorded (see _host_getitem)
    shp = n.shape
    if not shp or (k is not None and (k.__class__ is not int or k <= 0)) or \
            rt.observers or rt.local.tracing_body:
        return None
    arr = n.host if n.__class__ is _HostNode else host_value(n)
    if arr is None:
        return None
    size = shp[0]
    s, e, k = it.indices(size)      # (tensor bounds: their __index__, as PyTorch reads them)
    if e < s:
        e = s
    rest = shp[1:]
    if s == 0 and e == size and k == 1:
        return x, (None, shp, shp)
    m = (e - s + k - 1) // k
    if n.op is _DATA and n.__class__ is not _HostNode and \
            m * arr[0:1].size > _HOST_WINDOW_MAX:
        return None
    out = (m,) + rest
    if rest:
        z = (0,) * len(rest)
        plan = (((s,) + z, (e,) + rest, (k,) + (1,) * len(rest)), out, out)
    else:
        plan = (((s,), (e,), (k,)), out, out)
    return Tensor(host_node(arr[s:e:k], n.dtype, n.device, False)), plan


def _bound(b):
    return b if b is None or b.__class__ is int else operator.index(b)


def _check_spec(x, spec, tensors, op, out):
    """Index tensors in `spec` must lie in [-size, size) of the dimension they index (the
    check runs inside the executable and guards `out`: see flowlite.checks)."""
    shp = x._node.shape
    n_consumed = builtins.sum(1 for it in spec if it[0] in "sit")
    dim = 0
    k = 0
    for it in spec:
        kind = it[0]
        if kind == "n":
            continue
        if kind == "e":
            dim += len(shp) - n_consumed
            continue
        if kind == "t":
            index_in_range(tensors[k], shp[dim], op, negative=True, dim=dim, shape=shp, out=out)
            k += 1
        dim += 1
    return out


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
    return apply(index_p, (x,) + tuple(tensors), (spec,))


def _index_add(x, spec, tensors, v):
    return apply(index_add_p, (x, v) + tuple(tensors), (spec,), x._node.shape, x._node.dtype)


def _index_set(x, spec, tensors, v):
    return apply(index_set_p, (x, v) + tuple(tensors), (spec,), x._node.shape, x._node.dtype)


@torch_op(inplace=True)
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
        raise ArgumentError(f"setitem: value of shape {tuple(v.shape)} cannot be broadcast to the "
                            f"indexed shape {tuple(target.shape)}") from None
    out = _index_add(x, spec, tensors, v) if accumulate else _index_set(x, spec, tensors, v)
    if tensors:
        _check_spec(x, spec, tensors, "index_put" if accumulate else "setitem", out)
    return out


def setitem(x, idx, value):
    x._rebind(index_put(x, idx, value), "__setitem__")


def _check_index_tensor(index, op, exc=DTypeError):
    if not isinstance(index, Tensor):
        index = as_tensor(index)
    if index.dtype.kind not in "iu":
        raise exc(f"{op}(): Expected dtype int64 (or int32) for index, got {index.dtype}")
    return index


@torch_op
def gather(x, dim, index):
    index = _check_index_tensor(index, "gather")
    d = _norm_dim(dim, x.ndim, "gather")
    if index.ndim != x.ndim:
        raise ArgumentError(f"gather: index tensor must have the same number of dimensions as the "
                            f"input (index {tuple(index.shape)}, input {tuple(x.shape)})")
    for i, (a, b) in enumerate(zip(index._node.shape, x._node.shape)):
        if i != d and a > b:
            raise ArgumentError(f"gather: size of index {tuple(index.shape)} exceeds the input "
                                f"{tuple(x.shape)} at dimension {i}")
    out = _take_along_prim(x, index, d)
    index_in_range(index, x._node.shape[d], "gather", dim=d, shape=x._node.shape, out=out)
    return out


@torch_op
def take_along_dim(x, indices, dim):
    indices = _check_index_tensor(indices, "take_along_dim")
    d = _norm_dim(dim, x.ndim, "take_along_dim")
    if indices.ndim != x.ndim:
        raise ArgumentError(f"take_along_dim(): input and indices should have the same number "
                            f"of dimensions, but got shapes {tuple(x.shape)} and "
                            f"{tuple(indices.shape)}")
    shape = list(broadcast_shapes(tuple(s for i, s in enumerate(x.shape) if i != d),
                                  tuple(s for i, s in enumerate(indices.shape) if i != d),
                                  op="take_along_dim"))
    xs = list(shape)
    xs.insert(d, x.shape[d])
    ish = list(shape)
    ish.insert(d, indices.shape[d])
    # PyTorch wraps negative indices here and (on CPU) reads past the end for too-large ones:
    # flowlite raises for those instead
    out = _take_along_prim(broadcast_to(x, tuple(xs)), broadcast_to(indices, tuple(ish)), d)
    index_in_range(indices, x._node.shape[d], "take_along_dim", negative=True, dim=d,
                   shape=x._node.shape, out=out)
    return out





def _scatter_prim(x, index, src, d):
    return apply(scatter_p, (x, index, src), (d,), x._node.shape, x._node.dtype)


def _scatter_args(x, dim, index, src, op):
    index = _check_index_tensor(index, op)
    d = _norm_dim(dim, x.ndim, op)
    if not isinstance(src, Tensor):
        src = broadcast_to(as_tensor(src, dtype=x.dtype), index._node.shape)
    src = to_dtype(src, x.dtype)
    if index.ndim != x.ndim or src.ndim != x.ndim:
        raise ArgumentError(f"{op}: index {tuple(index.shape)}, src {tuple(src.shape)} and self "
                            f"{tuple(x.shape)} must have the same number of dimensions")
    for i in range(x.ndim):
        if index.shape[i] > src.shape[i] or (i != d and index.shape[i] > x.shape[i]):
            raise ArgumentError(f"{op}: index {tuple(index.shape)} is larger than src "
                                f"{tuple(src.shape)} or self {tuple(x.shape)} at dimension {i}")
    return index, d, src


def _checked_scatter(out, x, index, d, op):
    index_in_range(index, x._node.shape[d], op, dim=d, shape=x._node.shape, out=out)
    return out


@torch_op(inplace=True)
def scatter(x, dim, index, src=None, value=None, reduce=None):
    if src is None:
        src = value
    index, d, src = _scatter_args(x, dim, index, src, "scatter")
    if reduce == "add":
        return _checked_scatter(_scatter_add_prim(x, index, src, d), x, index, d, "scatter")
    if reduce == "multiply":
        return _checked_scatter(apply(scatter_mul_p, (x, index, src), (d,), x._node.shape,
                                      x._node.dtype), x, index, d, "scatter")
    if reduce is not None:
        raise ArgumentError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
    return _checked_scatter(_scatter_prim(x, index, src, d), x, index, d, "scatter")


@torch_op(inplace=True)
def scatter_add(x, dim, index, src):
    index, d, src = _scatter_args(x, dim, index, src, "scatter_add")
    return _checked_scatter(_scatter_add_prim(x, index, src, d), x, index, d, "scatter_add")


@torch_op
def index_select(x, dim, index):
    index = _check_index_tensor(index, "index_select")
    if index.ndim > 1:
        raise IndexShapeError(f"index_select: index must be 1-D or 0-D (got shape "
                              f"{tuple(index.shape)})")
    d = _norm_dim(dim, x.ndim, "index_select")
    flat = reshape(index, (-1,))
    spec = tuple(("s", 0, s, 1) for s in x._node.shape[:d]) + (("t",),)
    out = _index(x, spec, (flat,))
    index_in_range(flat, x._node.shape[d], "index_select", dim=d, shape=x._node.shape,
                   out=out)
    return name_grad_fn(out, "IndexSelectBackward0", x)


@torch_op(inplace=True)
def index_add(x, dim, index, source, alpha=1):
    index = _check_index_tensor(index, "index_add")
    d = _norm_dim(dim, x.ndim, "index_add")
    if index.ndim > 1:
        raise IndexShapeError(f"index_add: index must be 1-D or 0-D (got shape "
                              f"{tuple(index.shape)})")
    want = x._node.shape[:d] + (index.numel(),) + x._node.shape[d + 1:]
    if tuple(source.shape) != want and not (x.ndim == 0 and source.numel() == 1):
        raise ArgumentError(f"index_add: source shape {tuple(source.shape)} must match self "
                            f"shape {tuple(x.shape)} excluding dim {d}, with {index.numel()} "
                            f"indices there (expected {want})")
    spec = tuple(("s", 0, s, 1) for s in x._node.shape[:d]) + (("t",),)
    if alpha != 1:
        source = source * alpha
    out = _index_add(x, spec, (index,), to_dtype(source, x.dtype))
    index_in_range(index, x._node.shape[d], "index_add", dim=d, shape=x._node.shape, out=out)
    return out


@torch_op
def take(x, index):
    """x read as 1-D at `index` (negative indices count from the end), shaped like index."""
    index = _check_index_tensor(index, "take")
    flat = reshape(x, (-1,))
    out = _index(flat, (("t",),), (index,))
    index_in_range(index, flat._node.shape[0], "take", negative=True, shape=x._node.shape,
                   out=out)
    return out


def _dim_spec(x, dim, index, op):
    # PyTorch: index_fill_ raises IndexError for an index of the wrong dtype
    index = _check_index_tensor(index, op, IndexDTypeError if op == "index_fill" else DTypeError)
    if index.ndim > 1:
        raise IndexShapeError(f"{op}: index must be 1-D or 0-D (got shape {tuple(index.shape)})")
    d = _norm_dim(dim, x.ndim, op)
    return d, reshape(index, (-1,)), tuple(("s", 0, s, 1) for s in x._node.shape[:d]) + \
        (("t",),)


@torch_op(inplace=True)
def index_fill(x, dim, index, value):
    """x with the slices at `index` along dim set to value (a number or a 0-d tensor)."""
    d, flat, spec = _dim_spec(x, dim, index, "index_fill")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ArgumentError(f"index_fill: only supports a 0-dimensional value tensor, got "
                                f"shape {tuple(value.shape)}")
        v = to_dtype(value, x.dtype)
    else:
        v = as_tensor(value, dtype=x.dtype)
    out = _index_set(x, spec, (flat,), v)
    index_in_range(flat, x._node.shape[d], "index_fill", negative=True, dim=d,
                   shape=x._node.shape, out=out)
    return out


@torch_op(inplace=True)
def index_copy(x, dim, index, source):
    """x with the slices at `index` along dim replaced by source's (index_copy)."""
    d, flat, spec = _dim_spec(x, dim, index, "index_copy")
    want = x._node.shape[:d] + (flat._node.shape[0],) + x._node.shape[d + 1:]
    if tuple(source.shape) != want:
        # PyTorch: IndexError (count or rank differs) or RuntimeError (slice shape differs)
        raise IndexShapeError(f"index_copy: source shape {tuple(source.shape)} must be {want} "
                            f"(self {tuple(x.shape)}, dim {d}, {flat._node.shape[0]} indices)")
    out = _index_set(x, spec, (flat,), to_dtype(source, x.dtype))
    index_in_range(flat, x._node.shape[d], "index_copy", dim=d, shape=x._node.shape, out=out)
    return out


@torch_op(inplace=True)
def masked_fill(x, mask, value):
    if not isinstance(mask, Tensor) or mask.dtype is not D.bool_:
        got = f"{mask.dtype} tensor of shape {tuple(mask.shape)}" if isinstance(mask, Tensor) \
            else type(mask).__name__
        raise DTypeError(f"masked_fill: expected a bool mask tensor, got a {got}")
    broadcast_shapes(x._node.shape, mask._node.shape, op="masked_fill")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ArgumentError(f"masked_fill: only supports a 0-dimensional value tensor, but "
                                f"got a tensor of shape {tuple(value.shape)}")
        value = to_dtype(value, x.dtype)
    else:
        value = _scalar(value, x.dtype)
    r = where(mask, value, x)
    r = r if r._node.shape == x._node.shape else broadcast_to(r, x._node.shape)
    return name_grad_fn(r, "MaskedFillBackward0", x)


@torch_op(method=False)
def one_hot(x, num_classes=-1):
    if x.dtype.kind not in "iu":
        raise DTypeError(f"one_hot is only applicable to index tensors (got {x.dtype})")
    if num_classes < 0:
        num_classes = builtins.int(amax(x).item()) + 1 if x.numel() else 0
    classes = arange(num_classes, device=x.device, dtype=x.dtype)
    out = to_dtype(eq(unsqueeze(x, -1), classes), D.int64)
    index_in_range(x, num_classes, "one_hot", kind="class", shape=x._node.shape, out=out)
    return out
