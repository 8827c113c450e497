"""Packed sequences (flowlite.nn.utils.rnn: PackedSequence, pack_padded_sequence,
pad_packed_sequence, pack_sequence, unpack_sequence, unpad_sequence) into and out of nn.LSTM,
nn.GRU and nn.RNN, against PyTorch 2.13 in float64: packed data, padded outputs, final states
and the gradients of inputs, initial states and parameters; the errors' classes; one program
for every set of lengths of one padded shape, and length buckets equal to exact programs."""
import numpy as np
import pytest
import torch
from torch.nn.utils import rnn as trnn

import flowlite as fl
import flowlite.engine.metrics as M
from flowlite.nn.utils import rnn as frnn

MODES = ["LSTM", "GRU", "RNN"]


def close(a, b, atol=1e-11):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else a.numpy()
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b.numpy()
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=atol)


def pair(mode, *args, **kw):
    """The same layer in PyTorch and flowlite (float64, PyTorch's weights)."""
    tm = getattr(torch.nn, mode)(*args, **kw).double()
    fm = getattr(fl.nn, mode)(*args, **kw).double()
    with fl.no_grad():
        for n, p in tm.named_parameters():
            getattr(fm, n).copy_(fl.tensor(p.detach().numpy()))
    return tm, fm


def state_sum(h):
    return h[0] + 2 * h[1] if isinstance(h, tuple) else h


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_first", [False, True], ids=["time_major", "batch_first"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
def test_rnn_on_packed_sequences_matches_pytorch(x64, mode, batch_first, bidirectional,
                                                 enforce_sorted):
    rng = np.random.default_rng(1)
    T, B, I, H = 6, 5, 3, 4
    lengths = [6, 4, 4, 2, 1] if enforce_sorted else [4, 6, 1, 4, 2]   # ties included
    x = rng.standard_normal((B, T, I) if batch_first else (T, B, I))
    x[(slice(None), slice(5, None)) if batch_first else slice(5, None)] = 1e3  # garbage
    tm, fm = pair(mode, I, H, num_layers=2, bidirectional=bidirectional,
                  batch_first=batch_first)
    tx, fx = torch.tensor(x, requires_grad=True), fl.tensor(x, requires_grad=True)
    tp = trnn.pack_padded_sequence(tx, lengths, batch_first, enforce_sorted)
    fp = frnn.pack_padded_sequence(fx, lengths, batch_first, enforce_sorted)
    close(tp.data, fp.data)
    assert fp.batch_sizes.tolist() == tp.batch_sizes.tolist()
    for a, b in ((tp.sorted_indices, fp.sorted_indices),
                 (tp.unsorted_indices, fp.unsorted_indices)):
        assert (a is None) == (b is None) and (a is None or a.tolist() == b.tolist())
    to, th = tm(tp)
    fo, fh = fm(fp)
    assert isinstance(fo, frnn.PackedSequence)
    close(to.data, fo.data)
    tpad, tlen = trnn.pad_packed_sequence(to, batch_first, padding_value=-2.0)
    fpad, flen = frnn.pad_packed_sequence(fo, batch_first, padding_value=-2.0)
    close(tpad, fpad)
    assert flen.tolist() == tlen.tolist()
    if mode == "LSTM":
        close(th[1], fh[1])
    close(state_sum(th), state_sum(fh))
    w = rng.standard_normal(tuple(tpad.shape))
    ((tpad * torch.tensor(w)).sum() + (state_sum(th) ** 2).sum()
     + (to.data ** 3).sum()).backward()
    ((fpad * fl.tensor(w)).sum() + (state_sum(fh) ** 2).sum()
     + (fo.data ** 3).sum()).backward()
    close(tx.grad, fx.grad)
    for n, p in tm.named_parameters():
        close(p.grad, getattr(fm, n).grad)


