"""flowlite's reverse-mode engine: `backward()` and `grad()` over the tape.

Layer: frontend — imports engine.backward_templates, engine.ir, engine.phases, engine.runtime,
engine.tape, ops.shape, recording, tensor. The grad mode and the tape's entries (GradFn,
AccumulateGrad) live in `tape`, below the tensor; this engine sits above the op front end
because the VJPs it runs are written in flowlite ops.

Every differentiable op run under grad mode with an input that requires grad
gets a `GradFn`: the primitive, its static attributes, the input *nodes*
(immutable, so in-place rebinding of a tensor never corrupts the tape) with
their autograd edges, and the output node.  `backward()` walks the GradFns in
reverse topological order and calls each primitive's VJP — written in
flowlite ops, so the backward pass is more lazy nodes in the same graph as the
forward, and with `create_graph=True` it is itself differentiable.
"""
from __future__ import annotations

from ..engine import backward_templates as _templates
from ..engine import ir, phases as _phases
from ..engine.phases import clock as _clock
from .ops.shape import PadSum, add_cotangents
from .recording import rebind
from ..engine.runtime import rt
from ..engine.tape import (AccumulateGrad, GradFn, _TupleCotangent, _state, is_grad_enabled,
                           set_grad_enabled)
from ..engine.tape import (enable_grad, no_grad)  # noqa: F401  (flowlite.autograd.no_grad, as in torch)
from .tensor import Tensor, set_node_recorder


def __getattr__(name):      # backward._live: this thread's live GradFns (tests read it)
    if name == "_live":
        return rt.local.live
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

def _accumulate(a, b, pieces=True):
    """a + b for cotangents; `pieces`: zero pads of disjoint pieces may stay a PadSum (backward
    joins it when it reads the edge's cotangent; a tuple's elements are summed plainly)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, _TupleCotangent):
        return _TupleCotangent(_accumulate(x, y, False) for x, y in zip(a, b))
    return add_cotangents(a, b) if pieces else a + b


def run_backward(roots, grads, *, retain_graph=False, create_graph=False, inputs=None,
                 accumulate=True, allow_unused=False, rec_outs=None):
    """Core engine used by Tensor.backward and flowlite.grad.

    roots: tensors; grads: matching cotangent tensors.  If `inputs` is given,
    returns the gradient for each (and writes no .grad unless accumulate).
    """
    # the run summary's "backward" phase (flowlite.engine.phases): one flag test when off
    prev = _phases.enter("backward") if _clock.on else None
    try:
        root_edges = _root_edges(roots, grads)
        if rec_outs is None:
            _check_mid_step_syncs(root_edges)
            if inputs is None and not create_graph and len(root_edges) == 1:
                done = _try_template(root_edges[0][0], roots, grads, retain_graph)
                if done:
                    return None
        target_ids = _target_ids(inputs) if inputs is not None else None
        deps = _dependency_counts(root_edges)
        # grad(): run only the VJPs on a path to a requested input
        useful = _on_paths_to(root_edges, target_ids) if target_ids is not None else None
        captured = _execute(root_edges, deps, target_ids, useful, retain_graph, create_graph,
                            accumulate, rec_outs)
        if inputs is None:
            return None
        result = []
        for i in range(len(inputs)):
            g = captured.get(i)
            if g is None and not allow_unused:
                raise RuntimeError(f"grad: input {i} was not used in the graph of the outputs "
                                   "(pass allow_unused=True to get None)")
            result.append(g)
        return result
    finally:
        if prev is not None:
            _phases.leave("backward", prev)


def _root_edges(roots, grads):
    out = []
    for t, g in zip(roots, grads):
        e = t._edge
        if e is None:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a "
                               "grad_fn")
        out.append((e, g))
    return out


def _try_template(root, roots, grads, retain_graph) -> bool:
    """The template fast path of a plain `loss.backward()`: re-emit a known tape's backward
    nodes, or record this pass's rules as a template candidate.  True when done."""
    if not _templates.enabled[0] or _templates.rules_must_run():
        return False
    info = _templates.tape_key(root, grads[0]._node, GradFn)
    if info is None:
        return False
    key, t_edges, t_env, _ = info
    recording = _templates.lookup(key)
    if recording is None:
        return False
    if type(recording) is _templates._Template:
        _templates.emit(recording, t_env, t_edges, Tensor)
        if not retain_graph:
            for e in t_edges:
                if type(e) is GradFn:
                    e.inputs = None
    else:
        _record_backward(recording, key, t_env, t_edges, roots, grads, retain_graph)
    return True


