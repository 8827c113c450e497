"""Idioms of pytorch/examples' word_language_model (an nn.Transformer subclass whose decoder
is replaced by a Linear, a sinusoidal PositionalEncoding buffer, a log(tril(ones)) mask) and
time_sequence_prediction (two stacked LSTMCells unrolled over time, trained by LBFGS with a
closure), written here from scratch and run in flowlite and PyTorch from the same weights:
the losses agree."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import flowlite as fl

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True",
                                        "ignore:.*has recompiled")


def _lm_classes(lib):
    nn, F = lib.nn, lib.nn.functional

    class PosEnc(nn.Module):
        def __init__(self, d, max_len=64):
            super().__init__()
            pe = lib.zeros(max_len, d)
            pos = lib.arange(0, max_len, dtype=lib.float).unsqueeze(1)
            div = lib.exp(lib.arange(0, d, 2).float() * (-math.log(10000.0) / d))
            pe[:, 0::2] = lib.sin(pos * div)
            pe[:, 1::2] = lib.cos(pos * div)
            self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

        def forward(self, x):
            return x + self.pe[:x.size(0), :]

    class LM(nn.Transformer):
        def __init__(self, ntoken, d, nhead, nhid, nlayers):
            super().__init__(d_model=d, nhead=nhead, dim_feedforward=nhid,
                             num_encoder_layers=nlayers, num_decoder_layers=1, dropout=0.0)
            self.pos = PosEnc(d)
            self.emb = nn.Embedding(ntoken, d)
            self.d = d
            self.decoder = nn.Linear(d, ntoken)        # replaces the decoder stack

        def forward(self, src):
            n = len(src)
            mask = lib.log(lib.tril(lib.ones(n, n)))
            x = self.pos(self.emb(src) * math.sqrt(self.d))
            return F.log_softmax(self.decoder(self.encoder(x, mask=mask)), dim=-1)
    return LM


def test_transformer_language_model_idiom_matches_torch(x64):
    R = np.random.default_rng(0)
    ntok, S, B = 20, 6, 2
    data, target = R.integers(0, ntok, (S, B)), R.integers(0, ntok, (S * B,))
    torch.manual_seed(0)
    tm = _lm_classes(torch)(ntok, 8, 2, 16, 1).double()
    fm = _lm_classes(fl)(ntok, 8, 2, 16, 1).double()
    assert list(fm.state_dict()) == list(tm.state_dict())
    fm.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    losses = {}
    for lib, m in (("torch", tm), ("fl", fm)):
        T = torch if lib == "torch" else fl
        opt = T.optim.SGD(m.parameters(), lr=0.5)
        out = []
        for _ in range(2):
            opt.zero_grad()
            loss = T.nn.functional.nll_loss(m(T.tensor(data)).view(-1, ntok), T.tensor(target))
            loss.backward()
            T.nn.utils.clip_grad_norm_(m.parameters(), 0.25)
            opt.step()
            out.append(loss.item())
        losses[lib] = out
    np.testing.assert_allclose(losses["fl"], losses["torch"], rtol=1e-10)


def _sequence_class(lib):
    nn = lib.nn

    class Sequence(nn.Module):
        def __init__(self, hidden=6):
            super().__init__()
            self.hidden = hidden
            self.cell1 = nn.LSTMCell(1, hidden)
            self.cell2 = nn.LSTMCell(hidden, hidden)
            self.out = nn.Linear(hidden, 1)

        def forward(self, x, future=0):
            n = x.size(0)
            h1, c1, h2, c2 = (lib.zeros(n, self.hidden, dtype=lib.double) for _ in range(4))
            outs = []
            for xt in x.split(1, dim=1):
                h1, c1 = self.cell1(xt, (h1, c1))
                h2, c2 = self.cell2(h1, (h2, c2))
                y = self.out(h2)
                outs.append(y)
            for _ in range(future):
                h1, c1 = self.cell1(y, (h1, c1))
                h2, c2 = self.cell2(h1, (h2, c2))
                y = self.out(h2)
                outs.append(y)
            return lib.cat(outs, dim=1)
    return Sequence


def test_lstm_cell_sequence_with_lbfgs_matches_torch(x64):
    t = np.arange(6) + np.array([[0], [5], [11]])
    wave = np.sin(t / 3.0)
    torch.manual_seed(0)
    tm = _sequence_class(torch)().double()
    fm = _sequence_class(fl)().double()
    fm.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    res = {}
    for lib, m in (("torch", tm), ("fl", fm)):
        T = torch if lib == "torch" else fl
        x, y = T.from_numpy(wave[:, :-1]), T.from_numpy(wave[:, 1:])
        crit = T.nn.MSELoss()
        opt = T.optim.LBFGS(m.parameters(), lr=0.8, max_iter=3)
        losses = []
        for _ in range(1):     # one step: every program compiles once per test, keep it short
            def closure():
                opt.zero_grad()
                loss = crit(m(x), y)
                loss.backward()
                return loss
            losses.append(opt.step(closure).item())
        with T.no_grad():
            pred = m(x[:1], future=3)
        res[lib] = (losses, pred.detach().numpy() if lib == "torch" else pred.numpy())
    np.testing.assert_allclose(res["fl"][0], res["torch"][0], rtol=1e-7)
    np.testing.assert_allclose(res["fl"][1], res["torch"][1], rtol=1e-6, atol=1e-9)
