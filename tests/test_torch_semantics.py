"""Edge semantics checked against PyTorch 2.13: zero gradients of piecewise-constant ops,
lists read as index tuples, varargs dims, dtype-wrapping casts."""
import warnings

import numpy as np
import pytest
import torch

import flowlite as fl


@pytest.mark.parametrize("op", ["sign", "floor", "ceil", "round", "trunc", "pow0"])
def test_piecewise_constant_ops_give_zero_gradients_not_none(op):
    grads = []
    for lib in (torch, fl):
        x = lib.tensor([1.5, -2.0, 0.0, 0.25], requires_grad=True)
        y = x ** 0 if op == "pow0" else getattr(x, op)()
        (y * lib.tensor([1.0, 2.0, 3.0, 4.0]) + x * 0.5).sum().backward()
        grads.append(x.grad.detach().numpy() if lib is torch else x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_sign_alone_leaves_a_zero_gradient():
    x = fl.tensor([1.0, -1.0], requires_grad=True)
    x.sign().sum().backward()
    assert x.grad is not None and x.grad.tolist() == [0.0, 0.0]


INDEXES = {
    "list_of_ints": lambda L: [0, 1],
    "list_holding_a_list": lambda L: [[0, 1]],
    "list_holding_two_lists": lambda L: [[0, 1], [1, 2]],
    "list_holding_a_tensor": lambda L: [L.tensor([1, 0])],
    "list_holding_a_slice": lambda L: [slice(None), [0, 2]],
    "list_holding_none": lambda L: [None, 0],
    "list_holding_ellipsis": lambda L: [Ellipsis, 1],
}


@pytest.mark.parametrize("name", sorted(INDEXES))
def test_a_list_index_holding_sequences_is_a_tuple_as_in_pytorch(name):
    out = []
    for lib in (torch, fl):
        x = lib.arange(24).reshape(2, 3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # PyTorch deprecates the form (still supports it)
            r = x[INDEXES[name](lib)]
            y = lib.zeros(2, 3, 4, dtype=lib.int32 if lib is fl else torch.int32)
            y[INDEXES[name](lib)] = 7
        out.append((np.asarray(r.tolist()), np.asarray(y.tolist())))
    np.testing.assert_array_equal(out[1][0], out[0][0])
    np.testing.assert_array_equal(out[1][1], out[0][1])


def test_flip_takes_varargs_a_list_or_dims_and_rejects_a_repeated_dim():
    for lib in (torch, fl):
        x = lib.arange(6).reshape(2, 3)
        assert x.flip(0, 1).tolist() == [[5, 4, 3], [2, 1, 0]]
        assert lib.flip(x, [1]).tolist() == [[2, 1, 0], [5, 4, 3]]
        assert lib.flip(x, dims=(0,)).tolist() == [[3, 4, 5], [0, 1, 2]]
        with pytest.raises(RuntimeError):
            x.flip(0, 0)


def test_mv_matches_pytorch_and_checks_shapes():
    a, v = np.arange(6.0).reshape(2, 3), np.array([1.0, -1.0, 2.0])
    got = fl.mv(fl.tensor(a), fl.tensor(v)).tolist()
    assert got == torch.mv(torch.tensor(a), torch.tensor(v)).tolist()
    with pytest.raises(RuntimeError, match="mv"):
        fl.mv(fl.tensor(a), fl.tensor([1.0, 2.0]))


def test_ravel_is_a_view_when_contiguous_and_a_copy_otherwise_as_in_pytorch():
    for lib in (torch, fl):
        x = lib.arange(6).reshape(2, 3)
        r = x.ravel()
        r[0] = 9
        assert x.tolist() == [[9, 1, 2], [3, 4, 5]]
        assert lib.ravel(x.t()).tolist() == [9, 3, 1, 4, 2, 5]
