"""Views and write-through: PyTorch's aliasing on a functional graph.

Layer: frontend — imports engine.errors, engine.executor, engine.host_data, engine.host_reads,
engine.ir, engine.layout, engine.runtime, engine.tape, ops, ops.shape, tensor.

A view (basic indexing, `view`/`reshape` where the layout allows, `transpose`, `expand`,
`narrow`, `split`, `diagonal`, `unfold`, `detach()`, `.data`, ...) is a new tensor whose
`_alias` is a `_View`: its root (the tensor that owns the storage) and how it was derived,
from which its layout in the root's elements (offset, strides — PyTorch's storage model)
follows.  A root with views carries a `_Root`: weak references to them and a version.

Nodes are immutable, so nothing is written in place: an in-place op on a view records one
`view_write` node (the root's new value), rebinds the root, and re-derives every live view
of that root with one `view_read` node each — functionalization, as PyTorch/XLA does it.
Everything stays lazy: a write adds nodes, never a sync.  Host data (engine.host_data) is the
exception that keeps PyTorch's meaning the same way: views of it are numpy views, and a write
into a small host root makes the root's new value with numpy and re-derives its views there.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..engine.errors import ArgumentError, DTypeError, IndexRangeError
from ..engine import executor, ir, layout as L
from . import ops as F
from ..engine.host_data import (HostNode, host_node, host_value, read_layout,
                                row_nodes, write_layout)
from ..engine.host_reads import commit_host_read
from ..engine.runtime import rt
from ..engine.tape import AccumulateGrad, _state
from .ops.shape import transpose_family
from .tensor import Tensor, _norm_dim, name_grad_fn

_ref = weakref.ref
_DATA_OP = ir.DATA


class _Root:
    """Attached to a tensor that has (or had) views, or was written in place."""
    __slots__ = ("views", "version", "limit", "noted")

    def __init__(self):
        self.views = []       # weakrefs to the views (dead ones pruned now and then)
        self.version = 0
        self.limit = 16
        self.noted = None     # the undo generation this tensor's host write was noted in


class _View:
    __slots__ = ("root", "parent", "kind", "args", "in_shape", "shape", "grad", "detached",
                 "nograd", "multi", "lay", "noted", "index")

    def __init__(self, root, parent, kind, args, in_shape, shape, detached, nograd):
        self.root = root          # the Tensor owning the storage (kept alive, as in PyTorch)
        self.parent = parent      # the _View this one was derived from (None: the root)
        self.kind = kind
        self.args = args
        self.in_shape = in_shape
        self.shape = shape
        self.detached = detached  # detach()/.data in the chain: outside autograd
        self.nograd = nograd      # made under no_grad: PyTorch forbids writing it with grad
        #                           mode on when the root requires grad
        self.grad = not (detached or nograd)   # re-derivations keep the autograd link
        self.multi = parent is not None and parent.multi   # from split/chunk/unbind
        self.lay = None
        self.noted = None         # (as _Root.noted)
        self.index = None         # the Python-int index it was taken at (host_writes)


def _slice_rule(off, st, shape, args):
    return L.slice_layout(off, st, args[0], args[1])


def _reshape_rule(off, st, shape, args):
    return off, L.view_strides(shape, st, args[0])


def _basic_rule(off, st, shape, plan):
    sl, sliced, out_shape = plan
    if sl is not None:
        off, st = L.slice_layout(off, st, sl[0], sl[2])
    return off, L.view_strides(sliced, st, out_shape)


_RULES = {
    "alias": lambda off, st, shape, args: (off, st),
    "row": lambda off, st, shape, args: (off + args[0] * st[0], st[1:]),
    "slice": _slice_rule,
    "reshape": _reshape_rule,
    "basic": _basic_rule,
    "perm": lambda off, st, shape, args: L.permute_layout(off, st, args[0]),
    "expand": lambda off, st, shape, args: L.expand_layout(off, st, shape, args[0]),
    "diag": lambda off, st, shape, args: L.diagonal_layout(off, st, shape, *args),
    "unfold": lambda off, st, shape, args: L.unfold_layout(off, st, args[0], args[1]),
    "strided": lambda off, st, shape, args: args,
}


def _layout(v: _View):
    """(offset, strides) of view v in its root's elements."""
    lay = v.lay
    if lay is None:
        if v.parent is None:
            off, st = 0, L.contiguous_strides(v.in_shape)
        else:
            off, st = _layout(v.parent)
        lay = v.lay = _RULES[v.kind](off, st, v.in_shape, v.args)
    return lay


