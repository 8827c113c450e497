"""The primitives nn is built on, forward and backward against jax (float64): N-d convolution
with stride/padding/dilation/groups, the transposed convolution (ops._conv_input_grad), max and
sum window reductions (ops._window_raw) and softmax/log_softmax, plus their second order."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import flowlite as fl
import flowlite.frontend.ops as F
from conftest import check_fd, check_grad, check_values, randn

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

# (x shape, w shape, attrs): attrs = (strides, padding pairs, lhs_dilation, rhs_dilation, groups)
CONVS = [
    ((2, 3, 7, 6), (4, 3, 3, 3), ((1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1)),  # 3x3 "same"
    ((1, 2, 10), (4, 1, 4), ((2,), ((1, 2),), (1,), (2,), 2)),                    # conv1d
    ((1, 4, 8, 7), (6, 2, 3, 2), ((2, 1), ((1, 0), (2, 2)), (1, 1), (2, 1), 2)),  # groups
    ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), ((1, 2, 1), ((0, 1), (1, 1), (0, 0)), (1, 1, 1),
                                        (1, 1, 2), 1)),                           # conv3d
    ((1, 1, 1, 1), (2, 1, 1, 1), ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)),  # size 1
]


def _jax_conv(attrs, x, w):
    strides, padding, lhs, rhs, groups = attrs
    return lax.conv_general_dilated(x, w, strides, padding, lhs, rhs,
                                    feature_group_count=groups)


def test_convolutions_values_and_grads(x64):
    arrays = []
    for k, (sx, sw, _) in enumerate(CONVS):
        arrays += [randn(*sx, seed=k), randn(*sw, seed=50 + k)]

    def fl_fn(*xs):
        return tuple(F._conv_raw(xs[2 * k], xs[2 * k + 1], c[2]) for k, c in enumerate(CONVS))

    def jnp_fn(*xs):
        return tuple(_jax_conv(c[2], xs[2 * k], xs[2 * k + 1]) for k, c in enumerate(CONVS))

    check_grad(fl_fn, jnp_fn, *arrays)


def test_transposed_convolution_values_and_grads(x64):
    """ops._conv_input_grad is the transposed convolution (ConvTranspose's forward)."""
    cases = [CONVS[2]]   # strided, padded, dilated, grouped
    arrays, shapes = [], []
    for k, (sx, sw, attrs) in enumerate(cases):
        out_shape = jax.eval_shape(lambda x, w, a=attrs: _jax_conv(a, x, w),
                                   jax.ShapeDtypeStruct(sx, jnp.float64),
                                   jax.ShapeDtypeStruct(sw, jnp.float64)).shape
        arrays += [randn(*out_shape, seed=70 + k), randn(*sw, seed=80 + k)]
        shapes.append(sx)

    def fl_fn(*xs):
        return tuple(F._conv_input_grad(xs[2 * k], xs[2 * k + 1], c[2], shapes[k])
                     for k, c in enumerate(cases))

    def jnp_fn(*xs):
        outs = []
        for k, c in enumerate(cases):
            g, w = xs[2 * k], xs[2 * k + 1]
            _, vjp = jax.vjp(lambda x: _jax_conv(c[2], x, w), jnp.zeros(shapes[k]))
            outs.append(vjp(g)[0])
        return tuple(outs)

    check_grad(fl_fn, jnp_fn, *arrays)


def test_conv_second_order(x64):
    """Gradients of conv gradients (conv_input_grad / conv_weight_grad VJPs)."""
    sx, sw, attrs = CONVS[1]
    x0, w0 = randn(*sx, seed=90), randn(*sw, seed=91)
    x = fl.from_numpy(x0).requires_grad_()
    w = fl.from_numpy(w0).requires_grad_()
    y = F._conv_raw(x, w, attrs)
    gx, gw = fl.grad((y * y).sum(), [x, w], create_graph=True)
    hx, hw = fl.grad((gx * gx).sum() + (gw.sin()).sum(), [x, w])

    def first(x, w):
        return jax.grad(lambda x, w: jnp.sum(_jax_conv(attrs, x, w) ** 2), argnums=(0, 1))(x, w)

    def second(x, w):
        gx, gw = first(x, w)
        return jnp.sum(gx * gx) + jnp.sum(jnp.sin(gw))

    ref = jax.jit(lambda x, w: (first(x, w), jax.grad(second, argnums=(0, 1))(x, w)))(x0, w0)
    fl.sync()
    for got, r in zip((gx, gw, hx, hw), ref[0] + ref[1]):
        np.testing.assert_allclose(got.numpy(), r, rtol=1e-9, atol=1e-9)


# window attrs: (kind, window dims, strides, padding pairs), over the full rank
WINDOWS = [
    ((2, 3, 6, 6), ("max", (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4)),          # max_pool2d
    ((1, 2, 7, 5), ("max", (1, 1, 3, 3), (1, 1, 2, 1), ((0, 0), (0, 0), (1, 1), (1, 1)))),
    ((2, 2, 8), ("max", (1, 1, 3), (1, 1, 1), ((0, 0), (0, 0), (0, 0)))),        # overlapping
    ((1, 2, 5, 5), ("sum", (1, 1, 3, 2), (1, 1, 2, 1), ((0, 0), (0, 0), (1, 1), (0, 1)))),
]


def _jax_window(attrs, x):
    kind, dims, strides, padding = attrs
    if kind == "max":
        return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, padding)
    return lax.reduce_window(x, 0.0, lax.add, dims, strides, padding)


def test_window_reductions_values_and_grads(x64):
    arrays = [randn(*s, seed=200 + k) for k, (s, _) in enumerate(WINDOWS)]

    def fl_fn(*xs):
        return tuple(F._window_raw(x, a) for x, (_, a) in zip(xs, WINDOWS))

    def jnp_fn(*xs):
        return tuple(_jax_window(a, x) for x, (_, a) in zip(xs, WINDOWS))

    check_grad(fl_fn, jnp_fn, *arrays)


def test_window_reductions_second_order(x64):
    """max_window_grad / max_window_select / sum_window_transpose are differentiable too."""
    (s1, a1), (s2, a2) = WINDOWS[1], WINDOWS[3]
    x0, z0 = randn(*s1, seed=210), randn(*s2, seed=211)
    x = fl.from_numpy(x0).requires_grad_()
    z = fl.from_numpy(z0).requires_grad_()
    out = (F._window_raw(x, a1) ** 2).sum() + (F._window_raw(z, a2) ** 3).sum()
    gx, gz = fl.grad(out, [x, z], create_graph=True)
    hx, hz = fl.grad((gx * gx).sum() + (gz * gz).sum(), [x, z])

    def f(x, z):
        return jnp.sum(_jax_window(a1, x) ** 2) + jnp.sum(_jax_window(a2, z) ** 3)

    def second(x, z):
        gx, gz = jax.grad(f, argnums=(0, 1))(x, z)
        return jnp.sum(gx * gx) + jnp.sum(gz * gz)

    ref = jax.jit(lambda x, z: jax.grad(second, argnums=(0, 1))(x, z))(x0, z0)
    fl.sync()
    np.testing.assert_allclose(hx.numpy(), ref[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hz.numpy(), ref[1], rtol=1e-9, atol=1e-12)


def test_softmax_log_softmax_values_and_grads(x64):
    def fl_fn(x, s):
        return (x.softmax(-1), fl.softmax(x, 0), x.log_softmax(-1), fl.log_softmax(x, 1),
                s.softmax(0), s.log_softmax(-1), x[:, :1].softmax(1), (x * 100).log_softmax(2))

    def jnp_fn(x, s):
        return (jax.nn.softmax(x, -1), jax.nn.softmax(x, 0), jax.nn.log_softmax(x, -1),
                jax.nn.log_softmax(x, 1), jnp.ones(()), jnp.zeros(()),
                jax.nn.softmax(x[:, :1], 1), jax.nn.log_softmax(x * 100, 2))

    check_grad(fl_fn, jnp_fn, randn(2, 3, 4, seed=300), np.array(0.3))


def test_softmax_second_order_and_stability(x64):
    a = randn(3, 4, seed=301)
    x = fl.from_numpy(a).requires_grad_()
    y = (x.softmax(1) ** 2).sum() + (x.log_softmax(0) * fl.from_numpy(a)).sum()
    g, = fl.grad(y, x, create_graph=True)
    h, = fl.grad((g ** 2).sum(), x)

    def f(x):
        return jnp.sum(jax.nn.softmax(x, 1) ** 2) + jnp.sum(jax.nn.log_softmax(x, 0) * a)

    ref = jax.jit(lambda x: jax.grad(lambda x: jnp.sum(jax.grad(f)(x) ** 2))(x))(a)
    fl.sync()
    np.testing.assert_allclose(h.numpy(), ref, rtol=1e-9, atol=1e-12)
    big = fl.tensor([[1e4, 0.0, -1e4]])
    check_values([big.softmax(1), big.log_softmax(1), fl.tensor([1, 2, 3]).softmax(0)],
                 [np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, -1e4, -2e4]]),
                  np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum()], rtol=1e-6)


def test_conv_float32_matches_jax():
    sx, sw, attrs = CONVS[0]
    x = randn(*sx, seed=400, dtype=np.float32)
    w = randn(*sw, seed=401, dtype=np.float32)
    y = F._conv_raw(fl.from_numpy(x), fl.from_numpy(w), attrs)
    m = F._window_raw(y, ("max", (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4))
    assert y.dtype is fl.float32 and m.dtype is fl.float32
    ref = jax.jit(lambda x, w: (_jax_conv(attrs, x, w),
                                _jax_window(("max", (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4),
                                            _jax_conv(attrs, x, w))))(x, w)
    check_values([y, m], list(ref), rtol=1e-5, atol=1e-5)


def test_finite_differences_nn_prims(x64):
    check_fd(lambda x, w: F._conv_raw(x, w, CONVS[1][2]), randn(1, 2, 10, seed=500),
             randn(2, 1, 4, seed=501))
    check_fd(lambda x: F._window_raw(x, WINDOWS[2][1]).tanh(), randn(1, 1, 6, seed=502))
    check_fd(lambda x: x.log_softmax(1) * x.softmax(0), randn(2, 3, seed=503))
