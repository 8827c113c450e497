"""Rebinding tensors and recording updates: the in-place half of the tracer.

Layer: frontend — imports engine.dtypes, engine.errors, engine.graph_key, engine.host_data,
engine.host_eval, engine.ir, engine.metrics, engine.runtime, engine.tape, ops, primitives,
tensor, views. In-place methods, `nn` (parameter values) and `optim` (the update node whose
outputs replace parameters and state) all go through these, so nothing outside the core writes
`Tensor._node`.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..engine import dtypes as D, graph_key, host_eval, ir
from ..engine.errors import ArgumentError
from ..engine.host_data import HostNode, host_array, host_node, on_host
from ..engine.graph_key import enter as _enter
from ..engine.metrics import _C
from .ops import broadcast_to, full_like, getitem_plan, index_put, to_dtype, where
from .primitives import tuple_get
from ..engine.runtime import rt
from ..engine.tape import AccumulateGrad, _state
from .tensor import Tensor, apply, name_grad_fn
from .views import _Root, _View, _alias_of, _mark, _note_undo, orphan, rebound, refresh, write_view

_DATA = ir.DATA
_Node = ir.Node
_new_node = ir.Node.__new__
_ref = weakref.ref
record = apply
_TRUE = True


# PyTorch's node for an in-place write of a value without history
_FILL_NODES = {"fill_": "FillBackward2", "zero_": "ZeroBackward0", "copy_": "CopyBackwards"}


def rebind(t: Tensor, new: Tensor, opname: str) -> Tensor:
    """In-place semantics: `t` now holds `new`'s value (cast to t's dtype) and, under grad
    mode, its autograd history; the tape keeps the old node.  A view writes through to its
    root, and every live view of the root sees the new value (flowlite.views)."""
    if new._node.shape != t._node.shape:
        raise RuntimeError(f"{opname}: result shape {tuple(new.shape)} doesn't match the "
                           f"in-place tensor's shape {tuple(t.shape)}")
    if new._node.dtype is not t._node.dtype:
        new = to_dtype(new, t._node.dtype)
    a = t._alias
    if a.__class__ is _View:
        write_view(t, a, new, opname)
        return t
    e = t._edge
    if e is not None and _state.enabled:
        if isinstance(e, AccumulateGrad):
            raise RuntimeError(f"{opname}: a leaf Variable that requires grad is being used "
                               "in an in-place operation (wrap it in flowlite.no_grad())")
        if new._edge is None:
            # a value without history (fill_, zero_, copy_ of a constant): like PyTorch, t
            # still requires grad, its old history getting a zero gradient
            new = name_grad_fn(where(_TRUE, new, t), _FILL_NODES.get(opname, "WhereBackward0"))
        t._edge = new._edge
    elif e is None and new._edge is not None and _state.enabled:
        t._edge = new._edge
    _note_undo(t, e, new._node.__class__ is HostNode)
    n = t._node = new._node
    if n.op is not _DATA:
        rt.local.pending.append(_ref(t))
    elif n.__class__ is HostNode:
        n.written = True          # done on the host: a failed sync before the next takes it back
    if a is None:
        t._alias = _Root()
    refresh(t)
    return t


def setitem(x, idx, value):
    """`x[idx] = value`: for a basic index, PyTorch copies value into the view x[idx];
    advanced indices put into x.  Into small host data (engine.host_data) a Python number or
    host data is written on the host (views.write_view)."""
    if _mask_write(x, idx, value):
        return
    if x._alias.__class__ is not _View and x._node.op is not _DATA:
        _to_host(x)
    out, plan = getitem_plan(x, idx, True)
    if plan is None:
        rebind(x, index_put(x, idx, value), "__setitem__")
        return
    sub = _alias_of(x) if out is x else _mark(out, x, "basic", plan)
    host = sub._node.__class__ is HostNode
    if isinstance(value, Tensor):
        if host and value._node.__class__ is HostNode and value._edge is None:
            v = _host_value(value._node, sub._node)
            if v is not None:
                rebind(sub, v, "copy_")
                return
        v = to_dtype(value, x._node.dtype)
        try:
            v = broadcast_to(v, sub._node.shape)
        except ValueError:
            raise ArgumentError(f"setitem: value of shape {tuple(value.shape)} cannot be broadcast "
                             f"to the indexed shape {tuple(sub.shape)}") from None
        rebind(sub, v, "copy_")
    else:
        if host and isinstance(value, _NUMBERS):
            v = _host_fill(value, sub._node)
            if v is not None:
                rebind(sub, v, "copy_")
                return
        rebind(sub, full_like(sub, value), "copy_")   # PyTorch copies here: overlaps refused


_NUMBERS = (int, float, bool, np.number, np.bool_)


def _mask_write(x, idx, value) -> bool:
    """`x[mask] = value` with a pending bool mask over x's leading dimensions and one value (a
    number or a one-element tensor) recorded as where(mask, value, x): no read of the mask,
    whose True count only an index_put needs (nanoGPT's top-k while sampling, `logits[logits <
    v[:, [-1]]] = -float('Inf')`, read every token).  False: the general path."""
    if not isinstance(idx, Tensor):
        return False
    m = idx._node
    if m.dtype is not D.bool_ or m.op is _DATA or m.op is ir.SCALAR:
        return False
    ms, xs = m.shape, x._node.shape
    if not ms or tuple(ms) != tuple(xs[:len(ms)]):
        return False
    if isinstance(value, Tensor):
        if tuple(value._node.shape) not in ((), (1,)):
            return False
        value = to_dtype(value, x._node.dtype).reshape(())
    elif not isinstance(value, _NUMBERS):
        return False
    if len(ms) < len(xs):
        idx = idx.reshape(tuple(ms) + (1,) * (len(xs) - len(ms)))
    new = where(idx, value, x)
    if new._node.dtype is not x._node.dtype:
        new = to_dtype(new, x._node.dtype)
    rebind(x, new, "__setitem__")
    return True
# a pending tensor written into is given its value as host data first when it has at most
# this many elements and that value is a few exact steps from data (`torch.zeros(n)`)
_HOST_ROOT_MAX = 1 << 14


def _to_host(x):
    """`losses = torch.zeros(n)` then `losses[k] = loss.item()`: x's pending value, computed
    on the host (exact: a constant, views and integer arithmetic of data), becomes host data,
    so the writes are done there — no graph node per write, no program."""
    n = x._node
    d = n.device
    if n.op is ir.SCALAR or d is None or not on_host(d) or x._edge is not None or \
            rt.observers or rt.local.tracing_body:
        return
    size = 1
    for s in n.shape:
        size *= s
    if size > _HOST_ROOT_MAX:
        return
    got = host_eval.value(n, host_array)
    if got is not None:
        x._node = host_node(np.array(got[0], copy=True), n.dtype, d)


def _host_fill(value, sub):
    """`value` (a Python number) as host data of sub's shape and dtype, converted as the
    recorded path converts it (full_like); None when that conversion fails (the recorded
    path then reports it)."""
    d = sub.dtype
    v = value.item() if isinstance(value, (np.number, np.bool_)) else value
    if d is D.bool_:
        v = bool(v)
    elif d.kind in "iu":
        v = int(v)
    try:
        a = np.asarray(v, dtype=d.np)
    except (OverflowError, ValueError, TypeError):
        return None
    return Tensor(host_node(np.broadcast_to(a, sub.shape), d, sub.device))


def _host_value(v, sub):
    """Host data `v` converted to sub's dtype (exactly: the same dtype, or from integers) and
    broadcast to its shape; None otherwise."""
    d = sub.dtype
    a = v.host
    if v.dtype is not d:
        if v.dtype.kind not in "iub" or v.device is not sub.device:
            return None
        a = a.astype(d.np)
    try:
        a = np.broadcast_to(a, sub.shape)
    except ValueError:
        return None
    return Tensor(host_node(a, d, sub.device))


def set_value(t: Tensor, new: Tensor) -> Tensor:
    """Replace t's value by new's, keeping t's identity, autograd flags and .grad (a
    parameter moved to another device or dtype, a loaded state_dict entry); t's views see
    the new value when its shape is unchanged."""
    same = new._node.shape == t._node.shape
    _note_undo(t, t._edge)
    t._node = new._node
    if t.is_pending:
        rt.local.pending.append(_ref(t))
    if same:
        rebound(t)
    else:
        orphan(t)
    return t


def share(t: Tensor, cls=Tensor) -> Tensor:
    """A new handle of class `cls` on t's (immutable) value, outside autograd: a lazy,
    sync-free copy."""
    out = cls.__new__(cls)
    Tensor.__init__(out, t._node)
    return out


def share_into(obj: Tensor, t: Tensor) -> Tensor:
    """Initialise `obj`, a new instance of a Tensor subclass (from inside its `__init__`), as
    a handle on t's value outside autograd: what `share(t, type(obj))` builds, for
    subclasses whose constructor takes the tensor (`nn.Parameter(data)`)."""
    Tensor.__init__(obj, t._node)
    return obj


def host_scalar(value, dtype, tag=None) -> Tensor:
    """A Python number that travels as data (never a baked constant, so a new value never
    recompiles); `tag` names its source for `flowlite.compile`'s replays."""
    t = Tensor(ir.scalar_node(value, dtype))
    t._node.tag = tag
    return t


_proj_sigs: dict = {}


def record_into(targets, prim, inputs, attrs, memo=None) -> None:
    """Record `prim(*inputs)` — a multi-output, non-differentiable primitive whose output j
    has the shape and dtype of targets[j] — and rebind each target to its output, as an
    optimizer step rebinds parameters and state.  `memo` (a dict the caller keeps per
    call site) remembers the update's interned signature while attrs, shapes and dtypes
    stay the same: this runs for every parameter of every step."""
    shapes = tuple([t._node.shape for t in targets])
    dts = tuple([t._node.dtype for t in targets])
    local = rt.local
    st = local.stream
    if memo is not None and memo.get("key") == (attrs, shapes, dts):
        nodes = tuple([t._node for t in inputs])
        device = nodes[0].device
        flat = st.flat
        for i in nodes:         # apply's device check and graph-key entry, inline
            d = i.device
            if d is not device and d is not None:
                st.valid = False
                apply(prim, inputs, attrs, shapes, dts)   # raises the device error
            flat.append(i.mark if i.epoch is st else _enter(st, i))
        node = ir.node_with_sig(prim, nodes, attrs, shapes, dts, device, memo["sig"])
        flat.append(node.sig)
        node.epoch = st
        node.mark = st.nxt
        st.nxt += 1
        _C["ops"] += 1
        sigs, token, jn = memo["proj"]
    else:
        node = apply(prim, inputs, attrs, shapes, dts)._node
        key = (shapes, dts)
        proj = _proj_sigs.get(key)
        if proj is None:
            n = len(targets)
            proj = _proj_sigs[key] = (
                [ir.intern_sig((tuple_get, (j, n), shapes[j], dts[j], 1)) for j in range(n)],
                graph_key.token("projections", key), [(j, n) for j in range(n)])
        if memo is not None:
            memo["key"] = (attrs, shapes, dts)
            memo["sig"] = node.sig
            memo["proj"] = proj
        sigs, token, jn = proj
    # the projections are one graph-key entry: no codes (they read the entry before)
    n = len(targets)
    st.flat.append(token)
    k = st.nxt
    st.nxt = k + n
    ins = (node,)
    device = node.device
    pending = local.pending
    new = _new_node
    for j in range(n):          # node_with_sig, inline: this runs for every target
        t = targets[j]
        p = new(_Node)
        p.op = tuple_get
        p.inputs = ins
        p.attrs = jn[j]
        p.shape = shapes[j]
        p.dtype = dts[j]
        p.device = device
        p.value = None
        p.site = p.tag = p.check = None
        p.epoch = st
        p.mark = k + j
        p.size = None
        p.sig = sigs[j]
        t._node = p
        pending.append(_ref(t))
        if t._alias is not None:
            rebound(t)
    _C["ops"] += n