def _strides_of(x):
    a = x._alias
    if a.__class__ is _View:
        return _layout(a)
    return 0, L.contiguous_strides(x._node.shape)


def _mark(out, x, kind, args, linked=True):
    """Make `out` (just recorded from x) a view of x's root; linked=False: detach()/.data."""
    a = x._alias
    nograd = not _state.enabled
    if a.__class__ is _View:
        root, parent = a.root, a
        detached = not linked or a.detached
        nograd = nograd or a.nograd
    else:
        root, parent, detached = x, None, not linked
        if a is None:
            x._alias = _Root()
    ra = root._alias
    views = ra.views
    views.append(_ref(out))
    if len(views) > ra.limit:
        live = [r for r in views if r() is not None]
        ra.views = live
        ra.limit = max(16, 2 * len(live))
    out._alias = _View(root, parent, kind, args, x._node.shape, out._node.shape, detached,
                       nograd)
    return out


# ---- the view ops ---------------------------------------------------------------------------
def _alias_of(x):
    """A new tensor viewing all of x: PyTorch's view ops never return their input."""
    return _mark(Tensor(x._node, x._edge if _state.enabled else None), x, "alias", ())


def _reshape_view(out, x, op, copy_ok, node_name="ViewBackward0"):
    if out is x:
        return _alias_of(x)
    a = x._alias
    if a.__class__ is _View:
        off, st = _layout(a)
        if L.view_strides(x._node.shape, st, out._node.shape) is None:
            if copy_ok:
                # reshape of a non-viewable layout copies, as in PyTorch (its clone, then
                # _unsafe_view)
                return name_grad_fn(out, "UnsafeViewBackward0", x)
            raise RuntimeError(
                f"{op}: view size is not compatible with input tensor's size and stride (at "
                f"least one dimension spans across two contiguous subspaces): shape "
                f"{tuple(x.shape)} with strides {st} can't be viewed as "
                f"{tuple(out.shape)}. Use .reshape(...) instead.")
    name_grad_fn(out, node_name, x)
    return _mark(out, x, "reshape", (out._node.shape,))


def reshape(x, *shape):
    return _reshape_view(F.reshape(x, *shape), x, "reshape", True)


def view(x, *shape):
    if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list)) and \
            not hasattr(shape[0], "__index__") and not hasattr(shape[0], "__len__"):
        raise DTypeError(f"view: expected a shape, got {shape[0]!r} (view(dtype) is not "
                         "supported: use .to(dtype) for a converted copy)")
    return _reshape_view(F.reshape(x, *shape), x, "view", False)


def view_as(x, other):
    return view(x, other._node.shape)


def flatten(x, start_dim=0, end_dim=-1):
    out = F.flatten(x, start_dim, end_dim)
    return x if out is x else _reshape_view(out, x, "flatten", True)   # torch returns self too


def ravel(x):
    """x flattened to 1-D: a view when x's layout allows (as torch.ravel), else a copy."""
    return reshape(x, -1)


def unflatten(x, dim, sizes):
    return _reshape_view(F.unflatten(x, dim, sizes), x, "unflatten", False)


def squeeze(x, dim=None):
    # PyTorch's three overloads: squeeze(), squeeze(dim), squeeze(dims)
    name = "SqueezeBackward0" if dim is None else \
        "SqueezeBackward2" if isinstance(dim, (tuple, list)) else "SqueezeBackward1"
    return _reshape_view(F.squeeze(x, dim), x, "squeeze", False, name)


