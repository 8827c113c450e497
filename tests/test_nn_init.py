"""nn.init and every layer's default initialisation: statistics against PyTorch's documented
distributions, drawn on the host (PyTorch's stream: tests/test_torch_streams.py compares the
numbers) and in a program (flowlite.random.device_draws: created lazily, materialised by ONE
sync)."""
from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

import flowlite as fl
import flowlite.nn as nn
from flowlite.nn import init
from _nn_helpers import executions

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")


def _phi(x):
    return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _cdf(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def check_uniform(a, lo, hi, what):
    a = np.asarray(a, np.float64).ravel()
    n = a.size
    assert a.min() >= lo and a.max() <= hi, f"{what}: values outside [{lo}, {hi}]"
    if n < 1000:
        return
    width = hi - lo
    assert a.min() < lo + 0.02 * width and a.max() > hi - 0.02 * width, \
        f"{what}: range [{a.min()}, {a.max()}] doesn't fill [{lo}, {hi}]"
    sd = width / math.sqrt(12)
    assert abs(a.mean() - (lo + hi) / 2) < 5 * sd / math.sqrt(n), f"{what}: mean {a.mean()}"
    assert abs(a.std() / sd - 1) < 0.05, f"{what}: std {a.std()} vs {sd}"


def check_normal(a, mean, std, what):
    a = np.asarray(a, np.float64).ravel()
    n = a.size
    assert abs(a.mean() - mean) < 5 * std / math.sqrt(n), f"{what}: mean {a.mean()} vs {mean}"
    assert abs(a.std() / std - 1) < 0.05, f"{what}: std {a.std()} vs {std}"
    # normal, not uniform: about 4.6% of the mass beyond 2 sigma
    tail = (np.abs(a - mean) > 2 * std).mean()
    assert 0.03 < tail < 0.065, f"{what}: tail mass {tail}"


@pytest.mark.parametrize("where", ["host", "program"])
def test_default_layer_initialisation(where):
    fl.manual_seed(0)
    e0 = executions()
    with fl.random.device_draws() if where == "program" else contextlib.nullcontext():
        lin = nn.Linear(256, 512)
        conv = nn.Conv2d(16, 64, 3)
        convt = nn.ConvTranspose2d(32, 16, 3)          # weight (32, 16, 3, 3): fan_in 16*9
        emb = nn.Embedding(1000, 64, padding_idx=3)
        bn, ln, gn, rms = nn.BatchNorm2d(8), nn.LayerNorm(8), nn.GroupNorm(2, 8), nn.RMSNorm(8)
        mha = nn.MultiheadAttention(64, 4)
        lin2 = nn.Linear(256, 512)
    assert executions() == e0                        # nothing runs yet
    if where == "program":
        assert lin.weight.is_pending                 # drawn lazily in the program
    else:
        assert not lin.weight.is_pending             # PyTorch's numbers, drawn on the host
    fl.sync()                                        # at most one program (the rest)
    assert executions() <= e0 + 1

    b = 1 / math.sqrt(256)
    check_uniform(lin.weight.numpy(), -b, b, "Linear.weight")
    check_uniform(lin.bias.numpy(), -b, b, "Linear.bias")
    b = 1 / math.sqrt(16 * 9)
    check_uniform(conv.weight.numpy(), -b, b, "Conv2d.weight")
    check_uniform(conv.bias.numpy(), -b, b, "Conv2d.bias")
    check_uniform(convt.weight.numpy(), -b, b, "ConvTranspose2d.weight")
    check_uniform(convt.bias.numpy(), -b, b, "ConvTranspose2d.bias")
    w = emb.weight.numpy()
    assert np.all(w[3] == 0)
    check_normal(np.delete(w, 3, 0), 0.0, 1.0, "Embedding.weight")
    for m in (bn, ln, gn):
        np.testing.assert_array_equal(m.weight.numpy(), np.ones(8))
        np.testing.assert_array_equal(m.bias.numpy(), np.zeros(8))
    np.testing.assert_array_equal(rms.weight.numpy(), np.ones(8))
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(8))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(8))
    assert bn.num_batches_tracked.item() == 0
    b = math.sqrt(6 / (64 + 192))                    # xavier_uniform on (3E, E)
    check_uniform(mha.in_proj_weight.numpy(), -b, b, "MHA.in_proj_weight")
    np.testing.assert_array_equal(mha.in_proj_bias.numpy(), np.zeros(192))
    np.testing.assert_array_equal(mha.out_proj.bias.numpy(), np.zeros(64))
    b = 1 / math.sqrt(64)
    check_uniform(mha.out_proj.weight.numpy(), -b, b, "MHA.out_proj.weight")
    assert not np.array_equal(lin.weight.numpy(), lin2.weight.numpy())


@pytest.mark.parametrize("where", ["host", "program"])
def test_init_functions(where):
    with fl.random.device_draws() if where == "program" else contextlib.nullcontext():
        _init_functions()


