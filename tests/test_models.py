"""The tutorial models (models/): architecture against the JAX reference, forward/backward on
small shapes, and GPT/LSTM generation (determinism, fast paths == token-by-token, no
recompiles per token, KV cache == full forward)."""
from __future__ import annotations

import os
import sys
import warnings

import jax
import numpy as np
import pytest

import flowlite as fl
from flowlite import nn, optim
from flowlite.nn import functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import models  # noqa: E402
from models.gpt import GPT, GPTConfig, generation_schedule  # noqa: E402


def _load_numpy(model, params):
    model.load_state_dict({k: fl.from_numpy(v) for k, v in params.items()})


def _numpy_init(model, seed=0):
    """Replace a model's (still pending) random initialisation with NumPy values.

    Compiling a model's initialisation program costs seconds on XLA:CPU (every random draw is
    an unrolled threefry); loading NumPy arrays skips that program entirely, keeping these
    tests fast. flowlite's own initialisers are exercised by train.py's end-to-end tests."""
    rng = np.random.default_rng(seed)
    state = {}
    for k, t in model.state_dict().items():
        shape = tuple(t.shape)
        if not t.dtype.is_floating_point:
            v = np.zeros(shape, t.dtype.np)
        elif k.endswith("running_var") or (len(shape) == 1 and k.endswith("weight")):
            v = np.ones(shape, np.float32)           # norm scales, running variances
        elif len(shape) == 1:
            v = np.zeros(shape, np.float32)          # biases, running means
        else:
            fan_in = int(np.prod(shape[1:]))
            v = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        state[k] = v
    _load_numpy(model, state)
    return model


def _train_steps(model, x, y, n=1, lr=1e-2):
    """n training steps (one executable each, the same one): returns the losses; checks that
    every parameter got a finite gradient and moved."""
    opt = optim.Adam(model.parameters(), lr=lr)
    before = {k: v.numpy().copy() for k, v in model.named_parameters()}
    losses = []
    with warnings.catch_warnings():
        # this one helper trains every model at the same source line: recompiles expected
        warnings.filterwarnings("ignore", message="flowlite.*recompiled")
        for _ in range(n):
            out = model(x)
            if isinstance(out, tuple):
                out = out[0]
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    for k, p in model.named_parameters():
        assert p.grad is not None, f"{k}: no gradient"
        assert np.isfinite(p.grad.numpy()).all(), f"{k}: non-finite gradient"
        assert not np.array_equal(before[k], p.numpy()), f"{k} did not change"
    assert np.isfinite(losses).all()
    return out, losses


# ---------------------------------------------------------------- classifiers


