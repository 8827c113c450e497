"""flowlite/frontend/ops/indexing_more.py and ops/quantile.py against PyTorch: scatter_reduce
(every reduction, with and without self, ties, zeros for prod), index_reduce, masked_select,
masked_scatter, put, argwhere, unravel_index, quantile/nanquantile (every interpolation,
NaNs, tensor q) and unique_consecutive — values and gradients."""
import numpy as np
import pytest
import torch

import flowlite as fl
from _torch_oracle import compare

pytestmark = [pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning"),
              pytest.mark.filterwarnings("ignore:index_reduce.*beta")]

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 5))
X[1, 2] = 0.0
SRC = RNG.standard_normal((3, 4))
SRC[0, 1] = SRC[0, 2] = 0.0                # zeros: prod's gradient has special cases
IDX = RNG.integers(0, 5, (3, 4))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_values_and_gradients(reduce, x64):
    compare(lambda a, s: (fl.scatter_reduce(a, 1, fl.tensor(IDX), s, reduce),
                          a.scatter_reduce(1, fl.tensor(IDX), s, reduce, include_self=False)),
            lambda a, s: (torch.scatter_reduce(a, 1, torch.tensor(IDX), s, reduce),
                          a.scatter_reduce(1, torch.tensor(IDX), s, reduce, include_self=False)),
            X, SRC, rtol=1e-10, atol=1e-10)


def test_scatter_reduce_ties_integers_and_in_place(x64):
    xt, st, it = np.array([1.0, 3, 3, 0]), np.array([3.0, 3, 1]), np.array([1, 1, 2])
    compare(lambda a, s: tuple(fl.scatter_reduce(a, 0, fl.tensor(it), s, r, include_self=i)
                               for r in ("amax", "amin") for i in (True, False)),
            lambda a, s: tuple(torch.scatter_reduce(a, 0, torch.tensor(it), s, r,
                                                    include_self=i)
                               for r in ("amax", "amin") for i in (True, False)), xt, st)
    xi = np.array([1, 2, 3, 4])
    every = [(r, i) for r in ("sum", "prod", "mean", "amax", "amin") for i in (True, False)]
    compare(lambda a: tuple(fl.scatter_reduce(a, 0, fl.tensor([0, 0, 1]), fl.tensor([5, 6, 8]), r,
                                              include_self=i) for r, i in every),
            lambda a: tuple(torch.scatter_reduce(a, 0, torch.tensor([0, 0, 1]),
                                                 torch.tensor([5, 6, 8]), r, include_self=i)
                            for r, i in every), xi)
    t = fl.tensor([1.0, 2.0, 3.0])
    t.scatter_reduce_(0, fl.tensor([0, 0]), fl.tensor([5.0, 1.0]), "amax")
    assert t.tolist() == [5.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match="reduce argument must be"):
        fl.scatter_reduce(t, 0, fl.tensor([0]), t, "max")


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce(reduce, x64):
    compare(lambda a, s: (fl.index_reduce(a, 0, fl.tensor([0, 2, 0]), s, reduce),
                          a.index_reduce(1, fl.tensor([4, 4, 0]), s.T[:, :3].T.T[:3].T.T,
                                         reduce, include_self=False)),
            lambda a, s: (torch.index_reduce(a, 0, torch.tensor([0, 2, 0]), s, reduce),
                          a.index_reduce(1, torch.tensor([4, 4, 0]), s.T[:, :3].T.T[:3].T.T,
                                         reduce, include_self=False)),
            X, RNG.standard_normal((3, 5)), rtol=1e-10, atol=1e-10)


