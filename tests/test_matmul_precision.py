"""float32 matmul precision (flowlite.matmul_precision): PyTorch's full float32 by default on
accelerators, its setters, and compiled programs dropped when it changes."""
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
from flowlite.engine import cache, executor, lowering, matmul_precision
from flowlite.frontend import primitives


@pytest.fixture(autouse=True)
def _restore_precision():
    yield
    fl.set_float32_matmul_precision("highest")


def _fake_device(platform):
    return SimpleNamespace(jax_device=SimpleNamespace(platform=platform))


def _dot_text(device, dtype=jnp.float32):
    # flowlite's own matmul primitive, lowered as a program for `device` is
    x = jnp.ones((4, 4), dtype)
    return lowering.lower_for(jax.jit(lambda a, b: primitives.matmul.lower((), a, b)), device,
                              (x, x)).as_text()


def test_default_is_pytorch_highest_and_allow_tf32_false():
    assert fl.get_float32_matmul_precision() == "highest"
    assert fl.backends.cuda.matmul.allow_tf32 is False


@pytest.mark.parametrize("setting, hlo", [("highest", "HIGHEST"), ("high", "HIGH"),
                                          ("medium", "DEFAULT")])
def test_gpu_programs_are_lowered_under_the_setting(setting, hlo):
    fl.set_float32_matmul_precision(setting)
    text = _dot_text(_fake_device("gpu"))
    assert f"precision = [{hlo}, {hlo}]" in text


def test_bfloat16_dots_keep_jax_default_on_gpu():
    # a precision attribute on bf16 operands could only slow them down
    assert "precision = [DEFAULT, DEFAULT]" in _dot_text(_fake_device("gpu"), jnp.bfloat16) \
        or "precision" not in _dot_text(_fake_device("gpu"), jnp.bfloat16)


def test_cpu_programs_are_lowered_as_jax_makes_them():
    # XLA:CPU computes float32 dots in float32 whatever the attribute: its programs stay as
    # they were (no precision attribute added)
    fl.set_float32_matmul_precision("highest")
    plain = jax.jit(lambda a, b: jnp.matmul(a, b)).lower(jnp.ones((4, 4)),
                                                          jnp.ones((4, 4))).as_text()
    assert _dot_text(_fake_device("cpu")) == plain


def test_allow_tf32_is_the_same_setting():
    fl.backends.cuda.matmul.allow_tf32 = True
    assert fl.get_float32_matmul_precision() == "high"
    fl.backends.cuda.matmul.allow_tf32 = False
    assert fl.get_float32_matmul_precision() == "highest"


def test_bad_precision_is_a_runtime_error_naming_the_choices():
    with pytest.raises(RuntimeError, match="'highest', 'high' or 'medium'"):
        fl.set_float32_matmul_precision("fast")
    assert fl.get_float32_matmul_precision() == "highest"


def test_a_change_drops_compiled_programs_and_results_stay_right():
    a = fl.from_numpy(np.arange(9, dtype=np.float32).reshape(3, 3))
    want = np.arange(9, dtype=np.float32).reshape(3, 3) @ np.arange(9).reshape(3, 3)
    np.testing.assert_allclose((a @ a).numpy(), want)
    assert cache.cache_size() >= 1
    gen = matmul_precision.generation()
    fl.set_float32_matmul_precision("high")
    assert cache.cache_size() == 0 and matmul_precision.generation() == gen + 1
    np.testing.assert_allclose((a @ a).numpy(), want)
    fl.set_float32_matmul_precision("high")           # unchanged: nothing dropped
    assert cache.cache_size() >= 1


def test_compiled_function_retraces_after_a_change():
    w = fl.ones(3, 3)

    @fl.compile
    def step(x):
        w.copy_(w @ x)
        fl.sync()

    x = fl.eye(3)
    for _ in range(3):
        step(x)
    traces = step.traces
    fl.set_float32_matmul_precision("medium")
    step(x)
    assert step.traces == traces + 1
    np.testing.assert_allclose(w.numpy(), np.ones((3, 3)))
