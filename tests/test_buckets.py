"""Length buckets (flowlite/engine/buckets.py): a loop whose tensors grow by one each iteration
compiles once per bucket of lengths instead of once per length, and computes exactly what the
per-length programs compute — checked here against the same loop with buckets off, for each
primitive rule (softmax/sum/amax over the growing axis, contractions over it, negative
indices, arange, crops, concatenation, reshapes, checks on padded index tensors) and for the
fallbacks (a primitive without a rule, random draws outside a training step) that must
compile exactly."""
import jax
import numpy as np
import pytest

import flowlite as fl
import flowlite.nn.functional as F
from flowlite.engine import buckets

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")


@pytest.fixture(autouse=True)
def fresh():
    # work an earlier test left pending in this thread (a check recorded for a result it
    # dropped) would join this test's first graph and count as one more compile
    fl.sync()
    fl.clear_cache()
    buckets.set_buckets(True)
    yield
    buckets.set_buckets(True)
    fl.clear_cache()


@pytest.fixture
def x64():
    """float64 programs: bucketed and exact results then agree to rounding (~1e-15), so a
    masking bug can't hide under float32 tolerance."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    fl.clear_cache()
    yield
    jax.config.update("jax_enable_x64", old)
    fl.clear_cache()


def _grow(step, x0, n, on):
    """Run x = step(x) n times (a sync each time) with buckets on/off: (values, compiles)."""
    fl.clear_cache()
    buckets.set_buckets(on)
    x = fl.from_numpy(x0)
    c0 = fl.metrics.counters()["compiles"]
    outs = []
    for _ in range(n):
        x, y = step(x)
        fl.sync()
        outs.append(y.numpy())
    outs.append(x.numpy())
    return outs, fl.metrics.counters()["compiles"] - c0


def _same(step, x0, n=12, exact=False):
    on, c_on = _grow(step, x0, n, True)
    off, c_off = _grow(step, x0, n, False)
    for a, b in zip(on, off):
        assert a.shape == b.shape and a.dtype == b.dtype
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    return c_on, c_off


def test_growing_reductions_compile_once_per_bucket(x64):
    def step(x):
        y = (x * 0.5 + 1).softmax(-1)                 # softmax over the growing axis
        s = y.sum(-1, keepdim=True) + x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True)
        return fl.cat([x, s * 0.1], 1), y
    x0 = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float64)
    c_on, c_off = _same(step, x0)
    assert c_off == 12
    assert c_on <= 3          # two exact graphs find the family, then one bucket (T <= 16)


def test_attention_over_the_growing_context_matches_exact_programs(x64):
    rng = np.random.default_rng(1)
    w = fl.from_numpy(rng.normal(size=(3 * 8, 4)).astype(np.float64))

    def step(x):                                      # x: (1, T, 4)
        q, k, v = F.linear(x, w).split(8, dim=2)
        causal = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None],
                                                is_causal=True)[:, 0]
        full = (q @ k.transpose(1, 2)).softmax(-1) @ v          # contraction over T
        both = fl.einsum("btd,bsd->bts", causal, full).sum(-1)   # (1, T)
        nxt = (causal[:, -1:, :4] + full[:, [-1], 4:]).tanh()   # negative indices
        return fl.cat([x, nxt], 1), both
    x0 = rng.normal(size=(1, 2, 4)).astype(np.float64)
    c_on, c_off = _same(step, x0, n=14)
    assert c_off == 14 and c_on <= 3


def test_token_loop_with_embeddings_positions_and_crop(x64):
    rng = np.random.default_rng(2)
    tok = fl.from_numpy(rng.normal(size=(7, 6)).astype(np.float64))
    pos = fl.from_numpy(rng.normal(size=(10, 6)).astype(np.float64))   # 10 < bucket 16

    def step(idx):                                    # idx: (2, T) int
        ctx = idx if idx.shape[1] <= 10 else idx[:, -10:]
        t = ctx.shape[1]
        h = F.embedding(ctx, tok) + F.embedding(fl.arange(0, t), pos)
        h = h.reshape(2, t, 2, 3).transpose(1, 2).transpose(1, 2).reshape(2, t, 6)
        logits = h[:, -1, :] @ tok.t()                # (2, 7)
        nxt = logits.argmax(-1, keepdim=True)
        return fl.cat([idx, nxt], 1), logits
    x0 = np.array([[1, 2], [3, 4]], np.int64)
    c_on, c_off = _same(step, x0, n=16, exact=False)
    assert c_off == 16
    # lengths 2..10 are one family (one bucket), the cropped lengths 11.. another
    assert c_on <= 7


def test_an_index_out_of_range_in_the_valid_region_still_raises():
    tab = fl.from_numpy(np.eye(5, dtype=np.float32))

    def run(on):
        fl.clear_cache()
        buckets.set_buckets(on)
        idx = fl.from_numpy(np.array([[0, 1]], np.int64))
        for _ in range(6):
            e = F.embedding(idx, tab)                 # (1, T, 5)
            nxt = e.sum(-1).to(fl.int64) + idx[:, -1:] + 1   # grows by one each step
            idx = fl.cat([idx, nxt[:, -1:]], 1)
            fl.sync()
        return idx
    with pytest.raises(IndexError, match="embedding|index"):
        run(True)
    with pytest.raises(IndexError, match="embedding|index"):
        run(False)


def test_an_unsupported_primitive_compiles_exactly_and_stays_correct():
    def step(x):
        y = x.cumsum(-1)                              # no padding rule: exact programs
        return fl.cat([x, y[:, -1:] * 0.01], 1), y
    x0 = np.ones((1, 2), np.float32)
    c_on, c_off = _same(step, x0, n=8, exact=True)
    assert c_on == c_off == 8


def test_random_draws_of_a_growing_shape_outside_a_training_step_are_never_bucketed():
    with fl.random.device_draws():          # (drawn in programs: on the CPU host data)
        _growing_draws()


def _growing_draws():
    def step(x):
        r = fl.rand_like(x)
        return fl.cat([x, r[:, -1:]], 1), r
    x0 = np.zeros((1, 2), np.float32)
    fl.manual_seed(5)
    on, c_on = _grow(step, x0, 8, True)
    fl.manual_seed(5)
    off, c_off = _grow(step, x0, 8, False)
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)
    # (padded draws would stay padded buffers: tensors initialised for models of several
    # widths; in a training step they bucket, tests/test_buckets_training.py)
    assert c_on == c_off == 8


def test_bucketed_outputs_read_like_exact_ones():
    def step(x):
        return fl.cat([x, (x.sum(-1, keepdim=True) % 7)], 1), x
    fl.clear_cache()
    x = fl.from_numpy(np.array([[1, 2, 3]], np.int64))
    for _ in range(6):
        x, _ = step(x)
        fl.sync()
    assert x._node.op is buckets.UNPAD           # held padded on the device
    assert tuple(x.shape) == (1, 9)
    ref = [1, 2, 3]
    for _ in range(6):
        ref.append(sum(ref) % 7)
    assert x.tolist() == [ref]
    assert x.numpy().shape == (1, 9)
    assert x[0, -1].item() == ref[-1]
    assert (x + 1).numpy().tolist() == [[r + 1 for r in ref]]


def test_set_buckets_off_compiles_every_length():
    buckets.set_buckets(False)
    assert not buckets.buckets_enabled()

    def step(x):
        return fl.cat([x, x[:, -1:] + 1], 1), x
    _, c = _grow(step, np.zeros((1, 1), np.float32), 6, False)
    assert c == 6


def test_the_bucket_is_capped_by_a_fixed_size_the_graph_slices(x64):
    mask = fl.from_numpy(np.tril(np.ones((12, 12))))

    def step(x):                                      # x: (1, T); bias[:T, :T]-style slice
        t = x.shape[1]
        att = (x[:, :, None] * x[:, None, :]).masked_fill(mask[:t, :t] == 0, float("-inf"))
        y = att.softmax(-1).sum(1)
        return fl.cat([x, y[:, -1:]], 1), y
    x0 = np.full((1, 2), 0.5)
    c_on, c_off = _same(step, x0, n=10)
    assert c_off == 10 and c_on <= 3      # bucket capped at 12 instead of 16
