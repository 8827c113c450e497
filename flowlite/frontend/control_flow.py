"""`scan`: a loop recorded as ONE node (lowered to `lax.scan`), so recurrent
models don't unroll time into the graph.

The Python body runs once, on placeholder tensors, and its ops become a small
program stored in the node's attributes.  Tensors the body reads from outside
(weights, constants) become extra inputs.  The VJP is another scan, running in
reverse: each step replays the body program on the saved carry and applies
flowlite's own tape to it; the replayed entries read the values the forward kept
(residuals), so only the derivative runs.

Layer: frontend — imports backward, engine.buckets, engine.ir, engine.runtime, engine.tape, ops,
primitives, tensor.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..engine import buckets as B, ir
from ..engine.buckets import Sym
from ..engine.ir import Node, Prim
from ..engine.runtime import KeyStream, rt
from ..engine.tape import GradFn, enable_grad, is_grad_enabled
from . import ops as F
from . import primitives as P
from .backward import run_backward
from .tensor import Tensor, apply


def _no_lower(attrs, *xs):
    raise RuntimeError("scan placeholder reached the executor")


scan_arg = Prim("scan_arg", _no_lower, None, nondiff=True)


def _flatten(tree):
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=lambda x: isinstance(x, Tensor))
    for leaf in leaves:
        if not isinstance(leaf, Tensor):
            raise TypeError(f"scan: carries and xs must be Tensors (or pytrees of them), got "
                            f"{type(leaf).__name__}")
    return leaves, treedef


def _placeholder(i, shape, dtype, device):
    n = Node(scan_arg, (), (i,), tuple(shape), dtype, device)
    return Tensor(n)


def _trace_body(fn, carry_tree, carry_leaves, x_tree, x_leaves):
    """Run `fn` on placeholders; return the body program and its captured inputs."""
    nc = len(carry_leaves)
    cps = [_placeholder(i, c.shape, c.dtype, c._node.device) for i, c in enumerate(carry_leaves)]
    xps = [_placeholder(nc + i, x.shape[1:], x.dtype, x._node.device)
           for i, x in enumerate(x_leaves)]
    local = rt.local
    mark = len(local.pending)
    local.tracing_body += 1
    # the body's ops go into a program of their own, not into the graph key of the pending
    # work (an invalid key stream numbers nothing it reads)
    stream = local.stream
    local.stream = KeyStream(valid=False)
    try:
        out = fn(jax.tree_util.tree_unflatten(carry_tree, cps),
                 jax.tree_util.tree_unflatten(x_tree, xps) if x_leaves else None)
    finally:
        local.tracing_body -= 1
        local.stream = stream
        del local.pending[mark:]
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError("scan: the body must return a pair (new_carry, y)")
    new_carry, ys = out
    nc_leaves, nc_tree = _flatten(new_carry)
    if nc_tree != carry_tree:
        raise TypeError(f"scan: the body's carry structure changed: {carry_tree} -> {nc_tree}")
    for a, b in zip(carry_leaves, nc_leaves):
        if tuple(a.shape) != tuple(b.shape) or a.dtype is not b.dtype:
            raise TypeError(f"scan: carry changed shape/dtype across a step: "
                            f"{tuple(a.shape)}:{a.dtype.name} -> {tuple(b.shape)}:{b.dtype.name}")
    y_leaves, y_tree = _flatten(ys) if ys is not None else ([], None)
    arg_nodes = {id(t._node): i for i, t in enumerate(cps + xps)}
    program, out_refs, consts = _program([t._node for t in nc_leaves + y_leaves], arg_nodes,
                                         len(cps) + len(xps))
    edges = _captured_edges(nc_leaves + y_leaves, consts)
    return (program, out_refs, consts, edges), nc_leaves, y_leaves, y_tree


def _captured_edges(outs, consts):
    """Autograd edges of the tensors the body captured, read off the body's tape."""
    want = {id(n): j for j, n in enumerate(consts)}
    edges = [None] * len(consts)
    seen = set()
    stack = []
    for t in outs:
        j = want.get(id(t._node))
        if j is not None and t._edge is not None:
            edges[j] = t._edge
        elif isinstance(t._edge, GradFn):
            stack.append(t._edge)
    while stack:
        fn = stack.pop()
        if id(fn) in seen or fn.inputs is None:
            continue
        seen.add(id(fn))
        for n, e in zip(fn.inputs, fn.edges):
            if e is None:
                continue
            j = want.get(id(n))
            if j is not None:
                edges[j] = e
            elif isinstance(e, GradFn):
                stack.append(e)
    return edges