@pytest.mark.parametrize("mode", MODES)
def test_initial_state_is_in_the_callers_order(x64, mode):
    rng = np.random.default_rng(2)
    T, B, I, H = 5, 4, 2, 3
    lengths = [2, 5, 3, 1]
    x = rng.standard_normal((T, B, I))
    h0 = rng.standard_normal((2, B, H))
    tm, fm = pair(mode, I, H, num_layers=2)
    th0, fh0 = torch.tensor(h0, requires_grad=True), fl.tensor(h0, requires_grad=True)
    if mode == "LSTM":
        c0 = rng.standard_normal((2, B, H))
        tc0, fc0 = torch.tensor(c0, requires_grad=True), fl.tensor(c0, requires_grad=True)
        thx, fhx = (th0, tc0), (fh0, fc0)
    else:
        thx, fhx = th0, fh0
    to, th = tm(trnn.pack_padded_sequence(torch.tensor(x), lengths, enforce_sorted=False), thx)
    fo, fh = fm(frnn.pack_padded_sequence(fl.tensor(x), lengths, enforce_sorted=False), fhx)
    close(to.data, fo.data)
    close(state_sum(th), state_sum(fh))
    ((to.data ** 2).sum() + state_sum(th).sum()).backward()
    ((fo.data ** 2).sum() + state_sum(fh).sum()).backward()
    close(th0.grad, fh0.grad)
    if mode == "LSTM":
        close(tc0.grad, fc0.grad)


def test_pack_sequence_unpack_and_a_packedsequence_built_from_data(x64):
    rng = np.random.default_rng(3)
    seqs = [rng.standard_normal((n, 3)) for n in (2, 4, 1, 4)]
    tp = trnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    fp = frnn.pack_sequence([fl.tensor(s) for s in seqs], enforce_sorted=False)
    close(tp.data, fp.data)
    for a, b in zip(trnn.unpack_sequence(tp), frnn.unpack_sequence(fp)):
        close(a, b)
    padded = rng.standard_normal((3, 4, 2))
    for a, b in zip(trnn.unpad_sequence(torch.tensor(padded), torch.tensor([3, 1, 2]), True),
                    frnn.unpad_sequence(fl.tensor(padded), fl.tensor([3, 1, 2]), True)):
        close(a, b)
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        frnn.pack_sequence([fl.tensor(s) for s in seqs])
    # the idiom PackedSequence(f(packed.data), packed.batch_sizes, ...): an op on the rows
    tm, fm = pair("GRU", 5, 2, bidirectional=True)
    tlin, flin = torch.nn.Linear(3, 5).double(), fl.nn.Linear(3, 5).double()
    with fl.no_grad():
        flin.weight.copy_(fl.tensor(tlin.weight.detach().numpy()))
        flin.bias.copy_(fl.tensor(tlin.bias.detach().numpy()))
    tq = trnn.PackedSequence(tlin(tp.data), tp.batch_sizes, tp.sorted_indices,
                             tp.unsorted_indices)
    fq = frnn.PackedSequence(flin(fp.data), fp.batch_sizes, fp.sorted_indices,
                             fp.unsorted_indices)
    to, th = tm(tq)
    fo, fh = fm(fq)
    close(to.data, fo.data)
    close(th, fh)
    close(trnn.pad_packed_sequence(to, total_length=6)[0],
          frnn.pad_packed_sequence(fo, total_length=6)[0])
    (to.data.sum() + th.sum()).backward()
    (fo.data.sum() + fh.sum()).backward()
    close(tlin.weight.grad, flin.weight.grad)
    # PyTorch's tuple behaviour
    data, batch_sizes, sorted_indices, unsorted_indices = fo
    assert data is fo.data and batch_sizes.tolist() == [4, 3, 2, 2]
    assert fo[2].tolist() == tp.sorted_indices.tolist()
    assert fp.to(fl.float32).data.dtype is fl.float32


