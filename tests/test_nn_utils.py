"""nn.utils: gradient clipping (the total norm stays a lazy in-graph value) and flat vectors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import flowlite as fl
import flowlite.nn as nn
from flowlite.nn import utils
from _nn_helpers import executions

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")


def _params_with_grads(grads):
    ps = []
    for g in grads:
        p = nn.Parameter(fl.from_numpy(np.zeros_like(g)))
        p.grad = fl.from_numpy(g)
        ps.append(p)
    return ps


def test_clip_grad_norm_in_graph():
    rng = np.random.default_rng(0)
    g = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(5).astype(np.float32)]
    total = math.sqrt(sum((x.astype(np.float64) ** 2).sum() for x in g))
    big = _params_with_grads(g)
    small = _params_with_grads(g)
    inf = _params_with_grads(g)
    one = _params_with_grads(g)
    e0 = executions()
    n_big = utils.clip_grad_norm_(big, max_norm=1.0)
    n_small = utils.clip_grad_norm_(small, max_norm=100.0)
    n_inf = utils.clip_grad_norm_(inf, max_norm=0.5, norm_type=math.inf)
    n_one = utils.clip_grad_norm_(one, max_norm=2.0, norm_type=1)
    assert executions() == e0 and n_big.is_pending       # nothing ran: no host sync
    assert tuple(n_big.shape) == ()
    fl.sync()
    assert executions() == e0 + 1
    np.testing.assert_allclose(n_big.item(), total, rtol=1e-5)
    np.testing.assert_allclose(n_small.item(), total, rtol=1e-5)
    coef = 1.0 / (total + 1e-6)
    for p, x in zip(big, g):
        np.testing.assert_allclose(p.grad.numpy(), x * coef, rtol=1e-5)
    for p, x in zip(small, g):
        np.testing.assert_allclose(p.grad.numpy(), x, rtol=1e-6)      # below max: untouched
    m = max(np.abs(x).max() for x in g)
    np.testing.assert_allclose(n_inf.item(), m, rtol=1e-6)
    for p, x in zip(inf, g):
        np.testing.assert_allclose(p.grad.numpy(), x * 0.5 / (m + 1e-6), rtol=1e-5)
    s1 = sum(np.abs(x).sum() for x in g)
    np.testing.assert_allclose(n_one.item(), s1, rtol=1e-5)
    for p, x in zip(one, g):
        np.testing.assert_allclose(p.grad.numpy(), x * 2.0 / (s1 + 1e-6), rtol=1e-5)


def test_clip_grad_norm_edge_cases():
    p = nn.Parameter(fl.zeros(2))
    assert utils.clip_grad_norm_([p], 1.0).item() == 0.0        # no grads: norm 0
    q = _params_with_grads([np.array([np.nan, 1.0], np.float32)])
    with pytest.raises(RuntimeError, match="non-finite"):
        utils.clip_grad_norm_(q, 1.0, error_if_nonfinite=True)
    r = _params_with_grads([np.array([3.0, -4.0], np.float32)])
    utils.clip_grad_value_(r, 3.5)
    np.testing.assert_array_equal(r[0].grad.numpy(), [3.0, -3.5])
    t = _params_with_grads([np.array([3.0, 4.0], np.float32)])[0]
    np.testing.assert_allclose(utils.clip_grad_norm_(t, 1.0).item(), 5.0)   # a single tensor


def test_parameters_vector_roundtrip_and_gradient():
    m = nn.Linear(3, 2)
    vec = np.arange(8, dtype=np.float32)
    utils.vector_to_parameters(fl.from_numpy(vec), m.parameters())
    np.testing.assert_array_equal(m.weight.numpy(), vec[:6].reshape(2, 3))
    np.testing.assert_array_equal(m.bias.numpy(), vec[6:])
    assert m.weight.is_leaf and m.weight.requires_grad
    v = utils.parameters_to_vector(m.parameters())
    np.testing.assert_array_equal(v.numpy(), vec)
    (v * fl.from_numpy(np.arange(8, dtype=np.float32))).sum().backward()
    np.testing.assert_array_equal(m.weight.grad.numpy(), vec[:6].reshape(2, 3))
    with pytest.raises(ValueError, match="8 elements"):
        utils.vector_to_parameters(fl.zeros(5), m.parameters())


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.3, 1e6])
def test_clip_grad_norm_is_one_node_equal_to_torch_in_float64(x64, norm_type, max_norm):
    # the fused clip (one recorded node for every gradient and the norm) against
    # torch.nn.utils.clip_grad_norm_ in float64, gradients and norm
    import torch
    from flowlite.engine import metrics
    rng = np.random.default_rng(3)
    gs = [rng.standard_normal(s) for s in ((3, 4), (5,), (2, 2, 2))]
    ps = _params_with_grads(gs)
    before = [p.grad for p in ps]
    ops0 = metrics.counters()["ops"]
    total = utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
    assert metrics.counters()["ops"] - ops0 == 1 + len(ps) + 1   # the node, its outputs
    assert all(p.grad is b for p, b in zip(ps, before))           # clipped in place
    tps = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.float64)) for g in gs]
    for tp, g in zip(tps, gs):
        tp.grad = torch.from_numpy(g.copy())
    want = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type=norm_type)
    np.testing.assert_allclose(total.item(), want.item(), rtol=1e-12)
    for p, tp in zip(ps, tps):
        assert p.grad.dtype == fl.float64
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_clip_grad_norm_fused_equals_the_per_tensor_path_inside_a_step():
    # a model's step with clipping: the same losses and weights as clipping recorded op by op
    from flowlite.nn import utils as U

    def run(fused):
        fl.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        opt = fl.optim.SGD(model.parameters(), lr=0.5)
        x = fl.from_numpy(np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32))
        losses, norms = [], []
        for _ in range(3):
            loss = (model(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            if fused:
                n = U.clip_grad_norm_(model.parameters(), 0.05)
            else:
                grads = [p.grad for p in model.parameters()]
                n = U.get_total_norm(grads)
                U.clip_grads_with_norm_(list(model.parameters()), 0.05, n)
            opt.step()
            losses.append(loss.item())
            norms.append(n.item())
        return losses, norms, [p.detach().numpy() for p in model.parameters()]

    a, b = run(True), run(False)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
    for x, y in zip(a[2], b[2]):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_of_mixed_dtypes_falls_back_and_still_clips():
    g32 = np.ones((2, 2), np.float32)
    g16 = np.ones(3, np.float32)
    ps = _params_with_grads([g32, g16])
    ps[1].grad = ps[1].grad.to(fl.bfloat16)
    total = utils.clip_grad_norm_(ps, 1.0)
    np.testing.assert_allclose(float(total), math.sqrt(7), rtol=1e-2)
    np.testing.assert_allclose(ps[0].grad.numpy(), g32 / math.sqrt(7), rtol=1e-2)
