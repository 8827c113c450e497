"""The gradient kernels flowlite lowers itself from public `jax.lax` (no private JAX, no JAX
autodiff in flowlite): the convolution input gradient (also ConvTranspose's forward) and
weight gradient, the max-window gradient (select-and-scatter) and its transpose
(select-and-gather), and the sum-window transpose.  Each lowering is called directly on
float64 arrays and compared with `jax.vjp` / `jax.jvp` of `lax.conv_general_dilated` /
`lax.reduce_window` -- JAX's autodiff is the oracle here, in the tests only -- over a grid of
strides, asymmetric padding, dilation, groups, 1d/2d/3d and sizes the stride does not divide.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax import lax

import flowlite as fl
import flowlite.frontend.ops as F
from flowlite.frontend import primitives as P
from conftest import check_grad, randn


def _conv(attrs, x, w):
    strides, padding, lhs, rhs, groups = attrs
    return lax.conv_general_dilated(x, w, strides, padding, lhs, rhs,
                                    feature_group_count=groups)


def _out_shape(attrs, sx, sw):
    return jax.eval_shape(lambda x, w: _conv(attrs, x, w),
                          jax.ShapeDtypeStruct(sx, jnp.float32),
                          jax.ShapeDtypeStruct(sw, jnp.float32)).shape


# (x shape, w shape, attrs = (strides, padding pairs, lhs_dilation, rhs_dilation, groups))
CONV_CASES = {
    # 1d
    "1d-plain": ((2, 3, 9), (4, 3, 3), ((1,), ((0, 0),), (1,), (1,), 1)),
    "1d-stride2-odd": ((2, 3, 10), (4, 3, 3), ((2,), ((0, 0),), (1,), (1,), 1)),
    "1d-stride3-asym": ((1, 2, 11), (3, 2, 4), ((3,), ((2, 1),), (1,), (1,), 1)),
    "1d-dil2-groups2": ((1, 2, 10), (4, 1, 4), ((2,), ((1, 2),), (1,), (2,), 2)),
    "1d-depthwise": ((2, 4, 13), (8, 1, 3), ((2,), ((1, 1),), (1,), (1,), 4)),
    "1d-k1": ((2, 3, 7), (5, 3, 1), ((2,), ((0, 0),), (1,), (1,), 1)),
    "1d-lhs-dil": ((1, 2, 6), (3, 2, 3), ((1,), ((1, 1),), (2,), (1,), 1)),
    # 2d
    "2d-same": ((2, 3, 7, 6), (4, 3, 3, 3), ((1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1)),
    "2d-lenet": ((3, 1, 12, 12), (4, 1, 3, 3), ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)),
    "2d-stride2-odd": ((2, 3, 9, 8), (4, 3, 3, 3),
                       ((2, 2), ((1, 1), (1, 1)), (1, 1), (1, 1), 1)),
    "2d-mixed": ((1, 4, 8, 7), (6, 2, 3, 2), ((2, 1), ((1, 0), (2, 2)), (1, 1), (2, 1), 2)),
    "2d-stride-gt-kernel": ((2, 2, 11, 10), (3, 2, 2, 2),
                            ((3, 4), ((0, 1), (2, 0)), (1, 1), (1, 1), 1)),
    "2d-groups3-dil": ((2, 6, 10, 9), (9, 2, 3, 3),
                       ((1, 2), ((2, 2), (0, 3)), (1, 1), (2, 3), 3)),
    "2d-depthwise-s2": ((1, 4, 9, 9), (4, 1, 3, 3),
                        ((2, 2), ((1, 1), (1, 1)), (1, 1), (1, 1), 4)),
    "2d-size1": ((1, 1, 1, 1), (2, 1, 1, 1), ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)),
    "2d-kernel-eq-input": ((2, 3, 5, 4), (2, 3, 5, 4),
                           ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)),
    # 3d
    "3d-mixed": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2),
                 ((1, 2, 1), ((0, 1), (1, 1), (0, 0)), (1, 1, 1), (1, 1, 2), 1)),
    "3d-groups-stride": ((2, 4, 7, 6, 5), (6, 2, 3, 2, 3),
                         ((2, 3, 2), ((1, 1), (0, 2), (1, 0)), (1, 1, 1), (1, 1, 1), 2)),
    "3d-dil": ((1, 3, 6, 7, 8), (2, 3, 2, 2, 2),
               ((1, 1, 3), ((0, 0), (1, 2), (2, 1)), (1, 1, 1), (2, 3, 1), 1)),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_grad_kernels_match_jax_vjp(x64, name):
    sx, sw, attrs = CONV_CASES[name]
    sy = _out_shape(attrs, sx, sw)
    x, w, g = randn(*sx, seed=1), randn(*sw, seed=2), randn(*sy, seed=3)

    @jax.jit
    def ours(x, w, g):
        return (P._conv_input_grad_lower(attrs + (sx,), g, w),
                P._conv_weight_grad_lower(attrs + (sw,), x, g))

    @jax.jit
    def oracle(x, w, g):
        _, vjp = jax.vjp(lambda x, w: _conv(attrs, x, w), x, w)
        return vjp(g)

    gx, gw = ours(x, w, g)
    rx, rw = oracle(x, w, g)
    assert gx.shape == sx and gw.shape == sw and gx.dtype == gw.dtype == jnp.float64
    np.testing.assert_allclose(gx, rx, rtol=1e-10, atol=1e-10, err_msg="input grad")
    np.testing.assert_allclose(gw, rw, rtol=1e-10, atol=1e-10, err_msg="weight grad")


def test_conv_grad_kernels_float32():
    sx, sw, attrs = CONV_CASES["2d-groups3-dil"]
    sy = _out_shape(attrs, sx, sw)
    x, w, g = (randn(*s, seed=k, dtype=np.float32) for k, s in enumerate((sx, sw, sy)))
    gx = jax.jit(lambda g, w: P._conv_input_grad_lower(attrs + (sx,), g, w))(g, w)
    gw = jax.jit(lambda x, g: P._conv_weight_grad_lower(attrs + (sw,), x, g))(x, g)
    _, vjp = jax.vjp(lambda x, w: _conv(attrs, x, w), x, w)
    rx, rw = vjp(g)
    assert gx.dtype == gw.dtype == jnp.float32
    np.testing.assert_allclose(gx, rx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, rw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["1d-dil2-groups2", "2d-mixed", "3d-groups-stride"])
def test_conv_through_flowlite_tape(x64, name):
    """The same kernels wired through flowlite: conv's VJP, and the transposed convolution
    (conv_input_grad as a forward) differentiated by flowlite's tape."""
    sx, sw, attrs = CONV_CASES[name]
    sy = _out_shape(attrs, sx, sw)

    def fl_fn(x, w, g):
        return F._conv_raw(x, w, attrs), F._conv_input_grad(g, w, attrs, sx)

    def jnp_fn(x, w, g):
        _, vjp = jax.vjp(lambda x: _conv(attrs, x, w), jnp.zeros(sx))
        return _conv(attrs, x, w), vjp(g)[0]

    check_grad(fl_fn, jnp_fn, randn(*sx, seed=4), randn(*sw, seed=5), randn(*sy, seed=6),
               rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("nd,groups,stride,pad,opad,dil", [
    (1, 1, 2, 1, 1, 1), (2, 2, (2, 3), (1, 0), (1, 2), (1, 2)), (3, 1, 2, 0, 0, 1)])
def test_conv_transpose_matches_torch(nd, groups, stride, pad, opad, dil):
    import torch
    fn = {1: "conv_transpose1d", 2: "conv_transpose2d", 3: "conv_transpose3d"}[nd]
    x = randn(2, 4, *(5, 6, 4)[:nd], seed=7, dtype=np.float32)
    w = randn(4, 3, *(3, 2, 3)[:nd], seed=8, dtype=np.float32)
    y = getattr(fl.nn.functional, fn)(fl.from_numpy(x), fl.from_numpy(w), None, stride, pad,
                                      opad, groups, dil)
    ref = getattr(torch.nn.functional, fn)(torch.from_numpy(x), torch.from_numpy(w), None,
                                           stride, pad, opad, groups, dil)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


# window attrs over the full rank: (window dims, strides, padding pairs)
WINDOW_CASES = {
    "2d-k2s2": ((2, 3, 6, 6), (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4),
    "2d-k2s2-odd": ((2, 3, 11, 9), (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4),
    "2d-k3s3-ceil": ((1, 2, 7, 8), (1, 1, 3, 3), (1, 1, 3, 3), ((0, 0), (0, 0), (0, 2), (0, 1))),
    "2d-k2s2-pad": ((1, 2, 5, 6), (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 0))),
    "2d-k3s2p1": ((2, 2, 9, 8), (1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 2))),
    "2d-k3s1": ((1, 2, 6, 5), (1, 1, 3, 3), (1, 1, 1, 1), ((0, 0),) * 4),
    "2d-k3s2x1": ((1, 2, 7, 5), (1, 1, 3, 3), (1, 1, 2, 1), ((0, 0), (0, 0), (1, 1), (1, 1))),
    "2d-k2s3": ((1, 2, 10, 8), (1, 1, 2, 2), (1, 1, 3, 3), ((0, 0),) * 4),
    "2d-rect": ((2, 1, 9, 7), (1, 1, 2, 3), (1, 1, 2, 3), ((0, 0),) * 4),
    "1d-k3s1": ((2, 2, 8), (1, 1, 3), (1, 1, 1), ((0, 0),) * 3),
    "1d-k3s2p1-ceil": ((2, 3, 10), (1, 1, 3), (1, 1, 2), ((0, 0), (0, 0), (1, 2))),
    "1d-k4s4": ((1, 2, 13), (1, 1, 4), (1, 1, 4), ((0, 0),) * 3),
    "3d-k2s2": ((1, 2, 5, 4, 6), (1, 1, 2, 2, 2), (1, 1, 2, 2, 2), ((0, 0),) * 5),
    "3d-mixed": ((2, 2, 9, 4, 5), (1, 1, 2, 2, 3), (1, 1, 2, 1, 3),
                 ((0, 0), (0, 0), (1, 1), (0, 1), (1, 1))),
    "channel-window": ((2, 4, 5), (1, 2, 2), (1, 2, 1), ((0, 0),) * 3),
    "unbatched-3d-input": ((3, 7, 6), (1, 2, 2), (1, 2, 2), ((0, 0), (1, 1), (0, 0))),
}


def _max_window(x, dims, strides, padding):
    return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, padding)