def _target_ids(inputs):
    """id(edge) -> the positions in `inputs` whose gradient that edge's cotangent is."""
    target_ids = {}
    for i, t in enumerate(inputs):
        if t._edge is None:
            raise RuntimeError(f"grad: input {i} does not require grad")
        target_ids.setdefault(id(t._edge), []).append(i)
    return target_ids


def _dependency_counts(root_edges):
    """id(edge) -> how many GradFns reachable from the roots lead into it."""
    deps = {}
    seen = set()
    stack = [e for e, _ in root_edges]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, GradFn):
            if e.inputs is None:
                raise RuntimeError(
                    "Trying to backward through the graph a second time (or directly access "
                    "saved tensors after they have already been freed). Specify "
                    "retain_graph=True on the first backward call if you need to.")
            for p in e.edges:
                if p is not None:
                    deps[id(p)] = deps.get(id(p), 0) + 1
                    stack.append(p)
    return deps


def _on_paths_to(root_edges, target_ids):
    """ids of the GradFns on a path to a requested input (a requested non-leaf tensor's own
    GradFn captures its cotangent but need not run)."""
    useful = set()
    memo = {}
    stack = [e for e, _ in root_edges]
    seen = set()
    while stack:                      # iterative post-order: no recursion limit
        e = stack[-1]
        k = id(e)
        if k in seen:
            stack.pop()
            if k not in memo:
                r = False
                if isinstance(e, GradFn):
                    for p in e.edges:
                        if p is not None and (id(p) in target_ids or memo.get(id(p))):
                            r = True
                memo[k] = r
                if r:
                    useful.add(k)
            continue
        seen.add(k)
        if isinstance(e, GradFn):
            for p in e.edges:
                if p is not None and id(p) not in seen:
                    stack.append(p)
    return useful


def _execute(root_edges, deps, target_ids, useful, retain_graph, create_graph, accumulate,
             rec_outs):
    """Run the VJPs in reverse topological order; returns the captured input cotangents."""
    pending = {}   # id(edge) -> accumulated cotangent
    captured = {}
    prev = is_grad_enabled()
    prev_bw = _state.in_backward
    set_grad_enabled(create_graph)
    _state.in_backward = True
    # gradient rules compute in their forward's dtypes: autocast never recasts them (a
    # backward() inside an autocast region included)
    local = rt.local
    prev_autocast, local.autocast = local.autocast, None
    try:
        for e, g in root_edges:
            pending[id(e)] = _accumulate(pending.get(id(e)), g)
        ready = [e for e, _ in root_edges if deps.get(id(e), 0) == 0]
        done = set()
        while ready:
            e = ready.pop()
            k = id(e)
            if k in done:
                continue
            done.add(k)
            g = pending.pop(k, None)
            if type(g) is PadSum:
                g = g.tensor()
            if target_ids is not None and k in target_ids:
                for i in target_ids[k]:
                    captured[i] = g
            if isinstance(e, AccumulateGrad):
                if rec_outs is not None and g is not None:
                    rec_outs.append((e, g._node))
                if target_ids is None and g is not None:
                    _to_leaf(e, g, create_graph, rec_outs)
                continue
            if e.retain is not None and g is not None and not isinstance(g, _TupleCotangent):
                t = e.retain()
                if t is not None:
                    _accumulate_leaf(t, g, create_graph)
            grads_in = None
            if g is not None and (useful is None or k in useful):
                grads_in = _call_vjp(e, g, Tensor, Tensor)
            edges = e.edges
            if not retain_graph:
                e.inputs = None
            for i, p in enumerate(edges):
                if p is None:
                    continue
                pk = id(p)
                if grads_in is not None:
                    gi = grads_in[i]
                    if gi is not None:
                        pending[pk] = _accumulate(pending.get(pk), gi)
                deps[pk] -= 1
                if deps[pk] == 0:
                    ready.append(p)
    finally:
        set_grad_enabled(prev)
        _state.in_backward = prev_bw
        local.autocast = prev_autocast
    return captured


