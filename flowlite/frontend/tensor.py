"""The lazy `Tensor`: a handle on an IR node plus its autograd edge.

Layer: frontend — imports engine.cuts, engine.device, engine.dtypes, engine.errors,
engine.executor, engine.graph_key, engine.host_data, engine.host_reads, engine.ir, engine.mesh,
engine.metrics, engine.phases, engine.runtime, engine.tape, printing. `apply` is the single
entry point that records an op: it builds the node (shape/dtype checked now, so errors point at
the user's line), attaches a GradFn when the tape is on, and registers the result as pending
work. The PyTorch- named methods (arithmetic, shape ops, `backward`, in- place `*_`) are bound
onto `Tensor` by `tensor_methods`, above the op front end.
"""
from __future__ import annotations

import weakref

import jax
import numpy as np

from ..engine.errors import ArgumentError
from ..engine.host_data import HostNode as _HostNode, host_node, on_host
from ..engine.host_reads import host_view
from ..engine import dtypes as D, executor, ir
from ..engine.cuts import before_read as _before_read, bound as _bound
from ..engine.graph_key import enter as _enter
from ..engine.device import Device, _from_jax, default_device, device as _make_device
from ..engine.mesh import device_for_sharding
from ..engine.metrics import _C, user_site
from ..engine import phases as _phases
from ..engine.phases import clock as _clock
from .printing import tensor_repr
from ..engine.runtime import rt
from ..engine.tape import AccumulateGrad, GradFn, _state

_Node = ir.Node
Size = ir.Size
_DATA, _SCALAR = ir.DATA, ir.SCALAR
_ref = weakref.ref
_local = rt.local
_GradFn = GradFn
_new_node = _Node.__new__
_new_fn = GradFn.__new__
_SIGS = ir._SIGS
_intern_sig = ir.intern_sig


