"""Host reads run only what they need (executor.sync_for_read) and a few exact steps from data
are computed on the host (flowlite.host_eval): what stays lazy, what joins, what compiles."""
import warnings

import jax
import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite.engine import executor, host_eval, host_reads


def _counts():
    c = fl.metrics.counters()
    return c["executions"], c["compiles"]


def test_reading_drawn_indices_leaves_the_forward_pass_lazy():
    w = fl.randn(8, 4, requires_grad=True)
    fl.sync()
    loss = (fl.randn(3, 8) @ w).relu().sum()
    e0, _ = _counts()
    ix = fl.randint(0, 100, (6,))
    got = [int(i) for i in ix]               # drawn on the host: no program at all
    assert _counts()[0] == e0
    assert loss.is_pending                   # the forward pass did not run
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no "sync between forward and backward" warning
        loss.backward()
    fl.sync()
    assert got == ix.tolist()
    assert w.grad.shape == (8, 4)


def test_work_sharing_nodes_with_the_read_joins_it_so_nothing_runs_twice():
    x = fl.randn(5)
    fl.sync()
    shared = (x * 2).exp()
    a = shared + 1
    b = shared.sum()                         # shares `shared` with a: runs with it
    other = x - 7                            # shares nothing pending: stays lazy
    e0, _ = _counts()
    a.numpy()
    assert _counts()[0] == e0 + 1
    assert not b.is_pending and other.is_pending
    np.testing.assert_allclose(b.item(), np.exp(x.numpy() * 2).sum(), rtol=1e-6)
    assert _counts()[0] == e0 + 1            # b came with a
    other.numpy()
    assert _counts()[0] == e0 + 2


def test_a_draw_read_early_gives_the_numbers_it_gives_when_read_late():
    fl.manual_seed(3)
    early = fl.rand(4)
    early_vals = early.tolist()
    lazy = fl.rand(4) * 1.0                  # the next draw, left pending
    fl.manual_seed(3)
    late = fl.rand(4)
    late_next = fl.rand(4)
    fl.sync()
    assert early_vals == late.tolist()
    assert lazy.tolist() == late_next.tolist()


def test_in_place_writes_on_views_are_read_through_their_root():
    base = fl.zeros(6)
    fl.sync()
    v = base[2:5]
    v.add_(1.0)                              # rebinds base; v re-derived from it
    unrelated = fl.ones(3) * 4
    np.testing.assert_array_equal(v.numpy(), [1, 1, 1])
    np.testing.assert_array_equal(base.numpy(), [0, 0, 1, 1, 1, 0])
    assert unrelated.is_pending
    np.testing.assert_array_equal(unrelated.numpy(), [4, 4, 4])


def test_a_check_guarding_the_read_runs_with_it():
    x = fl.arange(5.)
    fl.sync()
    bad = x[fl.tensor([7])]
    unrelated = x + 1
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        bad.numpy()
    assert unrelated.is_pending
    np.testing.assert_array_equal(unrelated.numpy(), [1, 2, 3, 4, 5])


def test_index_arithmetic_on_read_data_runs_on_the_host_and_compiles_nothing():
    ix = fl.tensor([3, 9, 1])
    t = fl.arange(20).reshape(4, 5)
    fl.sync()
    e0, c0 = _counts()
    ends = [int(i + 8) for i in ix]
    assert ends == [11, 17, 9]
    assert int(t[2, 1] * 3 - t[0, 4]) == 29
    assert (t.t()[1:3] > 6).tolist() == [[False, False, True, True], [False, True, True, True]]
    assert bool(ix[0] < ix[1]) is True
    assert _counts() == (e0, c0)


def test_float_arithmetic_is_left_to_xla():
    x = fl.tensor([0.1, 0.2])
    fl.sync()
    e0, _ = _counts()
    float(x[0] + x[1])                        # not exact on the host in general: a program
    assert _counts()[0] == e0 + 1


