"""The op declarations (@torch_op, flowlite/frontend/ops/_registry.py) against PyTorch's namespace: every
declared name is PyTorch's, and every PyTorch name a declared op could carry is exposed."""
import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite.frontend.ops import OPS
from flowlite.frontend.ops._registry import register, torch_op

# flowlite's own additions, kept on purpose: fl.one_hot (torch has it in nn.functional only),
# in-place maximum_/minimum_
EXTRA = {"one_hot", "maximum_", "minimum_"}
# PyTorch names a declared op does not carry, and why
NOT_EXPOSED = {
    "where": "Tensor.where(condition, other) takes self as the value, not the condition",
    "squeeze_": "in-place shape changes are not supported (a handle keeps its shape)",
    "unsqueeze_": "in-place shape changes are not supported",
    "transpose_": "in-place shape changes are not supported",
    "t_": "in-place shape changes are not supported",
}


def test_every_declared_name_exists_in_pytorch():
    missing = [n for n, e in OPS.items() if e.top and not hasattr(torch, n)]
    missing += [n for n, e in OPS.items() if e.method and not hasattr(torch.Tensor, n)]
    missing += [n + "_" for n, e in OPS.items()
                if e.inplace and not hasattr(torch.Tensor, n + "_")]
    assert set(missing) <= EXTRA, sorted(set(missing) - EXTRA)


def test_declared_ops_carry_every_pytorch_name_they_can():
    gaps = [n for n, e in OPS.items() if not e.top and hasattr(torch, n) and not hasattr(fl, n)]
    gaps += [n for n, e in OPS.items()
             if not e.method and hasattr(torch.Tensor, n) and not hasattr(fl.Tensor, n)]
    gaps += [n + "_" for n, e in OPS.items() if not e.inplace and
             hasattr(torch.Tensor, n + "_") and not hasattr(fl.Tensor, n + "_")]
    assert set(gaps) <= set(NOT_EXPOSED), sorted(set(gaps) - set(NOT_EXPOSED))


def test_declarations_generate_the_namespaces():
    for name, e in OPS.items():
        assert getattr(fl.frontend.ops, name) is e.fn
        if e.method:
            assert hasattr(fl.Tensor, name)
        if e.inplace:
            assert hasattr(fl.Tensor, name + "_")


def test_a_name_declared_twice_is_an_error():
    assert "exp" in OPS
    with pytest.raises(RuntimeError, match="'exp' is declared twice"):
        register("exp", lambda x: x)
    with pytest.raises(RuntimeError, match="declared twice"):
        @torch_op
        def sum(x):  # noqa: A001
            return x


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                                  "logical_or", "logical_xor", "atan2"])
def test_in_place_comparisons_and_logic_keep_the_dtype_as_in_pytorch(name):
    a = np.array([1.0, -2.0, 0.0, 3.0], np.float32)
    b = np.array([1.0, 2.0, 0.5, -3.0], np.float32)
    x, t = fl.tensor(a), torch.tensor(a)
    getattr(x, name + "_")(fl.tensor(b))
    getattr(t, name + "_")(torch.tensor(b))
    assert x.dtype is fl.float32
    np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6)


def test_in_place_scans_bitwise_not_and_new_top_level_names_match_pytorch():
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    x, t = fl.tensor(a), torch.tensor(a)
    x.cumsum_(1)
    t.cumsum_(1)
    x.cumprod_(0)
    t.cumprod_(0)
    np.testing.assert_allclose(x.numpy(), t.numpy())
    i, ti = fl.tensor([1, 6, -3]), torch.tensor([1, 6, -3])
    i.bitwise_not_()
    ti.bitwise_not_()
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(fl.bitwise_not(fl.tensor([True, False])).numpy(), [False, True])
    c = fl.clone(fl.tensor(a), memory_format=None)
    np.testing.assert_array_equal(c.numpy(), a)
    got = fl.index_add(fl.zeros(3), 0, fl.tensor([0, 2, 0]), fl.tensor([1.0, 2.0, 3.0]))
    ref = torch.index_add(torch.zeros(3), 0, torch.tensor([0, 2, 0]), torch.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
    got = fl.index_put(fl.zeros(3), (fl.tensor([1, 1]),), fl.tensor([2.0, 5.0]), accumulate=True)
    ref = torch.index_put(torch.zeros(3), (torch.tensor([1, 1]),), torch.tensor([2.0, 5.0]),
                          accumulate=True)
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
