"""Long elementwise chains (an RNN state unrolled in Python) are cut for XLA's fusion: the
values stay exact, the cut survives XLA's optimizations, short chains are never cut."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import torch

import flowlite as fl
from flowlite.engine import cache, executor, lowering, reroll


def _chain(x, a, b, steps):
    # one multiply-add per step: the shape of an LSTM cell state (c = f * c + i * g)
    for _ in range(steps):
        x = x * a + b
    return x


@pytest.fixture(autouse=True)
def _unrolled():
    # these tests check the cuts of an unrolled chain; re-rolling would make the chain a
    # loop (tests/test_reroll.py checks that form)
    was = reroll.reroll_enabled()
    reroll.set_reroll(False)
    yield
    reroll.set_reroll(was)


def _last_program_text():
    texts = [e.compiled.as_text() for st in cache._cache.values()
             for e in st.exes.values()]
    return texts[-1]


def _chain_and_grads(x0, a0, b0, steps):
    fl.clear_cache()
    x, a, b = (fl.from_numpy(v).requires_grad_() for v in (x0, a0, b0))
    y = _chain(x, a, b, steps)
    (y * y).sum().backward()
    return [t.numpy() for t in (y, x.grad, a.grad, b.grad)]


def test_long_chain_is_exact_forward_and_backward(x64, monkeypatch):
    rng = np.random.default_rng(0)
    x0, a0, b0 = (rng.normal(size=(5, 7)) * s for s in (1.0, 0.3, 1.0))
    got = _chain_and_grads(x0, a0, b0, 60)
    assert "conditional(" in _last_program_text()
    ref = jax.value_and_grad(lambda *v: jnp.sum(_chain(*v, 60) ** 2), argnums=(0, 1, 2))
    want = [np.asarray(_chain(x0, a0, b0, 60))] + [np.asarray(g) for g in ref(x0, a0, b0)[1]]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13)
    # bit for bit what the uncut program computes
    monkeypatch.setattr(lowering, "_BREAK_DEPTH", 10 ** 9)
    uncut = _chain_and_grads(x0, a0, b0, 60)
    assert "conditional(" not in _last_program_text()
    for g, u in zip(got, uncut):
        np.testing.assert_array_equal(g, u)


def test_chain_cut_survives_xla_optimizations():
    fl.clear_cache()
    x = fl.ones(8, 16) * 0.5
    y = _chain(x, fl.full((8, 16), 0.9), fl.full((8, 16), 0.1), 4 * lowering._BREAK_DEPTH)
    np.testing.assert_allclose(y.numpy(), np.asarray(_chain(jnp.full((8, 16), 0.5),
                                                            0.9, 0.1,
                                                            4 * lowering._BREAK_DEPTH)),
                               rtol=1e-5)
    # the cuts are conditionals XLA can neither fold (the predicate is data) nor fuse through
    assert _last_program_text().count("conditional(") >= 4


def test_short_chain_is_not_cut():
    fl.clear_cache()
    y = _chain(fl.ones(8, 16), 0.9, 0.1, lowering._BREAK_DEPTH // 2 - 1)
    y.numpy()
    assert "conditional(" not in _last_program_text()


def test_unrolled_lstm_cell_matches_torch(x64):
    # pytorch/examples' time_sequence_prediction pattern: LSTMCell stepped in a Python loop
    steps, batch, hidden = 24, 3, 5
    ref = torch.nn.LSTMCell(1, hidden).double()
    cell = fl.nn.LSTMCell(1, hidden).double()
    cell.load_state_dict({k: fl.from_numpy(v.detach().numpy())
                          for k, v in ref.state_dict().items()})
    seq = np.random.default_rng(1).normal(size=(batch, steps))

    def run(lib, m, inp):
        h = c = lib.zeros(batch, hidden, dtype=lib.float64)
        outs = []
        for x_t in inp.split(1, dim=1):
            h, c = m(x_t, (h, c))
            outs.append(h)
        loss = (lib.stack(outs) ** 2).mean()
        loss.backward()
        return loss

    want = run(torch, ref, torch.from_numpy(seq))
    got = run(fl, cell, fl.from_numpy(seq))
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    for (name, p), q in zip(cell.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, err_msg=name)
