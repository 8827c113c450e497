"""flowlite/frontend/ops/histogram.py against PyTorch: histogram (int bins over the data's range
or a given range, tensor bins, weight, density), histc, histogramdd and bincount — values equal
to torch's for float32 and float64, gradients with respect to the weights, errors, and no
recompiling when the data's range changes."""
import numpy as np
import pytest
import torch

import flowlite as fl
from _torch_oracle import compare

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

RNG = np.random.default_rng(0)
DATA = RNG.standard_normal(500)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histogram_values_match_pytorch(dtype, x64):
    x = DATA.astype(dtype)
    # exact edges: 0.1-spaced values land on bin edges, where a naive division misplaces them
    on_edges = (np.arange(-20, 21) / 10).astype(dtype)
    for kw in (dict(bins=10), dict(bins=7, range=(-1.0, 2.0)), dict(bins=5, density=True),
               dict(bins=1), dict(bins=13, range=(-0.5, 0.5), density=True)):
        compare(lambda t: tuple(fl.histogram(t, **kw)), lambda t: tuple(torch.histogram(t, **kw)),
                x, grad=False, rtol=0, atol=0)
    compare(lambda t: tuple(t.histogram(bins=4, range=(-2.0, 2.0))),
            lambda t: tuple(t.histogram(bins=4, range=(-2.0, 2.0))), on_edges, grad=False,
            rtol=0, atol=0)
    edges = np.array([-3.0, -0.5, 0.0, 0.25, 2.0], dtype)
    compare(lambda t, e: tuple(fl.histogram(t, e)), lambda t, e: tuple(torch.histogram(t, e)),
            x, edges, grad=False, rtol=0, atol=0)
    compare(lambda t, e: tuple(fl.histogram(t, e, density=True)),
            lambda t, e: tuple(torch.histogram(t, e, density=True)), x, edges, grad=False,
            rtol=1e-7, atol=0)


def test_histogram_weights_gradient_nan_and_outside(x64):
    x = np.array([0.1, 0.5, np.nan, 0.9, 5.0, -5.0, 1.0, 0.0])
    w = RNG.uniform(0.5, 2.0, x.shape)
    got = compare(lambda t, wt: tuple(fl.histogram(t.detach(), bins=4, range=(0.0, 1.0),
                                                   weight=wt)),
                  lambda t, wt: tuple(torch.histogram(t.detach(), bins=4, range=(0.0, 1.0),
                                                      weight=wt.detach())), x, w, grad=False)
    # the gradient with respect to the weights: each element's bin's (0 outside, NaN)
    wt = fl.tensor(w, requires_grad=True)
    h = fl.histogram(fl.tensor(x), bins=4, range=(0.0, 1.0), weight=wt).hist
    (h * fl.tensor([1.0, 2.0, 3.0, 4.0], dtype=fl.float64)).sum().backward()
    np.testing.assert_array_equal(wt.grad.numpy(), [1, 3, 0, 4, 0, 0, 4, 1])  # 0.5: bin 2
    assert got[0].numpy().sum() == pytest.approx(w[[0, 1, 3, 6, 7]].sum())


def test_histc_matches_pytorch_and_is_not_differentiable():
    x = DATA.astype(np.float32)
    for kw in (dict(bins=13), dict(bins=6, min=-1, max=1), dict(bins=3, min=2, max=2)):
        compare(lambda t: fl.histc(t, **kw), lambda t: torch.histc(t, **kw), x, grad=False,
                rtol=0, atol=0)
    compare(lambda t: t.histc(4, 0, 0), lambda t: t.histc(4, 0, 0),
            np.full(5, 3.0, np.float32), grad=False)
    t = fl.tensor(x, requires_grad=True)
    assert not fl.histc(t, 5).requires_grad
    with pytest.raises(NotImplementedError, match="histogram_cpu"):
        fl.histc(fl.tensor([1, 2, 3]))


def test_histogramdd_matches_pytorch(x64):
    pts = RNG.standard_normal((200, 2))
    w = RNG.uniform(0.1, 1.0, 200)
    for kw in (dict(bins=[3, 4]), dict(bins=5, range=[-1.0, 1.0, -2.0, 2.0], density=True)):
        compare(lambda p: (fl.histogramdd(p, **kw).hist, *fl.histogramdd(p, **kw).bin_edges),
                lambda p: (torch.histogramdd(p, **kw).hist,
                           *torch.histogramdd(p, **kw).bin_edges), pts, grad=False, rtol=1e-12,
                atol=0)
    e0, e1 = np.array([-2.0, 0.0, 2.0]), np.array([-1.0, 0.5, 1.0])
    compare(lambda p, wt, a, b: (fl.histogramdd(p, [a, b], weight=wt).hist,),
            lambda p, wt, a, b: (torch.histogramdd(p, [a, b], weight=wt).hist,), pts, w, e0, e1,
            grad=False)


def test_bincount_matches_pytorch():
    x = np.array([0, 1, 1, 3, 7, 3, 3], np.int64)
    compare(lambda t: (fl.bincount(t), fl.bincount(t, minlength=10), t.bincount()),
            lambda t: (torch.bincount(t), torch.bincount(t, minlength=10), t.bincount()), x)
    w = np.linspace(0.5, 2.0, 7).astype(np.float32)
    compare(lambda t, wt: fl.bincount(t.long(), wt),
            lambda t, wt: torch.bincount(t.long(), wt.detach()), x.astype(np.float32), w,
            grad=False)
    got = fl.bincount(fl.tensor(x), fl.tensor([1, 2, 3, 4, 5, 6, 7]))
    assert got.dtype is fl.float32 and got.tolist() == [1, 5, 0, 17, 0, 0, 0, 5]  # int -> float
    assert fl.bincount(fl.tensor([], dtype=fl.int64), minlength=3).tolist() == [0, 0, 0]
    wt = fl.tensor(w, requires_grad=True)
    (fl.bincount(fl.tensor(x), wt) * fl.arange(8.0)).sum().backward()
    np.testing.assert_array_equal(wt.grad.numpy(), x.astype(np.float32))
    for bad in (fl.tensor([1, -1]), fl.tensor([[1]]), fl.tensor([1.0])):
        with pytest.raises(RuntimeError, match="non-negative integral"):
            fl.bincount(bad)


def test_histogram_errors():
    with pytest.raises(NotImplementedError):
        fl.histogram(fl.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="not finite"):
        fl.histogram(fl.tensor([1.0, float("inf")]), bins=3)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        fl.histogram(fl.tensor([1.0]), bins=0)
    with pytest.raises(RuntimeError, match="same dtype"):
        fl.histogram(fl.tensor([1.0]), bins=fl.tensor([0.0, 1.0], dtype=fl.float16))


def test_a_changing_data_range_does_not_recompile():
    # makemore plots histograms of activations every few steps: the range is data, not program
    def run(k):
        a = DATA[k * 100:(k + 1) * 100].astype(np.float32) * (k + 1)
        got = fl.histogram(fl.tensor(a), bins=20).hist.numpy()
        np.testing.assert_array_equal(got, torch.histogram(torch.tensor(a), bins=20).hist.numpy())
    run(0)
    before = fl.metrics.counters()["compiles"]
    for k in range(1, 4):
        run(k)
    assert fl.metrics.counters()["compiles"] == before
