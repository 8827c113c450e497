"""Shared test helpers: x64 switching, gradient checks against jax and finite differences.

`check_grad(fl_fn, jnp_fn, *arrays)` runs the same function written with flowlite ops and with
jax.numpy on the same float64 data and compares the values and, for every floating output, the
vector-Jacobian product with a random cotangent (flowlite's own tape vs `jax.vjp`).  All
flowlite outputs and gradients of one call are materialised by ONE sync, so a check costs one
compiled program.  `check_fd` compares flowlite's gradients with central finite differences.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

# the kernel choices a test run times (engine/onednn.py) stay in the run, not in the user's table
os.environ.setdefault("FLOWLITE_KERNEL_TABLE",
                      os.path.join(tempfile.mkdtemp(prefix="flowlite-kernels-"), "kernels.json"))

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl


@contextlib.contextmanager
def x64_mode(enabled: bool = True):
    """Switch JAX's x64 mode for a block and restore the previous setting afterwards."""
    prev = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", prev)


@pytest.fixture
def x64():
    """float64 (and int64) tensors for the duration of one test."""
    with x64_mode(True):
        yield


@pytest.fixture(autouse=True)
def _isolate_global_state():
    """Every test starts with x64 off and the default float dtype, and leaves them so."""
    prev_x64 = bool(jax.config.jax_enable_x64)
    prev_dtype = fl.get_default_dtype()
    yield
    jax.config.update("jax_enable_x64", prev_x64)
    fl.set_default_dtype(prev_dtype)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape, seed: int = 0, dtype=np.float64) -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).standard_normal(shape), dtype=dtype)


def positive(*shape, seed: int = 0, low: float = 0.5, high: float = 2.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape)


def _as_tuple(x):
    return (x,) if not isinstance(x, (tuple, list)) else tuple(x)


def _np(x):
    return np.asarray(x)


def _kind(dtype) -> str:
    """'f' floating (bfloat16 included), 'i' integer (signed or not), 'b' bool."""
    k = np.dtype(dtype).kind
    return "f" if k in "fV" else ("i" if k in "iu" else k)


def check_values(fl_outs, ref_outs, rtol=1e-6, atol=1e-6, what="value"):
    """Compare a (tuple of) flowlite tensor(s) with a (tuple of) reference array(s).

    Shapes and dtypes (kind: float/int/bool) must agree too.  Several outputs share one sync.
    """
    fl_outs, ref_outs = _as_tuple(fl_outs), _as_tuple(ref_outs)
    assert len(fl_outs) == len(ref_outs), (len(fl_outs), len(ref_outs))
    fl.sync()
    for k, (a, b) in enumerate(zip(fl_outs, ref_outs)):
        b = _np(b)
        av = a.numpy()
        assert tuple(a.shape) == b.shape, f"{what} {k}: shape {tuple(a.shape)} != {b.shape}"
        assert av.shape == b.shape, f"{what} {k}: materialised shape {av.shape} != {b.shape}"
        assert _kind(av.dtype) == _kind(b.dtype), \
            f"{what} {k}: dtype {av.dtype} vs reference {b.dtype}"
        if av.dtype.kind in "biu":
            np.testing.assert_array_equal(av, b, err_msg=f"{what} {k}")
        else:
            np.testing.assert_allclose(av.astype(np.float64), b.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"{what} {k}")