def test_host_eval_matches_xla_on_integer_wraparound():
    jax.config.update("jax_enable_x64", False)
    big = fl.tensor([2 ** 31 - 1], dtype=fl.int32)
    fl.sync()
    host = int(big[0] + 1)
    xla = int((big + fl.tensor([1], dtype=fl.int32)).sum())   # a reduction: not on the host
    assert host == xla == -2 ** 31


def test_host_eval_refuses_big_or_unknown_graphs():
    n = fl.arange(host_eval.MAX_ELEMENTS + 1)
    fl.sync()
    assert host_reads.host_view((n + 1)._node) is None
    small = fl.arange(4)
    fl.sync()
    assert host_reads.host_view((small.sum())._node) is None      # a reduction
    np.testing.assert_array_equal(host_reads.host_view((small * 2)._node), [0, 2, 4, 6])


def test_nanogpt_style_loop_runs_one_model_executable_per_iteration_and_matches_torch():
    """get_batch between forward and backward (randint indices iterated on the host), gradient
    accumulation, clip_grad_norm_, AdamW and a loss.item() every iteration."""
    V, T, B, steps, accum = 11, 8, 4, 6, 2
    data_np = np.random.default_rng(0).integers(0, V, 400)

    def run(m):
        torch.manual_seed(0)                   # the same initial weights on both sides
        tm = torch.nn.Sequential(torch.nn.Embedding(V, 16), torch.nn.Linear(16, V))
        if m is fl:
            model = fl.nn.Sequential(fl.nn.Embedding(V, 16), fl.nn.Linear(16, V))
            model.load_state_dict({k: fl.from_numpy(v.detach().numpy())
                                   for k, v in tm.state_dict().items()})
        else:
            model = tm
        opt = m.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        rng = np.random.default_rng(1)          # the indices: the same on both sides

        def get_batch():
            ix = m.from_numpy(rng.integers(0, len(data_np) - T - 1, (B,)))
            x = m.stack([m.from_numpy(data_np[i:i + T]) for i in ix])
            y = m.stack([m.from_numpy(data_np[i + 1:i + 1 + T]) for i in ix])
            return x, y

        x, y = get_batch()
        losses, execs = [], []
        for _ in range(steps):
            e0 = fl.metrics.counters()["executions"]
            for _ in range(accum):
                logits = model(x)
                loss = m.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
                loss = loss / accum
                x, y = get_batch()                 # host reads between forward and backward
                loss.backward()
            m.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item() * accum)
            execs.append(fl.metrics.counters()["executions"] - e0)
        return losses, execs

    theirs, _ = run(torch)
    ours, execs = run(fl)
    np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-6)
    assert execs[2:] == [1] * (steps - 2), execs    # from_numpy indices: ONE step executable


