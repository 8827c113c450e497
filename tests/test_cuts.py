"""Graphs that grow without a read run in pieces (flowlite/engine/cuts.py).

A loop that extends a sequence with `cat` and reads nothing until the end runs one piece per
step, the pieces bucketed by length: a few programs in all, and exactly what the loop computes
when it reads every step (or is never cut).

On the CPU `multinomial` draws PyTorch's numbers on the host, reading the probabilities every
step (tests/test_torch_streams.py): these loops draw in programs instead, inside
`flowlite.random.device_draws()`, where a generation loop reads nothing until the end."""
import warnings

import numpy as np
import pytest

import flowlite as fl
from flowlite import nn
from flowlite.nn import functional as F


@pytest.fixture(autouse=True)
def _cuts_on():
    fl.set_graph_cuts(True)
    with fl.random.device_draws():
        yield
    fl.set_graph_cuts(True)


class Bigram(nn.Module):
    def __init__(self, vocab=13):
        super().__init__()
        self.tok = nn.Embedding(vocab, vocab)

    def forward(self, idx):
        return self.tok(idx)

    def generate(self, idx, n, read_each_step=False):
        for _ in range(n):
            logits = self(idx)[:, -1, :]
            probs = F.softmax(logits, dim=-1)
            idx_next = fl.multinomial(probs, num_samples=1)
            if read_each_step:
                int(idx_next[0, 0])
            idx = fl.cat((idx, idx_next), dim=1)
        return idx


def _generate(n, read_each_step=False, seed=3):
    fl.manual_seed(seed)
    m = Bigram()
    fl.sync()
    c0 = fl.metrics.counters()
    out = m.generate(fl.zeros((2, 1), dtype=fl.long), n, read_each_step).tolist()
    c1 = fl.metrics.counters()
    return out, {k: c1[k] - c0[k] for k in ("compiles", "executions", "graph_cuts")}


def test_a_500_step_generation_without_a_read_compiles_at_most_3_programs_and_equals_reading_each_step():
    fl.clear_cache()
    out, c = _generate(500)
    assert len(out[0]) == 501
    assert c["compiles"] <= 3, c
    assert c["graph_cuts"] == 498
    ref, c_ref = _generate(500, read_each_step=True)
    assert c_ref["graph_cuts"] == 0
    assert out == ref


def test_cut_pieces_equal_the_uncut_graph():
    out, c = _generate(40, seed=5)
    assert c["graph_cuts"] == 38
    fl.set_graph_cuts(False)
    ref, c_ref = _generate(40, seed=5)
    assert c_ref["graph_cuts"] == 0 and c_ref["executions"] == 1
    assert out == ref


def test_a_float_sequence_grown_under_no_grad_is_cut_and_equals_the_uncut_graph(x64):
    cell = nn.Linear(3, 3).double()

    def run():
        seq = fl.ones((4, 1, 3), dtype=fl.float64)
        with fl.no_grad():
            for _ in range(30):
                seq = fl.cat([seq, fl.tanh(cell(seq[:, -1:, :])) + seq.mean(1, keepdim=True)], 1)
        return seq.numpy()

    c0 = fl.metrics.counters()["graph_cuts"]
    got = run()
    assert fl.metrics.counters()["graph_cuts"] - c0 == 28
    fl.set_graph_cuts(False)
    want = run()
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_a_sequence_with_autograd_history_is_never_cut():
    """A decoder that grows its outputs with cat in a training forward: the step stays one
    executable."""
    lin = nn.Linear(4, 4)
    opt = fl.optim.SGD(lin.parameters(), lr=0.1)
    x = fl.randn(2, 1, 4)
    fl.sync()
    c0 = fl.metrics.counters()
    out = x
    for _ in range(20):
        out = fl.cat([out, lin(out[:, -1:, :])], 1)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    c1 = fl.metrics.counters()
    assert c1["graph_cuts"] == c0["graph_cuts"]
    assert c1["executions"] - c0["executions"] == 1
    assert np.isfinite(loss.item())


def test_two_nested_cats_of_one_expression_are_not_cut():
    a, b, c = fl.arange(3), fl.arange(2) + 10, fl.arange(4) + 20
    c0 = fl.metrics.counters()["graph_cuts"]
    out = fl.cat([fl.cat([a, b]), c])
    assert fl.metrics.counters()["graph_cuts"] == c0
    assert out.tolist() == [0, 1, 2, 10, 11, 20, 21, 22, 23]


def test_the_cut_is_explained_in_the_report():
    fl.metrics.reset()
    _generate(6)
    report = fl.metrics.report()
    assert "graphs cut into pieces" in report
    assert "a sequence grown by cat at test_cuts.py:" in report
    assert fl.metrics.counters()["graph_cuts"] == 4


