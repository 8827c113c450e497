"""allclose / isclose / equal / diag / Tensor.type against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import flowlite as fl

INF, NAN = float("inf"), float("nan")
PAIRS = [([1.0, 2.0], [1.0, 2.000001]), ([1.0, INF], [1.0, INF]), ([1.0, -INF], [1.0, INF]),
         ([NAN, 1.0], [NAN, 1.0]), ([1.0, 2.0], [1.1, 2.0]), ([0.0], [1e-9])]


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_allclose_match_torch(a, b, equal_nan):
    fa, fb, ta, tb = fl.tensor(a), fl.tensor(b), torch.tensor(a), torch.tensor(b)
    np.testing.assert_array_equal(fl.isclose(fa, fb, equal_nan=equal_nan).numpy(),
                                  torch.isclose(ta, tb, equal_nan=equal_nan).numpy())
    assert fl.allclose(fa, fb, equal_nan=equal_nan) == torch.allclose(ta, tb,
                                                                      equal_nan=equal_nan)


def test_equal_matches_torch():
    for a, b in [([1, 2], [1, 2]), ([1, 2], [1, 3]), ([1, 2], [1, 2, 3])]:
        assert fl.equal(fl.tensor(a), fl.tensor(b)) == torch.equal(torch.tensor(a),
                                                                  torch.tensor(b))


@pytest.mark.parametrize("k", [0, 1, 2, -1, -3])
def test_diag_matches_torch(k):
    v = np.arange(1.0, 4.0)
    m = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(fl.diag(fl.tensor(v), k).numpy(),
                                  torch.diag(torch.tensor(v), k).numpy())
    np.testing.assert_array_equal(fl.tensor(m).diag(k).numpy(),
                                  torch.tensor(m).diag(k).numpy())


def test_diag_gradient(x64):
    x = fl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = np.arange(16.0).reshape(4, 4)
    (fl.diag(x, 1) * fl.tensor(w)).sum().backward()
    (torch.diag(tx, 1) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_type_names_and_conversion():
    assert fl.ones(2).type() == torch.ones(2).type() == "torch.FloatTensor"
    assert fl.ones(2, dtype=fl.int32).type() == "torch.IntTensor"
    assert fl.ones(2).type("torch.DoubleTensor").dtype == fl.tensor([1.0]).double().dtype
    assert fl.ones(2).type(fl.int32).dtype == fl.int32


@pytest.mark.parametrize("name", ["FloatTensor", "LongTensor", "IntTensor", "ByteTensor",
                                  "BoolTensor", "HalfTensor", "ShortTensor", "CharTensor"])
def test_legacy_tensor_types_construct_and_isinstance_like_torch(name):
    F, T = getattr(fl, name), getattr(torch, name)
    a, b = F([1, 0, 2]), T([1, 0, 2])
    if name != "LongTensor":        # int64 is stored as int32 without x64 (IntTensor)
        assert a.type() == b.type() == f"torch.{name}"
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert isinstance(a, F) and isinstance(b, T)
    assert F(3, 2).shape == T(3, 2).shape and F().shape == T().shape
    assert F(fl.Size([2, 5])).shape == (2, 5)
    np.testing.assert_array_equal(F(np.array([3, 1])).numpy(), T(np.array([3, 1])).numpy())
    other = "FloatTensor" if name != "FloatTensor" else "ByteTensor"
    assert not isinstance(a, getattr(fl, other))
    with pytest.raises(TypeError, match=name):
        F([1], [2])