def test_mlp_matches_benchmark_layout_and_reference():
    import jax_reference as R
    import specs

    m = models.MLP()
    params = specs.init_mlp(seed=1)
    assert list(m.state_dict()) == list(params)
    _load_numpy(m, params)
    x = np.random.default_rng(0).random((5, 64), dtype=np.float32)
    got = m(fl.from_numpy(x)).numpy()
    want = np.asarray(jax.jit(R.mlp_forward)(params, x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # images are flattened
    assert tuple(m(fl.from_numpy(x.reshape(5, 1, 8, 8))).shape) == (5, 10)


def test_lenet_matches_benchmark_layout_and_reference():
    import jax_reference as R
    import specs

    m = models.LeNet()
    params = specs.init_cnn(seed=2)
    assert list(m.state_dict()) == list(params)
    assert tuple(m.fc1.weight.shape) == (128, 800)
    _load_numpy(m, params)
    x = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
    want = np.asarray(jax.jit(R.cnn_forward)(params, x))
    np.testing.assert_allclose(m(fl.from_numpy(x)).numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["mlp", "lenet"])
def test_classifier_forward_backward_on_digit_shapes(name):
    make = {"mlp": lambda: models.MLP(), "lenet": lambda: models.LeNet(image_size=8)}[name]
    model = _numpy_init(make())
    x = fl.from_numpy(np.random.default_rng(1).random((6, 1, 8, 8), dtype=np.float32))
    y = fl.from_numpy(np.arange(6, dtype=np.int32) % 10)
    out, losses = _train_steps(model, x, y, n=3)
    assert tuple(out.shape) == (6, 10)
    assert losses[-1] < losses[0], losses


def test_resnet_loss_falls_on_cifar_shapes_and_runs_on_digits():
    model = _numpy_init(models.ResNet(in_channels=3, num_classes=10, blocks=(1, 1),
                                      widths=(4, 8)))
    keys = list(model.state_dict())
    assert "stages.1.0.shortcut.0.weight" in keys          # 1x1 projection where shape changes
    assert "stages.1.0.shortcut.1.running_var" in keys     # ... with its BatchNorm
    assert "stages.0.0.bn1.running_mean" in keys           # BatchNorm buffers
    assert not any(k.startswith("stages.0.0.shortcut") for k in keys)   # identity otherwise
    x = fl.from_numpy(np.random.default_rng(1).random((8, 3, 32, 32), dtype=np.float32))
    y = fl.from_numpy(np.arange(8, dtype=np.int32))
    rm = model.stages[0][0].bn1.running_mean.numpy().copy()
    out, losses = _train_steps(model, x, y, n=4)
    assert tuple(out.shape) == (8, 10)
    assert losses[-1] < losses[0], losses
    assert not np.array_equal(rm, model.stages[0][0].bn1.running_mean.numpy())   # train mode

    digits = _numpy_init(models.ResNet(in_channels=1, num_classes=10, blocks=(1, 1),
                                       widths=(4, 8))).eval()
    x = np.random.default_rng(2).random((4, 1, 8, 8), dtype=np.float32)
    with fl.no_grad():
        a = digits(fl.from_numpy(x))
        b = digits(fl.from_numpy(x[::-1].copy()))
        fl.sync()
    assert tuple(a.shape) == (4, 10)
    # eval mode uses the running statistics: a row's output does not depend on its batch
    np.testing.assert_allclose(a.numpy()[::-1], b.numpy(), rtol=1e-4, atol=1e-5)


def test_lenet_sizes():
    assert tuple(models.LeNet(image_size=8).fc1.weight.shape) == (128, 32 * 2 * 2)
    assert tuple(models.LeNet(in_channels=3, image_size=32).fc1.weight.shape) == (128, 32 * 6 * 6)
    with pytest.raises(ValueError, match="too small"):
        models.LeNet(image_size=4, padding=0)


# ---------------------------------------------------------------- GPT

TINY = GPTConfig(vocab_size=11, context=12, n_layer=2, n_head=2, d_model=16)


@pytest.fixture(scope="module")
def tiny_gpt():
    m = _numpy_init(GPT(TINY), seed=1)
    fl.sync()
    return m


def _forward(m, idx):
    """Logits of a (2, 12) batch: every forward check below uses this one shape (one compile)."""
    assert idx.shape == (2, TINY.context)
    with fl.no_grad():
        return m(fl.from_numpy(idx.astype(np.int32))).numpy()


def test_gpt_matches_benchmark_layout_and_reference():
    import jax_reference as R
    import specs

    params = specs.init_gpt(seed=3)              # the benchmark configuration: names, shapes
    sd = GPT().state_dict()
    assert list(sd) == list(params)
    assert all(tuple(sd[k].shape) == v.shape for k, v in params.items())

    cfg = specs.GPTConfig(vocab_size=11, context=12, n_layer=2, n_head=2, d_model=16)
    params = specs.init_gpt(seed=3, cfg=cfg)     # the same numbers in both frameworks
    m = GPT(TINY)
    _load_numpy(m, params)
    idx = np.random.default_rng(0).integers(0, TINY.vocab_size, (2, TINY.context))
    forward = jax.jit(R.gpt_forward, static_argnums=2)
    want = np.asarray(forward(params, idx.astype(np.int32), cfg))
    np.testing.assert_allclose(_forward(m, idx), want, rtol=1e-4, atol=2e-4)


def test_gpt_forward_backward_small():
    m = _numpy_init(GPT(TINY, n_layer=1))
    ids = np.random.default_rng(0).integers(0, TINY.vocab_size, (3, 9)).astype(np.int32)
    x, y = fl.from_numpy(ids[:, :-1].copy()), fl.from_numpy(ids[:, 1:].copy())
    out, losses = _train_steps(m, x, y, n=3)
    assert tuple(out.shape) == (3, 8, TINY.vocab_size)
    assert losses[-1] < losses[0], losses
    with pytest.raises(ValueError, match="context"):
        m(fl.from_numpy(np.zeros((1, TINY.context + 1), np.int32)))


def test_gpt_forward_is_causal(tiny_gpt):
    m = tiny_gpt
    a = np.random.default_rng(0).integers(0, TINY.vocab_size, (1, TINY.context))
    b = a.copy()
    b[0, 6:] = (b[0, 6:] + 1) % TINY.vocab_size
    la, lb = _forward(m, np.concatenate([a, b]))
    np.testing.assert_allclose(la[:6], lb[:6], rtol=1e-5, atol=1e-6)
    assert not np.allclose(la[6:], lb[6:])


def test_generation_schedule_matches_benchmark():
    import specs

    for p, n, ctx, keep in [(8, 256, 64, None), (1, 5, 4, None), (3, 40, 12, 5), (12, 3, 12, 2)]:
        ours = generation_schedule(p, n, ctx, keep)
        ref = specs.generation_schedule(p, n, ctx, keep)
        want = np.stack([ref["src"], ref["pos"], ref["dst"], ref["sample"]], axis=1)
        np.testing.assert_array_equal(ours, want)


# One model, prompt shape and length for every generation test below, so that they share
# compiled programs (each distinct configuration compiles its set-up, its decode step and,
# for mode="scan", the fused loop — once).
N_NEW = 14          # prompt 3 + 14 new tokens > context 12: crosses a cache refill


def _generate(m, seed, mode, n=N_NEW, **kw):
    fl.manual_seed(seed)
    prompt = fl.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3) % 7)
    return m.generate(prompt, n, mode=mode, **kw).numpy()