def _data(shape, tie, seed):
    x = randn(*shape, seed=seed)
    # ties everywhere (as after a ReLU): the choice must be the first maximum, as XLA's
    return np.maximum(np.round(x), 0.0) if tie else x


def _naive_select(x, gg, dims, strides, padding):
    """gg at each window's first maximum (XLA's `>=` select order) over its in-bounds
    elements (padding, the lowest value, can only win an all -inf window: not in this data)."""
    out = tuple((n + lo + hi - k) // s + 1 for n, k, s, (lo, hi) in
                zip(x.shape, dims, strides, padding))
    r = np.zeros(out)
    for oi in np.ndindex(*out):
        best = None
        for o in np.ndindex(*dims):
            p = tuple(a * s + b - lo for a, s, b, (lo, _) in zip(oi, strides, o, padding))
            if all(0 <= q < n for q, n in zip(p, x.shape)) and \
                    (best is None or not x[best] >= x[p]):
                best = p
        r[oi] = gg[best]
    return r


@pytest.mark.parametrize("tie", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("name", list(WINDOW_CASES))
def test_max_window_kernels_match_jax(x64, name, tie):
    shape, dims, strides, padding = WINDOW_CASES[name]
    a = ("max", dims, strides, padding)
    x = _data(shape, tie, seed=10)
    out = jax.eval_shape(lambda x: _max_window(x, dims, strides, padding),
                         jax.ShapeDtypeStruct(shape, jnp.float64)).shape
    g, gg = randn(*out, seed=11), randn(*shape, seed=12)

    @jax.jit
    def ours(x, g, gg):
        return P._max_window_grad_lower(a, x, g), P._max_window_select_lower(a, x, gg)

    @jax.jit
    def oracle(x, g, gg):
        _, vjp = jax.vjp(lambda x: _max_window(x, dims, strides, padding), x)
        _, tangent = jax.jvp(lambda x: _max_window(x, dims, strides, padding), (x,), (gg,))
        return vjp(g)[0], tangent

    grad, sel = ours(x, g, gg)
    rgrad, rsel = oracle(x, g, gg)
    assert grad.shape == shape and sel.shape == out
    # select-and-scatter's choice, ties included, is exactly XLA's (overlapping windows may
    # add an element's shares in another order: a wrong choice would be off by O(1))
    np.testing.assert_allclose(grad, rgrad, rtol=1e-14, atol=1e-15)
    # select-and-gather: the same choice (JAX's own reduce_window JVP may pick another of
    # several tied maxima, so with ties compare with the naive first maximum instead)
    np.testing.assert_array_equal(sel, _naive_select(x, gg, dims, strides, padding))
    if not tie:
        np.testing.assert_array_equal(sel, rsel)
    # the two kernels are each other's transpose
    np.testing.assert_allclose(np.vdot(sel, g), np.vdot(gg, grad), rtol=1e-12)


def test_max_window_nan_and_neg_inf_follow_pytorch(x64):
    """PyTorch's max-pool gradient goes to the window's first maximum, or its last NaN, and
    never to padding (an all -inf window picks its first real element)."""
    cases = []
    x = randn(1, 1, 6, 6, seed=13)
    x[0, 0, 1, 1] = x[0, 0, 2, 3] = x[0, 0, 3, 3] = np.nan
    cases.append((x, (1, 1, 3, 3), (1, 1, 1, 1), ((0, 0), (0, 0), (1, 1), (1, 1))))
    cases.append((x, (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4))
    y = np.full((1, 1, 5, 5), -np.inf)
    y[0, 0, 4, 4] = 1.0
    cases.append((y, (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1))))
    cases.append((y, (1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1))))
    cases.append((y, (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4))
    for x, dims, strides, padding in cases:
        a = ("max", dims, strides, padding)
        out = jax.eval_shape(lambda x: _max_window(x, dims, strides, padding),
                             jax.ShapeDtypeStruct(x.shape, jnp.float64)).shape
        g = randn(*out, seed=14)
        got = jax.jit(lambda x, g: P._max_window_grad_lower(a, x, g))(x, g)
        tx = torch.from_numpy(x).requires_grad_()
        ty = torch.nn.functional.max_pool2d(tx, dims[2:], strides[2:], [p[0] for p in padding[2:]])
        ty.backward(torch.from_numpy(np.asarray(g)))
        np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-14, atol=1e-15,
                                   err_msg=repr((dims, strides, padding)))