class TinyLM(nn.Module):
    """Dropout left on while generating (ng-video-lecture's gpt.py generates in train
    mode), a context crop, attention over the growing context."""

    def __init__(self, vocab=11, d=8, block=12):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, d)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("tril", fl.tril(fl.ones(block, block)))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.tok(idx))
        w = (x @ x.transpose(-2, -1)).masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        return self.head(F.softmax(w, dim=-1) @ x)

    def generate(self, idx, n):
        for _ in range(n):
            logits = self(idx[:, -self.block:])[:, -1, :]
            idx_next = fl.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = fl.cat((idx, idx_next), dim=1)
        return idx


def test_dropout_while_generating_buckets_and_equals_the_uncut_graph():
    def run():
        fl.manual_seed(11)
        m = TinyLM()
        fl.sync()
        c0 = fl.metrics.counters()
        out = m.generate(fl.zeros((2, 1), dtype=fl.long), 24).tolist()
        return out, fl.metrics.counters()["compiles"] - c0["compiles"]

    fl.clear_cache()
    got, compiles = run()
    # first piece, one exact, a bucket up to the crop (`tril[:T, :T]` at T == block keeps its
    # slice: still that family); the cropped family's exact + bucket
    assert compiles <= 5, compiles
    fl.set_graph_cuts(False)
    want, _ = run()
    assert got == want


def test_a_piece_leaves_what_only_the_tape_saved_lazy_and_a_later_backward_recomputes_it():
    """Generating with autograd on (gpt.py does): each piece outputs the sequence and the live
    tensors, not every activation the tape saved for a backward that usually never comes;
    one that does come recomputes them, with the same draws."""
    def run(cuts):
        fl.set_graph_cuts(cuts)
        fl.manual_seed(4)
        m = TinyLM()
        fl.sync()
        fl.clear_cache()
        idx = fl.zeros((2, 1), dtype=fl.long)
        for _ in range(10):
            logits = m(idx[:, -m.block:])[:, -1, :]
            idx = fl.cat((idx, fl.multinomial(F.softmax(logits.detach(), -1), 1)), 1)
        outputs = max((e["outputs"] for e in fl.debug.executables()), default=0)
        logits.sum().backward()
        return idx.tolist(), [p.grad.numpy() for p in m.parameters()], outputs

    got, grads, outputs = run(True)
    assert 0 < outputs <= 6, outputs
    want, want_grads, _ = run(False)
    assert got == want
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_an_index_out_of_range_in_a_piece_raises_at_a_later_cut_or_read():
    """A piece's checks are read at the next piece or read (the host records ahead while it
    runs, as a training step's are); the error names the op and the bad index."""
    emb = nn.Embedding(5, 5)
    idx = fl.zeros((1, 1), dtype=fl.long)
    with pytest.raises(IndexError, match=r"embedding: index \d+ is out of bounds .*size 5"):
        for i in range(12):
            logits = emb(idx)[:, -1, :]
            nxt = fl.multinomial(F.softmax(logits, -1), 1) + (7 if i == 6 else 0)
            idx = fl.cat((idx, nxt), 1)
        idx.tolist()


def test_a_bucketed_piece_s_bad_index_raises_at_the_next_piece_and_earlier_pieces_stand():
    """Bucketed pieces read their checks at the next piece too (the device runs piece t while
    the host records t+1): the error names the op; what earlier pieces computed stands, and
    what the failed piece and the pieces recorded after it computed raises the same error."""
    from flowlite.engine import metrics
    fl.manual_seed(2)
    emb = nn.Embedding(5, 5)
    idx = fl.zeros((1, 1), dtype=fl.long)
    kept = None
    n0 = len(metrics._compile_log)
    with pytest.raises(IndexError, match=r"embedding: index \d+ is out of bounds .*size 5"):
        for i in range(60):
            logits = emb(idx)[:, -1, :]
            nxt = fl.multinomial(F.softmax(logits, -1), 1) + (7 if i == 40 else 0)
            idx = fl.cat((idx, nxt), 1)
            if i == 30:
                kept = idx
        idx.tolist()
    assert any("length bucket" in e[0] for e in metrics._compile_log[n0:])
    before = kept.tolist()[0]
    assert len(before) == 32 and all(0 <= t < 5 for t in before)
    with pytest.raises(IndexError, match="embedding"):
        idx.tolist()


