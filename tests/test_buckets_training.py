"""Length buckets in training steps (issue 35): a loop whose batches change length from step to
step trains in one executable per bucket of lengths — forward, backward and the optimizer
update — and every loss and every final parameter equals the exact (per-length) program's.
Checked in float64 against the same loop with buckets off (values to rounding), for an LSTM
language model, a Transformer encoder with a key padding mask, a GRU, a CNN over a varying
batch, and a fuzz of random length sequences; and against PyTorch on the same loops."""
import jax
import numpy as np
import pytest

import flowlite as fl
from flowlite.engine import buckets

nn, F = fl.nn, fl.nn.functional
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")


@pytest.fixture(autouse=True)
def fresh():
    fl.sync()
    fl.clear_cache()
    buckets.set_buckets(True)
    yield
    buckets.set_buckets(True)
    fl.clear_cache()


@pytest.fixture
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    fl.clear_cache()
    yield
    jax.config.update("jax_enable_x64", old)
    fl.clear_cache()


class LM(nn.Module):
    def __init__(self, rnn="lstm"):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.rnn = (nn.LSTM if rnn == "lstm" else nn.GRU)(6, 8, batch_first=True)
        self.head = nn.Linear(8, 11)

    def forward(self, x, y):
        h, _ = self.rnn(self.emb(x))
        return F.cross_entropy(self.head(h).reshape(-1, 11), y.reshape(-1))


class Encoder(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.emb = nn.Embedding(9, 8)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=dropout, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(8, 3)

    def forward(self, x, pad, y):
        h = self.enc(self.emb(x), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return F.cross_entropy(self.head((h * keep).sum(1) / keep.sum(1)), y)


class Seq2Seq(nn.Module):
    """A GRU encoder whose final state starts a GRU decoder (teacher forcing)."""
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 5)
        self.enc = nn.GRU(5, 6, batch_first=True)
        self.dec = nn.GRU(5, 6, batch_first=True)
        self.out = nn.Linear(6, 7)

    def forward(self, src, tgt):
        _, h = self.enc(self.emb(src))
        y, _ = self.dec(self.emb(tgt[:, :-1]), h)
        return F.cross_entropy(self.out(y).transpose(1, 2), tgt[:, 1:])


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3 * 4 * 4, 4)

    def forward(self, x, y):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return F.cross_entropy(self.fc(h.flatten(1)), y)


def lm_batches(lengths, seed=0, batch=3):
    rng = np.random.default_rng(seed)
    out = []
    for T in lengths:
        x = rng.integers(0, 11, (batch, T + 1))
        out.append((x[:, :-1], x[:, 1:]))
    return out


def encoder_batches(lengths, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for T in lengths:
        lens = rng.integers(1, T + 1, 3)
        lens[0] = T
        x = rng.integers(1, 9, (3, T))
        pad = np.arange(T)[None, :] >= lens[:, None]
        x[pad] = 0
        out.append((x, pad, rng.integers(0, 3, 3)))
    return out


def seq2seq_batches(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 7, (2, T)), rng.integers(0, 7, (2, T // 2 + 2))) for T in lengths]


def cnn_batches(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, 1, 8, 8)), rng.integers(0, 4, n)) for n in sizes]


def train(make, batches, on, dtype=np.float64, opt="adam", read_first=False):
    """(losses, final parameters, compiles) of the loop with buckets on or off."""
    fl.clear_cache()
    buckets.set_buckets(on)
    fl.manual_seed(0)
    model = make().double() if dtype == np.float64 else make()
    rng = np.random.default_rng(1)
    model.load_state_dict({k: fl.tensor((rng.standard_normal(tuple(v.shape)) * 0.3)
                                        .astype(dtype) if v.dtype.is_floating_point else v)
                           for k, v in model.state_dict().items()})
    o = fl.optim.Adam(model.parameters(), lr=1e-2) if opt == "adam" else \
        fl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    c0 = fl.metrics.counters()["compiles"]
    losses = []
    for b in batches:
        args = [fl.tensor(v.astype(dtype) if v.dtype.kind == "f" else v) for v in b]
        loss = model(*args)
        if read_first:      # the loss read before backward: the forward runs on its own
            losses.append(loss.item())
        o.zero_grad()
        loss.backward()
        o.step()
        if not read_first:
            losses.append(loss.item())
    params = [p.detach().numpy() for p in model.parameters()]
    return np.array(losses), params, fl.metrics.counters()["compiles"] - c0


