"""Ordering ops — sort, argsort, msort, topk, kthvalue, median, nanmedian, mode, unique,
searchsorted, bucketize, cummax, cummin — against PyTorch (values, indices and gradients),
including PyTorch's order of NaN (largest) and -0.0 == 0.0, ties, dtypes and errors."""
import numpy as np
import pytest
import torch

import flowlite as fl
from _torch_oracle import compare

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")


def distinct(*shape, seed=0):
    """Distinct values (no ties), so every index is well defined."""
    n = int(np.prod(shape))
    return np.random.default_rng(seed).permutation(n).reshape(shape).astype(np.float64) / 7 - 3


def _family(m):
    """The same calls in flowlite (m = fl) and PyTorch (m = torch)."""
    def f(x):
        return (m.sort(x), m.sort(x, 0, descending=True), m.argsort(x, dim=1),
                m.topk(x, 3), m.topk(x, 2, dim=1, largest=False), x.topk(1, 0),
                m.kthvalue(x, 2, 0), x.kthvalue(4, -1, keepdim=True), m.median(x, 1),
                m.median(x), m.nanmedian(x, -1), x.median(0, keepdim=True), m.msort(x),
                m.cummax(x, 1), m.cummin(x, 2), x.cummax(0), m.sort(x, stable=True, dim=2))
    return f


def test_sort_family_values_indices_and_grads(x64):
    compare(_family(fl), _family(torch), distinct(3, 5, 4))


def test_sort_family_float32_values():
    compare(_family(fl), _family(torch), distinct(3, 5, 4, seed=1).astype(np.float32),
            rtol=1e-6, atol=1e-6)


def test_nan_signed_zero_and_ties_follow_pytorch():
    x = np.array([[3., 1., 2., 1., 3., np.nan, 0., -0., np.nan, -np.inf, np.inf, 1.],
                  [-0., 0., 2., np.nan, 2., -1., -1., 5., 0., 0., -0., 7.]], np.float32)

    def f(m):
        return lambda t: (m.sort(t, stable=True), m.sort(t, descending=True, stable=True),
                          m.argsort(t, dim=-1, stable=True), m.median(t, 1).values,
                          m.median(t), m.nanmedian(t, 1).values, m.nanmedian(t),
                          m.kthvalue(t, 11).values, m.topk(t, 2).values,
                          m.topk(t, 3, largest=False).values, m.cummax(t, 1), m.cummin(t, 1))
    compare(f(fl), f(torch), x, grad=False)
    # median of a row with NaNs is NaN at the first NaN, as in PyTorch
    compare(lambda t: fl.median(t, 1), lambda t: torch.median(t, 1), x, grad=False)


def test_global_median_gradient_is_shared_by_ties(x64):
    x = np.array([[2., 1.], [2., 3.], [5., 2.]])
    compare(lambda t: fl.median(t), lambda t: torch.median(t), x)
    compare(lambda t: fl.nanmedian(t), lambda t: torch.nanmedian(t),
            np.array([np.nan, 1., 4., 1.]))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int8", "bool", "float16", "bfloat16"])
def test_dtypes(dtype):
    g = np.random.default_rng(3)
    if dtype == "bool":
        x = g.integers(0, 2, (4, 9)).astype(bool)
    elif dtype == "bfloat16":
        import ml_dtypes
        x = distinct(4, 9).astype(ml_dtypes.bfloat16)
    elif dtype == "float16":
        x = distinct(4, 9).astype(np.float16)
    else:
        info = np.iinfo(dtype)
        x = g.integers(max(info.min, -100), min(info.max, 100), (4, 9)).astype(dtype)

    def ops(m):   # stable sorts and values: defined even with ties
        return lambda t: (m.sort(t, stable=True), m.sort(t, dim=0, descending=True, stable=True),
                          m.topk(t, 3).values, m.kthvalue(t, 3).values, m.median(t, 1).values,
                          m.cummax(t, 1), m.cummin(t, 0))
    if dtype == "bool":   # PyTorch has no kthvalue/median/topk for bool
        def ops(m):
            return lambda t: (m.sort(t, stable=True),
                              m.sort(t, dim=0, descending=True, stable=True),
                              m.cummax(t, 1), m.cummin(t, 0))
    compare(ops(fl), ops(torch), x, grad=False)


def test_int64_under_x64(x64):
    x = np.random.default_rng(4).integers(-2 ** 40, 2 ** 40, (3, 6))
    compare(lambda t: (fl.sort(t, stable=True), fl.topk(t, 2), fl.cummax(t, 1)),
            lambda t: (torch.sort(t, stable=True), torch.topk(t, 2), torch.cummax(t, 1)), x)


def test_mode_smallest_of_the_most_frequent_and_its_last_index(x64):
    x = np.random.default_rng(5).integers(0, 4, (6, 11)).astype(np.float64)
    compare(lambda t: (fl.mode(t), fl.mode(t, 0), t.mode(keepdim=True)),
            lambda t: (torch.mode(t), torch.mode(t, 0), t.mode(keepdim=True)), x)
    compare(lambda t: fl.mode(t), lambda t: torch.mode(t),
            np.random.default_rng(6).integers(-3, 3, (5, 13)).astype(np.int32))


