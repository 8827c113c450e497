"""`torch.autograd` for flowlite: `grad`, `backward` and the grad-mode switches.

Layer: entry — imports engine.tape, frontend.backward, frontend.tensor. The engine that walks
the tape is `flowlite.frontend.backward`; this module is the namespace a PyTorch program reaches
as `torch.autograd`.
"""
from __future__ import annotations

from .engine.tape import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from .frontend import backward as _engine
from .frontend.tensor import Tensor


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
    if inputs is None:
        _engine.run_backward(outs, grads, retain_graph=retain_graph, create_graph=create_graph)
        return
    ins = _as_list(inputs)
    res = _engine.run_backward(outs, grads, retain_graph=retain_graph, create_graph=create_graph,
                               inputs=ins, allow_unused=True)
    for t, g in zip(ins, res):
        if g is not None:
            _engine._accumulate_leaf(t, g, create_graph)