def test_masked_select_scatter_put_argwhere_unravel(x64):
    m = RNG.random((3, 5)) > 0.5
    compare(lambda a, s, t: (fl.masked_select(a, fl.tensor(m)), a.masked_select(fl.tensor(m[0])),
                             fl.masked_scatter(a, fl.tensor(m), s),
                             a.masked_scatter(fl.tensor(m[0]), t),
                             fl.put(a, fl.tensor([0, -1, 3]), s[:3]),
                             a.put(fl.tensor([0, 0, 3]), s[:3], accumulate=True),
                             fl.argwhere(a > 0), fl.argwhere(a[0, 0] > -9)),
            lambda a, s, t: (torch.masked_select(a, torch.tensor(m)),
                             a.masked_select(torch.tensor(m[0])),
                             torch.masked_scatter(a, torch.tensor(m), s),
                             a.masked_scatter(torch.tensor(m[0]), t),
                             torch.put(a, torch.tensor([0, -1, 3]), s[:3]),
                             a.put(torch.tensor([0, 0, 3]), s[:3], accumulate=True),
                             torch.argwhere(a > 0), torch.argwhere(a[0, 0] > -9)),
            X, RNG.standard_normal(20), RNG.standard_normal((4, 5)), rtol=1e-12, atol=1e-12)
    compare(lambda: fl.unravel_index(fl.tensor([[-1, 5], [7, 0]]), (2, 3)),
            lambda: torch.unravel_index(torch.tensor([[-1, 5], [7, 0]]), (2, 3)))
    t = fl.zeros(4)
    t.masked_scatter_(fl.tensor([True, False, True, False]), fl.tensor([1.0, 2.0]))
    t.put_(fl.tensor([3]), fl.tensor([9.0]))
    assert t.tolist() == [1.0, 0.0, 2.0, 9.0]


INTERP = ["linear", "lower", "higher", "midpoint", "nearest"]


@pytest.mark.parametrize("interpolation", INTERP)
def test_quantile_values_and_gradients(interpolation, x64):
    x = RNG.standard_normal((3, 5, 4))
    xn = x.copy()
    xn[0, 1, 2] = xn[2, 3, 1] = np.nan            # one NaN per reduced slice at most
    q = np.array([0.1, 0.5, 0.95])
    kw = dict(interpolation=interpolation)
    compare(lambda a, b, q: (fl.quantile(a, 0.3, **kw), fl.quantile(a, 0.0, 1, **kw),
                             fl.quantile(a, 1.0, -1, True, **kw), fl.quantile(a, q, 0, **kw),
                             a.nanquantile(q, 2, **kw), fl.quantile(b, q, 1, **kw),
                             fl.nanquantile(b, q, 1, **kw),
                             fl.quantile(a, q, keepdim=True, **kw)),
            lambda a, b, q: (torch.quantile(a, 0.3, **kw), torch.quantile(a, 0.0, 1, **kw),
                             torch.quantile(a, 1.0, -1, True, **kw),
                             torch.quantile(a, q, 0, **kw), a.nanquantile(q, 2, **kw),
                             torch.quantile(b, q, 1, **kw), torch.nanquantile(b, q, 1, **kw),
                             torch.quantile(a, q, keepdim=True, **kw)),
            x, xn, q, rtol=1e-12, atol=1e-12)


def test_quantile_float32_and_errors():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    compare(lambda a: (a.quantile(0.25, 1), fl.nanquantile(a, 0.75)),
            lambda a: (a.quantile(0.25, 1), torch.nanquantile(a, 0.75)), x, rtol=1e-6,
            atol=1e-6)
    with pytest.raises(RuntimeError, match="range"):
        fl.quantile(fl.tensor(x), 1.5)
    with pytest.raises(RuntimeError, match=r"range \[0, 1\]"):
        fl.quantile(fl.tensor(x), fl.tensor([0.5, 2.0]))
    with pytest.raises(RuntimeError, match="float or double"):
        fl.quantile(fl.tensor([1, 2]), 0.5)


def test_unique_consecutive():
    a = np.array([1, 1, 2, 2, 2, 3, 1, 1])
    for kw in ({}, dict(return_inverse=True, return_counts=True)):
        compare(lambda t: fl.unique_consecutive(t, **kw),
                lambda t: torch.unique_consecutive(t, **kw), a)
    b = np.array([[1, 1], [1, 1], [2, 3], [2, 3], [1, 1]])
    compare(lambda t: t.unique_consecutive(True, True, dim=0),
            lambda t: t.unique_consecutive(True, True, dim=0), b)