def test_a_bucketed_piece_leaves_its_checks_unread_until_the_next_piece():
    """The host does not wait for a bucketed piece's program: its check flags stay unread
    (the device runs it while the host records the next piece)."""
    from flowlite.engine import metrics
    from flowlite.engine.runtime import rt
    emb = nn.Embedding(5, 5)
    idx = fl.zeros((1, 1), dtype=fl.long)
    n0 = len(metrics._compile_log)
    unread = []
    for i in range(40):
        logits = emb(idx)[:, -1, :]
        idx = fl.cat((idx, fl.multinomial(F.softmax(logits, -1), 1)), 1)
        unread.append(rt.local.unverified is not None)
    assert any("length bucket" in e[0] for e in metrics._compile_log[n0:])
    assert all(unread[-10:])
    assert len(idx.tolist()[0]) == 41
    assert rt.local.unverified is None


def test_a_loop_started_from_a_view_of_host_data_compiles_its_first_piece_as_a_family_member():
    """nanoGPT's sample.py starts from `torch.tensor(ids)[None, ...]`: that view of host data
    becomes the first piece's data leaf, as the carried sequence is in every later piece, so
    the first piece is the family's length-1 member (2 programs, not 3), values unchanged."""
    from flowlite.engine import metrics
    fl.manual_seed(0)
    emb = nn.Embedding(7, 7)
    fl.sync()

    def gen(n):
        idx = fl.tensor([3], dtype=fl.long)[None, ...]
        for _ in range(n):
            logits = emb(idx).sum(1)
            idx = fl.cat((idx, fl.multinomial(F.softmax(logits, -1), 1)), 1)
        return idx.tolist()

    fl.manual_seed(5)
    n0 = len(metrics._compile_log)
    cut = gen(30)
    assert len(metrics._compile_log) - n0 == 2, [e[0] for e in metrics._compile_log[n0:]]
    fl.set_graph_cuts(False)
    fl.manual_seed(5)
    assert gen(30) == cut


def test_a_family_whose_contractions_see_a_fixed_window_takes_one_large_bucket():
    """After the crop the model sees a fixed window and only the carried sequence grows: its
    padding costs nothing, so 300 tokens run in one bucket of 512."""
    from flowlite.engine import metrics
    fl.manual_seed(1)
    m = TinyLM()
    fl.sync()
    fl.clear_cache()
    n0 = len(metrics._compile_log)
    out = m.generate(fl.zeros((2, 1), dtype=fl.long), 300).tolist()
    assert len(out[0]) == 301
    buckets = [e[0].split("up to ")[1].rstrip("]") for e in metrics._compile_log[n0:]
               if "length bucket" in e[0]]
    assert buckets == ["12", "512"], buckets


class WholeContext(nn.Module):
    """nanoGPT-like: a linear layer over the whole growing context, no crop."""

    def __init__(self, vocab=7, d=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.tok(idx))


def test_a_family_whose_matmul_sees_the_whole_context_takes_buckets_of_64_and_256():
    """A contraction over the padded length multiplies real work: buckets start at 64 and grow
    4x (nanoGPT's first 64 tokens in a bucket of 512 paid 8x their computation)."""
    from flowlite.engine import metrics
    fl.manual_seed(2)
    m = WholeContext()
    fl.sync()
    fl.clear_cache()
    n0 = len(metrics._compile_log)
    idx = fl.zeros((1, 1), dtype=fl.long)
    with fl.no_grad():
        for _ in range(100):
            probs = F.softmax(m(idx)[:, -1, :], -1)
            idx = fl.cat((idx, fl.multinomial(probs, 1)), 1)
    assert len(idx.tolist()[0]) == 101
    buckets = [e[0].split("up to ")[1].rstrip("]") for e in metrics._compile_log[n0:]
               if "length bucket" in e[0]]
    assert buckets == ["64", "256"], buckets


def test_the_loop_s_first_two_steps_run_as_pieces_of_one_step():
    """The cut that finds the loop (its third `cat`) first runs the two steps before it as
    the pieces a cut at their `cat` would have run: no program holds three steps, and the
    steps equal the loop read step by step."""
    from flowlite.engine import metrics
    fl.clear_cache()
    n0 = len(metrics._compile_log)
    out, c = _generate(30, seed=9)
    sizes = [e[1] for e in metrics._compile_log[n0:] if e[0].startswith("graph cut")]
    assert sizes and max(sizes) <= min(sizes) + 3, sizes
    assert c["executions"] == 30 and c["graph_cuts"] == 28
    ref, _ = _generate(30, read_each_step=True, seed=9)
    assert out == ref


# ---- any loop that records without a read: pieces at its period ----------------------------
from flowlite.engine import cuts as _cuts_mod      # noqa: E402


def _delta(c0):
    c1 = fl.metrics.counters()
    return {k: c1[k] - c0[k] for k in ("compiles", "executions", "graph_cuts", "cache_hits")}