def _init_functions():
    fl.manual_seed(1)
    t = {k: fl.empty(200, 300) for k in ("u", "n", "c", "z", "o", "xu", "xn", "ku", "kn", "tn",
                                         "sp")}
    eye = fl.empty(3, 5)
    dirac = fl.empty(4, 2, 3, 3)
    tall, wide = fl.empty(300, 40), fl.empty(40, 8, 3, 3)
    out = init.uniform_(t["u"], -2.0, 3.0)
    assert out is t["u"]
    init.normal_(t["n"], 1.5, 0.5)
    init.constant_(t["c"], 0.25)
    init.zeros_(t["z"])
    init.ones_(t["o"])
    init.xavier_uniform_(t["xu"], gain=2.0)
    init.xavier_normal_(t["xn"])
    init.kaiming_uniform_(t["ku"], mode="fan_out", nonlinearity="relu")
    init.kaiming_normal_(t["kn"], a=0.1)
    init.trunc_normal_(t["tn"], mean=1.0, std=2.0, a=-1.0, b=2.0)
    init.sparse_(t["sp"], sparsity=0.3)
    init.eye_(eye)
    init.dirac_(dirac, groups=2)
    init.orthogonal_(tall)
    init.orthogonal_(wide, gain=3.0)
    fl.sync()

    check_uniform(t["u"].numpy(), -2.0, 3.0, "uniform_")
    check_normal(t["n"].numpy(), 1.5, 0.5, "normal_")
    assert np.all(t["c"].numpy() == 0.25) and np.all(t["z"].numpy() == 0)
    assert np.all(t["o"].numpy() == 1)
    fan_in, fan_out = 300, 200
    b = 2.0 * math.sqrt(6 / (fan_in + fan_out))
    check_uniform(t["xu"].numpy(), -b, b, "xavier_uniform_")
    check_normal(t["xn"].numpy(), 0, math.sqrt(2 / (fan_in + fan_out)), "xavier_normal_")
    b = math.sqrt(2) * math.sqrt(3 / fan_out)
    check_uniform(t["ku"].numpy(), -b, b, "kaiming_uniform_")
    check_normal(t["kn"].numpy(), 0, math.sqrt(2 / (1 + 0.01)) / math.sqrt(fan_in),
                 "kaiming_normal_")
    tn = t["tn"].numpy()
    al, be = (-1 - 1) / 2, (2 - 1) / 2
    z = _cdf(be) - _cdf(al)
    mean = 1 + 2 * (_phi(al) - _phi(be)) / z
    var = 4 * (1 + (al * _phi(al) - be * _phi(be)) / z - ((_phi(al) - _phi(be)) / z) ** 2)
    assert tn.min() >= -1 and tn.max() <= 2
    assert abs(tn.mean() - mean) < 0.01 and abs(tn.std() / math.sqrt(var) - 1) < 0.02
    sp = t["sp"].numpy()
    np.testing.assert_array_equal((sp == 0).sum(0), np.full(300, math.ceil(0.3 * 200)))
    assert abs(sp[sp != 0].std() - 0.01) < 0.001
    np.testing.assert_array_equal(eye.numpy(), np.eye(3, 5))
    d = dirac.numpy()
    assert d.sum() == 4 and d[0, 0, 1, 1] == d[1, 1, 1, 1] == d[2, 0, 1, 1] == d[3, 1, 1, 1] == 1
    q = tall.numpy().astype(np.float64)
    np.testing.assert_allclose(q.T @ q, np.eye(40), atol=2e-4)
    q = wide.numpy().reshape(40, -1).astype(np.float64)    # conv-shaped: rows (40, 72)
    np.testing.assert_allclose(q @ q.T, 9 * np.eye(40), atol=2e-3)
    # Haar-distributed: no preferred sign or direction
    assert abs(tall.numpy().mean()) < 0.01


def test_init_is_reproducible_per_seed_and_checks_arguments():
    fl.manual_seed(5)
    a = nn.Linear(4, 3)
    fl.manual_seed(5)
    b = nn.Linear(4, 3)
    fl.sync()
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    assert init.calculate_gain("relu") == math.sqrt(2)
    assert init.calculate_gain("tanh") == 5 / 3
    assert init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04)
    assert init.calculate_gain("conv2d") == init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(fl.empty(3))
    with pytest.raises(ValueError, match="fan_in, fan_out"):
        init.kaiming_uniform_(fl.empty(3, 3), mode="fan_avg")
    with pytest.raises(TypeError, match="floating-point"):
        init.normal_(fl.zeros(3, dtype=fl.int32))
    # initialising a parameter never records autograd history
    p = nn.Parameter(fl.empty(2, 2))
    init.normal_(p)
    assert p.is_leaf and p.grad_fn is None and p.requires_grad