def test_max_window_kernels_float32_and_int_input():
    shape, dims, strides, padding = WINDOW_CASES["2d-k3s2p1"]
    a = ("max", dims, strides, padding)
    x = _data(shape, True, seed=15).astype(np.float32)
    out = jax.eval_shape(lambda x: _max_window(x, dims, strides, padding),
                         jax.ShapeDtypeStruct(shape, jnp.float32)).shape
    g = randn(*out, seed=16, dtype=np.float32)
    got = jax.jit(lambda x, g: P._max_window_grad_lower(a, x, g))(x, g)
    _, vjp = jax.vjp(lambda x: _max_window(x, dims, strides, padding), x)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, vjp(g)[0], rtol=1e-6, atol=1e-6)
    # integer data (padding is then the dtype's minimum): the same choice
    got_i = jax.jit(lambda x, g: P._max_window_grad_lower(a, x, g))(x.astype(np.int32), g)
    np.testing.assert_array_equal(got_i, got)


SUM_CASES = [
    ((1, 2, 5, 5), (1, 1, 3, 2), (1, 1, 2, 1), ((0, 0), (0, 0), (1, 1), (0, 1))),
    ((2, 3, 11, 9), (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4),
    ((2, 3, 10), (1, 1, 3), (1, 1, 2), ((0, 0), (0, 0), (1, 2))),
    ((1, 2, 5, 4, 6), (1, 1, 2, 3, 2), (1, 1, 2, 1, 3), ((0, 0), (0, 0), (1, 0), (1, 1), (0, 2))),
    ((1, 2, 10, 8), (1, 1, 2, 2), (1, 1, 3, 3), ((0, 0),) * 4),
]


@pytest.mark.parametrize("case", SUM_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_sum_window_transpose_matches_jax(x64, case):
    shape, dims, strides, padding = case
    a = ("sum", dims, strides, padding, shape)

    def f(x):
        return lax.reduce_window(x, 0.0, lax.add, dims, strides, padding)
    out = jax.eval_shape(f, jax.ShapeDtypeStruct(shape, jnp.float64)).shape
    g = randn(*out, seed=17)
    got = jax.jit(lambda g: P._sum_window_transpose_lower(a, g))(g)
    _, vjp = jax.vjp(f, jnp.zeros(shape))
    np.testing.assert_allclose(got, vjp(g)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=(2, 3), stride=(1, 2))])
