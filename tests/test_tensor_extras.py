"""flowlite/frontend/tensor_extras.py against PyTorch: the top-level in-place functions, the
*_copy variants, split aliases, gradient (scalar, per-dim and coordinate spacing, both edge
orders), isin, nonzero_static, dtype utilities, process settings and the Tensor conveniences
(where, new, new_empty, sum_to_size, fill_diagonal_, reshape_as, dim_order, H/mH)."""
import numpy as np
import pytest
import torch

import flowlite as fl
from _torch_oracle import compare

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

A = np.array([[1.0, 4.0, 9.0, 16.0], [2.0, 5.0, 11.0, 12.5], [0.0, 1.0, 1.0, -3.0]])


def test_top_level_in_place_functions_act_on_their_first_argument():
    for name in ("exp_", "sqrt_", "clamp_", "neg_", "zero_", "fill_", "log10_", "xlogy_"):
        args = {"clamp_": (0.5, 2.0), "fill_": (3.0,), "xlogy_": (2.0,)}.get(name, ())
        x, t = fl.tensor([0.25, 1.0, 4.0]), torch.tensor([0.25, 1.0, 4.0])
        assert getattr(fl, name)(x, *args) is x
        getattr(torch, name)(t, *args)
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6, err_msg=name)


def test_copy_variants_and_split_aliases(x64):
    names = [("alias_copy", ()), ("diagonal_copy", ()),
             ("expand_copy", ((2, 3, 4),)), ("permute_copy", ((1, 0),)),
             ("select_copy", (0, 1)), ("slice_copy", (1, 1, 3)), ("squeeze_copy", ()),
             ("t_copy", ()), ("transpose_copy", (0, 1)), ("unsqueeze_copy", (1,)),
             ("view_copy", ((4, 3),)), ("unfold_copy", (1, 2, 1)),
             ("as_strided_copy", ((2, 2), (1, 2)))]
    compare(lambda a: tuple(getattr(fl, n)(a, *args) for n, args in names) +
            tuple(fl.split_copy(a, 2, 1)) + tuple(fl.split_with_sizes(a, [1, 3], 1)) +
            tuple(fl.unbind_copy(a)) + tuple(a.split_with_sizes([2, 1])) +
            tuple(fl.unsafe_chunk(a, 2, 1)) + (fl.concatenate([a, a], 1), fl.rsub(a, 5.0, 2),
                                              fl.fill(a, 2.5), fl.constant_pad_nd(a, (1, 2), 0.5)),
            lambda a: tuple(getattr(torch, n)(a, *args) for n, args in names) +
            tuple(torch.split_copy(a, 2, 1)) + tuple(torch.split_with_sizes(a, [1, 3], 1)) +
            tuple(torch.unbind_copy(a)) + tuple(a.split_with_sizes([2, 1])) +
            tuple(torch.unsafe_chunk(a, 2, 1)) + (torch.concatenate([a, a], 1),
                                                 torch.rsub(a, 5.0, alpha=2), torch.fill(a, 2.5),
                                                 torch.constant_pad_nd(a, (1, 2), 0.5)),
            A, rtol=1e-12, atol=1e-12)
    x = fl.zeros(3)
    fl.alias_copy(x).add_(1)            # a copy: x is unchanged
    assert x.tolist() == [0, 0, 0]
    y = fl.detach_copy(fl.ones(2, requires_grad=True))
    assert not y.requires_grad and y.tolist() == [1.0, 1.0]


def test_gradient_vs_pytorch(x64):
    coords = np.array([0.0, 1.0, 3.0, 4.5])
    compare(lambda a, c: (*fl.gradient(a), *fl.gradient(a, spacing=2.0),
                          *fl.gradient(a, spacing=[0.5, 3.0], dim=(0, 1), edge_order=2),
                          *fl.gradient(a, spacing=(c,), dim=1),
                          *fl.gradient(a, spacing=(c,), dim=1, edge_order=2),
                          *fl.gradient(a[0], spacing=(c,))),
            lambda a, c: (*torch.gradient(a), *torch.gradient(a, spacing=2.0),
                          *torch.gradient(a, spacing=[0.5, 3.0], dim=(0, 1), edge_order=2),
                          *torch.gradient(a, spacing=(c,), dim=1),
                          *torch.gradient(a, spacing=(c,), dim=1, edge_order=2),
                          *torch.gradient(a[0], spacing=(c,))), A, coords,
            rtol=1e-12, atol=1e-12)
    compare(lambda a: fl.gradient(a), lambda a: torch.gradient(a),
            np.array([1, 4, 9, 16]), grad=False)
    with pytest.raises(RuntimeError, match="edge_order"):
        fl.gradient(fl.tensor([1.0, 2.0]), edge_order=2)