def test_gpt_kv_cache_decoding_equals_full_forward(tiny_gpt):
    m = tiny_gpt
    out = _generate(m, 0, "lazy", temperature=0.0)
    assert out.shape == (2, 3 + N_NEW)
    np.testing.assert_array_equal(out[:, :3], np.arange(6).reshape(2, 3) % 7)
    # Each sampled token must be the argmax of a full forward over the tokens the schedule fed
    # since the last cache refill. Causal attention: padding the window to the context length
    # changes nothing before it, and keeps one shape (one compile) for every window.
    sched = generation_schedule(3, N_NEW, TINY.context)
    window, checked = [], 0
    for src, pos, dst, flag in sched:
        window = window[:pos] + [src]
        if flag:
            padded = out[:, window + [0] * (TINY.context - len(window))]
            logits = _forward(m, padded)[:, len(window) - 1]
            np.testing.assert_array_equal(logits.argmax(-1), out[:, dst])
            checked += 1
    assert checked == N_NEW
    # top_k=1 samples the argmax whatever the noise
    np.testing.assert_array_equal(_generate(m, 9, "lazy", temperature=1.0, top_k=1), out)


def test_gpt_generate_same_tokens_in_every_mode_and_per_seed(tiny_gpt):
    m = tiny_gpt
    kw = {"temperature": 0.8, "top_k": 4}
    lazy = _generate(m, 5, "lazy", **kw)
    assert lazy.min() >= 0 and lazy.max() < TINY.vocab_size
    np.testing.assert_array_equal(_generate(m, 5, "compile", **kw), lazy)
    np.testing.assert_array_equal(_generate(m, 5, "scan", **kw), lazy)
    np.testing.assert_array_equal(_generate(m, 5, "scan", **kw), lazy)     # deterministic
    assert not np.array_equal(_generate(m, 6, "scan", **kw), lazy)        # the seed matters


def test_gpt_generate_does_not_recompile_per_token(tiny_gpt):
    m = tiny_gpt
    kw = {"temperature": 0.8, "top_k": 4}
    steps = len(generation_schedule(3, N_NEW, TINY.context))
    for mode in ("lazy", "compile", "scan"):
        _generate(m, 0, mode, **kw)                  # warm (cached if an earlier test ran)
        c0 = fl.metrics.counters()
        _generate(m, 1, mode, **kw)
        c1 = fl.metrics.counters()
        assert c1["compiles"] == c0["compiles"], mode
        execs = c1["executions"] - c0["executions"]
        if mode == "scan":                           # set-up + the whole generation
            assert execs == 2, execs
        else:                                        # set-up + one execution per decode step
            assert execs == steps + 1, (mode, execs, steps)
        if mode == "compile":                        # replayed without re-running Python
            assert c1["replays"] - c0["replays"] >= steps - 2


def test_gpt_generate_argument_errors():
    m = GPT(TINY)
    p = fl.from_numpy(np.zeros((1, 2), np.int32))
    with pytest.raises(ValueError, match="mode"):
        m.generate(p, 3, mode="fast")
    with pytest.raises(ValueError, match="temperature"):
        m.generate(p, 3, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        m.generate(p, 3, top_k=0)


# ---------------------------------------------------------------- LSTM


def test_lstm_forward_backward_and_state():
    m = _numpy_init(models.CharLSTM(vocab_size=9, embed_dim=5, hidden_size=6, num_layers=2))
    ids = np.random.default_rng(0).integers(0, 9, (2, 7)).astype(np.int32)
    x, y = fl.from_numpy(ids[:, :-1].copy()), fl.from_numpy(ids[:, 1:].copy())
    out, losses = _train_steps(m, x, y, n=3)
    assert tuple(out.shape) == (2, 6, 9)
    assert losses[-1] < losses[0], losses
    with fl.no_grad():   # feeding a sequence in two pieces with the state == in one go
        full, _ = m(x)
        a, state = m(x[:, :4])
        b, _ = m(x[:, 4:], state)
        np.testing.assert_allclose(np.concatenate([a.numpy(), b.numpy()], 1), full.numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_lstm_generate_deterministic_and_no_recompiles():
    m = _numpy_init(models.CharLSTM(vocab_size=9, embed_dim=5, hidden_size=6, num_layers=1))
    prompt = fl.from_numpy(np.array([[1, 2, 3]], np.int32))

    def gen(seed, n, **kw):
        fl.manual_seed(seed)
        return m.generate(prompt, n, **kw).numpy()

    a = gen(3, 12, top_k=4)
    assert a.shape == (1, 15) and (a[:, :3] == [1, 2, 3]).all() and a.max() < 9
    np.testing.assert_array_equal(gen(3, 12, top_k=4), a)
    c0 = fl.metrics.counters()
    b = gen(4, 12, top_k=4)                 # another seed: new tokens, no new program
    c1 = fl.metrics.counters()
    assert not np.array_equal(a, b)
    assert c1["compiles"] == c0["compiles"]
    assert c1["executions"] - c0["executions"] == 12 + 1   # the prompt, then one per token
