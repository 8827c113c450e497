"""Property test: random programs built from the op set, on random shapes, checked against the
same program in jax.numpy (values) and jax.vjp (flowlite's own gradients), in float64.

CI runs a few hundred programs; set FLOWLITE_FUZZ_EXAMPLES=5000 for a nightly-size run.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import flowlite as fl

N_EXAMPLES = int(os.environ.get("FLOWLITE_FUZZ_EXAMPLES", "100"))

# (name, flowlite fn, jnp fn, domain) — unary ops applied to the current value
UNARY = [
    ("neg", lambda x: -x, lambda x: -x, None),
    ("tanh", fl.tanh, jnp.tanh, None),
    ("sigmoid", fl.sigmoid, jax.nn.sigmoid, None),
    ("exp_small", lambda x: fl.exp(x * 0.3), lambda x: jnp.exp(x * 0.3), None),
    ("sin", fl.sin, jnp.sin, None),
    ("square", lambda x: x * x, lambda x: x * x, None),
    ("softplus_like", lambda x: fl.log1p(fl.exp(-fl.abs(x))) + fl.maximum(x, 0.0),
     lambda x: jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(x, 0.0), None),
    ("sqrt_pos", lambda x: fl.sqrt(x * x + 1.0), lambda x: jnp.sqrt(x * x + 1.0), None),
    ("erf", fl.erf, jax.lax.erf, None),
    ("scale", lambda x: x * 1.7 - 0.2, lambda x: x * 1.7 - 0.2, None),
]
# reductions / shape ops that keep a 2-D value (rows, cols) -> (rows', cols')
SHAPE = [
    ("transpose", lambda x: x.T, lambda x: x.T),
    ("softmax", lambda x: fl.softmax(x, -1), lambda x: jax.nn.softmax(x, -1)),
    ("log_softmax", lambda x: fl.log_softmax(x, 0), lambda x: jax.nn.log_softmax(x, 0)),
    ("cumsum", lambda x: fl.cumsum(x, 1), lambda x: jnp.cumsum(x, 1)),
    ("center", lambda x: x - x.mean(1, keepdim=True), lambda x: x - x.mean(1, keepdims=True)),
    ("flip", lambda x: x.flip(0), lambda x: jnp.flip(x, 0)),
    ("slice_pad", lambda x: fl.cat([x[:, 1:], x[:, :1]], 1),
     lambda x: jnp.concatenate([x[:, 1:], x[:, :1]], 1)),
    ("max_keep", lambda x: x - x.amax(0, keepdim=True), lambda x: x - x.max(0, keepdims=True)),
    ("normalize", lambda x: x / (x.norm(dim=1, keepdim=True) + 1.0),
     lambda x: x / (jnp.linalg.norm(x, axis=1, keepdims=True) + 1.0)),
    ("gram", lambda x: (x @ x.T) * 0.1, lambda x: (x @ x.T) * 0.1),
]
BINARY = [
    ("add", lambda a, b: a + b, lambda a, b: a + b),
    ("mul", lambda a, b: a * b, lambda a, b: a * b),
    ("sub_row", lambda a, b: a - b[:1], lambda a, b: a - b[:1]),
    ("maximum", fl.maximum, jnp.maximum),
    ("where", lambda a, b: fl.where(a > b, a, b * 0.5), lambda a, b: jnp.where(a > b, a, b * 0.5)),
    ("div_safe", lambda a, b: a / (b * b + 1.0), lambda a, b: a / (b * b + 1.0)),
]
FINAL = [
    ("sum", lambda x: x.sum(), jnp.sum),
    ("mean_sq", lambda x: (x * x).mean(), lambda x: (x * x).mean()),
    ("logsumexp", lambda x: fl.logsumexp(x, (0, 1)), lambda x: jax.nn.logsumexp(x)),
    ("var", lambda x: x.var(), lambda x: jnp.var(x, ddof=1)),
]


@st.composite
def programs(draw):
    rows = draw(st.integers(2, 4))
    cols = draw(st.integers(2, 4))
    n = draw(st.integers(1, 6))
    steps = []
    for _ in range(n):
        kind = draw(st.sampled_from(["u", "s", "b"]))
        table = {"u": UNARY, "s": SHAPE, "b": BINARY}[kind]
        steps.append((kind, draw(st.integers(0, len(table) - 1))))
    final = draw(st.integers(0, len(FINAL) - 1))
    seed = draw(st.integers(0, 2 ** 16))
    return rows, cols, steps, final, seed


def _build(lib, steps, final, x, y):
    fl_side = lib == "fl"
    for kind, k in steps:
        if kind == "u":
            f = UNARY[k][1 if fl_side else 2]
            x = f(x)
        elif kind == "s":
            f = SHAPE[k][1 if fl_side else 2]
            x = f(x)
            y = f(y)
        else:
            if tuple(x.shape) != tuple(y.shape):
                y = y.T if tuple(y.T.shape) == tuple(x.shape) else y
            if tuple(x.shape) != tuple(y.shape):
                continue
            f = BINARY[k][1 if fl_side else 2]
            x = f(x, y)
    return FINAL[final][1 if fl_side else 2](x)


@pytest.mark.filterwarnings("ignore:flowlite.*recompiled")
@settings(max_examples=N_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_match_jax_values_and_gradients(prog):
    rows, cols, steps, final, seed = prog
    prev = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(seed)
        xa = rng.normal(size=(rows, cols))
        ya = rng.normal(size=(rows, cols))
        x = fl.tensor(xa, requires_grad=True)
        y = fl.tensor(ya, requires_grad=True)
        out = _build("fl", steps, final, x, y)
        gx, gy = fl.grad(out, [x, y], allow_unused=True)
        fl.sync()
        ref, (rgx, rgy) = jax.value_and_grad(
            lambda a, b: _build("jnp", steps, final, a, b), argnums=(0, 1))(xa, ya)
        np.testing.assert_allclose(out.item(), float(ref), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(gx.numpy() if gx is not None else 0 * xa, rgx, rtol=1e-7,
                                   atol=1e-9)
        np.testing.assert_allclose(gy.numpy() if gy is not None else 0 * ya, rgy, rtol=1e-7,
                                   atol=1e-9)
    finally:
        jax.config.update("jax_enable_x64", prev)
