"""Host data: values that stay on the host (numpy) until a program needs them.

Layer: engine — imports host_eval, ir, metrics, runtime. A tensor made from host data on a CPU
device (a Python list, numpy, `from_numpy`, a memmap slice) holds a `HostNode`: a data leaf
whose value is a read-only numpy array. What the front end takes from host data (or from a CPU
array already computed) on the host — windows at offsets read from tensors or numpy (`data[i:i +
n]`, i an element of drawn indices), the elements of an integer tensor iterated, their integer
arithmetic, stacks and concatenations, writes into a small host tensor — is another HostNode,
made with numpy: no program, no transfer, no graph node. It enters the next program as ONE
argument: the numpy array itself on its first use (JAX copies it in with the call, ~10 µs, where
a `device_put` costs ~140 µs on a slow CPU), a device array made once and kept from its second
use on (a constant read by every step). The rest of the engine reads `value`, a `jax.Array` made
on first access, so a HostNode is an ordinary data leaf to it: the same signature, the same
cached executables.
"""
from __future__ import annotations

import operator
import weakref

import jax
import numpy as np

from . import host_eval, ir
from .metrics import _C
from .runtime import rt

_DATA, _SCALAR = ir.DATA, ir.SCALAR
_slot_get = ir.Node.value.__get__
_slot_set = ir.Node.value.__set__
_new = ir.Node.__new__
_as_strided = np.lib.stride_tricks.as_strided


class HostNode(ir.Node):
    """A data leaf whose value lives on the host: `host` (a read-only numpy array of the
    node's shape and dtype); `value`, the device array, is made from it when first read.
    `written`: made by an in-place write done on the host, which a failed sync before the
    next sync takes back (rollback), as it takes back a recorded write."""
    __slots__ = ("host", "used", "written")

    @property
    def value(self):
        v = _slot_get(self)
        if v is None or v.is_deleted():
            v = _upload(self)
        return v

    @value.setter
    def value(self, v):
        _slot_set(self, v)


def _upload(n):
    # a copy the device array owns alone: XLA:CPU may alias an aligned host buffer, and a
    # donated argument is written in place (the host array may be a view of other data)
    v = jax.device_put(np.array(n.host, copy=True), n.device.jax_device)
    _slot_set(n, v)
    _C["host_uploads"] += 1
    return v


_sig_of: dict = {}     # (shape, dtype) -> the data leaf's signature


def host_node(arr, dtype, device, fresh=True) -> HostNode:
    """A HostNode holding `arr`, whose dtype is `dtype.np`, on CPU `device`; `fresh`: a new
    array, made read-only here (nodes are immutable) — else a view of host data, read-only
    already."""
    if fresh:
        arr.setflags(write=False)
    return _leaf(arr, arr.shape, dtype, device, _sig(arr.shape, dtype))


def _sig(shape, dtype):
    sig = _sig_of.get((shape, dtype))
    if sig is None:
        sig = _sig_of[(shape, dtype)] = ir.intern_sig((_DATA, (), shape, dtype, 0))
    return sig


def _leaf(arr, shape, dtype, device, sig) -> HostNode:
    n = _new(HostNode)
    n.op = _DATA
    n.inputs = n.attrs = ()
    n.shape = shape
    n.dtype = dtype
    n.device = device
    _slot_set(n, None)
    n.host = arr
    n.used = n.written = False
    n.site = n.tag = n.check = n.epoch = n.size = None
    n.mark = 0
    n.sig = sig
    return n


def row_nodes(arr, dtype, device) -> list:
    """A HostNode per row of read-only host array `arr` (numpy views)."""
    shape = arr.shape[1:]
    sig = _sig(shape, dtype)
    rows = list(arr) if shape else [arr[k, ...] for k in range(arr.shape[0])]
    return [_leaf(r, shape, dtype, device, sig) for r in rows]


def on_host(device) -> bool:
    """Whether tensors on `device` keep host data as HostNodes (a plain CPU device)."""
    return device.type == "cpu" and getattr(device, "mesh", None) is None


def host_array(n):
    """The host array of materialised node `n` — a HostNode's own, or a CPU device array
    read in place (zero-copy; waiting for it if a program is still computing it) — or None
    (pending, an accelerator's, a mesh's, deleted)."""
    if n.__class__ is HostNode:
        return n.host
    if n.op is not _DATA:
        return None
    d = n.device
    if d is None or d.type != "cpu":
        return None
    v = _slot_get(n)
    if not isinstance(v, jax.Array) or v.is_deleted() or len(v.devices()) != 1:
        return None
    return np.asarray(v)


