"""`torch.autograd` for flowlite: `grad`, `backward`, the grad-mode switches
(`no_grad`, `enable_grad`, `set_grad_enabled`, `inference_mode`), custom `Function`s and
`Variable`.

Layer: entry — imports engine.ir, engine.tape, frontend.backward, frontend.ops,
frontend.primitives, frontend.tensor. The engine that walks the tape is
`flowlite.frontend.backward`; this module is the namespace a PyTorch program reaches as
`torch.autograd`.
"""
from __future__ import annotations

import functools
import sys
import threading
import weakref

from .engine.ir import Prim
from .engine.tape import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from .frontend import backward as _engine
from .frontend import primitives as P
from .frontend.ops import zeros
from .frontend.tensor import Tensor, apply, name_grad_fn


def _as_list(x):
    return [x] if isinstance(x, Tensor) else list(x)


def _seed_grads(outs, grad_outputs, fn):
    gos = [None] * len(outs) if grad_outputs is None else _as_list(grad_outputs)
    grads = []
    for o, g in zip(outs, gos):
        if g is None:
            if o.shape != ():
                raise RuntimeError(f"{fn}: grad can be implicitly created only for scalar "
                                   f"outputs (output of shape {tuple(o.shape)})")
            g = o.new_ones(())
        grads.append(g)
    return grads


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of `outputs` w.r.t. `inputs` (like torch.autograd.grad), as lazy tensors."""
    outs, ins = _as_list(outputs), _as_list(inputs)
    grads = _seed_grads(outs, grad_outputs, "grad")
    if retain_graph is None:
        retain_graph = create_graph
    return tuple(_engine.run_backward(outs, grads, retain_graph=retain_graph,
                                      create_graph=create_graph, inputs=ins, accumulate=False,
                                      allow_unused=allow_unused))


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of `tensors` into the leaves' `.grad` (torch.autograd.backward):
    one backward pass over all of them."""
    outs = _as_list(tensors)
    grads = _seed_grads(outs, grad_tensors, "backward")
    if retain_graph is None:
        retain_graph = create_graph
    _engine.backward_into(outs, grads, retain_graph, create_graph, inputs)


class inference_mode:
    """`torch.inference_mode(mode=True)`: a context manager / decorator (bare or called) under
    which ops record no tape.  flowlite has no separate inference tensors: it is `no_grad`
    when `mode` is true and leaves the grad mode alone when it is false."""

    def __new__(cls, mode=True):
        self = super().__new__(cls)
        if callable(mode):                       # bare `@inference_mode`
            self.__init__(True)
            return self(mode)
        return self

    def __init__(self, mode=True):
        self.enabled = bool(mode) if not callable(mode) else True

    def __enter__(self):
        self.prev = is_grad_enabled()
        if self.enabled:
            set_grad_enabled(False)
            _inference.depth = getattr(_inference, "depth", 0) + 1
        return self

    def __exit__(self, *exc):
        if self.enabled:
            _inference.depth -= 1
        set_grad_enabled(self.prev)
        return False

    def __call__(self, fn):
        enabled = self.enabled

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with inference_mode(enabled):
                return fn(*a, **k)
        return wrapper


_inference = threading.local()      # per thread, as the grad mode is


def is_inference_mode_enabled() -> bool:
    return getattr(_inference, "depth", 0) > 0


def Variable(data, requires_grad=False, volatile=False):  # noqa: N802  (torch's name)
    """`torch.autograd.Variable` (PyTorch < 0.4): since 0.4 a Variable is a Tensor.  Like
    PyTorch, returns a new leaf sharing `data`'s value, requiring grad only if asked."""
    if not isinstance(data, Tensor):
        raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
    return data.detach().requires_grad_(bool(requires_grad))