class Tensor:
    __slots__ = ("_node", "_edge", "grad", "_alias", "__weakref__")
    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to us

    def __init__(self, node, edge=None):
        self._node = node
        self._edge = edge
        self.grad = None
        self._alias = None   # views: a views._View (its root, its layout) or a views._Root
        op = node.op
        if op is not _DATA and op is not _SCALAR:
            pending = _local.pending
            pending.append(_ref(self))   # every handle on pending work is a sync root
            n = len(pending)
            if n == 1 or not n & 0x3FFF:
                _graph_guard(n)

    # ---- metadata (never syncs) -------------------------------------------
    @property
    def shape(self):
        n = self._node
        s = n.size
        if s is None:
            s = n.size = Size(n.shape)
        return s

    def size(self, dim=None):
        if dim is None:
            return self.shape
        s = self._node.shape
        return s[_norm_dim(dim, len(s), "size")]

    @property
    def dtype(self):
        return self._node.dtype

    @property
    def device(self) -> Device:
        return self._node.device or default_device()

    @property
    def ndim(self):
        return len(self._node.shape)

    def dim(self):
        return len(self._node.shape)

    def numel(self):
        n = 1
        for s in self._node.shape:
            n *= s
        return n

    nelement = numel

    def element_size(self):
        return self._node.dtype.itemsize

    def is_floating_point(self):
        return self._node.dtype.is_floating_point

    @property
    def is_pending(self) -> bool:
        """True while the value is still an unexecuted graph node."""
        return self._node.op is not _DATA and self._node.op is not _SCALAR

    # ---- autograd -------------------------------------------------------------
    @property
    def requires_grad(self):
        return self._edge is not None

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, flag=True):
        if flag:
            if isinstance(self._edge, GradFn):
                return self
            if not self._node.dtype.is_floating_point:
                raise RuntimeError(f"only tensors of floating point dtype can require gradients "
                                   f"(got {self._node.dtype})")
            if self._edge is None:
                self._edge = AccumulateGrad(self)
        else:
            if isinstance(self._edge, GradFn):
                raise RuntimeError("you can only change requires_grad flags of leaf variables.")
            self._edge = None
        return self

    @property
    def grad_fn(self):
        e = self._edge
        return e if isinstance(e, GradFn) else None

    @property
    def is_leaf(self):
        return not isinstance(self._edge, GradFn)

    def retain_grad(self):
        e = self._edge
        if isinstance(e, GradFn):
            e.retain = _ref(self)
        elif e is None:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")

    def detach(self):
        return Tensor(self._node)

    def detach_(self):
        if isinstance(self._edge, GradFn) or self._edge is None:
            self._edge = None
        return self

    @property
    def data(self):
        return Tensor(self._node)

    @data.setter
    def data(self, other):
        if not isinstance(other, Tensor):
            raise TypeError("data: expected a Tensor")
        self._node = other._node
        if self.is_pending:
            _local.pending.append(_ref(self))

    # ---- host reads (sync) ----------------------------------------------------
    def _value(self, cause):
        if _clock.on and _phases.untimed("reads"):   # the run summary (engine.phases)
            return _phases.timed("reads", _timed_read, self, cause)
        if _local.unverified is not None:   # a deferred check failed? raise it first
            executor.verify_pending()
        n = self._node
        if n.__class__ is _HostNode:
            return n.host
        if n.op is _SCALAR:
            return np.asarray(n.value, dtype=n.dtype.np)
        if n.device is None and not n.inputs:   # a shared baked constant: never materialised
            return np.full(n.attrs[0], n.attrs[1], dtype=n.dtype.np)
        if n.op is not _DATA:
            v = host_view(n)     # x[i, j] of data: read on the host, nothing compiled
            if v is not None:
                return v
            cause = f"{cause} at {user_site(3)}"
            rt.check_implicit_sync(cause)
            _before_read()       # a loop cut at its period: its complete pieces first (cuts)
            executor.sync_for_read(cause, n)
            if n.op is not _DATA:     # a bucketed output (executor._run_bucketed): on host
                return host_view(n)
        return n.value

    def numpy(self):
        return np.asarray(self._value(".numpy()"))

    def item(self):
        n = self._node
        if n.__class__ is _HostNode and not n.shape and _local.unverified is None and \
                not _clock.on:
            return n.host.item()        # an element of host data (`x[i].item()` in a loop)
        if self.numel() != 1:
            raise ArgumentError(f"item(): only one element tensors can be converted to Python "
                             f"scalars (shape {tuple(self.shape)})")
        return np.asarray(self._value(".item()")).reshape(()).item()

    def tolist(self):
        return np.asarray(self._value(".tolist()")).tolist()

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with more than one value is ambiguous "
                               f"(shape {tuple(self.shape)})")
        return bool(np.asarray(self._value("bool()")))

    def __float__(self):
        return float(np.asarray(self._value("float()")).reshape(()))

    def __int__(self):
        return int(np.asarray(self._value("int()")).reshape(()))

    def __index__(self):
        n = self._node
        if n.dtype.kind not in "iu":
            raise TypeError("only integer tensors can be converted to an index")
        if n.__class__ is _HostNode and not n.shape and _local.unverified is None:
            return int(n.host)        # an element of host data (`data[i:i + n]`): no work
        return int(np.asarray(self._value("__index__")).reshape(()))

    def __array__(self, dtype=None, copy=None):
        a = np.asarray(self._value("np.asarray()"))
        return a if dtype is None else a.astype(dtype)

    def __len__(self):
        if not self._node.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._node.shape[0]

    def __repr__(self):
        return tensor_repr(self)

    __str__ = __repr__

    def __hash__(self):
        return id(self)

    def __deepcopy__(self, memo):
        # nodes are immutable: a copy shares the (pending or materialised) node, no sync
        r = memo.get(id(self))
        if r is None:
            r = memo[id(self)] = type(self).__new__(type(self))
            Tensor.__init__(r, self._node)
            if self._edge is not None and self.is_leaf:
                r.requires_grad_(True)
            if self.grad is not None:
                r.grad = Tensor(self.grad._node)
        return r

    def __reduce__(self):
        # pickling a tensor (e.g. by multiprocessing) copies its value
        return (_from_pickle, (self.numpy(), self.requires_grad))

    def __format__(self, spec):
        # PyTorch: a 0-d tensor formats as its Python number (`f"{loss}"` -> 2.3025851249694824)
        if not self._node.shape or (spec and self.numel() == 1):
            return format(self.item(), spec)
        if spec:
            raise TypeError(f"unsupported format string {spec!r} passed to Tensor.__format__ "
                            f"(a tensor of shape {tuple(self.shape)}; format its .item() or "
                            f".tolist() elements)")
        return repr(self)

_new_tensor = Tensor.__new__


def _timed_read(t, cause):
    v = t._value(cause)
    if isinstance(v, jax.Array):    # the wait for the device, and the copy to the host
        v = _phases.block(v)
    return v


def _graph_guard(n):
    if n == 1:
        rt.on_first_pending(user_site(3))
    else:
        _bound(n)       # a loop recording without a read runs in pieces (engine.cuts)
        rt.check_graph_size(len(_local.pending))