def same_as_exact(make, batches, rtol=1e-10, **kw):
    l_on, p_on, c_on = train(make, batches, True, **kw)
    l_off, p_off, c_off = train(make, batches, False, **kw)
    np.testing.assert_allclose(l_on, l_off, rtol=rtol, atol=rtol)
    for a, b in zip(p_on, p_off):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    return c_on, c_off


LENGTHS = [5, 9, 7, 12, 3, 17, 11]     # buckets 16 and 32 after 2 exact programs


def test_lstm_language_model_trains_in_one_program_per_bucket(x64):
    c_on, c_off = same_as_exact(LM, lm_batches(LENGTHS))
    assert c_off == len(set(LENGTHS))
    assert c_on == 2 + 2


def test_a_loss_read_before_backward_splits_the_step_and_both_parts_bucket(x64):
    c_on, c_off = same_as_exact(LM, lm_batches(LENGTHS), read_first=True)
    assert c_off == 2 * len(LENGTHS)
    assert c_on <= 2 * 4


def test_gru_language_model_matches_the_exact_programs(x64):
    c_on, _ = same_as_exact(lambda: LM("gru"), lm_batches(LENGTHS, seed=3))
    assert c_on == 4


def test_transformer_encoder_with_padding_mask_matches_the_exact_programs(x64):
    c_on, _ = same_as_exact(Encoder, encoder_batches(LENGTHS, seed=1))
    assert c_on == 4


def test_dropout_in_a_bucketed_step_draws_the_exact_programs_masks(x64):
    # each element's random number hashes its position in the logical shape
    c_on, _ = same_as_exact(lambda: Encoder(dropout=0.3), encoder_batches(LENGTHS[:5]))
    assert c_on == 3


def test_gru_seq2seq_matches_the_exact_programs(x64):
    # source T and target T/2 + 2 follow one length: one bucket after two exact programs
    c_on, c_off = same_as_exact(Seq2Seq, seq2seq_batches([4, 8, 6, 10, 12, 14], seed=2),
                                opt="sgd")
    assert (c_on, c_off) == (3, 6)


def test_cnn_with_batch_norm_over_a_varying_batch_matches_the_exact_programs(x64):
    sizes = [5, 7, 6, 9, 3, 12]
    # (SGD: BatchNorm cancels the conv bias, whose gradient is rounding noise that Adam
    # would scale up to full steps)
    c_on, c_off = same_as_exact(CNN, cnn_batches(sizes), opt="sgd")
    assert c_off == len(set(sizes))
    assert c_on == 2 + 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fuzz_random_length_sequences_match_the_exact_programs(x64, seed):
    rng = np.random.default_rng(100 + seed)
    lengths = [int(v) for v in rng.integers(1, 40, 6)]
    make = [LM, Encoder, lambda: LM("gru")][seed]
    batches = (encoder_batches if make is Encoder else lm_batches)(lengths, seed=seed)
    c_on, c_off = same_as_exact(make, batches)
    assert c_on <= 2 + 3


