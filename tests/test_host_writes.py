"""Element reads and in-place writes of small host tensors (flowlite/frontend/host_writes.py).

makemore's bigram count matrix — `N[stoi[a], stoi[b]] += 1` for every pair of a word list — and
the other small-tensor idioms (counters, lookup tables, `p[k]`, `x[i].item()` in a loop) run on
the host as PyTorch runs them: no graph node, no program, PyTorch's values (integer wrap-around,
promotion, write-through views, bounds errors), and the tensor enters a later program as data."""
import random
import warnings

import numpy as np
import pytest

import flowlite as fl
from flowlite.engine.host_data import HostNode


def _words(n, seed=0):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    weights = [8, 2, 3, 4, 10, 2, 2, 5, 7, 1, 2, 5, 3, 7, 6, 2, 1, 6, 5, 6, 3, 1, 2, 1, 3, 1]
    return ["".join(rng.choices(letters, weights, k=rng.randint(2, 9))) for _ in range(n)]


def _count(words, N, stoi):
    for w in words:
        chs = ["."] + list(w) + ["."]
        for ch1, ch2 in zip(chs, chs[1:]):
            N[stoi[ch1], stoi[ch2]] += 1


def _counters():
    c = fl.metrics.counters()
    return {k: c[k] for k in ("compiles", "executions", "ops", "syncs")}


def test_the_bigram_count_matrix_is_built_on_the_host_and_read_as_pytorch_reads_it():
    words = _words(700)            # ~4,500 writes
    chars = sorted(set("".join(words)))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    ref = np.zeros((27, 27), np.int32)
    for w in words:
        chs = ["."] + list(w) + ["."]
        for a, b in zip(chs, chs[1:]):
            ref[stoi[a], stoi[b]] += 1
    fl.sync()
    c0 = _counters()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no "recorded without a sync" warning
        N = fl.zeros((27, 27), dtype=fl.int32)
        _count(words, N, stoi)
    c1 = _counters()
    # nothing recorded per write (the zeros, and the first element view before N was host data)
    assert c1 == {**c0, "ops": c1["ops"]} and c1["ops"] - c0["ops"] <= 4
    assert isinstance(N._node, HostNode) and N.dtype is fl.int32
    np.testing.assert_array_equal(N.numpy(), ref)
    assert N[0, :].tolist() == ref[0].tolist()
    assert N[3, 5].item() == ref[3, 5]
    p = N[0].float()
    p = p / p.sum()
    np.testing.assert_allclose(p.numpy(), ref[0] / ref[0].sum(), rtol=1e-6)
    assert fl.metrics.counters()["compiles"] - c1["compiles"] <= 2   # the reads' programs


def test_integer_elements_wrap_around_as_in_pytorch():
    N = fl.zeros((2, 3), dtype=fl.int32)
    N[0, 1] = 2 ** 31 - 1
    N[0, 1] += 1
    N[1, 2] -= 3
    N[1, 0] += 2 ** 31 - 1
    N[1, 0] *= 2
    assert N.tolist() == [[0, -2 ** 31, 0], [-2, 0, -3]]
    u = fl.zeros(3, dtype=fl.uint8)
    u[1] -= 1
    u[2] += 255
    u[2] += 1
    assert u.tolist() == [0, 255, 0] and u.dtype is fl.uint8


def test_promotion_and_in_place_casting_follow_pytorch():
    N = fl.zeros((2, 2), dtype=fl.int32)
    N[0, 1] += fl.tensor(3)                    # a 0-d int64 tensor: int32 stays
    assert N.dtype is fl.int32 and N.tolist() == [[0, 3], [0, 0]]
    with pytest.raises(RuntimeError, match="can't be cast"):
        N[1, 1] += 1.5                         # a float result into an int tensor
    assert N.tolist() == [[0, 3], [0, 0]]
    b = fl.zeros(2, dtype=fl.bool)
    with pytest.raises(RuntimeError, match="can't be cast"):
        b[0] += 1
    p = fl.zeros(4)
    p[1] += 0.1
    p[1] += 0.2
    p[2] -= 1e-8
    p[0] += fl.tensor(2.5)
    want = np.zeros(4, np.float32)
    want[1] = np.float32(np.float32(0.1) + np.float32(0.2))
    want[2] = -np.float32(1e-8)
    want[0] = 2.5
    np.testing.assert_array_equal(p.numpy(), want)


def test_views_write_through_both_ways():
    N = fl.zeros((3, 3), dtype=fl.int32)
    row = N[1]
    v = N[2, 2]
    N[1, 2] += 1
    row[0] += 5
    N[2, 2] += 7
    N[0][1] += 4                  # a view of a view
    assert row.tolist() == [5, 0, 1]
    assert v.item() == 7          # an element is a view too
    assert N.tolist() == [[0, 4, 0], [5, 0, 1], [0, 0, 7]]
    s = N[:, 1]                   # a strided view, written on the host as well
    s[2] += 9
    assert N[2, 1].item() == 9
    N[0, 0] = N[2, 2]             # another element's view: a copy of its value
    N[1][1] = row[0]
    assert N[0].tolist() == [7, 4, 0] and N[1, 1].item() == 5