# ---- custom autograd Functions -------------------------------------------------------------------
class FunctionCtx:
    """The `ctx` of a custom Function: what forward leaves for backward."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._saved = ()
        self._non_differentiable = set()
        self._dirty = ()

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors (or None), but got "
                                f"{type(t).__name__}")
        self._saved = tensors

    @property
    def saved_tensors(self):
        return self._saved

    def mark_non_differentiable(self, *outputs):
        self._non_differentiable.update(id(t) for t in outputs)

    def mark_dirty(self, *tensors):
        # an in-place forward rebinds its input (flowlite records in-place ops as new nodes):
        # nothing more to do than PyTorch's bookkeeping
        self._dirty = tensors

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = bool(value)


BackwardCFunction = FunctionCtx    # the name `ctx`'s class has in torch.autograd.function

# the ctx of each recorded custom-Function node (keyed weakly by the node the VJP receives)
_CTX = weakref.WeakKeyDictionary()


def _custom_vjp(attrs, ins, out, g):
    cls, n_args, positions, n_outs = attrs
    ctx = _CTX.get(out._node)
    if ctx is None:
        raise RuntimeError(f"{cls.__name__}.backward: the saved context is gone")
    gs = list(g) if n_outs > 1 else [g]
    if ctx.materialize_grads:
        shapes, dtypes = (out._node.shape, out._node.dtype) if n_outs > 1 else (
            (out._node.shape,), (out._node.dtype,))
        gs = [x if x is not None else zeros(shapes[i], dtype=dtypes[i], device=out.device)
              for i, x in enumerate(gs)]
    grads = cls.backward(ctx, *gs)
    if not isinstance(grads, tuple):
        grads = (grads,)
    if len(grads) < n_args or any(x is not None for x in grads[n_args:]):
        raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of "
                           f"gradients (expected {n_args}, got {len(grads)})")
    result = []
    for p, x in zip(positions, ins[:len(positions)]):
        gr = grads[p]
        if gr is not None:
            if not isinstance(gr, Tensor):
                raise TypeError(f"{cls.__name__}.backward returned a {type(gr).__name__} for "
                                f"input {p}: expected a Tensor or None")
            if tuple(gr.shape) != tuple(x.shape):
                raise RuntimeError(f"Function {cls.__name__}Backward returned an invalid "
                                   f"gradient at index {p} - got {list(gr.shape)} but "
                                   f"expected shape compatible with {list(x.shape)}")
            if gr.dtype != x.dtype:
                gr = gr.to(x.dtype)
        result.append(gr)
    return tuple(result) + (None,) * (len(ins) - len(positions))


def _lower_passthrough(attrs, *xs):
    n_outs = attrs[3]
    outs = xs[len(attrs[2]):]
    return tuple(outs) if n_outs > 1 else outs[0]


class _FunctionMeta(type):
    def __init__(cls, name, bases, ns):
        super().__init__(name, bases, ns)
        # one primitive per Function class: the graph key names the class, so every call of
        # the same Function reuses the compiled step
        cls._prims = {m: Prim(name, _lower_passthrough, _custom_vjp, multi=m)
                      for m in (False, True)}


class Function(metaclass=_FunctionMeta):
    """`torch.autograd.Function`: a custom op with a hand-written backward.

    `forward(ctx, *args)` (or `forward(*args)` with `setup_context(ctx, inputs, output)`) runs
    on flowlite tensors with grad recording off; `backward(ctx, *grad_outputs)` returns one
    gradient (or None) per forward argument.  Both are recorded lazily like any op: the
    backward becomes lazy nodes of the step's graph, and it is itself differentiable (double
    backward) unless decorated with `once_differentiable`."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    vjp = backward

    @staticmethod
    def setup_context(ctx, inputs, output):
        """Override to use the `forward(*args)` style (PyTorch >= 2.0)."""

    @classmethod
    def apply(cls, *args, **kwargs):
        grad_on = is_grad_enabled()
        needs = tuple(isinstance(a, Tensor) and a.requires_grad and grad_on for a in args)
        ctx = FunctionCtx(needs)
        separate = cls.setup_context is not Function.setup_context   # forward(*args) style
        with no_grad():
            if separate:
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        if not any(needs):
            return output
        single = not isinstance(output, tuple)
        outs = [output] if single else list(output)
        t_idx = [i for i, o in enumerate(outs) if isinstance(o, Tensor)]
        if not t_idx:
            return output
        positions = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor))
        ins = tuple(args[i] for i in positions) + tuple(outs[i] for i in t_idx)
        n_outs = len(t_idx)
        attrs = (cls, len(args), positions, n_outs)
        prim = cls._prims[n_outs > 1]
        shapes = tuple(tuple(outs[i].shape) for i in t_idx)
        dtypes = tuple(outs[i].dtype for i in t_idx)
        if n_outs == 1:
            node_t = apply(prim, ins, attrs, shapes[0], dtypes[0])
            wrapped = [node_t]
        else:
            node_t = apply(prim, ins, attrs, shapes, dtypes)
            wrapped = [apply(P.tuple_get, (node_t,), (j, n_outs), shapes[j], dtypes[j])
                       for j in range(n_outs)]
        for w in wrapped:                      # PyTorch's name for a Function's node
            name_grad_fn(w, f"{cls.__name__}Backward")
        _CTX[node_t._node] = ctx
        by_id = {}
        for j, i in enumerate(t_idx):
            o = outs[i]
            if id(o) in ctx._non_differentiable or not o.dtype.is_floating_point:
                continue                       # returned as computed: no gradient flows
            by_id[id(o)] = wrapped[j]
            outs[i] = wrapped[j]
        # a saved output is the recorded one (with this Function as its grad_fn)
        ctx._saved = tuple(by_id.get(id(t), t) if t is not None else None for t in ctx._saved)
        return outs[0] if single else tuple(outs)


def once_differentiable(fn):
    """Decorator for a Function's backward that is not itself differentiable: it runs with
    grad recording off (a double backward through it finds no gradient path)."""
    @functools.wraps(fn)
    def wrapper(ctx, *grad_outputs):
        with no_grad():
            return fn(ctx, *grad_outputs)
    return wrapper


# `torch.autograd.function.once_differentiable` / `.Function` / `.FunctionCtx`: PyTorch keeps
# them in a submodule; here they live in this module, which answers under that name too
function = sys.modules[__name__]
