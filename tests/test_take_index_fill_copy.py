"""take / index_fill / index_copy (and their in-place forms) against PyTorch: values,
gradients, and the checked out-of-range errors (raised at the sync, like every checked op)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import flowlite as fl

X = np.arange(24.0).reshape(2, 3, 4)


def _both(fn):
    return fn(fl, fl.tensor(X)), fn(torch, torch.tensor(X))


@pytest.mark.parametrize("fn", [
    lambda m, x: m.take(x, m.tensor([[0, -1], [5, 23]])),
    lambda m, x: x.index_fill(1, m.tensor([0, -1]), -7.0),
    lambda m, x: x.index_fill(2, m.tensor(1), m.tensor(3.5)),
    lambda m, x: x.index_copy(2, m.tensor([3, 0]), m.ones(2, 3, 2, dtype=x.dtype)),
    lambda m, x: x.clone().index_fill_(0, m.tensor([1]), 0.0),
    lambda m, x: x.clone().index_copy_(1, m.tensor([2]), m.zeros(2, 1, 4, dtype=x.dtype)),
], ids=["take", "index_fill", "index_fill_0d_tensor", "index_copy", "index_fill_",
        "index_copy_"])
def test_values_match_torch(fn):
    ours, theirs = _both(fn)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_gradients_match_torch(x64):
    def run(m):
        x = m.tensor(X, requires_grad=True)
        s = m.tensor(np.arange(12.0).reshape(2, 3, 2), requires_grad=True)
        w = m.tensor(np.linspace(-1, 1, 24).reshape(2, 3, 4))
        y = x.index_copy(2, m.tensor([3, 0]), s).index_fill(1, m.tensor([1]), 2.0)
        ((y * w).sum() + (m.take(x, m.tensor([0, 5, 5])) ** 2).sum()).backward()
        return x.grad, s.grad
    for a, b in zip(run(fl), run(torch)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda m, x: m.take(x, m.tensor([24])),
    lambda m, x: m.take(x, m.tensor([-25])),
    lambda m, x: x.index_fill(1, m.tensor([3]), 0.0),
    lambda m, x: x.index_copy(1, m.tensor([-1]), m.ones(2, 1, 4, dtype=x.dtype)),
], ids=["take_hi", "take_lo", "index_fill_hi", "index_copy_negative"])
def test_out_of_range_raises_like_torch(fn):
    with pytest.raises(IndexError):
        fn(torch, torch.tensor(X))
    with pytest.raises(IndexError, match="out of bounds"):
        fn(fl, fl.tensor(X)).numpy()