def _program(outputs, arg_nodes, n_args):
    """Body program over refs [args..., consts..., body nodes...] (consts appended later)."""
    depends = {}
    order = []
    for r in outputs:
        stack = [r]
        while stack:
            n = stack[-1]
            k = id(n)
            if k in depends:
                stack.pop()
                continue
            if k in arg_nodes:
                depends[k] = True
                stack.pop()
                continue
            if n.op is ir.DATA or n.op is ir.SCALAR or not n.inputs:
                depends[k] = n.op is scan_arg
                stack.pop()
                continue
            pending = [i for i in n.inputs if id(i) not in depends]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            depends[k] = any(depends[id(i)] for i in n.inputs)
            if depends[k]:
                order.append(n)
    consts = []
    const_idx = {}
    body_idx = {}
    instrs = []
    base = n_args
    # refs: args are 0..n_args-1, consts n_args.., body nodes after consts; fix up at the end
    pending_instrs = []
    for n in order:
        ins = []
        for i in n.inputs:
            k = id(i)
            if k in arg_nodes:
                ins.append(("a", arg_nodes[k]))
            elif depends.get(k):
                ins.append(("b", body_idx[k]))
            else:
                if k not in const_idx:
                    const_idx[k] = len(consts)
                    consts.append(i)
                ins.append(("k", const_idx[k]))
        body_idx[id(n)] = len(pending_instrs)
        pending_instrs.append((n, ins))
    outs = []
    for r in outputs:
        k = id(r)
        if k in arg_nodes:
            outs.append(("a", arg_nodes[k]))
        elif depends.get(k):
            outs.append(("b", body_idx[k]))
        else:
            if k not in const_idx:
                const_idx[k] = len(consts)
                consts.append(r)
            outs.append(("k", const_idx[k]))
    nk = len(consts)

    def ref(r):
        kind, j = r
        return j if kind == "a" else (base + j if kind == "k" else base + nk + j)
    for n, ins in pending_instrs:
        instrs.append((n.op, n.attrs, tuple(ref(r) for r in ins), n.shape, n.dtype))
    return tuple(instrs), tuple(ref(r) for r in outs), consts


def _lower_scan(attrs, *xs, valid=None):
    """lax.scan of the body program; with `valid` (a traced step count: buckets' padded
    length) only the first `valid` steps run (in reverse: steps valid-1 .. 0), as a while
    loop, and the stacked outputs past them hold zeros."""
    program, out_refs, nc, nx, nk, length, reverse, nres = attrs
    init, seqs, consts = xs[:nc], xs[nc:nc + nx], xs[nc + nx:]

    def body(carry, x):
        env = list(carry) + list(x) + list(consts)
        for prim, a, ins, shape, dt in program:
            v = prim.lower(a, *[env[i] for i in ins])
            if not prim.multi and v.dtype != dt.np:
                v = v.astype(dt.np)
            env.append(v)
        outs = [env[i] for i in out_refs]
        new_carry = tuple(outs[:nc])
        return new_carry, (tuple(outs[nc:]), tuple(carry))

    if valid is None:
        final, (ys, carries) = lax.scan(body, tuple(init), tuple(seqs), length=length,
                                        reverse=reverse)
        return tuple(final) + tuple(ys) + tuple(carries)
    # the shapes of one step's outputs, for the stacked buffers
    step_out = jax.eval_shape(body, tuple(init), tuple(x[0] for x in seqs))[1]
    bufs = jax.tree_util.tree_map(lambda a: jnp.zeros((length,) + a.shape, a.dtype), step_out)

    def step(state):
        i, carry, bufs = state
        t = valid - 1 - i if reverse else i
        x = tuple(lax.dynamic_index_in_dim(v, t, keepdims=False) for v in seqs)
        carry, out = body(carry, x)
        bufs = jax.tree_util.tree_map(
            lambda b, o: lax.dynamic_update_index_in_dim(b, o, t, 0), bufs, out)
        return i + 1, carry, bufs

    _, final, (ys, carries) = lax.while_loop(lambda st: st[0] < valid, step,
                                             (jnp.zeros((), jnp.int32), tuple(init), bufs))
    return tuple(final) + tuple(ys) + tuple(carries)


