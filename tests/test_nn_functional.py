"""flowlite.nn.functional: attention, padding, resizing, normalisation helpers and argument
errors, against jax.numpy transcriptions of PyTorch's documented formulas (float64)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
import flowlite.nn.functional as F
from _nn_helpers import check_many, fn_case

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")
R = np.random.default_rng(7)


def randn(*shape):
    return R.standard_normal(shape)


def ref_sdpa(q, k, v, mask=None, causal=False, scale=None):
    s = q @ k.swapaxes(-1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf) if mask.dtype == bool else s + mask
    return jax.nn.softmax(s, -1) @ v


def _src_index(n_in, n_out, align, scale):
    """PyTorch's source coordinate for linear modes (area_pixel_compute_source_index)."""
    o = np.arange(n_out, dtype=np.float64)
    if align:
        sc = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        return sc * o
    sc = 1.0 / scale if scale else n_in / n_out
    return np.maximum(sc * (o + 0.5) - 0.5, 0.0)


def ref_linear_resize(x, sizes, align, scales):
    """Separable linear interpolation by gathering the two neighbours and blending."""
    for i, (n_out, sc) in enumerate(zip(sizes, scales)):
        ax = 2 + i
        n_in = x.shape[ax]
        src = _src_index(n_in, n_out, align, sc)
        i0 = np.floor(src).astype(int)
        i1 = np.minimum(i0 + 1, n_in - 1)
        lam = (src - i0).reshape((-1,) + (1,) * (x.ndim - ax - 1))
        x = jnp.take(x, i0, ax) * (1 - lam) + jnp.take(x, i1, ax) * lam
    return x


def ref_nearest(x, sizes, scales, exact=False):
    for i, (n_out, sc) in enumerate(zip(sizes, scales)):
        ax = 2 + i
        n_in = x.shape[ax]
        step = np.float32(1.0 / sc) if sc else np.float32(n_in) / np.float32(n_out)
        o = np.arange(n_out, dtype=np.float32)
        src = np.floor((o + np.float32(0.5)) * step if exact else o * step).astype(int)
        x = jnp.take(x, np.minimum(src, n_in - 1), ax)
    return x