def unsqueeze(x, dim):
    return _reshape_view(F.unsqueeze(x, dim), x, "unsqueeze", False, "UnsqueezeBackward0")


def permute(x, *dims):
    if len(dims) == 1 and type(dims[0]) is not int:
        dims = tuple(dims[0])
    out = F.permute(x, dims)
    if out is x:
        return _alias_of(x)
    nd = len(x._node.shape)
    name_grad_fn(out, "PermuteBackward0", x)
    return _mark(out, x, "perm", (tuple(_norm_dim(d, nd, "permute") for d in dims),))


_transpose, _t, _mT, T = transpose_family(permute)     # T: PyTorch's permute too


def transpose(x, dim0, dim1):
    return name_grad_fn(_transpose(x, dim0, dim1), "TransposeBackward0", x)


def t(x):
    return name_grad_fn(_t(x), "TBackward0", x)


def mT(x):
    return name_grad_fn(_mT(x), "TransposeBackward0", x)


swapaxes = swapdims = transpose


def movedim(x, source, destination):
    nd = x.ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ArgumentError(f"movedim: source {src} and destination {dst} must have the same "
                            "number of dims")
    src = [_norm_dim(d, nd, "movedim") for d in src]
    dst = [_norm_dim(d, nd, "movedim") for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ArgumentError(f"movedim: repeated dim in source {src} or destination {dst}")
    order = [None] * nd
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(nd) if d not in src)
    return permute(x, tuple(o if o is not None else next(rest) for o in order))


moveaxis = movedim


def _expand_view(out, x):
    return _alias_of(x) if out is x else _mark(out, x, "expand", (out._node.shape,))


def expand(x, *sizes):
    return _expand_view(F.expand(x, *sizes), x)


def expand_as(x, other):
    return _expand_view(F.expand_as(x, other), x)


def broadcast_to(x, shape):
    return _expand_view(F.broadcast_to(x, shape), x)


def _slice_view(out, x, d, start):
    if out is x:
        return _alias_of(x)
    starts = [0] * len(x._node.shape)
    starts[d] = start
    return _mark(out, x, "slice", (tuple(starts), (1,) * len(starts)))


def narrow(x, dim, start, length):
    d = _norm_dim(dim, x.ndim, "narrow")
    if isinstance(start, Tensor):       # an offset from a tensor: data, not program
        s = int(start)
        if s < 0:
            s += x._node.shape[d]
        if not 0 <= s <= x._node.shape[d] - length or length < 0:
            raise IndexRangeError(f"narrow: start ({s}) + length ({length}) exceeds dimension "
                                  f"size ({x._node.shape[d]}) of dim {d} in shape "
                                  f"{tuple(x.shape)}")
        return getitem(x, (slice(None),) * d + (slice(start, s + length),))
    if not isinstance(start, int):
        start = int(start)
    out = F.narrow(x, d, start, length)
    return _slice_view(out, x, d, start + x._node.shape[d] if start < 0 else start)


def select(x, dim, index):
    d = _norm_dim(dim, x.ndim, "select")
    n = x._node.shape[d]
    if not -n <= index < n:
        raise IndexRangeError(f"select(): index {index} out of range for tensor of size "
                              f"{tuple(x.shape)} at dimension {dim}")
    return name_grad_fn(squeeze(narrow(x, d, index % n, 1), d), "SelectBackward0", x)


def split(x, split_size_or_sections, dim=0):
    d = _norm_dim(dim, x.ndim, "split")
    pieces = F.split(x, split_size_or_sections, d)
    name = "SplitBackward0" if isinstance(split_size_or_sections, int) else \
        "SplitWithSizesBackward0"
    out, start = [], 0
    for p in pieces:
        out.append(_multi(_slice_view(name_grad_fn(p, name, x), x, d, start)))
        start += p._node.shape[d]
    return tuple(out)


def _multi(v):
    a = v._alias
    if a.__class__ is _View:
        a.multi = True
    return v