def _bucket_scan(ctx, op, a, shape, ins, vals):
    """A scan over a padded length (an RNN over a batch's time steps): only the real steps
    run, so the final state, the stacked outputs of the real steps and the reverse
    (backward) scan's accumulated gradients are exact, and the padding costs no compute."""
    program, out_refs, nc, nx, nk, length, reverse, nres = a
    if not isinstance(length, Sym):
        if B._syms(a) or any(B._syms(s) for s in ins):
            raise B.Unsupported("scan with a padded carry or weight")
        return _lower_scan(a, *vals)
    for j, s in enumerate(ins):
        if (nc <= j < nc + nx and (s[0] != length or B._syms(s[1:]))) or \
                (not nc <= j < nc + nx and B._syms(s)):
            raise B.Unsupported("scan whose carry or weights have the padded length")
    if B._syms((program, out_refs)):
        raise B.Unsupported("scan whose body depends on the padded length")
    return _lower_scan((program, out_refs, nc, nx, nk, length.phys(ctx.S), reverse, nres),
                       *vals, valid=ctx.val(length))


def replay(program, out_refs, args, saved=None):
    """Re-record a body program as flowlite ops on `args` (tensors).  `saved`: {entry:
    tensor} values the forward kept (residuals): those entries are recorded with their
    op's gradient but computed as the saved value, so the backward does not recompute
    the forward step."""
    env = list(args)
    for k, (prim, a, ins, shape, dt) in enumerate(program):
        t = apply(prim, tuple(env[i] for i in ins), a, shape, dt)
        r = saved.get(k) if saved else None
        if r is not None:       # the tape keeps prim's GradFn; the node reads the residual
            n = t._node
            n.op, n.inputs, n.attrs = scan_saved, (r._node,), ()
        env.append(t)
    return [env[i] for i in out_refs]


# an entry of a backward body that reads the forward's saved value of that entry
scan_saved = Prim("scan_saved", lambda attrs, x: x, None, nondiff=True)


# ops the backward recomputes from the kept values rather than keep their own (a copy, a
# layout change or an add: free in the fused loop body, and as large as what they read)
_RECOMPUTED = frozenset({"add", "sub", "neg", "slice", "reshape", "transpose", "broadcast_to",
                         "convert", "concatenate", "view_read", "stop_gradient", "tuple_get"})


def _residuals(program, base):
    """The body entries the forward keeps for the backward (flowlite's tape then runs only
    the derivative, not the step again): their refs."""
    return tuple(base + k for k, (prim, *_) in enumerate(program)
                 if not prim.multi and prim.name not in _RECOMPUTED)