def test_a_running_sum_over_a_device_tensor_runs_in_repeated_pieces_of_one_program():
    """`s = s + x[i]` over 12,000 i, read once: pieces of one structure (one program, cache
    hits after it), no warning about a graph growing without a sync, the sum exactly the
    sequential float32 one."""
    n = 12000
    x = fl.arange(n, dtype=fl.float32) * 0.25
    fl.sync()
    fl.debug.set_graph_size_threshold(20_000)
    try:
        c0 = fl.metrics.counters()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            s = fl.zeros(())
            for i in range(n):
                s = s + x[i]
            got = s.item()
    finally:
        fl.debug.set_graph_size_threshold(200_000)
    d = _delta(c0)
    want = np.float32(0)
    for v in np.arange(n, dtype=np.float32) * np.float32(0.25):
        want = np.float32(want + v)
    assert got == want
    assert d["graph_cuts"] >= 3
    assert d["executions"] == d["graph_cuts"] + 1
    # the part before the repetition, the piece (every other cut: a cache hit), the rest
    assert d["compiles"] <= 3, d
    assert d["cache_hits"] >= d["graph_cuts"] - 2
    assert any("a loop recorded without a read" in why and site.startswith("test_cuts.py:")
               for site, why in fl.metrics.cuts())


def test_in_place_add_on_a_tensor_that_requires_no_grad_is_cut_and_exact():
    n = 9000
    xs = np.random.RandomState(0).randn(n, 4).astype(np.float32)
    x = fl.from_numpy(xs) * 1.0
    fl.sync()
    c0 = fl.metrics.counters()
    acc = fl.zeros(4)
    for i in range(n):
        acc.add_(x[i])
    got = acc.numpy()
    d = _delta(c0)
    want = np.zeros(4, np.float32)
    for i in range(n):
        want = want + xs[i]
    np.testing.assert_array_equal(got, want)
    assert d["graph_cuts"] >= 2 and d["compiles"] <= 3, d


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of a few iterations, the guard called by hand: the cutting logic on small loops."""
    monkeypatch.setitem(_cuts_mod._LOOP, "piece", 24)
    monkeypatch.setitem(_cuts_mod._LOOP, "window", 512)
    monkeypatch.setattr(_cuts_mod, "_MIN_REPS", 4)
    _cuts_mod._loop["stream"] = None
    yield
    _cuts_mod._loop["stream"] = None


def _loop_with_live_outputs(n, guard):
    x = fl.from_numpy(np.arange(3 * n, dtype=np.float32).reshape(n, 3)) * 0.5
    fl.sync()
    w = fl.arange(3, dtype=fl.float32) * 2 + 1      # pending, read by every iteration
    s = fl.zeros(3)
    kept = []
    for i in range(n):
        s = s * 0.5 + w + x[i]
        if i % 5 == 0:
            kept.append(s)          # live outputs of the pieces
        if guard and i % 40 == 39:
            _cuts_mod.bound(0)
    return s.numpy(), [k.numpy() for k in kept]


def test_pieces_output_what_later_work_and_live_tensors_read(small_pieces):
    c0 = fl.metrics.counters()
    got, kept = _loop_with_live_outputs(400, True)
    d = _delta(c0)
    assert d["graph_cuts"] >= 10
    fl.set_graph_cuts(False)
    want, want_kept = _loop_with_live_outputs(400, True)
    np.testing.assert_array_equal(got, want)
    for a, b in zip(kept, want_kept):
        np.testing.assert_array_equal(a, b)
    # one program for the repeated pieces: few compiles for tens of cuts
    assert d["compiles"] <= 6, d


def test_work_with_autograd_in_flight_is_never_cut(small_pieces):
    w = fl.ones(3, requires_grad=True)
    x = fl.from_numpy(np.arange(600, dtype=np.float32).reshape(200, 3)) * 0.01
    fl.sync()
    c0 = fl.metrics.counters()
    s = fl.zeros(())
    for i in range(200):
        s = s + (w * x[i]).sum()
        if i % 40 == 39:
            _cuts_mod.bound(0)
    s.backward()
    d = _delta(c0)
    assert d["graph_cuts"] == 0
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().sum(0), rtol=1e-5)


def test_without_a_period_a_big_graph_runs_whole_at_the_guard(small_pieces, monkeypatch):
    monkeypatch.setitem(_cuts_mod._LOOP, "fallback", 200)
    x = fl.arange(64, dtype=fl.float32) * 1.0
    fl.sync()
    c0 = fl.metrics.counters()
    s = fl.zeros(())
    for i in range(150):
        s = s + x[:(i * i) % 61 + 1].sum()     # no period: every slice's bounds change
    _cuts_mod.bound(0)
    assert _delta(c0)["graph_cuts"] == 1
    assert not s.is_pending
