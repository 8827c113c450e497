"""Element reads and in-place writes of small host tensors, at eager speed.

Layer: frontend — imports engine.errors, engine.host_data, engine.host_reads, engine.layout,
engine.runtime, recording, tensor, views. A bigram count matrix built the way teaching scripts
build it — `N = torch.zeros((27, 27), dtype=torch.int32)`, then `N[stoi[a], stoi[b]] += 1` for
every pair of a word list (228k writes) — or a counter, a lookup table, `p[k]` and `x[i].item()`
in a Python loop: each is an element read or an in-place update of a tensor that needs no
gradient, by a host number. Recorded, every one was a few graph nodes (228k writes: one graph of
2.7M nodes, minutes of compiling). Here, as PyTorch does, they are done now, on the host:

- `x[i, j]` (Python ints) of host data (engine.host_data) is host data: a numpy view of x, or
  an element's value — a view in flowlite's sense (views.py) either way, so a later write
  through it reaches x, and a write to x reaches it;
- an in-place op (`+=`, `add_`, ...) on an element or a view of host data, whose operands are
  Python numbers or host data, is computed with numpy (host_data.elementwise, int_value:
  PyTorch's promotion, integer wrap-around) and written into the root on the host; a root
  still pending from a constant (`torch.zeros(...)`) becomes host data first;
- `x[i, j] = v` (a number, or an element of host data) writes the element on the host; v the
  very view `x[i, j] += 1` just wrote through is the copy of a value onto itself: nothing to
  do but PyTorch's version bump.

An element is written into the root's own array when nothing else holds it (no pending graph
reads it, no undo record, no numpy view, no program still copying it in), else into a copy:
the root stays immutable for whatever reads it.  Anything else takes the recorded path: a
tensor that requires grad, an operand pending or on a device, an op numpy can't do exactly.
Host data that a program reads later enters it as one argument, as all host data does.
"""
from __future__ import annotations

import sys

import numpy as np

from ..engine.errors import IndexRangeError
from ..engine.host_reads import host_view
from ..engine.host_data import HostNode, host_node, int_value, on_host as _on_host_device, \
    read_layout, uploaded
from ..engine import layout as L
from ..engine.runtime import rt
from . import views as V
from .recording import _to_host, setitem as _setitem
from .tensor import Tensor

_local = rt.local
_View = V._View
_NUMBERS = (int, float, bool)


def _int_index(idx):
    """idx as a tuple of Python ints, or None."""
    if idx.__class__ is int:
        return (idx,)
    if idx.__class__ is tuple and idx:
        for i in idx:
            if i.__class__ is not int:
                return None
        return idx
    return None


_strides: dict = {}      # shape -> its contiguous strides


def _element_layout(x, shape, idx):
    """(offset, strides) of x[idx] (idx: Python ints) in x's root, checking each index's
    range as PyTorch does."""
    a = x._alias
    if a.__class__ is _View:
        off, st = V._layout(a)
    else:
        off = 0
        st = _strides.get(shape)
        if st is None:
            st = _strides[shape] = L.contiguous_strides(shape)
    for d, i in enumerate(idx):
        size = shape[d]
        if not -size <= i < size:
            raise IndexRangeError(f"index {i} is out of bounds for dimension {d} with size "
                                  f"{size}")
        off += (i + size if i < 0 else i) * st[d]
    return off, st[len(idx):]


def getitem(x, idx):
    """`x[idx]`: for host data x outside autograd and an index of Python ints, a numpy view
    of x's value (no graph node); else views.getitem."""
    n = x._node
    if n.__class__ is HostNode and x._edge is None:
        ints = _int_index(idx)
        if ints is not None and len(ints) <= len(n.shape) and not rt.observers and \
                not _local.tracing_body:
            lay = _element_layout(x, n.shape, ints)
            if len(ints) == len(n.shape):    # an element: its value (a view of x's array
                # would stop x being written in place, update_element)
                v = np.asarray(n.host[ints])
                fresh = True
            else:
                v = n.host[ints + (Ellipsis,)]
                fresh = False
            out = Tensor(host_node(v, n.dtype, n.device, fresh))
            V._mark(out, x, "strided", lay)
            a = out._alias
            a.lay = lay
            a.index = ints          # (`x[idx] = out` is a copy onto itself: setitem)
            return out
    return V.getitem(x, idx)