def check_grad(fl_fn, jnp_fn, *arrays, wrt=None, rtol=1e-7, atol=1e-9, seed=0,
               check_dtype=True):
    """Values and gradients of `fl_fn` (flowlite) against `jnp_fn` (jax.numpy) in float64.

    `arrays` are numpy arrays; floating ones (or those listed in `wrt`) are differentiated.
    `fl_fn` and `jnp_fn` may return one array or a tuple.  The gradient compared is that of
    sum_k <ct_k, out_k> with a random cotangent ct_k per floating output, so one flowlite
    program (forward + backward, one sync) and one jitted jax program check every output; when
    the gradients disagree, each output is re-checked alone so the failure names it.
    Requires x64 mode (the `x64` fixture).
    """
    assert jax.config.jax_enable_x64, "check_grad compares in float64: use the x64 fixture"
    arrays = [np.asarray(a) for a in arrays]
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    wrt = list(wrt)
    ts = [fl.from_numpy(a) for a in arrays]
    for i in wrt:
        ts[i].requires_grad_(True)
    outs = _as_tuple(fl_fn(*ts))
    g = np.random.default_rng(seed)
    cts = [g.standard_normal(tuple(o.shape)) if o.dtype.is_floating_point else None
           for o in outs]
    fl_grads = _fl_vjp(outs, cts, [ts[i] for i in wrt])
    fl.sync()  # one executable for every value and gradient above

    def f(*diff):
        full = list(arrays)
        for i, d in zip(wrt, diff):
            full[i] = d
        return _as_tuple(jnp_fn(*[jnp.asarray(a) for a in full]))

    def ref(diff, cts):
        outs, vjp = jax.vjp(f, *diff)
        full_cts = tuple(jnp.asarray(c, o.dtype) if c is not None else
                         (jnp.zeros_like(o) if jnp.issubdtype(o.dtype, jnp.inexact) else
                          np.zeros(o.shape, jax.dtypes.float0)) for c, o in zip(cts, outs))
        return outs, vjp(full_cts)

    diff = tuple(jnp.asarray(arrays[i]) for i in wrt)
    ref_outs, ref_grads = jax.jit(ref)(diff, cts)
    assert len(ref_outs) == len(outs), f"{len(outs)} flowlite outputs vs {len(ref_outs)} in jax"
    for k, (o, r) in enumerate(zip(outs, ref_outs)):
        r = np.asarray(r)
        assert tuple(o.shape) == r.shape, f"output {k}: shape {tuple(o.shape)} vs jax {r.shape}"
        v = o.numpy()
        if check_dtype:
            assert v.dtype == r.dtype or (v.dtype.kind in "iu" and r.dtype.kind in "iu"), \
                f"output {k}: dtype {v.dtype} vs jax {r.dtype}"
        if v.dtype.kind in "biu":
            np.testing.assert_array_equal(v, r, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(v, r, rtol=rtol, atol=atol, err_msg=f"output {k} value")
    try:
        _compare_grads(fl_grads, ref_grads, arrays, wrt, rtol, atol, "the sum over outputs")
    except AssertionError:
        if sum(c is not None for c in cts) < 2:
            raise
        for k, ct in enumerate(cts):   # name the culprit
            if ct is None:
                continue
            only = [c if j == k else None for j, c in enumerate(cts)]
            got = _fl_vjp(_as_tuple(fl_fn(*ts)), only, [ts[i] for i in wrt])
            fl.sync()
            _compare_grads(got, jax.jit(ref)(diff, only)[1], arrays, wrt, rtol, atol,
                           f"output {k}")
        raise
    return outs


def _fl_vjp(outs, cts, inputs):
    """flowlite gradient of sum_k <ct_k, out_k> w.r.t. inputs (None where unused)."""
    loss = None
    for o, ct in zip(outs, cts):
        if ct is None or not o.requires_grad:
            continue
        term = (o * fl.from_numpy(ct.astype(o.dtype.np))).sum()
        loss = term if loss is None else loss + term
    if loss is None:
        return [None] * len(inputs)
    return fl.grad(loss, inputs, allow_unused=True)


def _compare_grads(got, ref_grads, arrays, wrt, rtol, atol, what):
    for j, i in enumerate(wrt):
        gref = np.asarray(ref_grads[j])
        gv = np.zeros_like(arrays[i]) if got[j] is None else got[j].numpy()
        assert gv.shape == arrays[i].shape, \
            f"grad of {what} wrt input {i}: shape {gv.shape} vs {arrays[i].shape}"
        np.testing.assert_allclose(gv, gref, rtol=rtol, atol=atol,
                                   err_msg=f"grad of {what} wrt input {i}")


def check_grad2(fl_fn, jnp_fn, *arrays, wrt=None, rtol=1e-8, atol=1e-10, seed=0):
    """Second order: the gradient of ||grad <ct, f(x)>||^2 (flowlite's create_graph=True tape
    differentiating its own VJPs) against jax, float64.  `fl_fn`/`jnp_fn` return one array."""
    assert jax.config.jax_enable_x64, "check_grad2 compares in float64: use the x64 fixture"
    arrays = [np.asarray(a) for a in arrays]
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    ts = [fl.from_numpy(a) for a in arrays]
    for i in wrt:
        ts[i].requires_grad_(True)
    out = fl_fn(*ts)
    ct = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    inputs = [ts[i] for i in wrt]
    firsts = fl.grad((out * fl.from_numpy(ct)).sum(), inputs, create_graph=True,
                     allow_unused=True)
    total = None
    for g in firsts:
        if g is not None and g.requires_grad:
            total = (g * g).sum() if total is None else total + (g * g).sum()
    got = fl.grad(total, inputs, allow_unused=True) if total is not None else [None] * len(wrt)
    fl.sync()

    def first(*diff):
        full = list(arrays)
        for i, d in zip(wrt, diff):
            full[i] = d
        return jnp.sum(jnp_fn(*full) * ct)

    def second(*diff):
        gs = jax.grad(first, argnums=tuple(range(len(wrt))))(*diff)
        return sum(jnp.sum(g * g) for g in gs)

    ref = jax.jit(jax.grad(second, argnums=tuple(range(len(wrt)))))(
        *[jnp.asarray(arrays[i]) for i in wrt])
    _compare_grads(got, ref, arrays, wrt, rtol, atol, "||grad||^2")


def check_fd(fl_fn, *arrays, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-7, seed=1):
    """flowlite's gradient of <ct, fl_fn(x)> against central finite differences (float64).

    Every perturbed evaluation has the same graph structure, so after the first compile each
    one is a cache hit; keep arrays small (a few dozen elements in all).
    """
    assert jax.config.jax_enable_x64, "check_fd works in float64: use the x64 fixture"
    arrays = [np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind == "f"
              else np.asarray(a) for a in arrays]
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    ts = [fl.from_numpy(a) for a in arrays]
    for i in wrt:
        ts[i].requires_grad_(True)
    out = fl_fn(*ts)
    ct = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    ct_t = fl.from_numpy(ct)
    (out * ct_t).sum().backward()
    fl.sync()
    analytic = [ts[i].grad.numpy() for i in wrt]

    def objective(arrs):
        with fl.no_grad():
            o = fl_fn(*[fl.from_numpy(a) for a in arrs])
            return float((o * ct_t).sum().item())

    for j, i in enumerate(wrt):
        num = np.zeros_like(arrays[i])
        flat = num.reshape(-1)
        for e in range(arrays[i].size):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[i].reshape(-1)[e] += eps
            minus[i].reshape(-1)[e] -= eps
            flat[e] = (objective(plus) - objective(minus)) / (2 * eps)
        np.testing.assert_allclose(analytic[j], num, rtol=rtol, atol=atol,
                                   err_msg=f"finite differences, input {i}")


def values(*tensors):
    """Materialise several tensors with one sync and return their numpy values."""
    fl.sync()
    return [t.numpy() for t in tensors]
