"""oneDNN's matmul inside XLA:CPU programs (engine/onednn.py): which matmuls and einsums take it
(FLOWLITE_ONEDNN=1: every one that fits; by default on jaxlib 0.12, each shape by a measurement
remembered per CPU), values and gradients equal to XLA's dot within float32/bfloat16 rounding,
and the custom call really in the compiled program (jaxlib 0.10.x/0.12.x on x86-64, where it is
offered; elsewhere the same checks hold for XLA's dot, which it falls back to)."""

import json
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


def test_off_when_turned_off(monkeypatch):
    monkeypatch.setenv("FLOWLITE_ONEDNN", "0")
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


def test_float16_float64_and_broadcast_batches_are_left_to_xla(on):
    assert onednn.bmm(jnp.ones((2, 8, 8), jnp.float16), jnp.ones((2, 8, 8), jnp.float16)) \
        is None
    assert onednn.bmm(np.ones((2, 8, 8)), np.ones((2, 8, 8))) is None       # float64
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


# ---- the measured choice (mode "auto": the default where such programs serialize) -----------
@pytest.fixture
def auto(monkeypatch, tmp_path):
    """mode "auto" with an empty table of choices in a file of the test's own."""
    monkeypatch.setattr(onednn, "mode", lambda: "auto")
    monkeypatch.setenv("FLOWLITE_KERNEL_TABLE", str(tmp_path / "kernels.json"))
    monkeypatch.setattr(onednn, "_choices", {})
    monkeypatch.setattr(onednn, "_table_state", {"loaded": False, "path": None})
    return tmp_path / "kernels.json"


def _measured(monkeypatch, answer):
    calls = []

    def fake(*args):
        calls.append(args)
        return answer
    monkeypatch.setattr(onednn, "_measure", fake)
    return calls


def test_mode_follows_the_setting_and_the_jaxlib(monkeypatch):
    try:
        for setting, want in (("0", "off"), ("1", "on" if OFFERED else "off")):
            monkeypatch.setenv("FLOWLITE_ONEDNN", setting)
            onednn.mode.cache_clear()
            assert onednn.mode() == want
        monkeypatch.delenv("FLOWLITE_ONEDNN")
        onednn.mode.cache_clear()
        serializes = OFFERED and version("jaxlib").startswith(onednn._SERIALIZES)
        assert onednn.mode() == ("auto" if serializes else "off")
    finally:
        onednn.mode.cache_clear()


@pytest.mark.parametrize("faster", [True, False])
def test_auto_takes_what_was_measured_faster(auto, monkeypatch, faster):
    calls = _measured(monkeypatch, faster)
    a, b = _rand(2, 256, 64, seed=1), _rand(2, 64, 128, seed=2)
    f = jax.jit(lambda a, b: onednn.bmm(a, b) if onednn.bmm(a, b) is not None
                else jnp.matmul(a, b))
    np.testing.assert_allclose(np.asarray(f(a, b)), a @ b, rtol=2e-5, atol=2e-5)
    assert ("__onednn$matmul" in f.lower(a, b).as_text()) == faster
    assert len(calls) == 1 and calls[0][:2] == ((2, 256, 64), (2, 64, 128))


def test_a_choice_is_timed_once_and_remembered_for_this_cpu(auto, monkeypatch):
    _measured(monkeypatch, True)
    real = onednn.cpu_fingerprint()
    args = ((512, 256), (256, 128), np.float32, False, True)
    assert onednn.choose(*args)
    stored = json.loads(auto.read_text())
    assert stored == {onednn.cpu_fingerprint(): {"float32:512x256@256x128T": True}}
    # a new process (fresh memory) reads it back and never times it again
    monkeypatch.setattr(onednn, "_choices", {})
    monkeypatch.setattr(onednn, "_table_state", {"loaded": False, "path": None})
    monkeypatch.setattr(onednn, "_measure", lambda *a: pytest.fail("timed again"))
    assert onednn.choose(*args)
    # another CPU (or core count, or jaxlib) times its own
    monkeypatch.setattr(onednn, "_choices", {})
    monkeypatch.setattr(onednn, "_table_state", {"loaded": False, "path": None})
    monkeypatch.setattr(onednn, "cpu_fingerprint", lambda: "another CPU")
    calls = _measured(monkeypatch, False)
    assert not onednn.choose(*args) and len(calls) == 1
    assert set(json.loads(auto.read_text())) == {"another CPU", real}


def test_small_matmuls_keep_xlas_dot_untimed(auto, monkeypatch):
    _measured(monkeypatch, True)
    assert not onednn.choose((16, 16), (16, 16), np.float32, False, False)
    assert not auto.exists()


def test_the_real_measurement_runs_and_answers(auto):
    got = onednn._measure((128, 128), (128, 128), np.dtype(np.float32), False, False)
    assert got in (True, False)


def test_bfloat16_and_2d_matmuls_equal_xlas_within_rounding(on):
    import ml_dtypes
    a = _rand(64, 48, seed=3).astype(ml_dtypes.bfloat16)
    b = _rand(48, 40, seed=4).astype(ml_dtypes.bfloat16)
    if not OFFERED:             # no custom call on this platform: the caller uses XLA's dot
        assert onednn.matmul(jnp.asarray(a), jnp.asarray(b)) is None
        return
    got = jax.jit(lambda a, b: onednn.matmul(a, b))(a, b)
    assert got.dtype == jnp.bfloat16
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=2e-2, atol=5e-2)
    x = _rand(2, 3, 32, 24, seed=5)
    w = _rand(16, 24, seed=6)
    got = jax.jit(lambda x, w: onednn.matmul(x, w, tw=True))(x, w)
    np.testing.assert_allclose(np.asarray(got), x @ w.T, rtol=2e-5, atol=2e-5)


def test_linear_trains_the_same_with_onednn_in_bfloat16_and_float32(on):
    import torch
    for dt, tdt, tol in ((fl.float32, torch.float32, 1e-4), (fl.bfloat16, torch.bfloat16, 3e-2)):
        x, w, b = _rand(4, 8, 16, seed=7), _rand(24, 16, seed=8), _rand(24, seed=9)
        lin = fl.nn.Linear(16, 24).to(dt)
        with fl.no_grad():
            lin.weight.copy_(fl.tensor(w).to(dt))
            lin.bias.copy_(fl.tensor(b).to(dt))
        tx = fl.tensor(x).to(dt).requires_grad_()
        lin(tx).float().square().sum().backward()
        assert ("__onednn$matmul" in fl.debug.executable_text(-1)) == OFFERED
        ref = torch.nn.Linear(16, 24).to(tdt)
        with torch.no_grad():
            ref.weight.copy_(torch.tensor(w))
            ref.bias.copy_(torch.tensor(b))
        rx = torch.tensor(x).to(tdt).requires_grad_()
        ref(rx).float().square().sum().backward()
        for got, want in ((tx.grad, rx.grad), (lin.weight.grad, ref.weight.grad)):
            g = np.asarray(got.float())
            np.testing.assert_allclose(g, want.float().numpy(), rtol=tol,
                                       atol=tol * np.abs(g).max())