def test_scaled_dot_product_attention(x64):
    q, k, v = randn(2, 3, 5, 4), randn(2, 3, 6, 4), randn(2, 3, 6, 2)
    bm = R.uniform(size=(5, 6)) > 0.4
    bm[:, 0] = True
    fm = randn(5, 6)
    q6 = randn(2, 6, 5, 4)
    check_many([
        fn_case(F.scaled_dot_product_attention, ref_sdpa, q, k, v, label="plain"),
        fn_case(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                  scale=0.3),
                lambda q, k, v, m: ref_sdpa(q, k, v, m, scale=0.3), q, k, v, bm, const=(3,),
                label="bool mask"),
        fn_case(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                lambda q, k, v, m: ref_sdpa(q, k, v, m), q, k, v, fm, const=(3,),
                label="float mask"),
        fn_case(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                lambda q, k, v: ref_sdpa(q, k, v, causal=True), q, k, v, label="causal"),
        fn_case(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                lambda q, k, v: ref_sdpa(q, jnp.repeat(k, 2, 1), jnp.repeat(v, 2, 1)), q6, k, v,
                label="gqa"),
    ])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_reduced_precision_gelu_rounds_once_as_pytorchs_kernel(dt, approximate):
    """gelu of a bfloat16/float16 tensor computes in float32 and rounds once, as PyTorch's
    CPU kernel does (composed from ops that each round, it was several roundings off): the
    forward is float32 gelu rounded, bit for bit outside the far tails; forward and input gradient agree with
    PyTorch's within one rounding (its erf/tanh polynomials differ in the far tails)."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32) * 3
    g = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    out = []
    for lib in (fl, torch):
        a = lib.from_numpy(x).to(getattr(lib, dt)).requires_grad_(True)
        y = lib.nn.functional.gelu(a, approximate=approximate)
        y.backward(lib.from_numpy(g).to(getattr(lib, dt)))
        assert y.dtype == getattr(lib, dt) and a.grad.dtype == getattr(lib, dt)
        out.append((y.detach().float().numpy(), a.grad.float().numpy()))
    jdt = jnp.bfloat16 if dt == "bfloat16" else jnp.float16
    x32 = jnp.asarray(x).astype(jdt).astype(jnp.float32)
    if approximate == "none":       # flowlite's formula, in float32, rounded once
        y32 = x32 * (jax.scipy.special.erf(x32 * (1 / math.sqrt(2))) + 1.0) * 0.5
    else:
        inner = (x32 + x32 * x32 * x32 * 0.044715) * math.sqrt(2 / math.pi)
        y32 = x32 * (jnp.tanh(inner) + 1.0) * 0.5
    once = np.asarray(y32.astype(jdt).astype(jnp.float32))
    normal = np.abs(once) > 1e-3      # (composed in the reduced dtype: ~1/3 of these differ)
    np.testing.assert_array_equal(out[0][0][normal], once[normal])
    eps = 2.0 ** -8 if dt == "bfloat16" else 2.0 ** -11
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=eps, atol=1e-4)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=2 * eps, atol=1e-4)


def test_reduced_precision_attention_accumulates_in_float32():
    """scaled_dot_product_attention of bfloat16 q, k, v computes in float32 and returns
    bfloat16 (PyTorch's CPU kernel accumulates in float): forward and gradients within
    bfloat16 rounding of the float64 reference, and of PyTorch's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 3, 16, 8)).astype(np.float32) for _ in range(3))
    res = {}
    for name, lib, dt in (("fl", fl, fl.bfloat16), ("torch", torch, torch.bfloat16),
                          ("ref", torch, torch.float64)):
        ts = [lib.from_numpy(a).to(dt).requires_grad_(True) for a in (q, k, v)]
        y = lib.nn.functional.scaled_dot_product_attention(*ts, is_causal=True)
        assert y.dtype == dt
        y.float().pow(2).sum().backward()
        res[name] = [y.detach().float().numpy()] + [t.grad.float().numpy() for t in ts]
    for a, b, r in zip(res["fl"], res["torch"], res["ref"]):
        scale = np.abs(r).max()
        assert np.abs(a - r).max() <= 2 ** -7 * scale * 2, np.abs(a - r).max() / scale
        assert np.abs(a - r).max() <= np.abs(b - r).max() * 1.5 + 2 ** -8 * scale


def test_sdpa_dropout_and_errors():
    q = fl.from_numpy(np.ones((1, 2, 3), np.float32))
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    np.testing.assert_array_equal(out.numpy(), np.zeros((1, 2, 3)))
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=fl.ones(2, 2, dtype=fl.bool),
                                       is_causal=True)
    with pytest.raises(ValueError, match="don't match"):
        F.scaled_dot_product_attention(q, fl.zeros(1, 2, 4), q)


def test_pad_normalize_unfold_similarity(x64):
    x = randn(2, 3, 4, 5)
    pads = (1, 2, 2, 1)
    jpads = [(0, 0), (0, 0), (2, 1), (1, 2)]

    def ref_unfold(x, k=(2, 3), stride=2, pad=1):
        xp = jnp.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
        n, c, h, w = xp.shape
        oh, ow = (h - k[0]) // stride + 1, (w - k[1]) // stride + 1
        cols = []
        for ci in range(c):
            for i in range(k[0]):
                for j in range(k[1]):
                    cols.append(xp[:, ci, i:i + (oh - 1) * stride + 1:stride,
                                   j:j + (ow - 1) * stride + 1:stride].reshape(n, -1))
        return jnp.stack(cols, 1)
    y = randn(2, 3, 4, 5)
    check_many([
        fn_case(lambda x: F.pad(x, pads, "reflect"), lambda x: jnp.pad(x, jpads, "reflect"), x,
                label="reflect"),
        fn_case(lambda x: F.pad(x, pads, "replicate"), lambda x: jnp.pad(x, jpads, "edge"), x,
                label="replicate"),
        fn_case(lambda x: F.pad(x, pads, "circular"), lambda x: jnp.pad(x, jpads, "wrap"), x,
                label="circular"),
        fn_case(lambda x: F.pad(x, (1, 1), value=2.5),
                lambda x: jnp.pad(x, [(0, 0)] * 3 + [(1, 1)], constant_values=2.5), x,
                label="constant"),
        fn_case(lambda x: F.normalize(x, dim=1),
                lambda x: x / jnp.maximum(jnp.linalg.norm(x, axis=1, keepdims=True), 1e-12), x,
                label="normalize p=2"),
        fn_case(lambda x: F.normalize(x, p=1.0, dim=-1),
                lambda x: x / jnp.maximum(jnp.abs(x).sum(-1, keepdims=True), 1e-12), x,
                label="normalize p=1"),
        fn_case(lambda x: F.unfold(x, (2, 3), padding=1, stride=2), ref_unfold, x,
                label="unfold"),
        fn_case(F.cosine_similarity,
                lambda a, b: (a * b).sum(1) / (jnp.linalg.norm(a, axis=1)
                                               * jnp.linalg.norm(b, axis=1)), x, y,
                label="cosine_similarity"),
    ])


