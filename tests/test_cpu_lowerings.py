"""The CPU-only lowerings chosen by measurement (bench/lowering_choices.py): a convolution with
few input taps as a sum of shifted slices, a max-pool (an avg-pool, and its gradient) as the
max (sum) of its window's slices, and the max-pool gradient's window choice computed once.  Each must give the reference's values
(XLA's own convolution / reduce_window, PyTorch for forward and backward) and must really be
what the CPU program runs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax import lax

import flowlite as fl
import flowlite.nn.functional as F
from flowlite.frontend import primitives as P

# (x shape, w shape, (strides, padding pairs, lhs dilation, rhs dilation, groups))
TAP_CASES = [
    ((4, 1, 10, 10), (5, 1, 3, 3), ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)),
    ((4, 3, 11, 9), (6, 3, 3, 3), ((2, 1), ((1, 2), (0, 1)), (1, 1), (2, 1), 1)),
    ((2, 1, 12), (3, 1, 5), ((1,), ((2, 2),), (1,), (1,), 1)),
    ((2, 2, 5, 6, 7), (3, 2, 2, 2, 2), ((1, 1, 2), ((1, 0), (0, 0), (1, 1)), (1, 1, 1),
                                        (1, 1, 1), 1)),
]


@pytest.mark.parametrize("xs,ws,a", TAP_CASES)
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_conv_as_taps_equals_xla_convolution(xs, ws, a, dtype, tol, x64):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(xs).astype(dtype))
    w = jnp.asarray(rng.standard_normal(ws).astype(dtype))
    b = jnp.asarray(rng.standard_normal(ws[0]).astype(dtype))
    assert P._taps_pay(a, x, w)
    got = jax.jit(lambda x, w, b: P._conv(a, x, w, b))(x, w, b)
    want = lax.conv_general_dilated(x, w, *a[:4], precision="highest") + \
        b.reshape((1, -1) + (1,) * (len(xs) - 2))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def test_taps_only_where_they_pay():
    a = ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)
    x32 = jnp.zeros((2, 1, 8, 8), jnp.float32)
    assert P._taps_pay(a, x32, jnp.zeros((4, 1, 3, 3), jnp.float32))       # LeNet's conv1
    assert not P._taps_pay(a, jnp.zeros((2, 16, 8, 8)), jnp.zeros((4, 16, 3, 3)))  # 144 taps
    assert not P._taps_pay(a, x32.astype(jnp.bfloat16), jnp.zeros((4, 1, 3, 3), jnp.bfloat16))
    grouped = a[:4] + (2,)
    assert not P._taps_pay(grouped, jnp.zeros((2, 2, 8, 8)), jnp.zeros((4, 1, 3, 3)))
    transposed = a[:2] + ((2, 2),) + a[3:]
    assert not P._taps_pay(transposed, x32, jnp.zeros((4, 1, 3, 3), jnp.float32))


def _program(fn, *args):
    """The compiled CPU program of the pending graph fn(*args) builds (values discarded)."""
    out = fn(*args)
    text = fl.debug.hlo(out if isinstance(out, (list, tuple)) else [out], "hlo")
    fl.sync()
    return text


def test_cpu_program_runs_the_taps_and_slices_not_convolution_or_reduce_window():
    x = fl.randn(8, 1, 12, 12)
    w = fl.randn(4, 1, 3, 3)
    text = _program(lambda x, w: F.max_pool2d(F.conv2d(x, w), 2), x, w)
    assert "convolution(" not in text and "reduce-window(" not in text
    # a 16-channel convolution stays XLA's
    x16, w16 = fl.randn(2, 16, 6, 6), fl.randn(4, 16, 3, 3)
    assert "convolution(" in _program(F.conv2d, x16, w16)


def test_lenet_layers_forward_and_backward_match_torch():
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((6, 1, 28, 28)).astype(np.float32)
    w0 = rng.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.3
    b0 = rng.standard_normal(16).astype(np.float32)
    g0 = rng.standard_normal((6, 16, 13, 13)).astype(np.float32)

    x, w, b = fl.from_numpy(x0), *(fl.from_numpy(v).requires_grad_() for v in (w0, b0))
    y = F.max_pool2d(F.relu(F.conv2d(x, w, b)), 2)
    (y * fl.from_numpy(g0)).sum().backward()

    tx, tw, tb = torch.from_numpy(x0), *(torch.from_numpy(v).requires_grad_() for v in (w0, b0))
    ty = torch.nn.functional.max_pool2d(torch.relu(torch.nn.functional.conv2d(tx, tw, tb)), 2)
    (ty * torch.from_numpy(g0)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 0), (2, 1, 1)])
def test_max_pool_slices_forward_and_gradient_match_torch(kernel, stride, padding):
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    x0[0, 0, :2, :2] = 1.0                 # a tie: PyTorch's gradient goes to the first max
    x0[1, 2, 4, 4] = np.nan                 # NaN propagates as in PyTorch
    x0[0, 1, 3, :] = -np.inf
    x = fl.from_numpy(x0).requires_grad_()
    y = F.max_pool2d(x, kernel, stride, padding)
    g0 = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    (y * fl.from_numpy(g0)).sum().backward()

    tx = torch.from_numpy(x0).requires_grad_()
    ty = torch.nn.functional.max_pool2d(tx, kernel, stride, padding)
    (ty * torch.from_numpy(g0)).sum().backward()
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_max_pool_slices_equal_reduce_window_exactly_on_every_dtype():
    rng = np.random.default_rng(3)
    a = ("max", (1, 1, 3, 2), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (0, 1)))
    for dt in (np.float32, np.float64, np.int32, np.float16):
        x = jnp.asarray((rng.standard_normal((2, 2, 7, 6)) * 10).astype(dt))
        init = np.array(-np.inf if np.issubdtype(dt, np.floating) else np.iinfo(dt).min, dt)
        want = lax.reduce_window(x, init, lax.max, *a[1:])
        got = jax.jit(lambda x: P._window(a, x))(x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("kernel,stride,padding,count_include_pad",
                         [(2, 2, 0, True), (3, 2, 1, True), (3, 2, 1, False), (3, 1, 1, False)])
def test_avg_pool_slices_forward_and_gradient_match_torch(kernel, stride, padding,
                                                          count_include_pad):
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    x = fl.from_numpy(x0).requires_grad_()
    y = F.avg_pool2d(x, kernel, stride, padding, count_include_pad=count_include_pad)
    g0 = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    (y * fl.from_numpy(g0)).sum().backward()

    tx = torch.from_numpy(x0).requires_grad_()
    ty = torch.nn.functional.avg_pool2d(tx, kernel, stride, padding,
                                        count_include_pad=count_include_pad)
    (ty * torch.from_numpy(g0)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_sum_window_slices_equal_reduce_window():
    rng = np.random.default_rng(5)
    a = ("sum", (1, 1, 3, 2), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (0, 1)))
    for dt in (np.float32, np.int32):
        x = jnp.asarray((rng.standard_normal((2, 2, 7, 6)) * 10).astype(dt))
        want = lax.reduce_window(x, np.array(0, dt), lax.add, *a[1:])
        got = jax.jit(lambda x: P._window(a, x))(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-5)
    text = _program(lambda x: F.avg_pool2d(x, 2), fl.randn(2, 3, 8, 8))
    assert "reduce-window(" not in text
