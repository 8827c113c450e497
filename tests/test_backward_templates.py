"""Backward templates: a repeated tape re-emits its recorded backward nodes, with results
bit-identical to running the VJP rules, and never reuses a template that doesn't fit."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
from flowlite.engine import backward_templates as bt
from flowlite import nn


def _templated():
    return fl.metrics.counters()["backward_templates"]


@pytest.fixture
def fresh_templates():
    bt._cache.clear()
    yield
    bt.enabled[0] = True
    bt._cache.clear()


def _step_grads(w, b, x, scale):
    for p in (w, b):
        p.grad = None
    h = (x @ w + b).relu()
    loss = (h * scale).logsumexp(dim=1).mean() + (w * w).sum() * 0.01
    loss.backward()
    return w.grad.numpy(), b.grad.numpy(), loss.item()


def test_template_grads_match_the_rules_and_jax_grad_while_a_python_scalar_changes(
        fresh_templates):
    jax.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(0)
        w0, b0 = rng.normal(size=(5, 4)), rng.normal(size=(4,))
        xs = [rng.normal(size=(3, 5)) for _ in range(6)]
        scales = [0.3, 1.7, -2.5, 4.0, 0.9, 3.3]   # a new Python float every step

        def ref(w, b, x, s):
            h = jnp.maximum(x @ w + b, 0)
            return jax.nn.logsumexp(h * s, axis=1).mean() + (w * w).sum() * 0.01

        w = fl.from_numpy(w0).requires_grad_(True)
        b = fl.from_numpy(b0).requires_grad_(True)
        before = _templated()
        for x, s in zip(xs, scales):
            gw, gb, _ = _step_grads(w, b, fl.from_numpy(x), s)
            rw, rb = jax.grad(ref, argnums=(0, 1))(w0, b0, x, s)
            np.testing.assert_allclose(gw, rw, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(gb, rb, rtol=1e-12, atol=1e-12)
        # recorded on steps 1 and 2, emitted from the template on steps 3..6
        assert _templated() - before == 4
    finally:
        jax.config.update("jax_enable_x64", False)


def _train(n_steps):
    fl.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    opt = fl.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(n_steps):
        x = fl.from_numpy(rng.normal(size=(8, 6)).astype(np.float32))
        y = fl.from_numpy(rng.integers(0, 3, size=(8,)).astype(np.int32))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


def test_training_with_templates_is_bit_identical_to_running_the_rules(fresh_templates):
    before = _templated()
    losses_t, params_t = _train(8)
    assert _templated() - before == 6
    bt.enabled[0] = False
    losses_r, params_r = _train(8)
    assert losses_t == losses_r
    for a, b in zip(params_t, params_r):
        np.testing.assert_array_equal(a, b)


def test_a_new_shape_records_a_new_template_instead_of_reusing_one(fresh_templates):
    w = fl.ones(4, 3, requires_grad=True)
    for rows in (2, 2, 2, 5, 5, 5, 2):
        w.grad = None
        x = fl.from_numpy(np.linspace(-1, 1, rows * 4, dtype=np.float32).reshape(rows, 4))
        (x @ w).tanh().sum().backward()
        expect = x.numpy().T @ (1 - np.tanh(x.numpy() @ np.ones((4, 3))) ** 2)
        np.testing.assert_allclose(w.grad.numpy(), expect, rtol=1e-5)
    assert len([t for t in bt._cache.values() if isinstance(t, bt._Template)]) == 2


def test_grad_accumulates_into_an_existing_grad_on_the_template_path(fresh_templates):
    w = fl.ones(3, requires_grad=True)
    fl.sync()       # (a pending leaf's tape has another key than the materialised one's)
    before = _templated()
    for k in range(1, 6):
        (w * w).sum().backward()     # no zero_grad: grads add up, 2*w per call
        np.testing.assert_allclose(w.grad.numpy(), np.full(3, 2.0 * k))
    assert _templated() - before >= 3     # recorded twice, then replayed


def test_backward_twice_still_raises_on_the_template_path(fresh_templates):
    w = fl.ones(3, requires_grad=True)
    for _ in range(3):
        w.grad = None
        (w.exp() * 2).sum().backward()
    loss = (w.exp() * 2).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_retain_grad_create_graph_and_grad_inputs_bypass_templates(fresh_templates):
    w = fl.tensor([0.5, -1.0, 2.0], requires_grad=True)
    for _ in range(4):
        w.grad = None
        h = w * 3
        h.retain_grad()
        (h * h).sum().backward()
        np.testing.assert_allclose(h.grad.numpy(), 2 * 3 * w.numpy())
    for _ in range(4):
        (g,) = fl.grad((w ** 3).sum(), [w], create_graph=True)
        (gg,) = fl.grad(g.sum(), [w])
        np.testing.assert_allclose(gg.numpy(), 6 * w.numpy(), rtol=1e-6)
    assert not any(isinstance(t, bt._Template) for t in bt._cache.values())


def test_a_rule_whose_nodes_change_between_recordings_is_never_templated(fresh_templates):
    # a (deliberately odd) VJP reading Python state the tape key can't see: the two
    # recordings differ, so every backward keeps running the rule and stays correct
    from flowlite.engine.ir import Prim
    from flowlite.frontend.tensor import apply
    factor = [0.0]
    odd = Prim("odd_double", lambda attrs, x: x * 2,
               lambda attrs, ins, out, g: (g * factor[0],))
    w = fl.ones(3, requires_grad=True)
    for f in (2.5, 3.5, 4.5, 5.5, 6.5):
        factor[0] = f
        w.grad = None
        y = apply(odd, (w,), (), (3,), w.dtype)
        y.sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), np.full(3, f))
    assert bt._UNSAFE in bt._cache.values()


def test_tied_weights_and_reused_activations_match_the_rules_bit_for_bit(fresh_templates):
    # a weight used twice (tied embedding / output layer) and an activation feeding two
    # branches: the template must wire every reuse exactly as the rules did
    def run():
        fl.manual_seed(3)
        emb = nn.Embedding(11, 8)
        norm = nn.LayerNorm(8)
        opt = fl.optim.AdamW(list(emb.parameters()) + list(norm.parameters()), lr=1e-2)
        rng = np.random.default_rng(5)
        out = []
        for _ in range(7):
            idx = fl.from_numpy(rng.integers(0, 11, size=(4, 5)).astype(np.int32))
            h = norm(emb(idx))
            branch = h.tanh() * h + h.sigmoid()          # h used three times
            logits = branch @ emb.weight.t()             # the tied weight, again
            opt.zero_grad()
            loss = nn.functional.cross_entropy(logits.reshape(-1, 11), idx.reshape(-1))
            loss.backward()
            opt.step()
            out.append((loss.item(), emb.weight.grad.numpy().copy()))
        return out

    before = _templated()
    templated = run()
    assert _templated() - before == 5          # steps 3..7 came from the template
    bt.enabled[0] = False
    ruled = run()
    for (la, ga), (lb, gb) in zip(templated, ruled):
        assert la == lb
        np.testing.assert_array_equal(ga, gb)


def test_conv_batchnorm_dropout_training_matches_the_rules_bit_for_bit(fresh_templates):
    def run():
        fl.manual_seed(1)
        model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Dropout(0.3), nn.Flatten(),
                              nn.Linear(4 * 3 * 3, 5))
        opt = fl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        rng = np.random.default_rng(2)
        out = []
        for _ in range(6):
            x = fl.from_numpy(rng.normal(size=(3, 2, 6, 6)).astype(np.float32))
            y = fl.from_numpy(rng.integers(0, 5, size=(3,)).astype(np.int32))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out, [t.numpy() for t in model.state_dict().values()]

    before = _templated()
    losses_t, state_t = run()
    assert _templated() - before == 4
    bt.enabled[0] = False
    losses_r, state_r = run()
    assert losses_t == losses_r
    for a, b in zip(state_t, state_r):
        np.testing.assert_array_equal(a, b)