# node -> its host array, for nodes read more than once (a dataset's split, `data[:n]`, sliced
# at every drawn offset): a CPU array read in place, or views of host data still pending
# (keyed by id, each entry dropped by its node's death: a WeakKeyDictionary lookup makes a
# weak reference per call)
_seen: dict = {}
_VIEW_OPS = frozenset(("slice", "reshape", "transpose", "broadcast_to"))


def host_value(n):
    """host_array(n), or for pending `n` that is only views (slices, reshapes, transposes,
    broadcasts) of host data the numpy view they make — `train_data = data[:n]` before any
    sync; None otherwise."""
    if n.__class__ is HostNode:
        return n.host
    e = _seen.get(id(n))
    if e is not None and e[0]() is n:
        return e[1]
    if n.op is _DATA:
        v = host_array(n)
    else:
        d = n.device
        if d is None or d.type != "cpu":
            return None
        chain = []
        m = n
        while m.op is not _DATA:
            name = m.op.name
            if len(chain) > 8 or not (name in _VIEW_OPS and len(m.inputs) == 1 or (
                    name == "dyn_slice" and all(i.op is _SCALAR for i in m.inputs[1:]))):
                return None
            chain.append(m)
            m = m.inputs[0]
        v = host_array(m)
        if v is None:
            return None
        for m in reversed(chain):
            if m.op.name == "dyn_slice":     # a window at offsets given as data (clamped
                sizes = m.attrs[0]            # into range, as XLA's dynamic_slice does)
                v = v[tuple(slice(b, b + k) for b, k in (
                    (min(max(int(i.value), 0), d - k), k)
                    for i, d, k in zip(m.inputs[1:], v.shape, sizes)))]
            else:
                v = host_eval.view(m.op.name, m.attrs, v)
        if v.shape != n.shape:
            return None
        if v.flags.writeable:          # (a reshape that had to copy)
            v.setflags(write=False)
    if v is not None:
        k = id(n)
        _seen[k] = (weakref.ref(n, lambda _, k=k: _seen.pop(k, None)), v)
    return v


def arg(n):
    """What leaf `n` passes to an executable: its device array, or for a HostNode not yet
    uploaded its host array on the first use (the call copies it in) and a device array
    made once from the second on."""
    v = _slot_get(n)
    if v is not None and not v.is_deleted():
        return v
    if n.used:
        return n.value
    n.used = True
    return n.host


def written(n) -> bool:
    """Whether node `n` holds the result of an in-place write done on the host."""
    return n.__class__ is HostNode and n.written


def uploaded(n) -> bool:
    """Whether HostNode `n` holds a live device array (only then can a program be given its
    buffer to update in place)."""
    v = _slot_get(n)
    return v is not None and not v.is_deleted()


# ---- exact integer arithmetic on the host ---------------------------------------------------
_INT_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}
_RANGES: dict = {}


def int_op(name, n, y):
    """`x <op> y` for x a 0-d integer HostNode `n` (`i + block_size`, i an element of drawn
    indices) and y a Python int that fits its dtype or a tensor holding another such node:
    the result as a new HostNode — exact, wrapping on overflow as XLA does — or None (the op
    is recorded)."""
    fn = _INT_OPS.get(name)
    if fn is None or n.shape:
        return None
    dtype = n.dtype
    r = _RANGES.get(dtype)
    if r is None:
        if dtype.kind not in "iu":
            return None
        info = np.iinfo(dtype.np)
        r = _RANGES[dtype] = (int(info.min), int(info.max), _sig((), dtype))
    lo, hi, sig = r
    if y.__class__ is int:
        if not lo <= y <= hi:
            return None
    else:
        m = getattr(y, "_node", None)
        if m.__class__ is not HostNode or m.dtype is not dtype or m.device is not n.device or \
                m.shape or y._edge is not None:
            return None
        y = int(m.host)
    if rt.observers or rt.local.tracing_body:
        return None
    arr = _wrapped(fn(int(n.host), y), lo, hi, dtype)  # (Python ints: no ufunc on a 0-d array)
    return _leaf(arr, (), dtype, n.device, sig)


def _wrapped(v, lo, hi, dtype):
    """Python int v as a read-only 0-d array of integer `dtype` (range lo..hi), wrapped."""
    if not lo <= v <= hi:
        v = (v - lo) % (hi - lo + 1) + lo
    arr = np.array(v, dtype.np)
    arr.setflags(write=False)
    return arr


def int_value(name, x, y, dtype):
    """`x <op> y` (op: add, sub, mul) of Python ints x, a value of integer `dtype`, and y, as
    `dtype` computes it: a read-only 0-d array, wrapped on overflow as PyTorch and XLA do;
    None when y doesn't fit `dtype` (PyTorch's error, or a recorded op, decides)."""
    r = _RANGES.get(dtype)
    if r is None:
        info = np.iinfo(dtype.np)
        r = _RANGES[dtype] = (int(info.min), int(info.max), _sig((), dtype))
    lo, hi, _ = r
    if not lo <= y <= hi:
        return None
    return _wrapped(_INT_OPS[name](x, y), lo, hi, dtype)


