"""nn.Transformer, TransformerDecoder(Layer), TransformerEncoder and the RNN cells against
PyTorch itself: a torch module's state_dict loads unchanged into the flowlite module (same
keys, same layouts), then outputs, input gradients and parameter gradients agree in float64.
All flowlite cases of a test share one sync."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flowlite as fl
import flowlite.nn as nn
import flowlite.nn.functional as F
from flowlite import metrics

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True",
                                        "ignore:flowlite.*recompiled",
                                        "ignore:Support for mismatched key_padding_mask",
                                        "ignore:TransformerDecoderLayer. a copy")
R = np.random.default_rng(5)
E, H, FF = 8, 2, 16


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _fl(a, grad=True):
    if a is None or isinstance(a, bool):
        return a
    t = fl.from_numpy(np.array(a))
    return t.requires_grad_(True) if grad and t.dtype.is_floating_point else t


def _torch(a, grad=True):
    if a is None or isinstance(a, bool):
        return a
    t = torch.tensor(np.array(a))
    return t.requires_grad_(True) if grad and t.is_floating_point() else t


def _run_cases(cases, train=False):
    """cases: (name, flowlite module, torch module, positional inputs, keyword inputs (masks,
    never differentiated), hx builder or None).  Compares outputs and all gradients."""
    pending = []
    for name, fm, tm, inputs, kw in cases:
        tm.double()
        fm.double()
        fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        assert list(fm.state_dict()) == list(tm.state_dict()), name
        fm.train(train)
        tm.train(train)
        fin = [tuple(_fl(b) for b in a) if isinstance(a, tuple) else _fl(a) for a in inputs]
        tin = [tuple(_torch(b) for b in a) if isinstance(a, tuple) else _torch(a)
               for a in inputs]
        fo = _tuple(fm(*fin, **{k: _fl(v, False) for k, v in kw.items()}))
        to = _tuple(tm(*tin, **{k: _torch(v, False) for k, v in kw.items()}))
        assert len(fo) == len(to), name
        cts = [R.standard_normal(tuple(t.shape)) for t in to]
        sum((f * fl.from_numpy(c)).sum() for f, c in zip(fo, cts)).backward()
        sum((t * torch.tensor(c)).sum() for t, c in zip(to, cts)).backward()
        flat_f = [x for a in fin for x in _tuple(a) if x is not None]
        flat_t = [x for a in tin for x in _tuple(a) if x is not None]
        pending.append((name, fm, tm, fo, to, flat_f, flat_t))
    fl.sync()
    for name, fm, tm, fo, to, fin, tin in pending:
        for a, b in zip(fo, to):
            assert tuple(a.shape) == tuple(b.shape), name
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-8, atol=1e-10,
                                       err_msg=name)
        for i, (a, b) in enumerate(zip(fin, tin)):
            if b.grad is not None:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8,
                                           atol=1e-10, err_msg=f"{name} input {i} grad")
        tp = dict(tm.named_parameters())
        for k, p in fm.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), tp[k].grad.numpy(), rtol=1e-8,
                                       atol=1e-10, err_msg=f"{name} grad {k}")


# ---- RNN cells -------------------------------------------------------------------------------
def test_rnn_cells_match_pytorch(x64):
    torch.manual_seed(0)
    x, xu = R.standard_normal((3, 5)), R.standard_normal(5)
    h, hu = R.standard_normal((3, 4)), R.standard_normal(4)
    c = R.standard_normal((3, 4))
    cases = [
        ("rnn tanh", nn.RNNCell(5, 4), torch.nn.RNNCell(5, 4), (x, h), {}),
        ("rnn relu unbatched no bias no hx", nn.RNNCell(5, 4, bias=False, nonlinearity="relu"),
         torch.nn.RNNCell(5, 4, bias=False, nonlinearity="relu"), (xu,), {}),
        ("lstm", nn.LSTMCell(5, 4), torch.nn.LSTMCell(5, 4), (x, (h, c)), {}),
        ("lstm unbatched no bias", nn.LSTMCell(5, 4, bias=False),
         torch.nn.LSTMCell(5, 4, bias=False), (xu, (hu, c[0])), {}),
        ("lstm no hx", nn.LSTMCell(5, 4), torch.nn.LSTMCell(5, 4), (x,), {}),
        ("gru", nn.GRUCell(5, 4), torch.nn.GRUCell(5, 4), (x, h), {}),
        ("gru unbatched no hx", nn.GRUCell(5, 4), torch.nn.GRUCell(5, 4), (xu,), {}),
    ]
    _run_cases(cases)


def test_cell_unrolled_equals_the_full_layer():
    # same weights, same gate order: an LSTMCell unrolled over time is nn.LSTM
    cell, lstm = nn.LSTMCell(3, 4), nn.LSTM(3, 4)
    lstm.load_state_dict({k + "_l0": v for k, v in cell.state_dict().items()})
    x = fl.randn(6, 2, 3)
    h = c = fl.zeros(2, 4)
    outs = []
    for t in range(6):
        h, c = cell(x[t], (h, c))
        outs.append(h)
    y, (hn, cn) = lstm(x)
    np.testing.assert_allclose(fl.stack(outs).numpy(), y.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), cn[0].numpy(), rtol=1e-5, atol=1e-6)


def test_cell_defaults_and_errors():
    cell = nn.GRUCell(3, 4)
    assert [tuple(p.shape) for p in cell.parameters()] == [(12, 3), (12, 4), (12,), (12,)]
    bound = 1 / 2.0
    assert all(float(abs(p).max()) <= bound for p in cell.parameters())
    assert repr(nn.RNNCell(2, 3, bias=False, nonlinearity="relu")) == \
        "RNNCell(2, 3, bias=False, nonlinearity=relu)"
    with pytest.raises(ValueError, match="GRUCell: Expected input to be 1D or 2D, got 3D"):
        cell(fl.zeros(1, 2, 3))
    with pytest.raises(RuntimeError, match="inconsistent input_size: got 5 expected 3"):
        cell(fl.zeros(2, 5))
    with pytest.raises(RuntimeError, match=r"hidden of shape \(3, 4\) does not match"):
        cell(fl.zeros(2, 3), fl.zeros(3, 4))
    with pytest.raises(RuntimeError, match="hidden should also be 1-D"):
        cell(fl.zeros(3), fl.zeros(1, 4))
    with pytest.raises(TypeError, match="tuple"):
        nn.LSTMCell(3, 4)(fl.zeros(2, 3), fl.zeros(2, 4))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNNCell(3, 4, nonlinearity="sigmoid")


# ---- transformer -----------------------------------------------------------------------------
def _masks(S, T, N):
    causal = np.triu(np.full((T, T), -np.inf), 1)
    mem = R.uniform(size=(T, S)) > 0.7
    mem[:, 0] = False
    tkpm = np.zeros((N, T), bool)
    tkpm[1, T - 1:] = True
    skpm = np.zeros((N, S), bool)
    skpm[0, S - 2:] = True
    return causal, mem, tkpm, skpm


def test_transformer_layers_match_pytorch(x64):
    torch.manual_seed(0)
    S, T, N = 6, 5, 3
    src, tgt = R.standard_normal((S, N, E)), R.standard_normal((T, N, E))
    src_b, tgt_b = src.transpose(1, 0, 2).copy(), tgt.transpose(1, 0, 2).copy()
    causal, mem, tkpm, skpm = _masks(S, T, N)
    dec_kw = dict(tgt_mask=causal, memory_mask=mem, tgt_key_padding_mask=tkpm,
                  memory_key_padding_mask=skpm)
    # two cases cover every option (compile time, not the checks, is what costs here)
    cases = [
        ("transformer, every mask, causal hints", nn.Transformer(E, H, 1, 1, FF),
         torch.nn.Transformer(E, H, 1, 1, FF), (src, tgt),
         dict(dec_kw, src_key_padding_mask=skpm, src_mask=np.triu(np.full((S, S), -np.inf), 1),
              src_is_causal=True)),
        ("decoder layer unbatched batch_first norm_first, callable activation, no bias",
         nn.TransformerDecoderLayer(E, H, FF, activation=F.silu, batch_first=True,
                                    norm_first=True, bias=False),
         torch.nn.TransformerDecoderLayer(E, H, FF, activation=torch.nn.functional.silu,
                                          batch_first=True, norm_first=True, bias=False),
         (tgt_b[0], src_b[0]), dict(tgt_mask=causal, tgt_is_causal=True,
                                    memory_key_padding_mask=skpm[0])),
    ]
    c0 = metrics.counters()["syncs"]
    _run_cases(cases)
    assert metrics.counters()["syncs"] == c0 + 1     # recording the layers made no host read


def test_encoder_eval_nested_path_zeroes_padding_like_pytorch(x64):
    # PyTorch's encoder, in eval mode without autograd, runs a nested-tensor path for a
    # left-aligned src_key_padding_mask: the padded positions come out as zeros (then the
    # final norm).  flowlite reproduces it inside the graph; other masks run densely.
    torch.manual_seed(0)
    N, S = 3, 6
    src = R.standard_normal((N, S, E))
    left = np.zeros((N, S), bool)
    left[0, 4:] = True
    left[2, 1:] = True
    ragged = left.copy()
    ragged[1, 2] = True                         # not left-aligned: PyTorch runs densely
    tm = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(E, H, FF, batch_first=True), 1, torch.nn.LayerNorm(E))
    fm = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, FF, batch_first=True), 1,
                               nn.LayerNorm(E))
    tm.double().eval()
    fm.double().eval()
    fm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    got, want = [], []
    for kpm in (left, ragged, left.astype(np.float64) * -1e9):
        with torch.no_grad():
            want.append(tm(torch.tensor(src), src_key_padding_mask=torch.tensor(kpm)).numpy())
        with fl.no_grad():
            got.append(fm(fl.from_numpy(src), src_key_padding_mask=fl.from_numpy(kpm)))
    c0 = metrics.counters()["syncs"]
    fl.sync()
    assert metrics.counters()["syncs"] == c0 + 1          # the path decision made no sync
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-7, atol=1e-9)
    ln_bias = tm.norm.bias.detach().numpy()
    np.testing.assert_allclose(want[0][0, 4], ln_bias, atol=1e-12)    # zeros, then the norm
    assert not np.allclose(want[1][1, 2], ln_bias)


def test_generate_square_subsequent_mask():
    for sz in (1, 4):
        m = nn.Transformer.generate_square_subsequent_mask(sz)
        assert m.dtype is fl.float32
        np.testing.assert_array_equal(
            m.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(sz).numpy())


def test_transformer_errors():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerDecoderLayer(E, H, FF, activation="tanh")
    dec = nn.TransformerDecoderLayer(E, H, FF)
    x = fl.zeros(5, 2, E)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        dec(x, x, tgt_is_causal=True)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        nn.TransformerEncoderLayer(E, H, FF)(x, is_causal=True)
    t = nn.Transformer(E, H, 1, 1, FF)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        t(fl.zeros(5, 2, E), fl.zeros(5, 3, E))
    with pytest.raises(RuntimeError, match="feature number of src and tgt must be equal"):
        t(fl.zeros(5, 2, E), fl.zeros(5, 2, E + 2))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, FF), 1)
    assert any("batch_first was not True" in str(x.message) for x in w)
    # PyTorch's clones of a decoder layer with a Module activation compute relu (its
    # __setstate__); flowlite reproduces it, and says so
    with pytest.warns(UserWarning, match="computes F.relu instead"):
        dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF, activation=nn.GELU()), 1)
    assert dec.layers[0].activation is F.relu
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, FF, activation=nn.GELU()), 1)
    assert isinstance(enc.layers[0].activation, nn.GELU)