def chunk(x, chunks, dim=0):
    if chunks <= 0:
        raise ArgumentError(f"chunk: chunks must be positive, got {chunks}")
    if not x._node.shape:
        raise ArgumentError("chunk: expects at least a 1-dimensional tensor (got a 0-d tensor)")
    n = x._node.shape[_norm_dim(dim, x.ndim, "chunk")]
    return split(x, max(-(-n // chunks), 1), dim)


def unbind(x, dim=0):
    d = _norm_dim(dim, x.ndim, "unbind")
    if d == 0:
        rows = host_rows(x)
        if rows is not None:
            return rows
    return tuple(_multi(name_grad_fn(select(x, d, i), "UnbindBackward0", x))
                 for i in range(x._node.shape[d]))


# a pending integer tensor of at most this many elements, one op from data (a random draw),
# is read when it is iterated: its elements are read next (`for i in ix: data[i:i + n]`)
_READ_ON_ITER_MAX = 1 << 16


def host_rows(x):
    """The rows of an integer (or bool) tensor — indices, iterated to be read — as host data
    (views of x, as unbind's) when x's value is on the host, or x is small and one op from
    data (a random draw: read now, its one small program); else None.  (Rows of other
    dtypes are recorded: a loop over a sequence's steps feeds a program.)"""
    n = x._node
    if x._edge is not None or not n.shape or n.dtype.kind not in "iub" or rt.observers or \
            rt.local.tracing_body:
        return None
    arr = host_value(n)
    if arr is None:
        d = n.device
        if n.op is _DATA_OP or d is None or d.type != "cpu" or \
                L.numel(n.shape) > _READ_ON_ITER_MAX:
            return None
        for i in n.inputs:
            if i.op is not _DATA_OP and i.op is not ir.SCALAR:
                return None
        arr = np.asarray(x._value("iteration"))
        if arr.flags.writeable:
            arr.setflags(write=False)
    rows = [Tensor(r) for r in row_nodes(arr, n.dtype, n.device)]
    a = x._alias
    nograd = not _state.enabled
    if a.__class__ is _View:
        root, parent, detached = a.root, a, a.detached
        nograd = nograd or a.nograd
    else:
        root, parent, detached = x, None, False
        if a is None:
            x._alias = _Root()
    ra = root._alias
    ra.views.extend([_ref(r) for r in rows])
    if len(ra.views) > ra.limit:
        live = [r for r in ra.views if r() is not None]
        ra.views = live
        ra.limit = max(16, 2 * len(live))
    shape, rshape = n.shape, n.shape[1:]
    for k, r in enumerate(rows):
        v = r._alias = _View(root, parent, "row", (k,), shape, rshape, detached, nograd)
        v.multi = True
    return tuple(rows)


def getitem(x, idx):
    if idx.__class__ is slice and x._edge is None:
        got = F.host_window(x, x._node, idx)    # a window of host data (`data[i:i + n]`)
        if got is not None:
            out, plan = got
            return _alias_of(x) if out is x else _mark(out, x, "basic", plan)
    out, plan = F.getitem_plan(x, idx)
    if out._edge is not None and out is not x:
        name_grad_fn(out, _getitem_node_name(x, idx, plan is None), x)
    if plan is None:
        return out                 # advanced indexing copies, as in PyTorch
    if out is x:
        return _alias_of(x)
    return _mark(out, x, "basic", plan)


def _int_bounds(s: slice) -> bool:
    return all(v is None or type(v) is int for v in (s.start, s.stop, s.step))


def _getitem_node_name(x, idx, advanced):
    """PyTorch's node for `x[idx]`: indexing with tensors or lists ends in `index`; basic
    indexing applies its items left to right (an int selects, a slice slices, None
    unsqueezes), skipping, in a tuple, slices that cover their whole dimension and `...`, and
    the last one applied names the node (none applied: an alias)."""
    if advanced:
        # a lone 0-d integer tensor is an int to PyTorch (`x[torch.tensor(1)]` selects)
        if not (isinstance(idx, Tensor) and not idx._node.shape and idx.dtype.kind in "iu"):
            return "IndexBackward0"
    if not isinstance(idx, tuple):
        return ("UnsqueezeBackward0" if idx is None else "AliasBackward0" if idx is Ellipsis
                else "SliceBackward0" if isinstance(idx, slice) else "SelectBackward0")
    shape = x._node.shape
    used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    name, d = "AliasBackward0", 0
    for i in idx:
        if i is None:
            name = "UnsqueezeBackward0"
        elif i is Ellipsis:
            d += len(shape) - used
        elif isinstance(i, slice):
            # (a bound given as a tensor is not read here: that would be a sync)
            if d >= len(shape) or not _int_bounds(i) or i.indices(shape[d]) != (0, shape[d], 1):
                name = "SliceBackward0"
            d += 1
        else:
            name = "SelectBackward0"
            d += 1
    return name


def diagonal(x, offset=0, dim1=0, dim2=1):
    nd = x.ndim
    d1, d2 = _norm_dim(dim1, nd, "diagonal"), _norm_dim(dim2, nd, "diagonal")
    if d1 == d2:
        raise ArgumentError(f"diagonal: dimensions cannot be identical {dim1}, {dim2}")
    shape = L.diagonal_shape(x._node.shape, offset, d1, d2)
    off, st = L.diagonal_layout(0, L.contiguous_strides(x._node.shape), x._node.shape,
                                offset, d1, d2)
    out = name_grad_fn(F._view_read(x, shape, off, st), "DiagonalBackward0", x)
    return _mark(out, x, "diag", (offset, d1, d2))


def unfold(x, dimension, size, step):
    shp = x._node.shape
    d = _norm_dim(dimension, max(len(shp), 1), "unfold")
    n = shp[d] if shp else 1
    if size > n or size < 0:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {n} but "
                           f"size is {size}")
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    if not shp:
        return _mark(F.reshape(x, (size,)), x, "reshape", ((size,),))
    shape = L.unfold_shape(shp, d, size, step)
    off, st = L.unfold_layout(0, L.contiguous_strides(shp), d, step)
    out = name_grad_fn(F._view_read(x, shape, off, st), "UnfoldBackward0", x)
    return _mark(out, x, "unfold", (d, step))


def as_strided(x, size, stride, storage_offset=None):
    """PyTorch's as_strided: a view at an explicit layout of x's storage (its root)."""
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: mismatch in length of strides {stride} and shape "
                           f"{size}")
    a = x._alias
    src, linked = (a.root, a.grad) if a.__class__ is _View else (x, True)
    off = _strides_of(x)[0] if storage_offset is None else storage_offset
    n = L.numel(src._node.shape)
    top = off + sum((s - 1) * k for s, k in zip(size, stride) if s > 0)
    if off < 0 or any(k < 0 for k in stride) or (L.numel(size) and top >= n):
        raise RuntimeError(f"as_strided: size {size}, stride {stride}, storage offset {off} "
                           f"is out of bounds for storage of size {n}")
    enabled = _state.enabled
    _state.enabled = enabled and linked
    try:
        out = F._view_read(src, size, off, stride)
    finally:
        _state.enabled = enabled
    return _mark(out, src, "strided", (off, stride), linked)


def detach(x):
    return _mark(Tensor(x._node), x, "alias", (), linked=False)


def contiguous(x, memory_format=None):
    a = x._alias
    if a.__class__ is _View and not L.is_contiguous(x._node.shape, _layout(a)[1]):
        return Tensor(x._node, x._edge)      # a copy: same value, no longer aliased
    return x


def is_contiguous(x, memory_format=None):
    return L.is_contiguous(x._node.shape, _strides_of(x)[1])


def stride(x, dim=None):
    st = _strides_of(x)[1]
    return st if dim is None else st[_norm_dim(dim, max(x.ndim, 1), "stride")]


def storage_offset(x):
    return _strides_of(x)[0]


def version(x):
    a = x._alias
    if a.__class__ is _View:
        a = a.root._alias
    return 0 if a is None else a.version


# ---- writes ---------------------------------------------------------------------------------
def _note_undo(t, edge, host=False):
    """Remember t's materialised node (weakly: its buffer stays donatable) so a failed sync
    can put it back (rollback._rollback).  `host`: t is being written on the host, where no
    pending node holds the old value: it is held here until the next sync."""
    old = t._node
    if old.op is not _DATA_OP:
        commit_host_read(old)      # a value read on the host stays what was read
    if old.op is _DATA_OP:
        local = rt.local
        if host:
            # written on the host again since its record (a counter in a loop): that first
            # record is what a failure restores; one per write held every old value
            a = t._alias
            if a is not None:
                if a.noted is local.undo_gen:
                    return
                a.noted = local.undo_gen
        undo = local.undo
        undo.append((_ref(t), _ref(old) if not host else _Held(old), edge))
        k = len(undo)
        if k >= 256 and not k & (k - 1):
            # the records of tensors gone since (the views a loop's `N[i, j] += 1` makes and
            # drops) restore nothing: dropped, as the list doubles
            undo[:] = [u for u in undo if u[0]() is not None]


class _Held:
    """A strong reference called like a weak one (an undo record's old node)."""
    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node

    def __call__(self):
        return self.node


def _check_leaf(t, opname):
    if _state.enabled and isinstance(t._edge, AccumulateGrad):
        raise RuntimeError(f"{opname}: a leaf Variable that requires grad is being used in an "
                           "in-place operation (wrap it in flowlite.no_grad(), or write "
                           "through .data)")


_UNIFORM = ("fill_", "zero_")   # one value everywhere: PyTorch lets these write overlaps


def write_view(t, a: _View, new, opname):
    """t (a view) now holds `new`: write it into the root, then re-derive the root's views."""
    _check_leaf(t, opname)
    root = a.root
    off, st = _layout(a)
    if opname not in _UNIFORM and L.self_overlapping(a.shape, off, st):
        if L.overlaps(a.shape, st):
            raise RuntimeError(
                f"{opname}: unsupported operation: more than one element of the written-to "
                f"tensor refers to a single memory location (an expanded view of shape "
                f"{tuple(t.shape)}, strides {st}). Please clone() the tensor before performing "
                "the operation.")
        # PyTorch lets these through and updates the shared elements once per alias, in its
        # loop order; a functional write can't reproduce that order, so refuse rather than
        # differ
        raise RuntimeError(
            f"{opname}: the written-to view of shape {tuple(t.shape)} (strides {st}) has "
            "elements that share memory (overlapping unfold/as_strided windows); its in-place "
            "result would depend on the write order, which flowlite does not reproduce. "
            "clone() the view, or build the result out of place.")
    if root._edge is None and new._edge is None and new._node.__class__ is HostNode and \
            _host_write(root, a, new._node, off, st):
        return
    enabled = _state.enabled
    if enabled and a.nograd and not a.detached and root._edge is not None:
        raise RuntimeError(f"{opname}: a view was created in no_grad mode and is being modified "
                           "in-place with grad mode enabled; PyTorch forbids this ambiguous "
                           "use: make the view and the write both inside no_grad(), or both "
                           "outside")
    linked = a.grad and enabled
    if linked and a.multi and root._edge is not None:
        raise RuntimeError(f"{opname}: this view is an output of split/chunk/unbind (a function "
                           "returning multiple views) and is being modified in-place while "
                           "its base requires grad; PyTorch forbids it: use an out-of-place op "
                           "or clone() the view")
    if linked and isinstance(root._edge, AccumulateGrad):
        raise RuntimeError(f"{opname}: a view of a leaf Variable that requires grad is being "
                           "used in an in-place operation (wrap it in flowlite.no_grad(), or "
                           "write through .data)")
    _state.enabled = linked
    try:
        base = F._view_write(root, new, off, st)
    finally:
        _state.enabled = enabled
    _note_undo(root, root._edge)
    if linked:
        root._edge = base._edge
    root._node = base._node
    rt.local.pending.append(_ref(root))
    refresh(root)
    if not a.grad and enabled and new._edge is not None:
        t._edge = new._edge      # like PyTorch: a write with history makes the view require grad


# a write into host data is done on the host (a copy of the root, written) when the root has
# at most this many elements; a bigger root records the write as every other does
_HOST_WRITE_MAX = 1 << 14


def _host_write(root, a, new, off, st) -> bool:
    """root's new value, with host data `new` written at view a's layout (off, st), made on
    the host when root is small host data: it stays host data, its views numpy views of it
    (refresh).  (A device array's root records the write: reading it would wait for the
    program computing it.)"""
    rn = root._node
    if rn.__class__ is not HostNode or rn.host.size > _HOST_WRITE_MAX or rt.observers or \
            rt.local.tracing_body:
        return False
    arr = rn.host
    _note_undo(root, root._edge, True)
    nn = root._node = host_node(write_layout(arr, a.shape, off, st, new.host), rn.dtype,
                                rn.device)
    nn.written = True
    refresh(root)
    return True


def refresh(root):
    """After root was rebound: bump its version and re-derive each live view from it."""
    ra = root._alias
    ra.version += 1
    if not ra.views:
        return
    enabled = _state.enabled
    pending = rt.local.pending
    rn = root._node
    rshape = rn.shape
    # host data without history: its views are numpy views of its new value
    host = rn.host if rn.__class__ is HostNode and root._edge is None else None
    live = []
    try:
        for r in ra.views:
            v = r()
            if v is None:
                continue
            a = v._alias
            if a.__class__ is not _View or a.root is not root:
                continue                  # detached from this root since (`.data = ...`)
            live.append(r)
            off, st = _layout(a)
            if off == 0 and a.shape == rshape and L.is_contiguous(rshape, st):
                v._node = root._node      # .data, detach(), a full view: the root's own node
                if a.grad:
                    v._edge = root._edge
            elif host is not None:
                if rn.written:       # (a failed sync takes the write back: views too)
                    _note_undo(v, v._edge, True)
                nv = v._node = host_node(read_layout(host, a.shape, off, st), rn.dtype,
                                         rn.device, False)
                nv.written = rn.written
                if a.grad:
                    v._edge = None
                continue
            else:
                _state.enabled = a.grad
                nv = F._view_read(root, a.shape, off, st)
                v._node = nv._node
                if a.grad:
                    v._edge = nv._edge
            pending.append(r)
    finally:
        _state.enabled = enabled
    ra.views = live
    ra.limit = max(16, 2 * len(live))


def rebound(t) -> None:
    """t (a root) was just given a new value by an update (optimizer step, replay, load):
    its views must see it."""
    a = t._alias
    if a is not None:
        if a.__class__ is _View:
            t._alias = None           # a view given a value of its own is no longer aliased
        else:
            refresh(t)


def orphan(t) -> None:
    """`t.data = other`: t takes other's value; its views keep the old storage, as in
    PyTorch, and t stops being a view."""
    a = t._alias
    if a is None:
        return
    if a.__class__ is _View:
        t._alias = None
        return
    for r in a.views:
        v = r()
        if v is not None and v._alias.__class__ is _View and v._alias.root is t:
            v._alias = None
    t._alias = None


def set_data(t, other):
    if not isinstance(other, Tensor):
        raise DTypeError(f"data: expected a Tensor, got {type(other).__name__}")
    orphan(t)
    t._node = other._node
    if t.is_pending:
        rt.local.pending.append(_ref(t))


# ---- more of PyTorch's view-returning ops, composed of the views above ------------------------
def tensor_split(x, indices_or_sections, dim=0):
    """PyTorch's tensor_split: `sections` near-equal pieces (the first n % sections one
    longer) or pieces cut at the given indices along dim; the pieces are views of x."""
    d = _norm_dim(dim, x.ndim, "tensor_split")
    n = x._node.shape[d]
    if isinstance(indices_or_sections, Tensor):
        if indices_or_sections.ndim > 1 or indices_or_sections.dtype.kind not in "iu":
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a "
                               "zero-dimensional or one-dimensional tensor of integers")
        indices_or_sections = (indices_or_sections.item() if indices_or_sections.ndim == 0
                               else indices_or_sections.tolist())
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        bounds, start = [], 0
        for i in range(k):
            start += q + (1 if i < r else 0)
            bounds.append(start)
        bounds = bounds[:-1]
    else:
        bounds = [int(i) for i in indices_or_sections]
    out, start = [], 0
    for b in bounds + [n]:
        b = b + n if b < 0 else b
        lo, hi = min(max(start, 0), n), min(max(b, 0), n)
        out.append(_multi(narrow(x, d, lo, max(hi - lo, 0))))
        start = b
    return tuple(out)