def test_normalize_zero_vector_has_finite_gradient():
    x = fl.zeros(2, 3, requires_grad=True)
    F.normalize(x).sum().backward()
    assert np.all(np.isfinite(x.grad.numpy()))


def test_interpolate(x64):
    x = randn(2, 3, 4, 5)
    x1 = randn(2, 3, 6)
    check_many([
        fn_case(lambda x: F.interpolate(x, size=(7, 3)),
                lambda x: ref_nearest(x, (7, 3), (None, None)), x, label="nearest size"),
        fn_case(lambda x: F.interpolate(x, scale_factor=2),
                lambda x: jnp.repeat(jnp.repeat(x, 2, 2), 2, 3), x, label="nearest x2"),
        fn_case(lambda x: F.interpolate(x, scale_factor=1.7),
                lambda x: ref_nearest(x, (6, 8), (1.7, 1.7)), x, label="nearest x1.7"),
        fn_case(lambda x: F.interpolate(x, size=(7, 3), mode="nearest-exact"),
                lambda x: ref_nearest(x, (7, 3), (None, None), exact=True), x,
                label="nearest-exact"),
        fn_case(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear"),
                lambda x: ref_linear_resize(x, (7, 3), False, (None, None)), x,
                label="bilinear"),
        fn_case(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear", align_corners=True),
                lambda x: ref_linear_resize(x, (7, 3), True, (None, None)), x,
                label="bilinear align_corners"),
        fn_case(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"),
                lambda x: ref_linear_resize(x, (6, 7), False, (1.5, 1.5)), x,
                label="bilinear x1.5"),
        fn_case(lambda x: F.interpolate(x, size=4, mode="linear", align_corners=True),
                lambda x: ref_linear_resize(x, (4,), True, (None,)), x1, label="linear"),
    ])


def test_interpolate_errors():
    x = fl.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match="exactly one"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=2, align_corners=True)
    with pytest.raises(ValueError, match="bilinear"):
        F.interpolate(fl.zeros(1, 1, 4), size=2, mode="bilinear")
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.interpolate(x, size=2, mode="bicubic")


def test_pooling_and_misc_functionals(x64):
    x = randn(2, 3, 9)
    check_many([
        fn_case(lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False),
                lambda x: jnp.stack([x[..., max(o * 2 - 1, 0):min(o * 2 + 2, 9)].mean(-1)
                                     for o in range(5)], -1), x, label="avg_pool1d"),
        fn_case(lambda x: F.adaptive_avg_pool1d(x, 4),
                lambda x: jnp.stack([x[..., (i * 9) // 4:-(-((i + 1) * 9) // 4)].mean(-1)
                                     for i in range(4)], -1), x, label="adaptive_avg_pool1d"),
        fn_case(lambda x: F.glu(x, 1), lambda x: x[:, :1] * jax.nn.sigmoid(x[:, 1:2]),
                x[:, :2], label="glu"),
        fn_case(lambda x: F.softmin(x, 1), lambda x: jax.nn.softmax(-x, 1), x, label="softmin"),
        fn_case(lambda x: F.log_softmax(x, dim=-1), lambda x: jax.nn.log_softmax(x, -1), x,
                label="log_softmax"),
    ])


