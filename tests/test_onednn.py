"""The opt-in oneDNN batched matmul (FLOWLITE_ONEDNN=1, engine/onednn.py): which matmuls and
einsums take it, values and gradients equal to XLA's dot within float32 rounding, and the
custom call really in the compiled program (jaxlib 0.10.x on x86-64, where it is offered;
elsewhere the same checks hold for XLA's dot, which it falls back to)."""

import platform
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
from flowlite.engine import onednn

OFFERED = version("jaxlib").startswith(onednn._TESTED_JAXLIB) and \
    platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setenv("FLOWLITE_ONEDNN", "1")
    onednn.enabled.cache_clear()
    yield
    onednn.enabled.cache_clear()


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_off_unless_asked(monkeypatch):
    monkeypatch.delenv("FLOWLITE_ONEDNN", raising=False)
    onednn.enabled.cache_clear()
    try:
        assert not onednn.enabled()
        assert onednn.bmm(jnp.ones((2, 8, 8)), jnp.ones((2, 8, 8))) is None
    finally:
        onednn.enabled.cache_clear()


@pytest.mark.parametrize("eq,sa,sb", [
    ("...le,...se->...ls", (2, 3, 16, 8), (2, 3, 12, 8)),      # attention's q kᵀ
    ("...ls,...se->...le", (2, 3, 16, 12), (2, 3, 12, 8)),     # p v
    ("...ls,...le->...se", (2, 3, 16, 12), (2, 3, 16, 8)),     # a gradient: contract l
    ("bhls,bshd->blhd", (2, 3, 16, 12), (2, 12, 3, 8)),        # batch dims not leading
    ("bij,bjk->bki", (4, 16, 8), (4, 8, 12)),                  # output transposed
])
def test_einsum_as_a_batched_matmul_equals_jnp(on, eq, sa, sb):
    a, b = _rand(*sa, seed=1), _rand(*sb, seed=2)
    f = jax.jit(lambda a, b: onednn.einsum(eq, a, b))
    got = f(a, b)
    np.testing.assert_allclose(np.asarray(got), np.einsum(eq, a, b), rtol=2e-5, atol=2e-5)
    assert ("__onednn$matmul" in f.lower(a, b).as_text()) == OFFERED


@pytest.mark.parametrize("eq,sa,sb", [
    ("ij,jk->ik", (16, 8), (8, 12)),               # no batch dims: XLA's dot is faster
    ("bij,bjk->bik", (4, 4, 8), (4, 8, 12)),       # a matrix dim under 8
    ("bij,bjk", (4, 16, 8), (4, 8, 12)),           # implicit output
    ("bijk,bjk->bi", (4, 16, 8, 8), (4, 8, 8)),    # two contracted indices
    ("bii,bij->bj", (4, 8, 8), (4, 8, 12)),        # a repeated index
])
def test_other_einsums_are_left_to_xla(on, eq, sa, sb):
    assert onednn.einsum(eq, jnp.asarray(_rand(*sa)), jnp.asarray(_rand(*sb))) is None


def test_float64_and_broadcast_batches_are_left_to_xla(on):
    assert onednn.bmm(jnp.ones((2, 8, 8), jnp.float16), jnp.ones((2, 8, 8), jnp.float16)) \
        is None
    assert onednn.bmm(jnp.ones((2, 8, 8)), jnp.ones((1, 8, 8))) is None


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_bmm_transposed_operands(on, ta, tb):
    # a is (12, 16) and b (16, 10) once the flagged ones are transposed
    a = _rand(*((3, 16, 12) if ta else (3, 12, 16)), seed=3)
    b = _rand(*((3, 10, 16) if tb else (3, 16, 10)), seed=4)
    got = jax.jit(lambda a, b: onednn.bmm(a, b, ta, tb))(a, b)
    want = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)


def test_attention_trains_the_same_with_onednn(on):
    # scaled_dot_product_attention's dots and their gradients, through flowlite's tape
    q, k, v = (_rand(2, 4, 16, 8, seed=s) for s in (5, 6, 7))
    tq, tk, tv = (fl.tensor(x, requires_grad=True) for x in (q, k, v))
    out = fl.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    (out * out).sum().backward()
    grads = [np.asarray(t.grad) for t in (tq, tk, tv)]
    assert ("__onednn$matmul" in fl.debug.executable_text(-1)) == OFFERED

    def ref(q, k, v):
        s = jnp.einsum("...le,...se->...ls", q, k) / np.sqrt(8)
        s = jnp.where(jnp.tril(jnp.ones((16, 16), bool)), s, -jnp.inf)
        o = jnp.einsum("...ls,...se->...le", jax.nn.softmax(s, -1), v)
        return (o * o).sum()
    want = jax.grad(ref, argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-4, atol=1e-5)


def test_matmul_with_batch_dims_takes_it(on):
    x = fl.tensor(_rand(3, 16, 12, seed=8), requires_grad=True)
    y = fl.tensor(_rand(3, 12, 10, seed=9), requires_grad=True)
    (x @ y).square().sum().backward()
    got = np.asarray(x.grad), np.asarray(y.grad)
    assert ("__onednn$matmul" in fl.debug.executable_text(-1)) == OFFERED
    want = jax.grad(lambda a, b: jnp.square(a @ b).sum(), argnums=(0, 1))(
        np.asarray(x.detach()), np.asarray(y.detach()))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-4, atol=1e-4)
