"""flowlite/frontend/ops/joining.py (and the view-returning splits in frontend/views.py)
against PyTorch: stacking, tiling, block_diag, cartesian_prod/combinations, rot90/flips,
diagonals, trace, kron, diff, vander, tril/triu_indices, the *_scatter ops, tensor_split &
co. — values and gradients in float64, integer dtypes, and the views writing through."""
import numpy as np
import pytest
import torch

import flowlite as fl
from _torch_oracle import compare
from conftest import check_fd

pytestmark = [pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")]

A = np.arange(1.0, 7.0).reshape(2, 3) * 0.7 - 1.0
B = np.array([[0.5, -1.0], [2.0, 0.25]])


def _joins(m):
    return lambda a, b: (
        m.hstack([a, b]), m.vstack([a, a]), m.row_stack([a[0], a[1]]), m.dstack([a, a]),
        m.column_stack([a[0], a[1]]), a.tile(2), m.tile(a, (2, 1, 2)), m.block_diag(a, b, a[0]),
        m.cartesian_prod(a[0], b[0]), m.combinations(a[0], 2),
        m.combinations(a[0], 3, with_replacement=True), m.rot90(a), m.rot90(a, 2),
        m.rot90(a, -1, [1, 0]), a.fliplr(), a.flipud(), m.diag_embed(a, 1),
        m.diag_embed(a, -1, 0, 2), m.diagflat(a, 1), a.trace(), m.kron(a, b), m.kron(a[0], b),
        m.diff(a * a), m.diff(a, 2, 0, prepend=a[:1] * 3), m.narrow_copy(a, 1, 1, 2),
        m.select_scatter(a, b[0], 1, 1), m.slice_scatter(a, b, 1, 0, 3, 2),
        m.diagonal_scatter(a, b[0], 1), m.as_strided_scatter(a.detach(), b, (2, 2), (1, 2), 1),
        *m.tensor_split(a, 2, 1), *a.tensor_split([1, 5], 1), *m.hsplit(a, 3),
        *m.vsplit(a, [1]), *m.atleast_3d(a, a[0]), *m.broadcast_tensors(a, a[0]),
        m.adjoint(a), m.atleast_2d(a[0, 0]))


def test_joins_values_and_gradients_vs_pytorch(x64):
    compare(_joins(fl), _joins(torch), A, B, rtol=1e-12, atol=1e-12)


def test_as_strided_scatter_gradient_is_the_derivative(x64):
    # PyTorch 2.13's gradient of as_strided_scatter with respect to its input is the
    # complement of the derivative (the gradient kept at the overwritten elements, zero
    # elsewhere): flowlite's is checked against finite differences instead
    check_fd(lambda a, b: (fl.as_strided_scatter(a, b, (2, 2), (1, 2), 1) *
                           fl.arange(6.0, dtype=fl.float64).reshape(2, 3)).sum(), A, B)


def test_vander(x64):
    # PyTorch's own vander backward fails (an in-place cumprod on a view): values only there,
    # flowlite's gradient against finite differences
    compare(lambda t: (fl.vander(t), fl.vander(t, 4, True), fl.vander(t, 1)),
            lambda t: (torch.vander(t), torch.vander(t, 4, True), torch.vander(t, 1)), A[0],
            grad=False, rtol=1e-12, atol=0)
    check_fd(lambda t: (fl.vander(t, 4) * fl.arange(4.0, dtype=fl.float64)).sum(), A[0])


def test_integer_and_bool_inputs():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    compare(lambda t: (fl.trace(t), fl.diff(t > 2), fl.vander(t[0]), fl.kron(t, t[:1]),
                       fl.block_diag(t, t[0]), fl.rot90(t), fl.tile(t, (2,))),
            lambda t: (torch.trace(t), torch.diff(t > 2), torch.vander(t[0]), torch.kron(t, t[:1]),
                       torch.block_diag(t, t[0]), torch.rot90(t), torch.tile(t, (2,))), a)
    for row, col, off in ((3, 4, 1), (4, 3, -1), (0, 2, 0)):
        for name in ("tril_indices", "triu_indices"):
            got = getattr(fl, name)(row, col, off)
            np.testing.assert_array_equal(got.numpy(), getattr(torch, name)(row, col, off).numpy())
            assert got.dtype is fl.int64 or not fl.get_default_dtype() is fl.float64


def test_splits_are_views_that_write_through():
    x = fl.zeros(2, 6)
    left, right = fl.tensor_split(x, 2, 1)
    left.add_(1.0)
    top, = fl.vsplit(x, [2])[:1]
    assert x.tolist() == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]] and top.shape == (2, 6)
    a = fl.zeros(2, 3)
    fl.adjoint(a)[0, 1] = 5.0
    assert a.tolist() == [[0, 0, 0], [5, 0, 0]]


def test_errors_follow_pytorch():
    with pytest.raises(RuntimeError, match="not divisible"):
        fl.hsplit(fl.zeros(2, 5), 2)
    with pytest.raises(RuntimeError, match="at least 2"):
        fl.vsplit(fl.zeros(3), 1)
    with pytest.raises(RuntimeError, match="size equal to the slice"):
        fl.select_scatter(fl.zeros(2, 3), fl.zeros(3), 1, 0)
    with pytest.raises(RuntimeError, match="2 or fewer dimensions"):
        fl.block_diag(fl.zeros(1, 1, 1))
    with pytest.raises(RuntimeError, match="dims to be different"):
        fl.rot90(fl.zeros(2, 2), 1, (0, 0))
    with pytest.raises(RuntimeError, match="expected a matrix"):
        fl.trace(fl.zeros(2))