def test_isin_and_nonzero_static(x64):
    e = np.array([[1, 2, 3], [4, 2, 7]])
    compare(lambda a: (fl.isin(a, fl.tensor([2, 5, 7])), fl.isin(a, fl.tensor([2, 7]),
                                                                invert=True),
                       fl.isin(a, 3), fl.isin(3, a), fl.isin(a, fl.tensor([], dtype=fl.int64))),
            lambda a: (torch.isin(a, torch.tensor([2, 5, 7])),
                       torch.isin(a, torch.tensor([2, 7]), invert=True), torch.isin(a, 3),
                       torch.isin(3, a), torch.isin(a, torch.tensor([], dtype=torch.int64))), e)
    f = np.array([1.0, np.nan, 2.5])
    compare(lambda a: fl.isin(a, fl.tensor([np.nan, 2.5], dtype=fl.float64)),
            lambda a: torch.isin(a, torch.tensor([np.nan, 2.5], dtype=torch.float64)), f)
    m = np.array([[0, 1, 0], [1, 1, 0]])
    compare(lambda a: (fl.nonzero_static(a, size=5), fl.nonzero_static(a, size=2, fill_value=7),
                       a.nonzero_static(size=4), fl.nonzero_static(a[0], size=3)),
            lambda a: (torch.nonzero_static(a, size=5),
                       torch.nonzero_static(a, size=2, fill_value=7), a.nonzero_static(size=4),
                       torch.nonzero_static(a[0], size=3)), m)


def test_dtype_utilities_and_settings():
    assert fl.promote_types(fl.int32, fl.float16) is fl.float16
    assert fl.result_type(fl.tensor([1]), 1.0) is fl.float32
    assert fl.result_type(fl.tensor([1]), fl.tensor(1.0)) is fl.float32
    assert fl.can_cast(fl.int32, fl.float32) and not fl.can_cast(fl.float32, fl.int32)
    assert fl.typename(fl.tensor([1.0])) == "torch.FloatTensor" and fl.typename(3) == "int"
    assert not fl.is_storage(fl.ones(1)) and fl.get_device(fl.ones(1)) == -1
    assert fl.get_default_device() == fl.device("cpu") or fl.get_default_device() is not None
    fl.set_num_threads(3)
    assert fl.get_num_threads() == 3
    fl.use_deterministic_algorithms(True, warn_only=True)
    assert fl.are_deterministic_algorithms_enabled() and fl.get_deterministic_debug_mode() == 1
    fl.set_deterministic_debug_mode("default")
    assert not fl.are_deterministic_algorithms_enabled()
    fl.set_warn_always(True)
    assert fl.is_warn_always_enabled()
    fl.set_warn_always(False)


def test_tensor_conveniences():
    x = fl.tensor([[1.0, -2.0], [3.0, -4.0]])
    assert x.where(x > 0, 0.0).tolist() == [[1.0, 0.0], [3.0, 0.0]]
    assert x.new([5, 6]).tolist() == [5.0, 6.0] and x.new(2, 3).shape == (2, 3)
    assert x.new().shape == (0,) and x.new_empty(3).dtype is fl.float32
    assert x.new(fl.Size([2, 1])).shape == (2, 1)
    assert x.sum_to_size(1, 2).tolist() == [[4.0, -6.0]]
    with pytest.raises(RuntimeError, match="not expandable"):
        x.sum_to_size(3)
    assert x.reshape_as(fl.zeros(4)).shape == (4,) and x.ndimension() == 2
    assert x.to_dense() is x and x.t().dim_order() == (1, 0) and x.dim_order() == (0, 1)
    assert x.H.tolist() == x.t().tolist() and x.mH.tolist() == x.t().tolist()
    y, t = fl.zeros(7, 3), torch.zeros(7, 3)
    y.fill_diagonal_(1.0, wrap=True)
    t.fill_diagonal_(1.0, wrap=True)
    np.testing.assert_array_equal(y.numpy(), t.numpy())
    z, u = fl.zeros(3, 4), torch.zeros(3, 4)
    z.fill_diagonal_(5)
    u.fill_diagonal_(5)
    np.testing.assert_array_equal(z.numpy(), u.numpy())
    assert fl.to_dlpack(x) is not None