def test_max_pool_grads_match_torch(kw):
    """Through nn.functional and flowlite's tape, first and second order, ties included."""
    import torch
    x0 = np.maximum(np.round(randn(2, 3, 9, 8, seed=18)), 0).astype(np.float32)
    w0 = randn(*torch.nn.functional.max_pool2d(torch.from_numpy(x0), **kw).shape, seed=19,
               dtype=np.float32)
    x = fl.from_numpy(x0).requires_grad_()
    y = fl.nn.functional.max_pool2d(x, **kw)
    gx, = fl.grad((y * fl.from_numpy(w0)).sum() + (y * y).sum(), [x], create_graph=True)
    hx, = fl.grad((gx * gx).sum(), [x])
    xt = torch.from_numpy(x0).requires_grad_()
    yt = torch.nn.functional.max_pool2d(xt, **kw)
    gt, = torch.autograd.grad((yt * torch.from_numpy(w0)).sum() + (yt * yt).sum(), [xt],
                              create_graph=True)
    ht, = torch.autograd.grad((gt * gt).sum(), [xt])
    fl.sync()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy())
    np.testing.assert_allclose(gx.numpy(), gt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hx.numpy(), ht.numpy(), rtol=1e-5, atol=1e-5)


def test_no_private_jax_in_primitives():
    import importlib
    import inspect
    assert "jax._src" not in inspect.getsource(P)
    for fam in ("_core", "elementwise", "creation", "shape", "reduction", "indexing", "linalg",
                "nn_kernels", "sorting", "rearrange"):      # where the primitives are declared
        assert "jax._src" not in inspect.getsource(importlib.import_module("flowlite.frontend.ops." + fam))
    for name in ("_ad", "_conv_t_lhs", "_conv_t_rhs", "_select_and_gather_add",
                 "_select_and_scatter_add"):
        assert not hasattr(P, name), name
