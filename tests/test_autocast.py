"""torch.autocast on CPU against PyTorch 2.13's own CPU autocast.

Each op runs under `autocast("cpu", dtype)` in flowlite and in PyTorch on the same data: the
output dtype must be PyTorch's (lower-precision list -> bfloat16/float16; fp32 list ->
float32; everything else -> ordinary promotion) and the values agree within the low precision's
tolerance.  A small MLP and CNN train under autocast with float32 parameters: loss dtype,
gradient dtypes (float32) and values follow PyTorch's, and the step compiles once.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flowlite as fl
from flowlite import metrics
from flowlite.nn import functional as F

_R = np.random.default_rng(38)


def _a(*shape):
    return _R.standard_normal(shape).astype(np.float32)


X, W, B = _a(4, 8), _a(5, 8), _a(5)
A3, B3 = _a(2, 3, 4), _a(2, 4, 5)
S1, K1 = _a(1, 2, 8), _a(3, 2, 3)
IMG, K2 = _a(1, 2, 8, 8), _a(3, 2, 3, 3)
V3, K3 = _a(1, 2, 4, 4, 4), _a(3, 2, 2, 2, 2)
Q = _a(1, 2, 4, 8)
V = _a(8)


def _cases(m, Fn):
    """name -> (fn(lib tensors...), arrays) with m the library, Fn its functional."""
    return {
        "linear": (lambda x, w, b: Fn.linear(x, w, b), (X, W, B)),
        "matmul": (lambda x, w: m.matmul(x, w.t()), (X, W)),
        "@": (lambda x, w: x @ w.t(), (X, W)),
        "mm": (lambda x, w: m.mm(x, w.t()), (X, W)),
        "bmm": (lambda a, b: m.bmm(a, b), (A3, B3)),
        "matmul_1d": (lambda v: m.matmul(v, v), (V,)),
        "einsum_contract": (lambda x, w: m.einsum("ij,kj->ik", x, w), (X, W)),
        "einsum_dot": (lambda v: m.einsum("i,i->", v, v), (V,)),
        "einsum_outer": (lambda v: m.einsum("i,j->ij", v, v), (V,)),
        "einsum_elementwise": (lambda x: m.einsum("ij,ij->ij", x, x), (X,)),
        "conv1d": (lambda x, k: Fn.conv1d(x, k), (S1, K1)),
        "conv2d": (lambda x, k: Fn.conv2d(x, k, padding=1), (IMG, K2)),
        "conv3d": (lambda x, k: Fn.conv3d(x, k), (V3, K3)),
        "conv_transpose1d": (lambda x, k: Fn.conv_transpose1d(x, k.transpose(0, 1)), (S1, K1)),
        "conv_transpose2d": (lambda x, k: Fn.conv_transpose2d(x, k.transpose(0, 1), stride=2),
                             (IMG, K2)),
        "conv_transpose3d": (lambda x, k: Fn.conv_transpose3d(x, k.transpose(0, 1)), (V3, K3)),
        "prelu": (lambda x, w: Fn.prelu(x, w), (X, np.array([0.25], np.float32))),
        "sdpa": (lambda q: Fn.scaled_dot_product_attention(q, q * 0.5, q, is_causal=True), (Q,)),
        # not autocast by PyTorch on CPU: their inputs' dtype
        "dot": (lambda v: m.dot(v, v), (V,)),
        "mv": (lambda w, x: m.mv(w, x[0]), (W, X)),
        "outer": (lambda v: m.outer(v, v), (V,)),
        "bilinear": (lambda x: Fn.bilinear(x, x, m.ones(3, 8, 8) * 0.1), (X,)),
        "softmax": (lambda x: m.softmax(x, -1), (X,)),
        "relu_add": (lambda x: m.relu(x) + x, (X,)),
        # a lower-precision result flowing on: bf16 softmax/layer_norm/sum, promotion with f32
        "linear_then": (lambda x, w: (lambda y: (m.softmax(y, -1), Fn.layer_norm(y, (5,)),
                                                 y.sum(), y + m.ones(4, 5)))(x @ w.t()),
                        (X, W)),
        # the fp32 list
        "mse_loss": (lambda x, w: Fn.mse_loss(x @ w.t(), m.zeros(4, 5)), (X, W)),
        "cross_entropy": (lambda x, w: Fn.cross_entropy(x @ w.t(), m.tensor([0, 1, 2, 3])),
                          (X, W)),
        "l1_smooth_huber": (lambda x, w: (lambda y: (Fn.l1_loss(y, y * 0), Fn.smooth_l1_loss(
            y, y * 0), Fn.huber_loss(y, y * 0)))(x @ w.t()), (X, W)),
        "bce_logits_kl": (lambda x, w: (lambda y: (Fn.binary_cross_entropy_with_logits(
            y, m.sigmoid(y)), Fn.kl_div(m.log_softmax(y, -1), m.softmax(y, -1),
                                         reduction="batchmean")))(x @ w.t()), (X, W)),
        "prod": (lambda x, w: (x @ w.t()).prod(-1), (X * 0.5, W * 0.5)),
        "pad_reflect2d": (lambda x, k: Fn.pad(Fn.conv2d(x, k), (1, 1, 1, 1), mode="reflect"),
                          (IMG, K2)),
        "pad_reflect3d": (lambda x, k: Fn.pad(Fn.conv3d(x, k), (1,) * 6, mode="reflect"),
                          (V3, K3)),
        "pad_replicate1d": (lambda x, k: Fn.pad(Fn.conv1d(x, k), (1, 2), mode="replicate"),
                            (S1, K1)),
        "pool3d": (lambda x, k: (Fn.avg_pool3d(Fn.conv3d(x, k, padding=1), 2),
                                 Fn.max_pool3d(Fn.conv3d(x, k, padding=1), 2)), (V3, K3)),
        "avg_pool2d": (lambda x, k: Fn.avg_pool2d(Fn.conv2d(x, k), 2), (IMG, K2)),
        "interpolate": (lambda x: Fn.interpolate(x, scale_factor=2, mode="bilinear"), (IMG,)),
        # float64 is never cast
        "linear_f64": (lambda x, w: Fn.linear(x.double(), w.double()), (X, W)),
    }


def _flat(x):
    return [y for v in x for y in _flat(v)] if isinstance(x, (tuple, list)) else [x]


def _np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().float().numpy() if t.dtype != torch.float64 else t.detach().numpy()
    return t.float().numpy() if t.dtype is not fl.float64 else t.numpy()


NAMES = list(_cases(torch, TF))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", NAMES)
def test_op_under_cpu_autocast_matches_torch(name, dtype, x64):
    fn_t, arrays = _cases(torch, TF)[name]
    fn_f, _ = _cases(fl, F)[name]
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        want = _flat(fn_t(*[torch.from_numpy(a) for a in arrays]))
    with fl.autocast("cpu", dtype=getattr(fl, dtype)):
        got = _flat(fn_f(*[fl.tensor(a) for a in arrays]))
    assert [str(g.dtype).split(".")[-1] for g in got] == \
        [str(w.dtype).split(".")[-1] for w in want], name
    tol = 4e-2 if dtype == "bfloat16" else 4e-3
    for g, w in zip(got, want):
        w = _np(w)
        np.testing.assert_allclose(_np(g), w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()),
                                   err_msg=name)


def test_enabled_false_nesting_decorator_and_state_queries():
    x, w = fl.tensor(X), fl.tensor(W)
    assert not fl.is_autocast_enabled("cpu")
    assert fl.get_autocast_dtype("cpu") is fl.bfloat16        # PyTorch's CPU default
    assert fl.get_autocast_dtype("cpu") is fl.bfloat16
    with fl.autocast("cpu"):
        assert fl.is_autocast_enabled("cpu") and (x @ w.T).dtype is fl.bfloat16
        with fl.autocast("cpu", enabled=False):
            assert not fl.is_autocast_enabled("cpu") and (x @ w.T).dtype is fl.float32
        with fl.amp.autocast("cpu", dtype=fl.float16):
            assert (x @ w.T).dtype is fl.float16
            assert fl.get_autocast_dtype("cpu") is fl.float16
        assert (x @ w.T).dtype is fl.bfloat16
    assert not fl.is_autocast_enabled("cpu") and (x @ w.T).dtype is fl.float32

    @fl.autocast("cpu", dtype=fl.bfloat16)
    def f(a, b):
        return a @ b.T

    assert f(x, w).dtype is fl.bfloat16 and f(x, w).dtype is fl.bfloat16
    assert (x @ w.T).dtype is fl.float32
    try:                        # an exception inside the region restores the state too
        with fl.autocast("cpu"):
            raise KeyError
    except KeyError:
        pass
    assert not fl.is_autocast_enabled("cpu")
    with pytest.warns(FutureWarning, match="torch.amp.autocast"):
        ctx = fl.cpu.amp.autocast(dtype=fl.bfloat16)
    with ctx:
        assert (x @ w.T).dtype is fl.bfloat16
    # PyTorch: an unsupported CPU dtype warns and disables autocast
    with pytest.warns(UserWarning, match="CPU Autocast only supports"):
        with fl.autocast("cpu", dtype=fl.float32):
            assert not fl.is_autocast_enabled("cpu")
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        fl.autocast("cpux")


def _mlp_cnn(lib, x, y, img):
    """A small MLP and a small CNN: (loss, parameters)."""
    g = np.random.default_rng(5)
    ps = [lib.tensor(g.standard_normal(s).astype(np.float32) * 0.3, requires_grad=True)
          for s in [(16, 8), (16,), (3, 16), (3,), (4, 2, 3, 3), (4,), (3, 4 * 3 * 3)]]
    Fn = TF if lib is torch else F
    h = lib.tanh(Fn.linear(x, ps[0], ps[1]))
    out = Fn.linear(h, ps[2], ps[3])
    c = Fn.max_pool2d(lib.relu(Fn.conv2d(img, ps[4], ps[5])), 2)
    c = Fn.linear(c.flatten(1), ps[6])
    loss = Fn.cross_entropy(out, y) + Fn.mse_loss(c, lib.zeros(1, 3)) + (out.float() ** 2).mean()
    return loss, ps


def test_mlp_and_cnn_forward_backward_under_autocast_follow_torch():
    x = _a(6, 8)
    img = _a(1, 2, 8, 8)
    y = np.array([0, 1, 2, 0, 1, 2])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tl, tps = _mlp_cnn(torch, torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(img))
    tl.backward()
    with fl.autocast("cpu", dtype=fl.bfloat16):
        fl_loss, fps = _mlp_cnn(fl, fl.tensor(x), fl.tensor(y), fl.tensor(img))
    fl_loss.backward()
    assert fl_loss.dtype is fl.float32 and tl.dtype == torch.float32
    np.testing.assert_allclose(fl_loss.item(), tl.item(), rtol=2e-2)
    for i, (a, b) in enumerate(zip(fps, tps)):
        assert a.grad.dtype is fl.float32 and b.grad.dtype == torch.float32
        w = b.grad.numpy()
        np.testing.assert_allclose(a.grad.numpy(), w, rtol=5e-2,
                                   atol=5e-2 * np.abs(w).max(), err_msg=f"grad {i}")


def test_training_step_under_autocast_compiles_once():
    model = fl.nn.Sequential(fl.nn.Linear(8, 16), fl.nn.ReLU(), fl.nn.Linear(16, 3))
    opt = fl.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = fl.tensor(_a(6, 8)), fl.tensor(np.array([0, 1, 2, 0, 1, 2]))

    def step():
        opt.zero_grad()
        with fl.autocast("cpu", dtype=fl.bfloat16):
            out = model(x)
            loss = F.cross_entropy(out, y)
        assert out.dtype is fl.bfloat16 and loss.dtype is fl.float32
        loss.backward()
        opt.step()
        return loss.item()

    losses = [step()]
    c0 = metrics.counters()
    losses += [step() for _ in range(4)]
    c1 = metrics.counters()
    assert c1["compiles"] == c0["compiles"]
    assert c1["executions"] - c0["executions"] == 4
    assert all(p.dtype is fl.float32 and p.grad.dtype is fl.float32 for p in model.parameters())
    assert losses[-1] < losses[0]


def test_compiled_step_follows_the_autocast_state_of_each_call():
    x, w = fl.tensor(X), fl.tensor(W, requires_grad=True)

    @fl.compile
    def f(x):
        return (x @ w.T) * 1

    dts = []
    for on in (False, True, True, False, True):
        with fl.autocast("cpu", enabled=on):
            dts.append(f(x).dtype)
    assert dts == [fl.float32, fl.bfloat16, fl.bfloat16, fl.float32, fl.bfloat16]


def test_cuda_autocast_changes_nothing_and_says_so():
    from flowlite.compat import amp
    amp._said["autocast"] = False
    with pytest.warns(UserWarning, match="has no effect"):
        ctx = fl.autocast("cuda", dtype=fl.bfloat16)
    with ctx:
        assert (fl.tensor(X) @ fl.tensor(W).T).dtype is fl.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fl.autocast("cuda")            # once only


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"])
def test_recurrent_layers_under_autocast_follow_torch(name):
    # PyTorch 2.13 CPU: LSTM (mkldnn_rnn_layer), RNN and RNNCell return bfloat16; GRU,
    # LSTMCell and GRUCell compute their gates in bfloat16 and keep the float32 state
    seq = _a(5, 2, 8)
    mods = []
    for lib in (torch, fl):
        cls = getattr(lib.nn, name)
        mods.append(cls(8, 4, num_layers=2, bidirectional=True) if name == "LSTM" else
                    cls(8, 4))
    mods[1].load_state_dict({k: fl.tensor(v.detach().numpy())
                             for k, v in mods[0].state_dict().items()})
    outs = []
    for lib, mod in ((torch, mods[0]), (fl, mods[1])):
        x = lib.tensor(seq if "Cell" not in name else seq[0])
        try:
            with lib.autocast("cpu", dtype=lib.bfloat16):
                outs.append(_flat(mod(x)))
        except RuntimeError as e:
            # oneDNN has no bfloat16 LSTM primitive on CPUs without AVX512-BF16 (an AMD EPYC
            # here): the oracle is PyTorch's float32 LSTM, and the dtypes are those PyTorch
            # returns where it has one (mkldnn_rnn_layer: bfloat16 everywhere)
            if lib is not torch or name != "LSTM" or "primitive descriptor" not in str(e):
                raise
            outs.append([o.to(torch.bfloat16) for o in _flat(mod(x))])
    want, got = outs
    assert [str(g.dtype).split(".")[-1] for g in got] == \
        [str(w.dtype).split(".")[-1] for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(_np(g), _np(w), rtol=0, atol=2e-2)