def _scan_vjp(attrs, inputs, out, g):
    program, out_refs, nc, nx, nk, length, reverse, nres = attrs
    init, seqs, consts = inputs[:nc], inputs[nc:nc + nx], inputs[nc + nx:]
    ny = len(out_refs) - nc             # the body's outputs, then its residuals
    nyu = ny - nres
    # the stacked per-step input carries are outputs nc+ny.. of the forward node
    n_out = nc + ny + nc
    saved = [apply(P.tuple_get, (out,), (nc + ny + j, n_out),
                   (length,) + tuple(init[j].shape), init[j].dtype) for j in range(nc)]
    create_graph = is_grad_enabled()
    # the residuals (not with create_graph: a backward differentiated again replays the
    # body, so its gradient reaches the forward's inputs through the replay)
    res_at = {}
    if not create_graph:
        base = nc + nx + nk
        for j, r in enumerate(out_refs[nc + nyu:]):
            shape, dt = program[r - base][3:]
            res_at[r - base] = apply(P.tuple_get, (out,), (nc + nyu + j, n_out),
                                     (length,) + tuple(shape), dt)
    ct_final = [g[j] if g[j] is not None else F.zeros_like(init[j]) for j in range(nc)]
    ct_ys = []
    for j in range(nyu):
        gy = g[nc + j]
        if gy is None:
            gy = F.zeros(_out_shape(out, nc + j), dtype=_out_dtype(out, nc + j),
                         device=out.device)
        ct_ys.append(gy)
    # cotangents of the stacked per-step carries (non-zero only for higher-order grads)
    ct_saved = [g[nc + ny + j] if g[nc + ny + j] is not None else F.zeros_like(saved[j])
                for j in range(nc)]
    float_mask_c = [c.dtype.is_floating_point for c in init]
    float_mask_x = [x.dtype.is_floating_point for x in seqs]
    float_mask_k = [k.dtype.is_floating_point for k in consts]
    body_refs = out_refs[:nc + nyu]
    res_entries = list(res_at)
    ct_k0 = [F.zeros_like(k) for k, m in zip(consts, float_mask_k) if m]

    def bwd_body(carry, x):
        ct_c, ct_k = carry
        c_t, x_t, cty_t, cts_t, res_t = x
        c_req = [Tensor(c._node).requires_grad_() if m else Tensor(c._node)
                 for c, m in zip(c_t, float_mask_c)]
        x_req = [Tensor(v._node).requires_grad_() if m else Tensor(v._node)
                 for v, m in zip(x_t, float_mask_x)]
        # captured tensors keep their own autograd edges, so a backward taken with
        # create_graph=True differentiates through them (higher-order grads)
        k_req = [k if m else Tensor(k._node) for k, m in zip(consts, float_mask_k)]
        with enable_grad():
            outs = replay(program, body_refs, c_req + x_req + k_req,
                          dict(zip(res_entries, res_t)))
        roots, cts = [], []
        for o, ct in zip(outs, list(ct_c) + list(cty_t)):
            if o.requires_grad:
                roots.append(o)
                cts.append(ct)
        wrt = [t for t, m in zip(c_req + x_req + k_req,
                                 float_mask_c + float_mask_x + float_mask_k) if m]
        usable = [t for t in wrt if t.requires_grad]
        got = run_backward(roots, cts, inputs=usable, accumulate=False,
                                    allow_unused=True, retain_graph=True,
                                    create_graph=create_graph) if roots and usable else []
        by_id = {id(t): g for t, g in zip(usable, got)}
        grads = [by_id.get(id(t)) for t in wrt]
        it = iter(grads)
        gc = [_z(next(it), c) + s if m else F.zeros_like(c)
              for c, m, s in zip(c_req, float_mask_c, cts_t)]
        gx = [_z(next(it), v) if m else F.zeros_like(v) for v, m in zip(x_req, float_mask_x)]
        gk = [_z(next(it), k) for k, m in zip(k_req, float_mask_k) if m]
        new_ct_k = [a + b for a, b in zip(ct_k, gk)]
        return (gc, new_ct_k), gx

    cache = None
    if not create_graph:
        # the traced body depends on the forward's program and its operands' shapes and
        # dtypes only; it captures the forward's constants (weights) and constants
        key = (program, out_refs, nc, nx, nk, reverse, nres,
               tuple((tuple(t.shape), t.dtype) for t in list(init) + list(consts)),
               tuple((tuple(t.shape[1:]), t.dtype) for t in seqs),
               tuple(t.dtype for t in ct_final + ct_ys + ct_saved))
        cache = (key, [k._node for k in consts])
    (ct_init, ct_k), ct_xs = _scan(bwd_body, (ct_final, ct_k0),
                                   (saved, list(seqs), ct_ys, ct_saved, list(res_at.values())),
                                   length, not reverse, cache)
    grads = []
    for c, m, gc in zip(init, float_mask_c, ct_init):
        grads.append(gc if m else None)
    for v, m, gx in zip(seqs, float_mask_x, ct_xs):
        grads.append(gx if m else None)
    it = iter(ct_k)
    for k, m in zip(consts, float_mask_k):
        grads.append(next(it) if m else None)
    return tuple(grads)


def _z(g, like):
    return g if g is not None else F.zeros_like(like)


def _out_shape(out, j):
    return out._node.shape[j]


def _out_dtype(out, j):
    return out._node.dtype[j]


scan_p = Prim("scan", _lower_scan, _scan_vjp, multi=True, bucket=_bucket_scan)


def scan(fn, init, xs=None, length=None, reverse=False):
    """`lax.scan` for flowlite tensors: fn(carry, x) -> (new_carry, y).

    Returns (final_carry, stacked_ys).  `init` and `xs` may be pytrees of
    tensors; every x is sliced along its first dimension.
    """
    return _scan(fn, init, xs, length, reverse)


# traced backward bodies, by what decides them (the forward scan's program, its operands'
# shapes and dtypes): an RNN's backward traces its body once, not at every step
_BWD_BODIES: dict = {}
_MAX_BWD_BODIES = 256