def test_one_hot_and_embedding_functional():
    oh = F.one_hot(fl.tensor([0, 2, 1]), 4)
    np.testing.assert_array_equal(oh.numpy(), np.eye(4, dtype=int)[[0, 2, 1]])
    w = fl.from_numpy(np.arange(6, dtype=np.float32).reshape(3, 2))
    np.testing.assert_array_equal(F.embedding(fl.tensor([[2, 0]]), w).numpy(), [[[4, 5], [0, 1]]])


def test_argument_errors():
    x = fl.zeros(2, 3)
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match="even"):
        F.pad(x, (1, 2, 3), "reflect")
    with pytest.raises(ValueError, match="output padding"):
        F.conv_transpose2d(fl.zeros(1, 2, 3, 3), fl.zeros(2, 2, 3, 3), stride=1,
                           output_padding=1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.2)
    with pytest.raises(TypeError, match="floating-point"):
        F.layer_norm(fl.tensor([[1, 2]]), (2,))


def test_linear_and_cross_entropy_second_order_gradients_match_jax(x64):
    # both are single primitives whose VJPs are flowlite ops, so they differentiate again
    x0, w0, b0 = randn(4, 3), randn(2, 3), randn(2)
    t = np.array([1, 0, 1, 1])

    def ref(w):
        logits = x0 @ w.T + b0
        return -jnp.take_along_axis(jax.nn.log_softmax(logits, 1), t[:, None], 1).mean()

    w = fl.from_numpy(w0).requires_grad_(True)
    loss = F.cross_entropy(F.linear(fl.from_numpy(x0), w, fl.from_numpy(b0)),
                           fl.from_numpy(t))
    (g,) = fl.grad(loss, [w], create_graph=True)
    (gg,) = fl.grad((g * g).sum(), [w])
    rg = jax.grad(ref)(w0)
    rgg = jax.grad(lambda w: (jax.grad(ref)(w) ** 2).sum())(w0)
    np.testing.assert_allclose(g.numpy(), rg, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gg.numpy(), rgg, rtol=1e-8, atol=1e-12)


def test_layer_norm_primitive_bias_only_whole_input_and_second_order_match_jax(x64):
    def ref(x, b):
        mu = x.mean()
        return (x - mu) / jnp.sqrt(((x - mu) ** 2).mean() + 1e-3) + b

    x0, b0 = randn(7), randn(7)
    x = fl.from_numpy(x0).requires_grad_(True)
    b = fl.from_numpy(b0).requires_grad_(True)
    y = F.layer_norm(x, (7,), None, b, eps=1e-3)     # normalises the whole (1-D) input
    np.testing.assert_allclose(y.numpy(), ref(x0, b0), rtol=1e-12, atol=1e-12)
    loss = (y * y * fl.from_numpy(np.arange(7.0))).sum()
    gx, gb = fl.grad(loss, [x, b], create_graph=True)
    (ggx,) = fl.grad((gx * gx).sum(), [x])
    f = lambda x, b: (ref(x, b) ** 2 * np.arange(7.0)).sum()
    rgx, rgb = jax.grad(f, argnums=(0, 1))(x0, b0)
    rggx = jax.grad(lambda x: (jax.grad(f)(x, b0) ** 2).sum())(x0)
    np.testing.assert_allclose(gx.numpy(), rgx, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), rgb, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ggx.numpy(), rggx, rtol=1e-7, atol=1e-10)


def test_clear_cache_also_drops_nn_functionals_device_constants():
    import flowlite.nn.functional as nnF
    x = fl.tensor(np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4))
    before = nnF.unfold(x, 2).numpy()
    assert nnF._const_cache
    fl.clear_cache()
    assert not nnF._const_cache
    np.testing.assert_array_equal(nnF.unfold(x, 2).numpy(), before)