def setitem(x, idx, value):
    """`x[idx] = value`; a value that is the view x[idx] of host data itself (`N[i, j] += 1`
    ends with this) is already in place."""
    if value.__class__ is Tensor and value._edge is None and x._edge is None and \
            value._node.__class__ is HostNode:
        va = value._alias
        xa = x._alias
        if va.__class__ is _View and va.index is not None and \
                va.index == _int_index(idx) and va.root is (
                x if xa.__class__ is not _View else xa.root) and va.parent is (
                xa if xa.__class__ is _View else None):
            va.root._alias.version += 1      # (`N[i, j] += 1`: made by getitem, from x, at
            return                           # idx; PyTorch's copy_ bumps the version)
        if va.__class__ is _View and va.root is (xa.root if xa.__class__ is _View else x):
            ints = _int_index(idx)
            if ints is not None and len(ints) <= len(x._node.shape) and \
                    va.shape == x._node.shape[len(ints):] and \
                    V._layout(va) == _element_layout(x, x._node.shape, ints):
                va.root._alias.version += 1      # (PyTorch's copy_ bumps it)
                return
    n = x._node
    if n.__class__ is not HostNode and x._edge is None and x._alias.__class__ is not _View \
            and n.op.name == "full" and _int_index(idx) is not None:
        _to_host_root(x)         # `N = torch.zeros(...)`, then `N[i, j] = N[i, j] + 1`
        n = x._node
    if n.__class__ is HostNode and x._edge is None and not rt.observers and \
            not _local.tracing_body:
        ints = _int_index(idx)
        if ints is not None and len(ints) == len(n.shape):    # `N[i, j] = v`: one element
            xa = x._alias
            root = xa.root if xa.__class__ is _View else x
            if root._edge is None and root._node.__class__ is HostNode:
                v = _element_value(value, n.dtype)
                if v is not None and \
                        _store(root, _element_layout(x, n.shape, ints)[0], v):
                    return
    _setitem(x, idx, value)


# a pending constant root (`torch.zeros((n, n))`) becomes host data for element writes when
# it has at most this many elements (update_element writes it in place)
_ROOT_MAX = 1 << 22


def _to_host_root(root):
    """root's pending value as host data when it is a constant (any size up to _ROOT_MAX) or a
    few exact steps from data (recording._to_host).  (A device array stays one: a buffer a
    training step updates in place keeps being updated there.)"""
    n = root._node
    d = n.device
    if n.op.name == "data":
        return
    if n.op.name == "full" and not n.inputs and d is not None and _on_host_device(d) and \
            root._edge is None and not rt.observers and not _local.tracing_body and \
            L.numel(n.shape) <= _ROOT_MAX:
        shape, value, dtype = n.attrs[:3]
        root._node = host_node(np.full(shape, value, dtype=dtype.np), n.dtype, d)
        return
    _to_host(root)


def _host_operand(v) -> bool:
    if v.__class__ in _NUMBERS:
        return True
    return isinstance(v, Tensor) and v._edge is None and v._node.__class__ is HostNode


def on_host(t, args, kwargs) -> bool:
    """Whether in-place op on t with these operands computes on the host: t an element or a
    view of host data outside autograd (its root made host data when it is a small constant
    still pending), every operand a Python number or host data.  (A whole tensor updated in
    place — `p.mul_(2)` — stays a recorded op: a program updates its buffer in place.)"""
    a = t._alias
    if t._edge is not None or rt.observers or _local.tracing_body or (
            a.__class__ is not _View and t._node.shape):
        return False
    for v in args:
        if not _host_operand(v):
            return False
    if kwargs:
        for v in kwargs.values():
            if not _host_operand(v):
                return False
    if t._node.__class__ is HostNode:
        return True
    root = a.root if a.__class__ is _View else t
    if root._edge is not None:
        return False
    rn = root._node
    if rn.__class__ is not HostNode:
        _to_host_root(root)      # `N = torch.zeros(...)`: a constant, now host data
        rn = root._node
        if rn.__class__ is not HostNode:
            return False
    if root is not t:        # a view recorded before its root was host data
        off, st = V._layout(a)
        t._node = host_node(read_layout(rn.host, a.shape, off, st), rn.dtype, rn.device, False)
    return True


