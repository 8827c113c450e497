"""Host reads computed on the host.

A value read while it is only a few exact steps away from materialised data — `int(ix[k])`
in a Python loop, the end of `data[i:i + block_size]` with `i` an element of a tensor — is
computed with numpy from the data's host copy: no executable to run, and none to compile for
every index or offset.  Only exact steps qualify, so the result is the one XLA would give:
views (slices, reshapes, transposes, broadcasts, strided views) of any dtype, and integer /
boolean arithmetic and comparisons (no float rounding that could differ from XLA's).

Layer: engine — imports ir.
"""
from __future__ import annotations

import numpy as np

from . import ir

_DATA, _SCALAR = ir.DATA, ir.SCALAR

# a host read is computed here when its pending graph has at most this many nodes, each of
# at most this many elements (index arithmetic, not bulk work)
MAX_NODES = 32
MAX_ELEMENTS = 1 << 16

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
           "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
           "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
_UNARY = {"neg": np.negative, "abs": np.abs, "convert": None}
_VIEWS = frozenset(("slice", "reshape", "transpose", "broadcast_to", "view_read"))
# (dyn_slice: a slice whose starts are host scalars, ops/indexing._apply_dynamic_plan)


class _NotOnHost(Exception):
    pass


_COMPUTED = "computed"     # (a memo key: set once arithmetic or a constant was evaluated)


def _exact(d) -> bool:
    return d.kind in "iub"


def value(node, leaf):
    """(`node`'s value as a numpy array computed on the host, whether anything beyond views
    of data was computed), or None when it isn't a few exact steps from data.  `leaf(n)`: the
    host array of materialised node n, or None when it can't be read on the host (then
    neither can `node`)."""
    memo = {}
    try:
        with np.errstate(over="ignore"):
            v = _eval(node, leaf, memo)
    except _NotOnHost:
        return None
    return v, _COMPUTED in memo


def _eval(n, leaf, memo):
    k = id(n)
    got = memo.get(k)
    if got is not None:
        return got
    if len(memo) > MAX_NODES:
        raise _NotOnHost
    op = n.op
    if op is _DATA:
        v = leaf(n)
        if v is None:
            raise _NotOnHost
    elif op is _SCALAR:
        v = np.asarray(n.value, dtype=n.dtype.np)
    else:
        if _size(n.shape) > MAX_ELEMENTS:
            raise _NotOnHost
        name = op.name
        a = n.attrs
        if name == "full" and not n.inputs:
            v = np.full(a[0], a[1], dtype=a[2].np)
            memo[_COMPUTED] = True
        elif name in _VIEWS:
            v = view(name, a, _eval(n.inputs[0], leaf, memo))
        elif name == "unpad":           # a bucketed output: its padded buffer, cut to size
            v = _eval(n.inputs[0], leaf, memo)[tuple(slice(0, d) for d in a[0])]
        elif name == "dyn_slice":       # a window whose offsets are data (host scalars)
            x = _eval(n.inputs[0], leaf, memo)
            starts = [int(_eval(i, leaf, memo)) for i in n.inputs[1:]]
            v = x[tuple(slice(b, b + size) for b, size in zip(starts, a[0]))]
        elif name in _BINARY or name in _UNARY:
            if not _exact(n.dtype) or not all(_exact(i.dtype) for i in n.inputs):
                raise _NotOnHost
            ins = [_eval(i, leaf, memo) for i in n.inputs]
            if name == "convert":
                v = ins[0].astype(n.dtype.np)
            elif name in _BINARY:
                v = _BINARY[name](ins[0], ins[1])
            else:
                v = _UNARY[name](ins[0])
            v = np.asarray(v, dtype=n.dtype.np)
            memo[_COMPUTED] = True
        else:
            raise _NotOnHost
        if v.shape != tuple(n.shape):
            raise _NotOnHost
    memo[k] = v
    return v


def view(name, a, x):
    """The numpy value of view op `name` (attributes `a`) of x."""
    if name == "slice":
        return x[tuple(slice(b, e, st) for b, e, st in zip(a[0], a[1], a[2]))]
    if name == "reshape":
        return x.reshape(a[0])
    if name == "transpose":
        return x.transpose(a[0])
    if name == "broadcast_to":
        return np.broadcast_to(x, a[0])
    _, shape, off, strides = a              # view_read: a strided view of its root
    idx = np.full(shape, off, dtype=np.int64)
    for d, (s, st) in enumerate(zip(shape, strides)):
        idx = idx + np.arange(s).reshape((-1,) + (1,) * (len(shape) - d - 1)) * st
    return x.reshape(-1)[idx]


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


