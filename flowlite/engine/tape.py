"""The tape's data: grad mode, the autograd edges (GradFn, AccumulateGrad) and the
registry of live GradFns whose saved nodes a sync must keep.

Layer: engine — imports ir, node_names, runtime. `tensor.apply` attaches a GradFn to every
differentiable op it records; the engine that walks them (`frontend.backward.run_backward`) sits
above the op front end, because the VJPs it calls are written in flowlite ops.
"""
from __future__ import annotations

import functools
import threading
import weakref

from . import ir
from .node_names import name_of as _name_of
from .runtime import rt

class _GradState(threading.local):
    enabled = True   # class default: a plain attribute read on the hot path, per thread
    in_backward = False


_state = _GradState()


def is_grad_enabled() -> bool:
    return _state.enabled


def set_grad_enabled(mode: bool) -> None:
    _state.enabled = bool(mode)


class _GradMode:
    mode = True

    def __enter__(self):
        self.prev = is_grad_enabled()
        set_grad_enabled(self.mode)
        return self

    def __exit__(self, *exc):
        set_grad_enabled(self.prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            with self.__class__():
                return fn(*a, **k)
        return wrapper


class no_grad(_GradMode):
    """Context manager / decorator: ops inside record no tape."""
    mode = False


class enable_grad(_GradMode):
    mode = True


class AccumulateGrad:
    """Edge into a leaf tensor that requires grad (PyTorch's AccumulateGrad)."""
    __slots__ = ("tensor_ref", "__weakref__")

    def __init__(self, tensor):
        self.tensor_ref = weakref.ref(tensor)

    def name(self):
        return "torch::autograd::AccumulateGrad"     # PyTorch's (a C++ node's qualified name)

    @property
    def variable(self):
        return self.tensor_ref()

    @property
    def next_functions(self):
        return ()

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"


class GradFn:
    # `label`: PyTorch's node name, set by the front end of a call whose primitive does not
    # determine it (`x.view()` and `x[0]` both record `reshape`); left unset (not stored by
    # the recording hot path), the name is derived from the primitive (engine.node_names)
    __slots__ = ("prim", "attrs", "inputs", "edges", "out", "retain", "epoch", "sig", "label",
                 "__weakref__")

    def __init__(self, prim, attrs, inputs, edges, out):
        self.epoch = rt.exec_epoch
        self.sig = out.sig        # the output's signature at creation (backward templates key)
        self.prim = prim
        self.attrs = attrs
        self.inputs = inputs      # tuple of Nodes (None once freed)
        self.edges = edges        # tuple of GradFn | AccumulateGrad | None per input
        self.out = out            # output Node
        self.retain = None        # weakref to a non-leaf tensor that called retain_grad()

    def name(self):
        """PyTorch's name for this node (`MulBackward0`, `ViewBackward0`, `AddmmBackward0`)."""
        label = getattr(self, "label", None)
        if label is not None:
            return label
        return _name_of(self.prim, self.attrs, self.inputs, self.out, len(self.edges))

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    @property
    def next_functions(self):
        return tuple((e, 0) for e in self.edges)


# GradFns that may still run backward: their pending saved nodes must survive a sync.
_local = rt.local


def register(fn: GradFn) -> None:
    _local.live.append(weakref.ref(fn))


def saved_pending_nodes() -> list:
    """Pending nodes saved by live tape entries (extra sync roots)."""
    out = []
    alive = []
    live = _local.live
    for r in live:
        fn = r()
        if fn is None or fn.inputs is None:
            continue
        alive.append(r)
        for n in fn.inputs:
            if n.op is not ir.DATA and n.op is not ir.SCALAR:
                out.append(n)
        if fn.out.op is not ir.DATA:
            out.append(fn.out)
    live[:] = alive
    return out


class _TupleCotangent(list):
    """Cotangent of a multi-output node: one slot per output (None = zero)."""