# a root written into a copy (the first write after a sync, or while something else holds
# its value) may have this many elements; one written in place, any number
_COPY_MAX = 1 << 22
_getrefcount = sys.getrefcount
_UPDATE = {"__iadd__": "add", "add_": "add", "__isub__": "sub", "sub_": "sub",
           "__imul__": "mul", "mul_": "mul", "__itruediv__": "div", "div_": "div"}
_FLOAT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
_FLOATS = (np.float32, np.float64)


def update_element(name, t, y):
    """`t += y` (`-=`, `*=`, `/=`, `add_`...) for t a 0-d element of host data — of an integer
    dtype and y a Python int that fits it (`N[i, j] += 1`), or of float32/float64 and y a
    Python int or float (`p[k] += 0.5`): the element's root written on the host now, exactly
    (integers wrapping on overflow, floats rounded once to the element's dtype, as PyTorch's
    kernels with a Python scalar do); -> t, or None (the general path)."""
    op = _UPDATE.get(name)
    if op is None or t._edge is not None:
        return None
    n = t._node
    if rt.observers or _local.tracing_body:
        return None
    if y.__class__ is int and n.dtype.kind in "iu":
        if op == "div":
            return None
        value = int_value(op, int(n.host), y, n.dtype)   # (None: y doesn't fit the dtype)
        if value is None:
            return None
    elif n.dtype.np in _FLOATS:
        with np.errstate(all="ignore"):     # (inf / nan as PyTorch gives them)
            value = np.asarray(_FLOAT_OPS[op](n.host, np.asarray(y, n.dtype.np)))
        value.setflags(write=False)
    else:
        return None
    a = t._alias
    if a.__class__ is not _View:
        return t._rebind(Tensor(host_node(value, n.dtype, n.device, False)), name)
    root = a.root
    if root._edge is not None or root._node.__class__ is not HostNode:
        return None
    return t if _store(root, V._layout(a)[0], value) else None


def _store(root, off, value) -> bool:
    """Element `off` (row-major) of host-data root `root` set to `value` (a 0-d array of its
    dtype), then root's views re-derived; False (nothing done) when the root is too big to
    copy and can't be written in place."""
    V._note_undo(root, None, True)      # (the first write since the last sync holds the old)
    rn = root._node
    arr = rn.host
    # written in place when nothing but the root holds its node or its array (no pending
    # graph reads it, no undo record, no numpy view, no program call still copying it in);
    # else into a copy, as every write into host data is
    if _getrefcount(rn) == 3 and _getrefcount(arr) == 3 and arr.base is None and \
            arr.flags.c_contiguous and not uploaded(rn):
        arr.setflags(write=True)
        arr.reshape(-1)[off] = value
        arr.setflags(write=False)
        rn.written = True
    elif arr.size <= _COPY_MAX:
        arr = np.array(arr, order="C", copy=True)
        arr.reshape(-1)[off] = value
        nn = root._node = host_node(arr, rn.dtype, rn.device)
        nn.written = True
    else:
        return False
    if root._alias is None:
        root._alias = V._Root()
    V.refresh(root)
    return True


def _element_value(value, d):
    """`value` (a Python number, or a 0-d tensor of host data outside autograd) as a 0-d array
    of dtype d, converted as `x[i] = value` converts it; None when that isn't exact here
    (the general path converts, or reports, it)."""
    if value.__class__ in _NUMBERS:
        v = bool(value) if d.kind == "b" else int(value) if d.kind in "iu" else value
        try:
            return np.asarray(v, dtype=d.np)
        except (OverflowError, ValueError, TypeError):
            return None
    if value.__class__ is Tensor and value._edge is None:
        n = value._node
        if n.shape:
            return None
        if n.__class__ is HostNode:
            v = n.host
        elif n.device is not None and _on_host_device(n.device) and n.op.name != "data":
            v = host_view(n)         # `N[i, j] + 1` of a constant: exact integer steps
            if v is None:
                return None
        else:
            return None
        if n.dtype is d:
            return v
        if n.dtype.kind in "iub":
            return np.asarray(v).astype(d.np)
    return None