def _split_dim(x, sections, dim, op, need):
    if x.ndim < need:
        raise RuntimeError(f"torch.{op} requires a tensor with at least {need} dimension, but "
                           f"got a tensor with {x.ndim} dimensions!")
    if isinstance(sections, int) and x._node.shape[dim] % sections:
        raise RuntimeError(f"torch.{op} attempted to split along dimension {dim}, but the size "
                           f"of the dimension {x._node.shape[dim]} is not divisible by the "
                           f"split_size {sections}!")
    return tensor_split(x, sections, dim)


def hsplit(x, indices_or_sections):
    """tensor_split along dim 1 (dim 0 for a 1-D tensor); sections must divide it."""
    return _split_dim(x, indices_or_sections, 1 if x.ndim > 1 else 0, "hsplit", 1)


def vsplit(x, indices_or_sections):
    """tensor_split along dim 0 of a tensor of at least 2 dims; sections must divide it."""
    return _split_dim(x, indices_or_sections, 0, "vsplit", 2)


def dsplit(x, indices_or_sections):
    """tensor_split along dim 2 of a tensor of at least 3 dims; sections must divide it."""
    return _split_dim(x, indices_or_sections, 2, "dsplit", 3)


def adjoint(x):
    """The conjugate transpose of the last two dims: for a real tensor, x.transpose(-2, -1)
    (a view)."""
    if x.ndim < 2:
        raise RuntimeError("tensor.adjoint() is only supported on matrices or batches of "
                           f"matrices. Got {x.ndim}-D tensor.")
    return transpose(x, -2, -1)