def _from_pickle(arr, requires_grad):
    t = from_numpy(np.asarray(arr))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _norm_dim(dim, ndim, op):
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{op}: dimension out of range (expected to be in range of "
                         f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {dim})")
    return dim + ndim if dim < 0 else dim


# ---- recording ops ----------------------------------------------------------------
_infer_cache: dict = {}


def infer(prim, attrs, nodes):
    """Shape/dtype rule fallback: the lowering itself, run abstractly once per
    signature (jax.eval_shape), then served from a dict."""
    key = (prim, attrs) + tuple((n.shape, n.dtype) for n in nodes)
    r = _infer_cache.get(key)
    if r is None:
        structs = [jax.ShapeDtypeStruct(n.shape, n.dtype.np) for n in nodes]
        try:
            out = jax.eval_shape(lambda *xs: prim.lower(attrs, *xs), *structs)
        except Exception as e:  # a user error: report it at the op, with shapes
            shapes = ", ".join(f"{tuple(n.shape)}:{n.dtype.name}" for n in nodes)
            msg = str(e).split("\n")[0]
            raise ValueError(f"{prim.name}: invalid arguments (inputs {shapes}; attrs "
                             f"{_fmt_attrs(attrs)}): {msg}") from None
        if prim.multi:
            r = (tuple(tuple(o.shape) for o in out),
                 tuple(D.from_numpy_dtype(o.dtype) for o in out))
        else:
            r = (tuple(out.shape), D.from_numpy_dtype(out.dtype))
        _infer_cache[key] = r
    return r


def _fmt_attrs(attrs):
    s = repr(attrs)
    return s if len(s) < 200 else s[:200] + "..."


def apply(prim, inputs, attrs=(), shape=None, dtype=None):
    """Record `prim(*inputs)`; returns a pending Tensor."""
    # the hot path of all tracing: the node, its handle and its GradFn are built inline
    # (no Node/Tensor/GradFn constructor calls; what they do is spelled out here)
    nodes = tuple([t._node for t in inputs])
    st = _local.stream          # the graph key, appended to as we go (graph_key)
    flat = st.flat
    device = None
    try:
        for n in nodes:
            flat.append(n.mark if n.epoch is st else _enter(st, n))
            d = n.device
            if d is not None:
                if device is None:
                    device = d
                elif d is not device:
                    raise RuntimeError(
                        f"{prim.name}: expected all tensors to be on the same device, but "
                        f"found at least two devices, {device} and {d}")
        if device is None:
            device = default_device()
        if shape is None:
            shape, dtype = infer(prim, attrs, nodes)
        sig_key = (prim, attrs, shape, dtype, len(nodes))
        sig = _SIGS.get(sig_key)
        if sig is None:
            sig = _intern_sig(sig_key)
    except BaseException:
        st.valid = False          # codes were appended without their entry's signature
        raise
    flat.append(sig)
    node = _new_node(_Node)
    node.op = prim
    node.inputs = nodes
    node.attrs = attrs
    node.shape = shape
    node.dtype = dtype
    node.device = device
    node.value = None
    node.site = node.tag = node.check = None
    node.epoch = st
    node.mark = k = st.nxt
    st.nxt = k + 1
    node.size = None
    node.sig = sig
    _C["ops"] += 1
    out = _new_tensor(Tensor)
    out._node = node
    out.grad = None
    out._alias = None
    out._edge = None
    pending = _local.pending
    pending.append(_ref(out))            # every handle on pending work is a sync root
    n = len(pending)
    if n == 1 or not n & 0x3FFF:
        _graph_guard(n)
    if not prim.nondiff and _state.enabled:
        edges = tuple([t._edge for t in inputs])
        for e in edges:
            if e is not None:
                if prim.multi or dtype.is_floating_point:
                    # the tape holds its own tuple: the executor counts the references to
                    # a leaf to tell whether anything outside the graph (here: the tape)
                    # still needs its buffer before donating it
                    fn = _new_fn(_GradFn)
                    fn.epoch = rt.exec_epoch
                    fn.sig = node.sig
                    fn.prim = prim
                    fn.attrs = attrs
                    fn.inputs = (*nodes,)
                    fn.edges = edges
                    fn.out = node
                    fn.retain = None
                    out._edge = fn
                    _local.live.append(_ref(fn))
                break
    if rt.debug_on:
        _on_new_node(node)
    return out


