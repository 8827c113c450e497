"""flowlite.nn layers: forward values and gradients (inputs and every parameter) against
jax.numpy transcriptions of PyTorch's documented formulas, in float64."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import flowlite as fl
import flowlite.nn as nn
from _nn_helpers import Case, check_layer, check_many, compiles, executions

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")
R = np.random.default_rng(1234)


def randn(*shape):
    return R.standard_normal(shape)


# ---- references -----------------------------------------------------------------------------
def ref_linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def ref_conv(x, w, b, stride, pads, dil, groups):
    """Cross-correlation written out: one einsum per kernel offset over strided slices."""
    nd = w.ndim - 2
    x = jnp.pad(x, [(0, 0), (0, 0)] + list(pads))
    n, cin = x.shape[:2]
    cout = w.shape[0]
    out_sp = [(x.shape[2 + i] - dil[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
              for i in range(nd)]
    xg = x.reshape((n, groups, cin // groups) + x.shape[2:])
    wg = w.reshape((groups, cout // groups) + w.shape[1:])
    y = 0.0
    for offs in np.ndindex(*w.shape[2:]):
        idx = tuple(slice(o * d, o * d + (m - 1) * s + 1, s)
                    for o, d, m, s in zip(offs, dil, out_sp, stride))
        patch = xg[(slice(None), slice(None), slice(None)) + idx]
        wk = wg[(slice(None), slice(None), slice(None)) + offs]
        sp = "xyz"[:nd]
        y = y + jnp.einsum(f"ngc{sp},goc->ngo{sp}", patch, wk)
    y = y.reshape((n, cout) + tuple(out_sp))
    return y if b is None else y + b.reshape((1, cout) + (1,) * nd)


def ref_conv_transpose2d(x, w, b, s, p, op, groups, d):
    """out[n, g*Cog + o, i*s - p + k*d] += x[n, g*Cig + c, i] * w[g*Cig + c, o, k]."""
    n, cin, h, wd = x.shape
    cog = w.shape[1]
    kh, kw = w.shape[2:]
    cig = cin // groups
    hout = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1
    wout = (wd - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1
    full = jnp.zeros((n, groups * cog, (h - 1) * s[0] + d[0] * (kh - 1) + 1 + op[0],
                      (wd - 1) * s[1] + d[1] * (kw - 1) + 1 + op[1]))
    for g in range(groups):
        xg = x[:, g * cig:(g + 1) * cig]
        for i in range(kh):
            for j in range(kw):
                c = jnp.einsum("nchw,co->nohw", xg, w[g * cig:(g + 1) * cig, :, i, j])
                full = full.at[:, g * cog:(g + 1) * cog,
                               i * d[0]:i * d[0] + (h - 1) * s[0] + 1:s[0],
                               j * d[1]:j * d[1] + (wd - 1) * s[1] + 1:s[1]].add(c)
    y = full[:, :, p[0]:p[0] + hout, p[1]:p[1] + wout]
    return y if b is None else y + b[None, :, None, None]


def ref_layer_norm(x, w, b, axes, eps):
    mu = x.mean(axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axes, keepdims=True)
    y = (x - mu) / jnp.sqrt(var + eps)
    if w is not None:
        y = y * w
    return y if b is None else y + b


# ---- linear / identity / flatten ------------------------------------------------------------
def test_linear_and_bilinear(x64):
    check_many([
        Case(nn.Linear(5, 3), lambda p, x: ref_linear(x, p["weight"], p["bias"]), (randn(4, 5),)),
        Case(nn.Linear(5, 3, bias=False), lambda p, x: ref_linear(x, p["weight"]),
             (randn(2, 3, 5),)),
        Case(nn.Linear(5, 3), lambda p, x: ref_linear(x, p["weight"], p["bias"]), (randn(5),)),
        Case(nn.Linear(5, 3), lambda p, x: ref_linear(x, p["weight"], p["bias"]),
             (randn(2, 2, 3, 5),)),
        Case(nn.Bilinear(4, 3, 2),
             lambda p, a, b: jnp.einsum("ni,oij,nj->no", a, p["weight"], b) + p["bias"],
             (randn(5, 4), randn(5, 3))),
    ])


def test_linear_shape_error_names_shapes():
    with pytest.raises(ValueError, match=r"\(4, 6\).*\(3, 5\)"):
        nn.Linear(5, 3)(fl.zeros(4, 6))


def test_identity_flatten_unflatten():
    x = fl.randn(2, 3, 4, 5)
    assert nn.Identity(7, foo=1)(x) is x
    assert tuple(nn.Flatten()(x).shape) == (2, 60)
    assert tuple(nn.Flatten(0, 2)(x).shape) == (24, 5)
    assert tuple(nn.Unflatten(1, (3, 1))(x).shape) == (2, 3, 1, 4, 5)
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
    assert repr(nn.Unflatten(1, (2, 2))) == "Unflatten(dim=1, unflattened_size=(2, 2))"


# ---- convolution ----------------------------------------------------------------------------
def _conv_case(m, x, pre=None, pads=None):
    if pads is None:
        if m.padding == "same":
            pads = []
            for d, k in zip(m.dilation, m.kernel_size):
                t = d * (k - 1)
                pads.append((t // 2, t - t // 2))
        elif m.padding == "valid":
            pads = [(0, 0)] * len(m.kernel_size)
        else:
            pads = [(p, p) for p in m.padding]
    return Case(m, lambda p, x: ref_conv(x if pre is None else pre(x), p["weight"],
                                         p.get("bias"), m.stride, pads, m.dilation, m.groups),
                (x,), label=repr(m))


def test_conv(x64):
    x = randn(2, 4, 7, 6)
    x3 = randn(2, 3, 5, 6)
    no_pad = [(0, 0), (0, 0)]

    def edge(mode, p):
        return lambda x: jnp.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], mode=mode)
    check_many([
        _conv_case(nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                             groups=2), x),
        _conv_case(nn.Conv2d(4, 6, (3, 2), padding="same", dilation=(2, 1)), x),
        _conv_case(nn.Conv2d(3, 2, 3, padding=(1, 2), padding_mode="reflect"), x3,
                   edge("reflect", (1, 2)), no_pad),
        _conv_case(nn.Conv2d(3, 2, 3, padding=1, padding_mode="circular", bias=False), x3,
                   edge("wrap", (1, 1)), no_pad),
        _conv_case(nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), randn(2, 4, 9)),
    ])


def test_conv_unbatched(x64):
    m = nn.Conv2d(3, 2, 3)
    check_layer(m, lambda p, x: ref_conv(x[None], p["weight"], p["bias"], (1, 1),
                                         [(0, 0), (0, 0)], (1, 1), 1)[0], randn(3, 5, 6))


def test_conv_transpose2d(x64):
    cases = []
    for s, p, op, g, d in [(2, 1, 1, 1, 1), (3, 1, 2, 2, 1), (1, 1, 1, 1, 2)]:
        m = nn.ConvTranspose2d(4, 6, (3, 2), stride=s, padding=p, output_padding=op, groups=g,
                               dilation=d)
        assert tuple(m.weight.shape) == (4, 6 // g, 3, 2)
        cases.append(Case(m, lambda pr, x, s=s, p=p, op=op, g=g, d=d: ref_conv_transpose2d(
            x, pr["weight"], pr["bias"], (s, s), (p, p), (op, op), g, (d, d)),
            (randn(2, 4, 4, 5),), label=repr(m)))
    check_many(cases)


def test_conv_transpose2d_output_size(x64):
    m = nn.ConvTranspose2d(3, 2, 3, stride=2, bias=False)
    out = check_layer(m, lambda p, x: ref_conv_transpose2d(x, p["weight"], None, (2, 2),
                                                           (0, 0), (1, 0), 1, (1, 1)),
                      randn(1, 3, 4, 4), call=lambda m, x: m(x, output_size=(10, 9)))
    assert tuple(out[0].shape) == (1, 2, 10, 9)
    with pytest.raises(ValueError, match="output size"):
        m(fl.zeros(1, 3, 4, 4), output_size=(12, 9))


def test_conv_errors():
    with pytest.raises(ValueError, match="groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="same"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match=r"\(1, 5, 8, 8\).*\(4, 3, 3, 3\)"):
        nn.Conv2d(3, 4, 3)(fl.zeros(1, 5, 8, 8))
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="bogus")


# ---- pooling --------------------------------------------------------------------------------
def _pool_out(n, k, s, p, d, ceil):
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_pads(shape, k, s, p, d, ceil):
    pads = []
    for n, kk, ss, pp, dd in zip(shape, k, s, p, d):
        out = _pool_out(n, kk, ss, pp, dd, ceil)
        need = (out - 1) * ss + dd * (kk - 1) + 1
        pads.append((pp, max(pp, need - n - pp)))
    return pads


def ref_max_pool(x, k, s, p, d, ceil):
    nd = len(k)
    pads = _pool_pads(x.shape[-nd:], k, s, p, d, ceil)
    lead = x.ndim - nd
    if all(v == 1 for v in d):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1,) * lead + k, (1,) * lead + s,
                                 [(0, 0)] * lead + pads)
    # jax has no VJP for dilated max windows: the max over the stacked window elements
    xp = jnp.pad(x, [(0, 0)] * lead + pads, constant_values=-jnp.inf)
    outs = [_pool_out(n, kk, ss, pp, dd, ceil)
            for n, kk, ss, pp, dd in zip(x.shape[lead:], k, s, p, d)]
    parts = []
    for offs in np.ndindex(*k):
        idx = tuple(slice(o * dd, o * dd + (m - 1) * ss + 1, ss)
                    for o, dd, m, ss in zip(offs, d, outs, s))
        parts.append(xp[(slice(None),) * lead + idx])
    return jnp.max(jnp.stack(parts), 0)


def ref_avg_pool(x, k, s, p, ceil, include_pad, divisor=None):
    nd = len(k)
    sp = x.shape[-nd:]
    pads = _pool_pads(sp, k, s, p, (1,) * nd, ceil)
    lead = x.ndim - nd
    win = ((1,) * lead + k, (1,) * lead + s)
    total = lax.reduce_window(x, 0.0, lax.add, *win, [(0, 0)] * lead + pads)
    if divisor:
        return total / divisor
    # PyTorch: the window is clipped to the padded extent (include_pad) or to the input
    ones = jnp.ones((1,) * lead + tuple(n + 2 * pp for n, pp in zip(sp, p)) if include_pad
                    else (1,) * lead + tuple(sp))
    extra = [(0, hi - lo) for lo, hi in pads] if include_pad else pads
    cnt = lax.reduce_window(ones, 0.0, lax.add, *win, [(0, 0)] * lead + extra)
    return total / cnt


def _pair(v):
    return v if isinstance(v, tuple) else (v, v)


def test_max_pool(x64):
    x = randn(2, 3, 7, 6)
    cases = []
    for kw in [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
               dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True),
               dict(kernel_size=2, stride=1, dilation=2)]:
        m = nn.MaxPool2d(**kw)
        k, st, p, d = (_pair(m.kernel_size), _pair(m.stride), _pair(m.padding),
                       _pair(m.dilation))
        cases.append(Case(m, lambda pr, x, k=k, st=st, p=p, d=d, c=m.ceil_mode:
                          ref_max_pool(x, k, st, p, d, c), (x,), label=repr(m)))
    cases.append(Case(nn.MaxPool1d(3, 2, 1, ceil_mode=True),
                      lambda pr, x: ref_max_pool(x, (3,), (2,), (1,), (1,), True),
                      (randn(2, 3, 8),)))
    check_many(cases)


def test_pool_repr_and_errors():
    assert repr(nn.MaxPool2d(2)) == \
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    with pytest.raises(ValueError, match="half"):
        nn.MaxPool2d(2, padding=2)(fl.zeros(1, 1, 4, 4))


def test_avg_pool(x64):
    x = randn(2, 3, 7, 6)
    cases = []
    for kw in [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
               dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
               dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
               dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
               dict(kernel_size=2, stride=1, divisor_override=3)]:
        m = nn.AvgPool2d(**kw)
        cases.append(Case(m, lambda pr, x, m=m: ref_avg_pool(
            x, _pair(m.kernel_size), _pair(m.stride), _pair(m.padding), m.ceil_mode,
            m.count_include_pad, m.divisor_override), (x,), label=str(kw)))
    check_many(cases)


def _bins(n, o):
    return [((i * n) // o, -(-((i + 1) * n) // o)) for i in range(o)]


def ref_adaptive(x, out, red):
    h, w = x.shape[-2:]
    rows = []
    for a, b in _bins(h, out[0]):
        rows.append(jnp.stack([red(x[..., a:b, c:d], axis=(-2, -1))
                               for c, d in _bins(w, out[1])], -1))
    return jnp.stack(rows, -2)


def test_adaptive_pool2d(x64):
    x = randn(2, 3, 6, 4)
    cases = []
    for out in [(1, 1), (3, 2), (5, 4)]:
        cases.append(Case(nn.AdaptiveAvgPool2d(out),
                          lambda p, x, out=out: ref_adaptive(x, out, jnp.mean), (x,)))
        cases.append(Case(nn.AdaptiveMaxPool2d(out),
                          lambda p, x, out=out: ref_adaptive(x, out, jnp.max), (x,)))
    cases.append(Case(nn.AdaptiveAvgPool2d((4, None)),
                      lambda p, x: ref_adaptive(x, (4, 5), jnp.mean), (randn(3, 6, 5),)))
    check_many(cases)


def test_adaptive_repr():
    assert repr(nn.AdaptiveAvgPool2d((1, 1))) == "AdaptiveAvgPool2d(output_size=(1, 1))"


# ---- normalisation --------------------------------------------------------------------------
def test_norm_layers(x64):
    x = randn(2, 4, 3, 5)

    def ref_group(p, x):
        n, c = x.shape[:2]
        y = ref_layer_norm(x.reshape(n, 2, -1), None, None, (2,), 1e-5).reshape(x.shape)
        return y * p["weight"][None, :, None, None] + p["bias"][None, :, None, None]
    eps64 = float(np.finfo(np.float64).eps)
    check_many([
        Case(nn.BatchNorm2d(3).train(), lambda p, x: ref_layer_norm(x, None, None, (0, 2, 3),
                                                                   1e-5)
             * p["weight"][None, :, None, None] + p["bias"][None, :, None, None],
             (randn(4, 3, 5, 2),)),
        Case(nn.BatchNorm1d(3, affine=False, eps=1e-3),
             lambda p, x: ref_layer_norm(x, None, None, (0,), 1e-3), (randn(6, 3),)),
        Case(nn.BatchNorm1d(3, track_running_stats=False).eval(),
             lambda p, x: ref_layer_norm(x, None, None, (0, 2), 1e-5) * p["weight"][None, :, None]
             + p["bias"][None, :, None], (randn(4, 3, 2),)),
        Case(nn.LayerNorm((3, 5)),
             lambda p, x: ref_layer_norm(x, p["weight"], p["bias"], (2, 3), 1e-5), (x,)),
        Case(nn.LayerNorm(5, eps=1e-3, bias=False),
             lambda p, x: ref_layer_norm(x, p["weight"], None, (3,), 1e-3), (x,)),
        Case(nn.LayerNorm(5, elementwise_affine=False),
             lambda p, x: ref_layer_norm(x, None, None, (3,), 1e-5), (x,)),
        Case(nn.GroupNorm(2, 4), ref_group, (x,)),
        Case(nn.RMSNorm(5), lambda p, x: x / jnp.sqrt((x * x).mean(-1, keepdims=True) + eps64)
             * p["weight"], (x,)),
        Case(nn.RMSNorm((3, 5), eps=1e-2, elementwise_affine=False),
             lambda p, x: x / jnp.sqrt((x * x).mean((-2, -1), keepdims=True) + 1e-2), (x,)),
    ])


def test_batch_norm_running_stats(x64):
    xs = [randn(4, 3, 2, 2) * (i + 1) + i for i in range(3)]
    for momentum in (0.1, None):
        m = nn.BatchNorm2d(3, momentum=momentum).double()
        rm, rv = np.zeros(3), np.ones(3)
        for k, x in enumerate(xs, 1):
            m(fl.from_numpy(x))
            f = momentum if momentum is not None else 1.0 / k
            rm = (1 - f) * rm + f * x.mean((0, 2, 3))
            rv = (1 - f) * rv + f * x.var((0, 2, 3), ddof=1)
        np.testing.assert_allclose(m.running_mean.numpy(), rm, rtol=1e-12)
        np.testing.assert_allclose(m.running_var.numpy(), rv, rtol=1e-12)
        assert m.num_batches_tracked.item() == 3
        assert m.num_batches_tracked.dtype is fl.int64
    # eval mode normalises with the running statistics and leaves them alone
    m.eval()
    x = xs[0]
    p = {"weight": randn(3), "bias": randn(3)}
    check_layer(m, lambda pr, x: (x - rm[None, :, None, None]) /
                np.sqrt(rv[None, :, None, None] + 1e-5) * pr["weight"][None, :, None, None]
                + pr["bias"][None, :, None, None], x, params=p)
    np.testing.assert_allclose(m.running_mean.numpy(), rm, rtol=1e-12)
    assert m.num_batches_tracked.item() == 3


def test_batch_norm_without_running_stats():
    m = nn.BatchNorm1d(3, track_running_stats=False)
    assert m.running_mean is None and "running_mean" not in m.state_dict()
    assert [k for k, _ in m.named_buffers()] == []


def test_batch_norm_errors_and_repr():
    with pytest.raises(ValueError, match="4D"):
        nn.BatchNorm2d(3)(fl.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(fl.zeros(1, 3))
    assert repr(nn.BatchNorm2d(8)) == ("BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, "
                                       "bias=True, track_running_stats=True)")


def test_norm_reprs():
    assert repr(nn.LayerNorm(4)) == \
        "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)"
    assert repr(nn.GroupNorm(2, 4)) == "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)"
    assert repr(nn.RMSNorm(4)) == "RMSNorm((4,), eps=None, elementwise_affine=True)"


def test_rms_norm_default_eps_follows_dtype():
    x = np.full((1, 4), 1e-4, np.float32)
    y = nn.RMSNorm(4, elementwise_affine=False)(fl.from_numpy(x)).numpy()
    eps32 = np.finfo(np.float32).eps
    np.testing.assert_allclose(y, x / np.sqrt(1e-8 + eps32), rtol=1e-5)


# ---- dropout --------------------------------------------------------------------------------
def test_dropout():
    fl.manual_seed(0)
    m = nn.Dropout(0.25)
    x = fl.ones(64, 64, requires_grad=True)
    y = m(x)
    y.sum().backward()
    a, g = y.numpy(), x.grad.numpy()
    assert set(np.unique(a)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((a == 0).mean() - 0.25) < 0.03
    np.testing.assert_array_equal(g, a)    # d(sum)/dx is the scaled mask itself
    # new mask on every call, same program: no recompile
    masks = []
    c0, e0 = compiles(), executions()
    for _ in range(3):
        masks.append(m(fl.ones(64, 64)).numpy())
    assert compiles() - c0 <= 1 and executions() - e0 == 3
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])
    # reproducible per seed
    fl.manual_seed(7)
    a = m(fl.ones(64, 64)).numpy()
    fl.manual_seed(7)
    np.testing.assert_array_equal(m(fl.ones(64, 64)).numpy(), a)
    # Dropout2d drops whole channels
    y = nn.Dropout2d(0.5)(fl.ones(4, 16, 8, 8)).numpy().reshape(4, 16, 64)
    assert np.all(y.min(-1) == y.max(-1)) and 0 < (y == 0).mean() < 1
    # eval mode and p=0: identity, no op recorded; p=1: zeros
    m.eval()
    assert m(x) is x
    assert nn.Dropout(0.0)(x) is x
    assert np.all(nn.Dropout(1.0)(fl.ones(5)).numpy() == 0)
    assert repr(nn.Dropout(0.1)) == "Dropout(p=0.1, inplace=False)"
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


# ---- embedding ------------------------------------------------------------------------------
def test_embedding_lookup_and_padding_gradient(x64):
    idx = np.array([[1, 2, 2, 0], [4, 0, 1, 3]])

    def ref(p):
        rows = p["weight"][idx]
        return jnp.where((idx == 2)[..., None], lax.stop_gradient(rows), rows)
    m = nn.Embedding(5, 3, padding_idx=2)
    check_many([Case(m, ref, call=lambda m: m(fl.from_numpy(idx))),
                Case(nn.Embedding(5, 3), lambda p: p["weight"][idx],
                     call=lambda m: m(fl.from_numpy(idx)))])
    assert np.all(m.weight.grad.numpy()[2] == 0)
    assert repr(nn.Embedding(10, 3, padding_idx=0)) == "Embedding(10, 3, padding_idx=0)"
    assert nn.Embedding(10, 3, padding_idx=-1).padding_idx == 9


def test_embedding_from_pretrained_and_errors():
    w = fl.tensor([[1.0, 2.0], [3.0, 4.0]])
    e = nn.Embedding.from_pretrained(w)
    assert not e.weight.requires_grad
    np.testing.assert_array_equal(e(fl.tensor([1, 0])).numpy(), [[3, 4], [1, 2]])
    with pytest.raises(TypeError, match="integer"):
        e(fl.tensor([0.0]))
    with pytest.raises(ValueError, match="num_embeddings"):
        nn.Embedding(3, 2, padding_idx=3)


# ---- activations ----------------------------------------------------------------------------
def _softplus(x, beta=1.0, threshold=20.0):
    return jnp.where(x * beta > threshold, x, jnp.log1p(jnp.exp(x * beta)) / beta)


ACTIVATIONS = [
    (nn.ReLU(), lambda x: jnp.maximum(x, 0)),
    (nn.ReLU6(), lambda x: jnp.clip(x, 0, 6)),
    (nn.LeakyReLU(0.2), lambda x: jnp.where(x > 0, x, 0.2 * x)),
    (nn.GELU(), lambda x: 0.5 * x * (1 + jax.scipy.special.erf(x / math.sqrt(2)))),
    (nn.GELU("tanh"), lambda x: 0.5 * x * (1 + jnp.tanh(math.sqrt(2 / math.pi)
                                                        * (x + 0.044715 * x ** 3)))),
    (nn.SiLU(), lambda x: x * jax.nn.sigmoid(x)),
    (nn.Mish(), lambda x: x * jnp.tanh(_softplus(x))),
    (nn.Tanh(), jnp.tanh),
    (nn.Sigmoid(), jax.nn.sigmoid),
    (nn.ELU(0.7), lambda x: jnp.where(x > 0, x, 0.7 * (jnp.exp(x) - 1))),
    (nn.CELU(1.3), lambda x: jnp.maximum(x, 0) + jnp.minimum(0, 1.3 * (jnp.exp(x / 1.3) - 1))),
    (nn.SELU(), lambda x: 1.0507009873554804934193349852946 * jnp.where(
        x > 0, x, 1.6732632423543772848170429916717 * (jnp.exp(x) - 1))),
    (nn.Softplus(), _softplus),
    (nn.Softplus(beta=2.0, threshold=3.0), lambda x: _softplus(x, 2.0, 3.0)),
    (nn.Hardtanh(-0.5, 0.8), lambda x: jnp.clip(x, -0.5, 0.8)),
    (nn.Hardsigmoid(), lambda x: jnp.clip(x / 6 + 0.5, 0, 1)),
    (nn.Hardswish(), lambda x: x * jnp.clip(x / 6 + 0.5, 0, 1)),
    (nn.LogSigmoid(), jax.nn.log_sigmoid),
    (nn.Softsign(), lambda x: x / (1 + jnp.abs(x))),
    (nn.Tanhshrink(), lambda x: x - jnp.tanh(x)),
    (nn.Softmax(dim=1), lambda x: jax.nn.softmax(x, 1)),
    (nn.LogSoftmax(dim=0), lambda x: jax.nn.log_softmax(x, 0)),
    (nn.Softmin(dim=1), lambda x: jax.nn.softmax(-x, 1)),
    (nn.GLU(), lambda x: x[:, :4] * jax.nn.sigmoid(x[:, 4:])),
]


def test_activations(x64):
    # one module evaluates every activation, so the whole table is one program
    x = randn(6, 8) * 3
    x[0, :3] = [25.0, -40.0, 0.5]      # softplus threshold / overflow branches

    class All(nn.Module):
        def __init__(self):
            super().__init__()
            self.acts = nn.ModuleList([a for a, _ in ACTIVATIONS])

        def forward(self, x):
            return tuple(a(x) for a in self.acts)
    check_layer(All(), lambda p, x: tuple(r(x) for _, r in ACTIVATIONS), x)


def test_activation_reprs_and_inplace():
    assert repr(nn.ReLU()) == "ReLU()"
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)"
    assert repr(nn.LeakyReLU()) == "LeakyReLU(negative_slope=0.01)"
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.Softplus()) == "Softplus(beta=1.0, threshold=20.0)"
    assert repr(nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"
    assert repr(nn.ELU()) == "ELU(alpha=1.0)"
    assert repr(nn.Softmax(1)) == "Softmax(dim=1)"
    w = fl.tensor([-1.0, 2.0], requires_grad=True)
    h = w * 1.0
    out = nn.ReLU(inplace=True)(h)
    assert out is h
    h.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 1.0])
    with pytest.raises(RuntimeError, match="leaf"):
        nn.ReLU(inplace=True)(w)


def test_softmax_implicit_dim_matches_pytorch_rule():
    x = fl.from_numpy(np.ones((2, 3, 4), np.float32))
    np.testing.assert_allclose(nn.Softmax()(x).numpy(), np.full((2, 3, 4), 0.5), rtol=1e-6)
    x = fl.from_numpy(np.ones((2, 3), np.float32))
    np.testing.assert_allclose(nn.Softmax()(x).numpy(), np.full((2, 3), 1 / 3), rtol=1e-6)


# ---- attention ------------------------------------------------------------------------------
def ref_mha(p, q, k, v, heads, attn_mask=None, kpm=None, batch_first=False, avg=True):
    if not batch_first:
        q, k, v = (t.swapaxes(0, 1) for t in (q, k, v))
    n, L, E = q.shape
    S = k.shape[1]
    hd = E // heads
    W, b = p["in_proj_weight"], p["in_proj_bias"]
    Q = q @ W[:E].T + b[:E]
    K = k @ W[E:2 * E].T + b[E:2 * E]
    V = v @ W[2 * E:].T + b[2 * E:]
    Q, K, V = (t.reshape(n, -1, heads, hd).transpose(0, 2, 1, 3) for t in (Q, K, V))
    s = Q @ K.swapaxes(-1, -2) / math.sqrt(hd)
    if attn_mask is not None:
        if attn_mask.ndim == 3:
            attn_mask = attn_mask.reshape(n, heads, L, S)
        s = jnp.where(attn_mask, -jnp.inf, s) if attn_mask.dtype == bool else s + attn_mask
    if kpm is not None:
        s = jnp.where(kpm[:, None, None, :], -jnp.inf, s)
    a = jax.nn.softmax(s, -1)
    o = (a @ V).transpose(0, 2, 1, 3).reshape(n, L, E)
    o = o @ p["out_proj.weight"].T + p["out_proj.bias"]
    if not batch_first:
        o = o.swapaxes(0, 1)
    return o, (a.mean(1) if avg else a)


def test_multihead_attention(x64):
    E, H = 8, 2
    q, kv = randn(5, 3, E), randn(7, 3, E)
    am = R.uniform(size=(5, 7)) > 0.7
    am[:, 0] = False
    kpm = np.zeros((3, 7), bool)
    kpm[1, 4:] = True
    fm = randn(3 * H, 4, 4)
    check_many([
        Case(nn.MultiheadAttention(E, H), lambda p, x: ref_mha(p, x, x, x, H), (q,),
             call=lambda m, x: m(x, x, x), label="self"),
        Case(nn.MultiheadAttention(E, H),
             lambda p, q, k, v: ref_mha(p, q, k, v, H, am, kpm, avg=False),
             (q, kv, randn(7, 3, E)),
             call=lambda m, q, k, v: m(q, k, v, attn_mask=fl.from_numpy(am),
                                       key_padding_mask=fl.from_numpy(kpm),
                                       average_attn_weights=False), label="cross+masks"),
        Case(nn.MultiheadAttention(E, H, batch_first=True),
             lambda p, x: ref_mha(p, x, x, x, H, fm, batch_first=True), (randn(3, 4, E),),
             call=lambda m, x: m(x, x, x, attn_mask=fl.from_numpy(fm)),
             label="batch_first float 3-D mask"),
    ])


def test_multihead_attention_shapes():
    E, H = 6, 3
    out, w = nn.MultiheadAttention(E, H)(fl.randn(4, 2, E), fl.randn(3, 2, E),
                                          fl.randn(3, 2, E), need_weights=False)
    assert w is None and tuple(out.shape) == (4, 2, E)
    out, w = nn.MultiheadAttention(E, H)(fl.randn(4, E), fl.randn(3, E), fl.randn(3, E))
    assert tuple(out.shape) == (4, E) and tuple(w.shape) == (4, 3)


def test_multihead_attention_keys_and_errors():
    m = nn.MultiheadAttention(8, 2)
    assert [(k, tuple(v.shape)) for k, v in m.state_dict().items()] == [
        ("in_proj_weight", (24, 8)), ("in_proj_bias", (24,)), ("out_proj.weight", (8, 8)),
        ("out_proj.bias", (8,))]
    m = nn.MultiheadAttention(8, 2, kdim=3, vdim=5, bias=False)
    assert list(m.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight",
                                    "out_proj.weight"]
    out, _ = m(fl.randn(4, 2, 8), fl.randn(6, 2, 3), fl.randn(6, 2, 5))
    assert tuple(out.shape) == (4, 2, 8)
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="attn_mask"):
        nn.MultiheadAttention(8, 2)(fl.randn(4, 2, 8), fl.randn(4, 2, 8), fl.randn(4, 2, 8),
                                    attn_mask=fl.zeros(3, 3, dtype=fl.bool))


def ref_encoder_layer(p, x, H, norm_first, act, batch_first=False, mask=None):
    def ln(y, name):
        return ref_layer_norm(y, p[name + ".weight"], p[name + ".bias"], (-1,), 1e-5)
    sa = {k[len("self_attn."):]: v for k, v in p.items() if k.startswith("self_attn.")}

    def block(y):
        return ref_mha(sa, y, y, y, H, mask, batch_first=batch_first)[0]

    def ff(y):
        h = act(y @ p["linear1.weight"].T + p["linear1.bias"])
        return h @ p["linear2.weight"].T + p["linear2.bias"]
    if norm_first:
        x = x + block(ln(x, "norm1"))
        return x + ff(ln(x, "norm2"))
    x = ln(x + block(x), "norm1")
    return ln(x + ff(x), "norm2")


def test_transformer_encoder_layer(x64):
    E, H = 8, 2
    mask = np.triu(np.ones((5, 5), bool), 1)
    cases = []
    for norm_first, activation, batch_first in [(False, "relu", False), (True, "gelu", True)]:
        act = (lambda y: jnp.maximum(y, 0)) if activation == "relu" else \
            (lambda y: 0.5 * y * (1 + jax.scipy.special.erf(y / math.sqrt(2))))
        m = nn.TransformerEncoderLayer(E, H, 16, dropout=0.1, activation=activation,
                                       norm_first=norm_first, batch_first=batch_first).eval()
        cases.append(Case(m, lambda p, x, nf=norm_first, act=act, bf=batch_first:
                          ref_encoder_layer(p, x, H, nf, act, bf, mask), (randn(5, 5, E),),
                          call=lambda m, x: m(x, src_mask=fl.from_numpy(mask)),
                          label=f"norm_first={norm_first}"))
    check_many(cases)


def test_transformer_encoder_stack():
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    enc = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(8)).eval()
    keys = list(enc.state_dict())
    assert keys[:4] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
                        "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias"]
    assert "layers.2.norm2.bias" in keys and keys[-2:] == ["norm.weight", "norm.bias"]
    # deep copies: the same initial values (PyTorch's draws, host data), independent
    # parameters
    a, b = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert a is not b and isinstance(b, nn.Parameter) and b.is_leaf and b.requires_grad
    assert a._node is b._node and not a.is_pending
    with pytest.raises(RuntimeError, match="Need attn_mask"):   # as PyTorch
        enc(fl.randn(4, 2, 8), is_causal=True)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    y = enc(fl.randn(4, 2, 8), mask=mask, is_causal=True)
    assert tuple(y.shape) == (4, 2, 8)
    assert "(0-2): 3 x TransformerEncoderLayer(" in repr(enc)


def test_upsample_module(x64):
    up = nn.Upsample(scale_factor=2, mode="nearest")
    check_layer(up, lambda p, x: jnp.repeat(jnp.repeat(x, 2, 2), 2, 3), randn(1, 2, 3, 2))
    assert repr(up) == "Upsample(scale_factor=2.0, mode='nearest')"