def test_float32_losses_equal_the_exact_programs():
    l_on, p_on, _ = train(LM, lm_batches(LENGTHS[:5]), True, dtype=np.float32)
    l_off, p_off, _ = train(LM, lm_batches(LENGTHS[:5]), False, dtype=np.float32)
    np.testing.assert_allclose(l_on, l_off, rtol=2e-5)
    for a, b in zip(p_on, p_off):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_primitive_without_a_padding_rule_is_named_with_its_line():
    class Cum(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(11, 4)

        def forward(self, x, y):
            return self.emb(x).cumsum(1).mean()       # cumsum has no padding rule

    fl.metrics.reset()
    fl.debug.track_sites(True)
    try:
        _, _, c = train(Cum, lm_batches([4, 6, 5, 7]), True, dtype=np.float32)
    finally:
        fl.debug.track_sites(False)
    assert c == 4
    report = fl.metrics.report()
    assert "length families compiled per length" in report
    assert "cumsum" in report and "test_buckets_training.py" in report


@pytest.mark.parametrize("kind", ["lstm", "encoder", "mlp"])
def test_the_issue_loops_compute_pytorchs_losses(kind):
    """bench/varlen_loops.py's loops (lengths 16-128 / 8-96, a smaller last batch), a few
    steps each, on PyTorch and on flowlite with the same data and initial weights."""
    import torch
    from bench import varlen_loops as V
    steps = 6
    want, _, _ = V.run(torch, kind, steps)
    c0 = fl.metrics.counters()["compiles"]
    got, _, _ = V.run(fl, kind, steps)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    if kind != "mlp":       # six lengths: two exact programs, then buckets
        assert fl.metrics.counters()["compiles"] - c0 < steps


def test_a_failed_bucketed_step_raises_and_commits_nothing():
    fl.manual_seed(0)
    model = LM()
    o = fl.optim.Adam(model.parameters(), lr=1e-2)
    for x, y in lm_batches([5, 9, 7, 12]):       # the last two run bucketed
        loss = model(fl.tensor(x), fl.tensor(y))
        o.zero_grad()
        loss.backward()
        o.step()
    before = [p.detach().numpy().copy() for p in model.parameters()]
    d0 = fl.metrics.counters()["donated_buffers"]
    x, y = lm_batches([10])[0]
    x[1, 3] = 11                                  # past the embedding's 11 rows
    with pytest.raises(IndexError, match="out of range|out of bounds"):
        loss = model(fl.tensor(x), fl.tensor(y))
        o.zero_grad()
        loss.backward()
        o.step()
        loss.item()
    # the parameters' buffers were given to the program; its guarded updates gave them back
    assert fl.metrics.counters()["donated_buffers"] > d0
    for a, p in zip(before, model.parameters()):
        np.testing.assert_array_equal(a, p.detach().numpy())
    x, y = lm_batches([10])[0]                    # and training goes on
    loss = model(fl.tensor(x), fl.tensor(y))
    o.zero_grad()
    loss.backward()
    o.step()
    assert np.isfinite(loss.item())


def test_the_hand_written_jax_lstm_loop_computes_pytorchs_losses():
    """The bench's JAX + optax baseline trains the same model: its losses are PyTorch's."""
    import torch
    from bench import varlen_loops as V
    want, _, _ = V.run(torch, "lstm", 4, fixed=20)
    got, _, _, compiles = V.run_jax("lstm", 4, fixed=20)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    assert compiles == 1


def test_a_smaller_last_batch_costs_one_extra_compile_in_training_and_in_evaluation():
    # 3 epochs of 100 samples in batches of 32 (32, 32, 32, 4): training compiles the step
    # for 32 and for 4; evaluation (no_grad, .item()) its forward for 32 and for 4
    fl.manual_seed(0)
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((100, 20)).astype(np.float32), rng.integers(0, 5, 100)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))
    o = fl.optim.SGD(model.parameters(), lr=0.1)
    c0 = fl.metrics.counters()["compiles"]
    for _ in range(3):
        for i in range(0, 100, 32):
            loss = F.cross_entropy(model(fl.tensor(X[i:i + 32])), fl.tensor(Y[i:i + 32]))
            o.zero_grad()
            loss.backward()
            o.step()
            loss.item()
    c1 = fl.metrics.counters()["compiles"]
    assert c1 - c0 == 2
    with fl.no_grad():
        for _ in range(3):
            correct = 0
            for i in range(0, 100, 32):
                out = model(fl.tensor(X[i:i + 32]))
                correct += (out.argmax(1) == fl.tensor(Y[i:i + 32])).sum().item()
    assert fl.metrics.counters()["compiles"] - c1 == 2