def test_zero_d_inputs():
    x = np.array(2.5, np.float32)
    compare(lambda t: (fl.sort(t), fl.topk(t, 1), fl.kthvalue(t, 1), fl.median(t, 0),
                       fl.mode(t), fl.cummax(t, 0), fl.argsort(t)),
            lambda t: (torch.sort(t), torch.topk(t, 1), torch.kthvalue(t, 1),
                       torch.median(t, 0), torch.mode(t), torch.cummax(t, 0), torch.argsort(t)),
            x)


def test_topk_k_zero_and_full():
    x = distinct(2, 5).astype(np.float32)
    compare(lambda t: (fl.topk(t, 0), fl.topk(t, 5), fl.topk(t, 5, largest=False)),
            lambda t: (torch.topk(t, 0), torch.topk(t, 5), torch.topk(t, 5, largest=False)), x)


def test_unique_matches_pytorch_and_syncs():
    x = np.array([[3, 1, 2], [1, 3, 3], [0, 2, 1]], np.int32)
    for kw in ({}, {"return_inverse": True}, {"return_counts": True},
               {"return_inverse": True, "return_counts": True, "sorted": False},
               {"dim": 0, "return_inverse": True, "return_counts": True}):
        compare(lambda t: fl.unique(t, **kw), lambda t: torch.unique(t, **kw), x, grad=False)
    f = np.array([1., np.nan, -0., np.nan, 0., 1.], np.float32)
    compare(lambda t: fl.unique(t, return_counts=True),
            lambda t: torch.unique(t, return_counts=True), f, grad=False)
    # pending (a reduction: not read on the host): unique reads it (a sync, data-dependent
    # shape)
    t = fl.from_numpy(x) + fl.ones(3, 3, dtype=fl.int32).cumsum(0) - fl.tensor([0, 1, 2])[:, None]
    before = fl.metrics.counters()["syncs"]
    u = t.unique()
    assert fl.metrics.counters()["syncs"] == before + 1
    assert u.tolist() == [1, 2, 3, 4]


def test_searchsorted_and_bucketize():
    seq = np.array([1., 2., 2., 3., 5.], np.float32)
    v = np.array([[2., 0.5, 5., 9.], [3., 2.5, 1., np.nan]], np.float32)
    rows = np.sort(np.random.default_rng(7).standard_normal((2, 3, 6)), -1).astype(np.float32)
    vals = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)

    def f(m):
        return lambda s, x, r, y: (
            m.searchsorted(s, x), m.searchsorted(s, x, right=True),
            m.searchsorted(s, x, side="right"), m.searchsorted(s, x, out_int32=True),
            m.searchsorted(r, y), m.searchsorted(r, y, right=True), m.bucketize(x, s),
            m.bucketize(x, s, right=True), m.bucketize(y, s, out_int32=True),
            m.searchsorted(s, 2.0), m.searchsorted(s, 2.0, right=True))
    compare(f(fl), f(torch), seq, v, rows, vals, grad=False)
    # sorter= and integer boundaries with float values
    unsorted = np.array([5, 1, 3, 2], np.int64)
    sorter = np.argsort(unsorted).astype(np.int64)
    compare(lambda s, o, x: fl.searchsorted(s, x, sorter=o),
            lambda s, o, x: torch.searchsorted(s, x, sorter=o),
            unsorted, sorter, np.array([2, 4, 0, 6], np.int64), grad=False)
    compare(lambda s, x: fl.searchsorted(s, x), lambda s, x: torch.searchsorted(s, x),
            np.array([1, 2, 3], np.int64), np.array([1.5, 2.5, 3.0], np.float32), grad=False)


def test_errors_name_the_op():
    x = fl.zeros(2, 3)
    with pytest.raises(RuntimeError, match=r"topk\(\).*k=4 out of range"):
        fl.topk(x, 4)
    with pytest.raises(RuntimeError, match=r"kthvalue\(\).*k=0"):
        fl.kthvalue(x, 0)
    with pytest.raises(IndexError, match="sort: dimension out of range"):
        fl.sort(x, 2)
    with pytest.raises(RuntimeError, match="side and right can't be set to opposites"):
        fl.searchsorted(fl.arange(3), fl.arange(3), right=True, side="left")
    with pytest.raises(RuntimeError, match="first N-1 dimensions"):
        fl.searchsorted(fl.zeros(2, 3), fl.zeros(3, 1))
    with pytest.raises(RuntimeError, match="bucketize.*1 dimension"):
        fl.bucketize(fl.zeros(3), fl.zeros(2, 2))
    with pytest.raises(IndexError, match="median.*non-empty"):
        fl.median(fl.zeros(2, 0), 1)


def test_lazy_and_no_recompile_on_new_data():
    def run(seed):
        x = fl.from_numpy(distinct(4, 6, seed=seed).astype(np.float32))
        out = (fl.sort(x).values, fl.topk(x, 2).indices, fl.median(x, 1).values,
               fl.cummax(x, 0).values, fl.mode(x).values)
        assert all(o.is_pending for o in out)
        fl.sync()
        return out
    run(0)
    before = fl.metrics.counters()
    out = run(1)
    after = fl.metrics.counters()
    assert after["compiles"] == before["compiles"] and after["syncs"] == before["syncs"] + 1
    np.testing.assert_array_equal(out[0].numpy(),
                                  np.sort(distinct(4, 6, seed=1).astype(np.float32), -1))