def test_an_index_out_of_range_raises_a_clear_index_error():
    N = fl.zeros((3, 4), dtype=fl.int32)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        N[3, 0] += 1
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        N[0, -5]
    N[-1, -1] += 2
    assert N[2, 3].item() == 2


def test_a_value_read_before_a_write_keeps_its_value():
    N = fl.zeros((2, 2), dtype=fl.int32)
    N[0, 0] += 1
    y = N * 2                     # pending: reads N's value as it is now
    before = N[0, 0]
    N[0, 0] += 1
    assert y.tolist() == [[2, 0], [0, 0]]
    assert before.item() == 2     # (a view: it follows N, as in PyTorch)
    assert N.tolist() == [[2, 0], [0, 0]]


def test_a_host_tensor_used_in_a_program_enters_as_data_and_stays_writable():
    N = fl.zeros((5, 5), dtype=fl.int32)
    for k in range(5):
        N[k, k] += k
    assert (N * 3).sum().item() == 30         # uploaded for the program
    N[4, 0] += 1
    assert (N * 3).sum().item() == 33
    assert N[4].tolist() == [1, 0, 0, 0, 4]


def test_tensors_that_require_grad_stay_recorded():
    w = fl.zeros(3, requires_grad=True)
    with fl.no_grad():
        w[0] += 1
    assert not isinstance(w._node, HostNode)
    assert w.detach().tolist() == [1.0, 0.0, 0.0]
    x = fl.zeros(2, requires_grad=True)
    y = x * 1
    y[0] += 1
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


def test_a_failed_sync_takes_back_host_writes_since_the_last_one():
    N = fl.zeros((3, 3), dtype=fl.int32)
    N[0, 0] += 1
    fl.sync()
    for _ in range(3):
        N[0, 0] += 1
    N[1, 1] += 5
    bad = fl.arange(3)[fl.tensor([5])]
    with pytest.raises(IndexError):
        bad.numpy()
    assert N.tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
    N[0, 0] += 1
    assert N[0, 0].item() == 2


def test_element_reads_in_a_loop_run_no_program():
    x = fl.tensor([1.5, 2.5, 4.0, 8.0])
    lut = fl.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    c0 = _counters()
    s = 0.0
    for i in range(4):
        s += x[i].item()
    k = [int(lut[j]) for j in range(8)]
    c = fl.zeros((), dtype=fl.int64)
    for j in range(100):
        c += 1
    c1 = _counters()
    assert s == 16.0 and k == [3, 1, 4, 1, 5, 9, 2, 6] and c.item() == 100
    assert c1["compiles"] == c0["compiles"] and c1["executions"] == c0["executions"]


def test_a_large_counter_is_written_in_place_without_a_copy_per_write():
    N = fl.zeros((300, 300), dtype=fl.int32)      # 90,000 elements
    rs = np.random.RandomState(1).randint(0, 300, (3000, 2))
    for a, b in rs:
        N[int(a), int(b)] += 1
    ref = np.zeros((300, 300), np.int32)
    np.add.at(ref, (rs[:, 0], rs[:, 1]), 1)
    np.testing.assert_array_equal(N.numpy(), ref)
    assert isinstance(N._node, HostNode)


def test_element_assignment_converts_as_pytorch_and_stays_on_the_host():
    N = fl.zeros((2, 3), dtype=fl.int32)
    c0 = _counters()
    for _ in range(50):
        N[0, 1] = N[0, 1] + 1                 # the non-augmented form
    N[1, 0] = 2.7                             # truncated toward zero
    N[1, 1] = -2.7
    N[1, 2] = True
    c1 = _counters()
    assert N.tolist() == [[0, 50, 0], [2, -2, 1]]
    # (the first read, of the constant N was, is recorded; nothing after it)
    assert c1["ops"] - c0["ops"] <= 4 and c1["executions"] == c0["executions"]
    b = fl.zeros(3, dtype=fl.bool)
    b[1] = 2
    assert b.tolist() == [False, True, False]
    row = N[1]
    row[0] = 7                                # through a view, into the root
    assert N[1, 0].item() == 7


def test_float_elements_update_in_one_rounding_as_pytorch(x64):
    p = fl.zeros(5)
    d = fl.zeros(2, dtype=fl.float64)
    want = np.zeros(5, np.float32)
    for k in range(40):
        p[k % 5] += 0.1
        want[k % 5] = np.float32(want[k % 5] + np.float32(0.1))
    p[4] /= 3
    want[4] = np.float32(want[4] / np.float32(3))
    p[3] *= 1e39                                   # overflows float32: inf, as in PyTorch
    want[3] = np.inf
    d[1] -= 1e-300
    np.testing.assert_array_equal(p.numpy(), want)
    assert d.tolist() == [0.0, -1e-300] and d.dtype is fl.float64