def _to_leaf(e, g, create_graph, rec_outs):
    t = e.tensor_ref()
    if t is None:
        return
    if rec_outs is not None:
        with _recorder_paused():
            _accumulate_leaf(t, g, create_graph)
    else:
        _accumulate_leaf(t, g, create_graph)


def _record_backward(recording, key, env, edges, roots, grads, retain_graph):
    """Run the VJP rules while recording the nodes they create (backward templates)."""
    created, outs = [], []
    set_node_recorder(created)
    try:
        run_backward(roots, grads, retain_graph=retain_graph, rec_outs=outs)
    finally:
        set_node_recorder(None)
    _templates.finish_recording(recording, key, env, edges, created, outs)


class _recorder_paused:
    """Nodes made while accumulating into an existing .grad depend on it, not on the tape."""

    def __enter__(self):
        self.saved = rt.local.recorder
        rt.local.recorder = None

    def __exit__(self, *exc):
        rt.local.recorder = self.saved
        return False


def _check_mid_step_syncs(root_edges):
    """A sync that ran this forward pass before its backward means two executables per step
    (a host read that ran only other work, the next batch's indices, left it lazy)."""
    for e, _ in root_edges:
        if isinstance(e, GradFn) and e.epoch < rt.exec_epoch and e.out.op is ir.DATA:
            for k in range(e.epoch + 1, rt.exec_epoch + 1):
                c = rt.exec_causes.get(k)
                if c is not None and not c.startswith(("optimizer", "eager")):
                    rt.on_mid_step_execution(c)


def _call_vjp(fn: GradFn, g, Tensor, wrap):
    prim = fn.prim
    if prim.vjp is None:
        raise RuntimeError(f"the derivative of '{prim.name}' is not implemented")
    ins = tuple(wrap(n, e) for n, e in zip(fn.inputs, fn.edges))
    out = wrap(fn.out, fn)
    grads = prim.vjp(fn.attrs, ins, out, g)
    if len(grads) != len(ins):
        raise AssertionError(f"vjp of {prim.name} returned {len(grads)} grads for {len(ins)} inputs")
    return grads


def _accumulate_leaf(t, g, create_graph):
    if g.shape != t.shape:
        raise RuntimeError(f"backward: gradient shape {g.shape} does not match tensor shape "
                           f"{t.shape}")
    if t.grad is None:
        t.grad = g if create_graph else Tensor(g._node)   # a fresh handle, not a view of g
    elif create_graph:
        t.grad = t.grad + g
    else:
        # accumulate in place, as PyTorch does: handles on .grad (and its views) see the sum
        with no_grad():
            rebind(t.grad, t.grad + g, "backward (accumulating into .grad)")


def backward_into(roots, grads, retain_graph, create_graph, inputs=None):
    """Tensor.backward / torch.autograd.backward: accumulate into the leaves' `.grad` — all
    of them, or only `inputs` when given (as PyTorch's `inputs=`)."""
    if inputs is None:
        run_backward(roots, grads, retain_graph=retain_graph, create_graph=create_graph)
        return
    inputs = list(inputs)
    got = run_backward(roots, grads, retain_graph=retain_graph, create_graph=create_graph,
                       inputs=inputs, allow_unused=True)
    for t, g in zip(inputs, got):
        if g is not None:
            _accumulate_leaf(t, g, create_graph)