def broadcast_tensors(*tensors):
    """The tensors expanded to their common shape (views, as PyTorch's)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = F.broadcast_shapes(*[t._node.shape for t in tensors], op="broadcast_tensors")
    return tuple(broadcast_to(t, shape) for t in tensors)


def _atleast(n, tensors):
    one = len(tensors) == 1
    if one and isinstance(tensors[0], (list, tuple)):
        tensors, one = tuple(tensors[0]), False
    out = []
    for t in tensors:
        if not isinstance(t, Tensor):
            t = F.as_tensor(t)
        nd = t.ndim
        if nd >= n:
            out.append(t)
        elif n == 3 and nd == 2:
            out.append(unsqueeze(t, -1))
        elif n == 3 and nd == 1:
            out.append(reshape(t, (1, t._node.shape[0], 1)))
        else:                                       # 0-d, or 1-d made 2-d
            out.append(reshape(t, (1,) * (n - nd) + t._node.shape))
    return out[0] if one else tuple(out)


def atleast_1d(*tensors):
    """Each tensor with at least one dim (0-d -> shape (1,)); one tensor in, one out."""
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    """Each tensor with at least two dims (0-d -> (1, 1), (n,) -> (1, n))."""
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    """Each tensor with at least three dims ((n,) -> (1, n, 1), (m, n) -> (m, n, 1))."""
    return _atleast(3, tensors)
