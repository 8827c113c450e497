"""Helpers for the flowlite.nn tests: layers and functions checked against jax.numpy references.

`check_layer(module, ref, *inputs)` sets the module's parameters to random float64 values,
runs forward and backward with a random cotangent, and compares the output, the input
gradients and every parameter gradient with `jax.vjp` of `ref(params, *inputs)` — a jax.numpy
transcription of PyTorch's documented formula.  `check_many([Case(...), ...])` does the same for
several cases at once: ONE flowlite sync (one compiled program) and ONE jitted reference for
the whole group, so a test costs two compiles however many cases it holds.  Use inside the
`x64` fixture.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import flowlite as fl
import flowlite.nn as nn

# references are only checked, never timed: compile them without XLA's expensive passes
_REF_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0}


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def random_params(module, seed=0, positive=()):
    g = np.random.default_rng(seed)
    vals = {}
    for name, p in module.named_parameters():
        shape = tuple(p.shape)
        vals[name] = g.uniform(0.5, 1.5, shape) if name in positive else g.standard_normal(shape)
    return vals


@dataclasses.dataclass
class Case:
    """module (or None for a plain function), reference, inputs; `call(module, *tensors)`
    replaces `module(*tensors)`; `params` overrides some random parameter values."""
    module: Any
    ref: Callable
    inputs: tuple = ()
    call: Callable = None
    params: dict = None
    label: str = ""
    wrt_inputs: bool = True


class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def fn_case(fn, ref, *inputs, label="", const=()):
    """A Case for a plain function: fn(*tensors) vs ref(*arrays); inputs at positions in
    `const` are passed as non-differentiated tensors."""
    if not const:
        return Case(_Fn(fn), lambda p, *xs: ref(*xs), tuple(inputs), label=label)
    var_idx = [i for i in range(len(inputs)) if i not in const]

    def call(m, *vs):
        full = [fl.from_numpy(np.array(a)) for a in inputs]
        for i, v in zip(var_idx, vs):
            full[i] = v
        return fn(*full)

    def rref(p, *vs):
        full = [jnp.asarray(a) for a in inputs]
        for i, v in zip(var_idx, vs):
            full[i] = v
        return ref(*full)
    return Case(_Fn(fn), rref, tuple(inputs[i] for i in var_idx), call=call, label=label)


def check_many(cases, seed=0, rtol=1e-7, atol=1e-9):
    assert jax.config.jax_enable_x64, "use the x64 fixture"
    g = np.random.default_rng(seed + 100)
    runs = []
    total = None
    all_pvals = []
    for k, c in enumerate(cases):
        m = c.module.double()
        pvals = random_params(m, seed + k)
        if c.params:
            pvals.update(c.params)
        if pvals:
            m.load_state_dict(pvals, strict=False)
        m.zero_grad()
        all_pvals.append(pvals)
    # the modules' lazy initialisation was replaced by the loaded values; dropping the pending
    # RNG-key chain it advanced keeps random-number code out of the checked program
    fl.manual_seed(seed)
    for c, pvals in zip(cases, all_pvals):
        m = c.module
        fidx = [i for i, a in enumerate(c.inputs)
                if c.wrt_inputs and np.asarray(a).dtype.kind == "f"]
        ins = []
        for i, a in enumerate(c.inputs):
            t = fl.from_numpy(np.array(a))
            if i in fidx:
                t.requires_grad_(True)
            ins.append(t)
        outs = _tuple(c.call(m, *ins) if c.call is not None else m(*ins))
        cts = [None if o is None or not o.dtype.is_floating_point
               else g.standard_normal(tuple(o.shape)) for o in outs]
        for o, ct in zip(outs, cts):
            if ct is not None and o.requires_grad:
                term = (o * fl.from_numpy(ct)).sum()
                total = term if total is None else total + term
        runs.append((c, m, pvals, fidx, ins, outs, cts))
    if total is not None:
        total.backward()
    fl.sync()   # one program: every output and every gradient of the group

    def reference(all_params, all_fins, all_cts):
        res = []
        for (c, m, pvals, fidx, ins, outs, cts), pj, fins, ocs in zip(runs, all_params,
                                                                        all_fins, all_cts):
            def f(pv, *vs, c=c, fidx=fidx):
                full = [jnp.asarray(a) for a in c.inputs]
                for i, v in zip(fidx, vs):
                    full[i] = v
                return _tuple(c.ref(pv, *full))
            ref_outs, vjp = jax.vjp(f, pj, *fins)
            rct = tuple(jnp.zeros(r.shape, r.dtype) if ct is None else ct.astype(r.dtype)
                        for r, ct in zip(ref_outs, ocs))
            res.append((ref_outs, vjp(rct)))
        return res

    args = ([{n: jnp.asarray(pv[n]) for n, _ in m.named_parameters()}
             for c, m, pv, *_ in runs],
            [[jnp.asarray(c.inputs[i]) for i in fidx] for c, m, pv, fidx, *_ in runs],
            [[None if ct is None else jnp.asarray(ct) for ct in r[6]] for r in runs])
    compiled = jax.jit(reference).lower(*args).compile(compiler_options=_REF_COMPILE_OPTIONS)
    results = compiled(*args)
    for (c, m, pvals, fidx, ins, outs, cts), (ref_outs, grads) in zip(runs, results):
        what = f"case {c.label or type(m).__name__}"
        assert len(ref_outs) == len(outs), f"{what}: {len(outs)} outputs vs {len(ref_outs)}"
        for k, (o, r) in enumerate(zip(outs, ref_outs)):
            assert tuple(o.shape) == tuple(r.shape), \
                f"{what} output {k}: shape {tuple(o.shape)} vs reference {r.shape}"
            np.testing.assert_allclose(o.numpy(), np.asarray(r), rtol=rtol, atol=atol,
                                       err_msg=f"{what} output {k}")
        gp, gin = grads[0], grads[1:]
        for n, p in m.named_parameters():
            got = np.zeros(tuple(p.shape)) if p.grad is None else p.grad.numpy()
            np.testing.assert_allclose(got, np.asarray(gp[n]), rtol=rtol, atol=atol,
                                       err_msg=f"{what}: gradient of parameter {n}")
        for j, i in enumerate(fidx):
            got = ins[i].grad
            got = np.zeros(np.shape(c.inputs[i])) if got is None else got.numpy()
            np.testing.assert_allclose(got, np.asarray(gin[j]), rtol=rtol, atol=atol,
                                       err_msg=f"{what}: gradient of input {i}")
    return [r[5] for r in runs]


def check_layer(module, ref, *inputs, params=None, call=None, **kw):
    return check_many([Case(module, ref, tuple(inputs), call, params)], **kw)[0]


def executions():
    return fl.metrics.counters()["executions"]


def compiles():
    return fl.metrics.counters()["compiles"]