def test_nanogpt_get_batch_with_drawn_indices_runs_one_executable_per_iteration():
    V, T, B = 11, 8, 4
    data_np = np.random.default_rng(0).integers(0, V, 400).astype(np.uint16)
    model = fl.nn.Sequential(fl.nn.Embedding(V, 16), fl.nn.Linear(16, V))
    opt = fl.optim.AdamW(model.parameters(), lr=1e-2)

    def get_batch():                             # nanoGPT's own: torch.randint, then iterate
        ix = fl.randint(len(data_np) - T, (B,))
        x = fl.stack([fl.from_numpy(data_np[i:i + T].astype(np.int64)) for i in ix])
        y = fl.stack([fl.from_numpy(data_np[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
        return x, y

    x, y = get_batch()
    execs, compiles = [], []
    for _ in range(6):
        c0 = fl.metrics.counters()
        logits = model(x)
        loss = fl.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        x, y = get_batch()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        c1 = fl.metrics.counters()
        execs.append(c1["executions"] - c0["executions"])
        compiles.append(c1["compiles"] - c0["compiles"])
    assert execs[2:] == [1] * 4, execs            # the step (the draw is numpy on the host)
    assert compiles[2:] == [0] * 4, compiles


def test_slicing_a_tensor_at_offsets_read_from_a_tensor_compiles_once():
    """`torch.stack([data[i:i + n] for i in ix])` on a tensor `data`: the offsets are data."""
    data = fl.arange(500.)
    data.requires_grad_(True)
    ref = np.arange(500.)
    fl.sync()
    compiles = []
    for _ in range(5):
        c0 = fl.metrics.counters()["compiles"]
        ix = fl.randint(0, 495, (6,))
        x = fl.stack([data[i:i + 8] for i in ix])
        (x * x).sum().backward()
        got, g, iv = x.numpy(), data.grad.numpy(), ix.numpy()
        data.grad = None
        np.testing.assert_array_equal(got, np.stack([ref[i:i + 8] for i in iv]))
        want = np.zeros(500)
        for i in iv:
            want[i:i + 8] += 2 * ref[i:i + 8]
        np.testing.assert_allclose(g, want)
        compiles.append(fl.metrics.counters()["compiles"] - c0)
    assert compiles[1:] == [0] * 4, compiles


def test_tensor_offsets_follow_python_slicing_and_narrow_matches_torch():
    d = np.arange(20.).reshape(4, 5)
    x, t = fl.from_numpy(d), torch.from_numpy(d)
    for s, e in ((0, 3), (2, 9), (-3, 5), (4, 2)):       # clamped, negative, empty
        np.testing.assert_array_equal(x[:, fl.tensor(s):fl.tensor(e)].numpy(),
                                      t[:, torch.tensor(s):torch.tensor(e)].numpy())
    for s in (0, 2, -3):
        np.testing.assert_array_equal(x.narrow(1, fl.tensor(s), 3).numpy(),
                                      t.narrow(1, torch.tensor(s), 3).numpy())
    with pytest.raises(IndexError, match="exceeds dimension size"):
        x.narrow(1, fl.tensor(4), 3)
    v = x[fl.tensor(1):fl.tensor(3)]                      # still a view of x, as in PyTorch
    v.mul_(0)
    np.testing.assert_array_equal(x.numpy()[1:3], 0)


def test_a_value_read_on_the_host_survives_a_failed_sync():
    ix = fl.tensor([3, 9])
    fl.sync()
    t = ix[0] + 5
    assert int(t) == 8                       # computed on the host, no program
    t.add_(1)                                # in place on top of what was read
    huge = fl.zeros(1 << 36) + 1             # 256 GiB: the sync fails before running
    with pytest.raises(MemoryError):
        fl.sync()                            # commits nothing ...
    assert int(t) == 8                       # ... and what was read stands
    u = ix[1] * 2
    assert int(u) == 18
    with pytest.raises(MemoryError):
        (huge + u).numpy()                   # u is a root of a failed read
    assert int(u) == 18
    del huge


def test_windows_of_a_data_tensor_at_python_int_offsets_compile_once():
    """word_language_model's get_batch: `source[i:i + bptt]` with i from range(): the
    window's offset is data once it is nonzero (the first window, at 0, is its own program)."""
    source = fl.from_numpy(np.arange(2000).reshape(200, 10))
    ref = np.arange(2000).reshape(200, 10)
    fl.sync()
    compiles = []
    for i in range(0, 160, 35):           # (full windows: a shorter last one is a new shape)
        c0 = fl.metrics.counters()["compiles"]
        data, target = source[i:i + 35], source[i + 1:i + 36].reshape(-1)
        got = (data * 2).sum(1).numpy(), target.numpy()
        np.testing.assert_array_equal(got[0], ref[i:i + 35].sum(1) * 2)
        np.testing.assert_array_equal(got[1], ref[i + 1:i + 36].reshape(-1))
        compiles.append(fl.metrics.counters()["compiles"] - c0)
    assert compiles[1] <= 1 and compiles[2:] == [0] * (len(compiles) - 2), compiles
    assert int(source[57, 3]) == 573 and int(source[120][9]) == 1209   # still read on the host