def name_grad_fn(out, name: str, src=None):
    """Give `out`'s autograd node the name PyTorch prints for the call that made it
    (`ViewBackward0` for `x.view()`, whose primitive, `reshape`, also serves `x[0]`); `src`:
    the call's input, whose own node must keep its name when `out` is an alias sharing it.
    A (values, indices) pair (pooling with `return_indices`) names its values."""
    if isinstance(out, tuple):
        name_grad_fn(out[0], name, src)
        return out
    e = out._edge
    if e.__class__ is _GradFn and (src is None or e is not src._edge):
        e.label = name
    return out


def _on_new_node(node):
    rec = _local.recorder   # while backward() records a template, every new node goes here
    if rec is not None:
        rec.append(node)
    rt.on_new_node(node)


def set_node_recorder(rec) -> None:
    with rt.lock:
        if (rec is None) != (_local.recorder is None):
            rt.recording += 1 if rec is not None else -1
        _local.recorder = rec
        rt.update_debug_on()


# ---- creation from host data -------------------------------------------------------
def _to_device(arr, device):
    # XLA:CPU may alias an aligned host buffer; tensors must own their data (a later write
    # to the caller's array, or buffer donation, would otherwise cross the boundary)
    if device.type == "cpu":
        arr = np.array(arr, copy=True)
    if _clock.on:
        _phases.note_h2d(arr.nbytes)
    mesh = getattr(device, "mesh", None)
    if mesh is not None:
        # host data bound for a mesh is a batch: split its leading dim over "data"
        if jax.process_count() > 1:
            return jax.make_array_from_process_local_data(mesh.batch_sharding(arr.shape), arr)
        return jax.device_put(arr, mesh.batch_sharding(arr.shape))
    return jax.device_put(arr, device.jax_device)


def from_numpy(arr, device=None) -> Tensor:
    """Host array -> tensor: a copy, kept on the host for a CPU device (host_data), else
    transferred (asynchronously)."""
    if _clock.on and _phases.untimed("data"):     # the run summary's "data" phase
        return _phases.timed("data", from_numpy, arr, device)
    arr = np.asarray(arr)
    d = D.from_numpy_dtype(arr.dtype)
    fresh = arr.dtype != d.np
    if fresh:
        arr = arr.astype(d.np)
    dev = default_device() if device is None else _as_device(device)
    return Tensor(_data_node(arr, fresh, d, dev))


def _data_node(arr, fresh, d, dev):
    """A data leaf holding host array `arr` (`fresh`: a new array nothing else holds)."""
    if on_host(dev):
        return host_node(arr if fresh else np.array(arr, copy=True), d, dev)
    return ir.data_node(_to_device(arr, dev), tuple(arr.shape), d, dev)


def from_jax(arr, device=None) -> Tensor:
    d = D.from_numpy_dtype(arr.dtype)
    if device is not None:
        dev = _as_device(device)
        arr = jax.device_put(arr, dev.jax_device)
    else:
        devs = arr.devices()
        if len(devs) > 1:
            dev = device_for_sharding(arr.sharding)
        else:
            # placed on a flowlite mesh of one device: that mesh (as its parameters are)
            dev = device_for_sharding(arr.sharding, create=False) or _from_jax(next(iter(devs)))
    return Tensor(ir.data_node(arr, tuple(arr.shape), d, dev))


def _as_device(device):
    return _make_device(device)


def _infer_list_dtype(data):
    flat = np.asarray(data)
    if flat.dtype == np.bool_:
        return D.bool_
    if flat.dtype.kind in "iu":
        return D.canonical(D.int64)
    if flat.dtype.kind == "f":
        return D.default_float()
    raise TypeError(f"tensor: cannot infer a dtype from {flat.dtype}")


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """PyTorch's `torch.tensor`: copy data (nested lists, numpy, scalars, tensors)."""
    if _clock.on and _phases.untimed("data"):     # the run summary's "data" phase
        return _phases.timed("data", tensor, data, dtype, device, requires_grad)
    if isinstance(data, Tensor):
        data = data.numpy()
    if isinstance(data, jax.Array):
        data = np.asarray(data)
    if isinstance(data, (np.ndarray, np.generic)) and dtype is None:
        d = D.from_numpy_dtype(data.dtype)  # numpy input keeps its dtype, as in PyTorch
    elif dtype is None:
        d = _infer_list_dtype(data)
    else:
        d = D.canonical(D.from_any(dtype))
    try:
        arr = np.asarray(data, dtype=d.np)
    except (ValueError, TypeError) as e:
        raise TypeError(f"tensor: could not convert data to {d}: {e}") from None
    dev = default_device() if device is None else _as_device(device)
    t = Tensor(_data_node(arr, arr is not data and arr.base is None, d, dev))
    if requires_grad:
        t.requires_grad_(True)
    return t