def _scan(fn, init, xs, length, reverse, cache=None):
    """scan(); `cache` = (key, outer nodes): the body's trace is kept under `key` when every
    tensor it captures is one of the outer nodes or a constant with no inputs, and reused
    with the outer nodes of this call."""
    c_leaves, c_tree = _flatten(init)
    x_leaves, x_tree = _flatten(xs) if xs is not None else ([], None)
    if x_leaves:
        lengths = {int(x.shape[0]) if x.ndim else -1 for x in x_leaves}
        if len(lengths) != 1 or -1 in lengths:
            raise ValueError(f"scan: every xs must have the same leading length, got shapes "
                             f"{[tuple(x.shape) for x in x_leaves]}")
        n = lengths.pop()
        if length is not None and length != n:
            raise ValueError(f"scan: length={length} but xs have leading length {n}")
        length = n
    if length is None:
        raise ValueError("scan: pass xs or length")
    got = _BWD_BODIES.get(cache[0]) if cache is not None else None
    if got:
        program, out_refs, specs, y_specs, y_tree = got
        consts = [_rebuild_const(sp, cache[1]) for sp in specs]
        edges = [None] * len(consts)
    else:
        (program, out_refs, consts, edges), nc_leaves, y_leaves, y_tree = _trace_body(
            fn, c_tree, c_leaves, x_tree, x_leaves)
        y_specs = tuple((tuple(y.shape), y.dtype) for y in y_leaves)
        if cache is not None and got is None:
            _keep_body(cache, program, out_refs, consts, y_specs, y_tree)
    nc, nx, nk = len(c_leaves), len(x_leaves), len(consts)
    const_tensors = [Tensor(k) for k in consts]
    for t, e in zip(const_tensors, edges):
        t._edge = e
    res_refs = ()
    if cache is None and is_grad_enabled() and any(
            t.requires_grad for t in c_leaves + x_leaves + const_tensors):
        # a differentiable forward keeps its steps' values for the backward (residuals)
        res_refs = _residuals(program, nc + nx + nk)
    attrs = (program, out_refs + res_refs, nc, nx, nk, int(length), bool(reverse),
             len(res_refs))
    res_specs = [(program[r - nc - nx - nk][3], program[r - nc - nx - nk][4])
                 for r in res_refs]
    shapes = tuple(tuple(c.shape) for c in c_leaves) + \
        tuple((length,) + tuple(shp) for shp, _ in list(y_specs) + res_specs) + \
        tuple((length,) + tuple(c.shape) for c in c_leaves)
    dts = tuple(c.dtype for c in c_leaves) + \
        tuple(dt for _, dt in list(y_specs) + res_specs) + tuple(c.dtype for c in c_leaves)
    out = apply(scan_p, tuple(c_leaves) + tuple(x_leaves) + tuple(const_tensors), attrs,
                shapes, dts)
    n_out = len(shapes)
    res = [apply(P.tuple_get, (out,), (j, n_out), shapes[j], dts[j])
           for j in range(nc + len(y_specs))]
    final = jax.tree_util.tree_unflatten(c_tree, res[:nc])
    ys = jax.tree_util.tree_unflatten(y_tree, res[nc:]) if y_tree is not None else None
    return final, ys


def _keep_body(cache, program, out_refs, consts, y_specs, y_tree):
    key, outer = cache
    where = {id(n): j for j, n in enumerate(outer)}

    def spec(n, depth=0):
        """How to get `n` at the next call: ("o", j) outer node j, ("c", n) a constant with
        no inputs, ("f", prim, attrs, input specs, shape, dtype) computed from those (the
        transposed weight a matmul's gradient reads); None: data or too deep."""
        j = where.get(id(n))
        if j is not None:
            return ("o", j)
        if n.op is ir.DATA or depth > 8:
            return None
        if not n.inputs:
            return ("c", n)
        ins = [spec(i, depth + 1) for i in n.inputs]
        if None in ins or n.op.multi:
            return None
        return ("f", n.op, n.attrs, tuple(ins), n.shape, n.dtype)
    specs = [spec(k) for k in consts]
    if None in specs:
        _BWD_BODIES[key] = False        # traced at every call
        return
    if len(_BWD_BODIES) >= _MAX_BWD_BODIES:
        del _BWD_BODIES[next(iter(_BWD_BODIES))]
    _BWD_BODIES[key] = (program, out_refs, tuple(specs), y_specs, y_tree)


def _rebuild_const(spec, outer):
    kind = spec[0]
    if kind == "o":
        return outer[spec[1]]
    if kind == "c":
        return spec[1]
    _, prim, attrs, ins, shape, dtype = spec
    return apply(prim, tuple(Tensor(_rebuild_const(i, outer)) for i in ins), attrs, shape,
                 dtype)._node