def test_packed_token_ids_and_padding_value():
    # packing a (T, B) batch of ids: no feature dims
    ids = fl.tensor([[1, 2, 3], [4, 5, 0], [7, 0, 0]])
    tids = torch.tensor([[1, 2, 3], [4, 5, 0], [7, 0, 0]])
    fp = frnn.pack_padded_sequence(ids, [3, 2, 1])
    tp = trnn.pack_padded_sequence(tids, [3, 2, 1])
    assert fp.data.tolist() == tp.data.tolist()
    fpad, flen = frnn.pad_packed_sequence(fp, batch_first=True, padding_value=9)
    tpad, tlen = trnn.pad_packed_sequence(tp, batch_first=True, padding_value=9)
    assert fpad.tolist() == tpad.tolist() and flen.tolist() == tlen.tolist()


@pytest.mark.parametrize("lib", ["torch", "flowlite"])
@pytest.mark.parametrize("case,exc", [
    ("unsorted", RuntimeError), ("zero_length", RuntimeError),
    ("negative_length", RuntimeError), ("count", RuntimeError),
    ("total_length", ValueError), ("lengths_2d", RuntimeError),
])
def test_errors_have_pytorchs_classes(lib, case, exc):
    L, R = (torch, trnn) if lib == "torch" else (fl, frnn)
    x = L.zeros(4, 3, 2)
    calls = {
        "unsorted": lambda: R.pack_padded_sequence(x, [1, 2, 3]),
        "zero_length": lambda: R.pack_padded_sequence(x, [2, 0, 1], enforce_sorted=False),
        "negative_length": lambda: R.pack_padded_sequence(x, [2, 1, -1]),
        "count": lambda: R.pack_padded_sequence(x, [4, 2]),
        "total_length": lambda: R.pad_packed_sequence(R.pack_padded_sequence(x, [3, 2, 1]),
                                                      total_length=2),
        "lengths_2d": lambda: R.pack_padded_sequence(x, [[2, 1, 1]]),
    }
    with pytest.raises(exc):
        calls[case]()


def test_a_length_past_the_input_is_refused():
    # PyTorch reads past the input's end here (unspecified values); flowlite refuses
    with pytest.raises(RuntimeError, match="exceeds the input's 4 time steps"):
        frnn.pack_padded_sequence(fl.zeros(4, 3, 2), [5, 2, 1])


def _train(steps, seed=0):
    fl.manual_seed(seed)
    emb = fl.nn.Embedding(20, 8)
    rnn = fl.nn.LSTM(8, 6, num_layers=2, batch_first=True, bidirectional=True, dropout=0.2)
    head = fl.nn.Linear(12, 20)
    opt = fl.optim.Adam(list(emb.parameters()) + list(rnn.parameters())
                        + list(head.parameters()), lr=1e-2)
    rng = np.random.default_rng(seed)
    losses, compiles = [], []
    for T in steps:
        lengths = rng.integers(1, T + 1, 4)
        lengths[rng.integers(0, 4)] = T
        x = fl.tensor(rng.integers(0, 20, (4, T)))
        y = fl.tensor(rng.integers(0, 20, (4, T)))
        out, _ = rnn(frnn.pack_padded_sequence(emb(x), lengths.tolist(), batch_first=True,
                                               enforce_sorted=False))
        h, _ = frnn.pad_packed_sequence(out, batch_first=True)
        loss = fl.nn.functional.cross_entropy(head(h).reshape(-1, 20), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        compiles.append(M.counters()["compiles"])
    return np.array(losses), compiles


def test_one_program_for_every_set_of_lengths_of_one_padded_shape():
    losses, compiles = _train([7] * 6)
    assert compiles[-1] == compiles[1], compiles      # a step, then its replays
    assert np.isfinite(losses).all()


def test_length_buckets_equal_exact_programs(x64):
    fl.set_default_dtype(fl.float64)
    steps = [5, 9, 3, 12, 7]
    fl.set_buckets(False)
    try:
        exact, _ = _train(steps)
    finally:
        fl.set_buckets(True)
    c0 = M.counters()["compiles"]
    bucketed, compiles = _train(steps)
    np.testing.assert_allclose(bucketed, exact, rtol=1e-10, atol=1e-12)
    assert compiles[-1] - c0 <= 4, compiles
