"""RNN/LSTM/GRU against jax.numpy references of PyTorch's documented equations, PyTorch
state_dict names/layouts, and compile time independent of sequence length."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
from flowlite.nn.rnn import GRU, LSTM, RNN


def _params(m):
    return {k: jnp.asarray(v.numpy()) for k, v in m.state_dict().items()}


def _cell(mode, p, sfx, x, h, c):
    wi, wh = p[f"weight_ih{sfx}"], p[f"weight_hh{sfx}"]
    bi, bh = p[f"bias_ih{sfx}"], p[f"bias_hh{sfx}"]
    gi = x @ wi.T + bi
    gh = h @ wh.T + bh
    if mode == "lstm":
        i, f, g, o = jnp.split(gi + gh, 4, -1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c
    if mode == "gru":
        ir, iz, in_ = jnp.split(gi, 3, -1)
        hr, hz, hn = jnp.split(gh, 3, -1)
        r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
        n = jnp.tanh(in_ + r * hn)
        return (1 - z) * n + z * h, c
    return jnp.tanh(gi + gh), c


def _reference(mode, p, x, layers, bidir, H):
    """Plain Python loop over time (T, B, I) -> output, h_n, c_n."""
    T, B, _ = x.shape
    dirs = 2 if bidir else 1
    hs, cs = [], []
    inp = x
    for layer in range(layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            h = jnp.zeros((B, H))
            c = jnp.zeros((B, H))
            ys = [None] * T
            for t in (range(T - 1, -1, -1) if d else range(T)):
                h, c = _cell(mode, p, sfx, inp[t], h, c)
                ys[t] = h
            outs.append(jnp.stack(ys))
            hs.append(h)
            cs.append(c)
        inp = jnp.concatenate(outs, -1)
    return inp, jnp.stack(hs), jnp.stack(cs)


@pytest.mark.parametrize("mode,cls", [("lstm", LSTM), ("gru", GRU), ("rnn", RNN)])
def test_recurrent_layers_match_reference_forward_and_backward(x64, mode, cls):
    fl.manual_seed(0)
    m = cls(3, 4, num_layers=2, bidirectional=True).to(fl.float64)
    x = np.random.default_rng(1).normal(size=(5, 2, 3))
    xt = fl.tensor(x, requires_grad=True)
    out = m(xt)
    y, hn = out[0], (out[1][0] if mode == "lstm" else out[1])
    loss = (y ** 2).sum() + (hn ** 3).sum()
    loss.backward()
    p = _params(m)

    def ref_loss(p, x):
        o, h, c = _reference(mode, p, x, 2, True, 4)
        return (o ** 2).sum() + (h ** 3).sum()

    np.testing.assert_allclose(loss.item(), float(ref_loss(p, jnp.asarray(x))), rtol=1e-10)
    gp, gx = jax.grad(ref_loss, argnums=(0, 1))(p, jnp.asarray(x))
    np.testing.assert_allclose(xt.grad.numpy(), np.asarray(gx), rtol=1e-8, atol=1e-10)
    for name, t in m.named_parameters():
        np.testing.assert_allclose(t.grad.numpy(), np.asarray(gp[name]), rtol=1e-8, atol=1e-10,
                                   err_msg=name)


def test_lstm_batch_first_initial_state_and_unbatched():
    fl.manual_seed(0)
    m = LSTM(3, 4, batch_first=True)
    x = fl.randn(2, 6, 3)
    h0, c0 = fl.randn(1, 2, 4), fl.randn(1, 2, 4)
    y, (h, c) = m(x, (h0, c0))
    assert tuple(y.shape) == (2, 6, 4) and tuple(h.shape) == (1, 2, 4)
    np.testing.assert_allclose(y[:, -1].numpy(), h[0].numpy(), rtol=1e-6)
    y1, (h1, _) = m(x[0])                       # unbatched (T, I) with batch_first
    assert tuple(y1.shape) == (6, 4) and tuple(h1.shape) == (1, 4)
    with pytest.raises(ValueError, match="input_size"):
        m(fl.randn(2, 6, 5))
    with pytest.raises(ValueError, match="h_0"):
        m(x, (fl.randn(2, 2, 4), c0))


def test_state_dict_names_and_init_range():
    m = LSTM(10, 20, num_layers=2, bidirectional=True)
    sd = m.state_dict()
    assert tuple(sd["weight_ih_l0"].shape) == (80, 10)
    assert tuple(sd["weight_hh_l1_reverse"].shape) == (80, 20)
    assert tuple(sd["weight_ih_l1"].shape) == (80, 40)
    assert tuple(sd["bias_hh_l0"].shape) == (80,)
    w = sd["weight_ih_l0"].numpy()
    bound = 1 / np.sqrt(20)
    assert w.min() >= -bound and w.max() <= bound and w.std() > bound / 2


def _compile_seconds(T):
    fl.manual_seed(0)
    m = LSTM(8, 16)
    x = fl.randn(T, 4, 8)
    fl.sync()
    fl.metrics.reset()
    y, _ = m(x)
    y.sum().backward()
    fl.sync()
    c = fl.metrics.counters()
    return c["compile_s"], c["graph_nodes"]


def test_lstm_compile_time_does_not_grow_with_sequence_length():
    import jax
    fl.set_buckets(False)            # exact programs at each length (no padded bucket)
    # both compiled here: a program loaded from the persistent cache (an earlier run, or
    # another test of this one) takes a fraction of a compile
    cached = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        _compile_seconds(3)              # warm jax's own caches
        (t16, n16), (t256, n256) = _compile_seconds(16), _compile_seconds(256)
    finally:
        fl.set_buckets(True)
        jax.config.update("jax_enable_compilation_cache", cached)
    assert n256 == n16               # one scan, whatever the length: the same program size
    # (an unrolled 256-step LSTM compiles for seconds; the margin absorbs a busy machine)
    assert t256 <= 3 * t16 + 0.25, (t16, t256)


def test_reading_an_lstm_output_before_backward_then_syncing_again():
    # the scan node saved for backward becomes an input of the next executable
    m = LSTM(4, 8)
    out, _ = m(fl.randn(5, 2, 4))
    assert np.isfinite(out.sum().item())
    out.sum().backward()
    fl.sync()
    assert tuple(m.weight_ih_l0.grad.shape) == (32, 4)
    assert np.isfinite(m.weight_ih_l0.grad.numpy()).all()