# ---- elementwise arithmetic of host data, on the host, while a DataLoader makes a batch ------
# a dataset's per-sample transform (`(t - mean) / std`, `img / 255`) on host data: done with
# numpy now, so the batch the DataLoader stacks is host data too and reaches the step as one
# argument; recorded, it put every sample's ops and operands into the step's program (mnist's
# 512-sample evaluation batch: 2,573 nodes, 1,545 inputs, a 15 s compile).  Only inside the
# loader (extend.loading): elsewhere arithmetic on small tensors is the program's, as a user
# building a step from them expects (and the compile cache, bucketing... are exercised so).
_HOST_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
             "maximum": np.maximum, "minimum": np.minimum}
HOST_ELEMENTS = 1 << 20      # bulk work beyond this is the device's (its kernels use every core)


def _hostable(x, dtype, shape):
    """The CPU device x's host result would live on, when an op on it may run on the host."""
    n = x._node
    local = rt.local
    if not local.loading or x._edge is not None or rt.observers or local.tracing_body or not (
            dtype.kind in "iu" or dtype.np in (np.float32, np.float64)):
        return None
    device = n.device
    if device is None or not on_host(device):
        return None
    size = 1
    for d in shape:
        size *= d
    return device if size <= HOST_ELEMENTS else None


def convert(x, dtype):
    """`x.to(dtype)` of host data (or a pending view of it: `from_numpy(img).permute(2, 0,
    1)`) as a new HostNode, when numpy's cast is XLA's: from bool or integers, or between
    float32 and float64; or None (recorded)."""
    n = x._node
    if not (n.dtype.kind in "biu" or n.dtype.kind == "f" and dtype.kind == "f"):
        return None
    device = _hostable(x, dtype, n.shape)
    v = host_value(n) if device is not None else None
    if v is None:
        return None
    return host_node(v.astype(dtype.np), dtype, device)


def _operand(n, np_dtype):
    op = n.op
    if op is _SCALAR:
        return np.asarray(_slot_get(n), np_dtype)
    if op.name == "full" and not n.shape and not n.inputs:    # a cached constant scalar
        return np.asarray(n.attrs[1], np_dtype)
    v = host_value(n)
    return None if v is None else v.astype(np_dtype, copy=False)


def elementwise(name, x, y, dtype, shape):
    """`x <op> y` for tensors x, y (one of them a HostNode, the other host data or a scalar,
    neither tracked by autograd) as a new HostNode of `dtype` and broadcast `shape`, computed
    with numpy: correctly rounded float32/float64 or wrapping integer arithmetic, element for
    element what PyTorch's CPU kernels give; or None (the op is recorded)."""
    fn = _HOST_OPS.get(name)
    nx, ny = x._node, y._node
    device = _hostable(x if nx.__class__ is HostNode else y, dtype, shape) \
        if fn is not None and x._edge is None and y._edge is None else None
    if device is None or (nx.device is not None and nx.device is not device) or \
            (ny.device is not None and ny.device is not device):
        return None
    a = _operand(nx, dtype.np)
    b = _operand(ny, dtype.np) if a is not None else None
    if b is None:
        return None
    with np.errstate(all="ignore"):       # inf / nan as XLA gives them, no warning
        r = fn(a, b)
    if r.shape != shape or r.dtype != dtype.np:
        return None
    # (a ufunc of 0-d arrays gives a numpy scalar, which ascontiguousarray makes 1-d)
    r = np.asarray(r)
    return host_node(r if r.flags.c_contiguous else np.ascontiguousarray(r), dtype, device)


# ---- strided layouts of a root's elements (flowlite.views) --------------------------------
def read_layout(arr, shape, off, strides):
    """The elements of `arr` (in its row-major order) at layout (off, strides): a view (an
    element: its value)."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    if not shape:               # an element (`N[i, j]`): its value, no view (as_strided
        v = np.array(flat[off])  # costs ten times more; a view would keep the root's array
        v.setflags(write=False)  # from being written in place)
        return v
    it = flat.itemsize
    return _as_strided(flat[off:], tuple(shape), tuple(s * it for s in strides),
                       writeable=False)


def write_layout(arr, shape, off, strides, value):
    """A copy of `arr` with the elements at layout (off, strides) set to `value`
    (broadcast)."""
    out = np.array(arr, order="C", copy=True)
    if not shape:               # an element (`N[i, j] += 1`)
        out.reshape(-1)[off] = value
        return out
    it = out.itemsize
    w = _as_strided(out.reshape(-1)[off:], tuple(shape), tuple(s * it for s in strides))
    w[...] = value
    return out
