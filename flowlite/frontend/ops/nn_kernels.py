"""Neural-network kernels' front ends: convolution and window (pooling) primitives,
softmax, log_softmax.

Layer: frontend — imports engine.buckets, engine.dtypes, engine.fusion, engine.matmul_precision,
engine.onednn, ops._core, ops._registry, ops.elementwise, ops.linalg, ops.reduction, ops.shape,
tensor. The family's primitives (`<name>_p`) are declared here, beside the front end that
records them: their gradient rules call the ops of this module and of those before it.
"""
from __future__ import annotations

import builtins
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...engine import buckets as B, dtypes as D, fusion, onednn
from ..tensor import _norm_dim, apply
from ...engine.matmul_precision import for_operands as _precision
from ._core import prim, to_dtype
from ._registry import torch_op
from .elementwise import exp, rsqrt
from .shape import mT, reshape
from .reduction import mean, sum
from .linalg import matmul


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _linear_lower(a, x, w, *b):
    y = onednn.matmul(x, w, tw=True)        # on CPU where measured faster (engine/onednn.py)
    if y is None:
        y = lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())), precision=_precision(x, w))
    return y + b[0] if b else y


def _linear_vjp(a, i, o, g):
    x, w = i[0], i[1]
    # the weight's cotangent is one (out, in) matmul over every leading dim of x
    g2 = g if g.ndim == 2 else reshape(g, (-1, g.shape[-1]))
    x2 = x if x.ndim == 2 else reshape(x, (-1, x.shape[-1]))
    gx = matmul(g, w) if x._edge is not None else None   # a network's input needs none
    grads = (gx, matmul(mT(g2), x2) if w._edge is not None else None)
    return grads + (sum(g2, 0) if i[2]._edge is not None else None,) if len(i) == 3 \
        else grads


# y = x Wᵀ (+ b): nn.Linear's whole forward as one node
linear_p = prim("linear", _linear_lower, _linear_vjp, bucket=B.rule_last_static(lambda a: 1))


def _nll_lower(a, logp, t):
    ignore_index, reduction = a
    t1 = jnp.expand_dims(t, 1)
    keep = t1 != ignore_index
    picked = jnp.take_along_axis(logp, jnp.where(keep, t1, 0), axis=1)     # (N, 1, *)
    loss = jnp.where(keep, -picked, jnp.zeros((), logp.dtype))
    if reduction == "none":
        return loss[:, 0]
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / jnp.sum(keep).astype(logp.dtype)


def _nll_vjp(a, i, o, g):
    logp, t = i
    return apply(nll_t_p, (g, t), a + (logp.shape,), logp.shape, logp.dtype), None


def _nll_t_lower(a, g, t):
    """The transpose of nll (it is linear in logp): -g / denom scattered onto the targets."""
    ignore_index, reduction, shape = a
    t1 = jnp.expand_dims(t, 1)
    keep = t1 != ignore_index
    w = keep.astype(g.dtype)
    if reduction == "none":
        w = w * jnp.expand_dims(g, 1)
    elif reduction == "mean":
        w = w * (g / jnp.sum(w))
    else:
        w = w * g
    onehot = lax.broadcasted_iota(t.dtype, shape, 1) == jnp.where(keep, t1, -1)
    return jnp.where(onehot, -w, jnp.zeros((), g.dtype))


def _nll_t_vjp(a, i, o, g):
    ct, t = i
    return apply(nll_p, (g, t), a[:2], ct.shape, g.dtype), None


def _layer_norm_lower(a, x, *wb):
    k, eps, has_w, has_b = a
    axes = tuple(range(x.ndim - k, x.ndim))
    n = math.prod(x.shape[x.ndim - k:])
    mean = jnp.sum(x, axes, keepdims=True) / n
    d = x - mean
    y = d * lax.rsqrt(jnp.sum(d * d, axes, keepdims=True) / n + eps)
    if has_w:
        y = y * wb[0]
    if has_b:
        y = y + wb[-1]
    return y


def _layer_norm_vjp(a, i, o, g):
    k, eps, has_w, has_b = a
    x = i[0]
    axes = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))

    def over_lead(t):      # sum over the leading (batch) dims: a weight/bias cotangent
        return sum(t, lead) if lead else t

    d = x - mean(x, axes, keepdim=True)
    rstd = rsqrt(mean(d * d, axes, keepdim=True) + eps)
    xhat = d * rstd
    grads = [None]
    gxhat = g
    if has_w:
        w = i[1]
        gxhat = g * w
        grads.append(over_lead(g * xhat) if w._edge is not None else None)
    if has_b:
        grads.append(over_lead(g) if i[-1]._edge is not None else None)
    if x._edge is not None:
        m1 = mean(gxhat, axes, keepdim=True)
        m2 = mean(gxhat * xhat, axes, keepdim=True)
        grads[0] = rstd * (gxhat - m1 - xhat * m2)
    return tuple(grads)


# LayerNorm over the trailing k dims (affine weight/bias optional): one node per call
layer_norm_p = prim("layer_norm", _layer_norm_lower, _layer_norm_vjp,
                    bucket=B.rule_last_static(lambda a: a[0]))


def _nll_bucket(ctx, op, a, shape, ins, vals):
    """Targets in the padding are ignored (ignore_index), so a mean divides by the real
    count and the padding gets no gradient; the class dim can't be padded."""
    logp_shape = ins[0] if op is nll_p else a[2]
    if B._syms(a[:2]) or isinstance(logp_shape[1], B.Sym):
        raise B.Unsupported(op.name + " over a padded class dim")
    g, t = vals
    m = ctx.valid(ins[1])
    if m is not None:
        t = jnp.where(m, t, jnp.asarray(a[0], t.dtype))
    if op is nll_p:
        return op.lower(a, g, t)
    return op.lower(a[:2] + (ctx.phys(a[2]),), g, t)


# negative log-likelihood of integer class targets (class dim 1), PyTorch's ignore_index
nll_p = prim("nll", _nll_lower, _nll_vjp, bucket=_nll_bucket)


nll_t_p = prim("nll_t", _nll_t_lower, _nll_t_vjp, bucket=_nll_bucket)


def _conv(a, x, w, *b):
    strides, padding, lhs_dil, rhs_dil, groups = a[:5]

    def xla_conv(x, w):
        return lax.conv_general_dilated(x, w, strides, padding, lhs_dil, rhs_dil,
                                        feature_group_count=groups,
                                        precision=_precision(x, w))

    def bias(y):
        # an optional per-channel bias (nn.Conv*'s): one node instead of reshape + add
        return y + b[0].reshape((1, -1) + (1,) * (y.ndim - 2)) if b else y
    if _taps_pay(a, x, w):
        # measured (bench/lowering_choices.py): on CPU a convolution with few input taps is
        # 3-10x faster as one fused sum of shifted slices than as XLA:CPU's convolution.  The
        # barrier materialises it: fused into its consumers (a max-pool's gradient compares
        # every window element with it) XLA would recompute every tap per use
        return lax.platform_dependent(
            x, w, cpu=lambda x, w: fusion.barrier(bias(_conv_taps(a, x, w))),
            default=lambda x, w: bias(xla_conv(x, w)))
    return bias(xla_conv(x, w))


def _cpu_materialized(v):
    """`v`, computed once in a CPU program (fusion.barrier); as it is elsewhere."""
    return lax.platform_dependent(v, cpu=fusion.barrier, default=lambda v: v)


# At most this many input taps (input channels x kernel elements) per output element for the
# CPU's shifted-slices convolution: LeNet's first layer (1 x 3x3) 0.25 ms vs 2.8 ms as a
# convolution, 3 x 3x3 1.5 vs 4.4 ms; a 3 x 7x7 stem (147 taps) is 4.5x slower that way.
_MAX_TAPS = 32


def _taps_pay(a, x, w):
    strides, padding, lhs_dil, rhs_dil, groups = a[:5]
    return (groups == 1 and all(d == 1 for d in lhs_dil) and x.dtype == w.dtype
            and x.dtype in (np.float32, np.float64) and 0 not in x.shape + w.shape
            and all(lo >= 0 and hi >= 0 for lo, hi in padding)
            and w.shape[1] * math.prod(w.shape[2:]) <= _MAX_TAPS)


def _conv_taps(a, x, w):
    """The convolution as sum over (input channel, kernel offset) of a strided slice of the
    padded input times that tap's weights: one elementwise loop XLA fuses whole."""
    strides, padding, _, rhs_dil, _ = a[:5]
    if any(lo or hi for lo, hi in padding):
        x = lax.pad(x, np.zeros((), x.dtype), [(0, 0, 0), (0, 0, 0)] +
                    [(lo, hi, 0) for lo, hi in padding])
    n, cin = x.shape[:2]
    cout, ks = w.shape[0], w.shape[2:]
    sp = x.shape[2:]
    out = [(s - d * (k - 1) - 1) // st + 1 for s, k, d, st in zip(sp, ks, rhs_dil, strides)]
    bshape = (1, cout) + (1,) * len(ks)
    y = None
    for c in range(cin):
        for off in np.ndindex(*ks):
            start = [o * d for o, d in zip(off, rhs_dil)]
            tap = _tap(x, [0, c] + start, [n, 1] + out, [1, 1] + list(strides))
            term = tap * lax.reshape(w[(slice(None), c) + off], bshape)
            y = term if y is None else y + term
    return y


def _conv_vjp(a, i, o, g):
    x, w = i[0], i[1]
    grads = (_conv_input_grad(g, w, a, tuple(x.shape)) if x._edge is not None else None,
             _conv_weight_grad(x, g, a, tuple(w.shape)) if w._edge is not None else None)
    if len(i) == 2:
        return grads
    return grads + (sum(g, (0,) + tuple(range(2, g.ndim))) if i[2]._edge is not None
                    else None,)


conv_p = prim("conv", _conv, _conv_vjp, bucket=B.rule_batch(1))


def _conv_transpose_kwargs(a, lhs_shape, rhs_shape, out_shape):
    # the geometry both gradient convolutions are built from (layouts NC..., OI..., NC...):
    # the forward's attrs plus the dilated extents of its input, kernel and output
    strides, padding, lhs_dil, rhs_dil, groups = a[:5]

    def dilated(shape, dil):
        return [0 if n == 0 else 1 + d * (n - 1) for n, d in zip(shape[2:], dil)]
    return dict(strides=tuple(strides), lo=[p[0] for p in padding], lhs_dil=tuple(lhs_dil),
                rhs_dil=tuple(rhs_dil), groups=groups, x_d=dilated(lhs_shape, lhs_dil),
                w_d=dilated(rhs_shape, rhs_dil), y_d=dilated(out_shape, strides),
                spatial=tuple(range(2, len(lhs_shape))))


def _conv_input_grad_lower(a, g, w):
    # the transposed convolution (public lax only): g, dilated by the forward strides,
    # convolved with the spatially flipped kernel whose in/out feature dims are swapped
    x_shape = a[5]
    k = _conv_transpose_kwargs(a, x_shape, w.shape, g.shape)
    groups, sp = k["groups"], k["spatial"]
    if groups > 1:
        # (O, I, *k) -> (G, O/G, I, *k) -> (O/G, G*I, *k): group j's kernels become output
        # features j*I..(j+1)*I-1 of the transposed convolution
        o, i = w.shape[:2]
        w = lax.reshape(w, (groups, o // groups) + tuple(w.shape[1:]))
        w = lax.reshape(w, (o // groups, groups * i) + tuple(w.shape[3:]),
                        dimensions=(1, 0) + tuple(range(2, w.ndim)))
    before = [wd - lo - 1 for wd, lo in zip(k["w_d"], k["lo"])]
    pads = [(b, xd + wd - 1 - yd - b)
            for b, xd, wd, yd in zip(before, k["x_d"], k["w_d"], k["y_d"])]
    w = lax.rev(w, sp)
    if w.dtype != g.dtype:
        w = lax.convert_element_type(w, g.dtype)
    spec = (0, 1) + sp
    dn = lax.ConvDimensionNumbers(lhs_spec=spec, rhs_spec=(1, 0) + sp, out_spec=spec)
    return lax.conv_general_dilated(g, w, window_strides=k["lhs_dil"], padding=pads,
                                    lhs_dilation=k["strides"], rhs_dilation=k["rhs_dil"],
                                    dimension_numbers=dn, feature_group_count=groups,
                                    precision=_precision(g, w))


def _conv_weight_grad_lower(a, x, g):
    # the weight-gradient convolution (public lax only): x (batch and feature dims swapped)
    # convolved with g as the kernel, the forward strides as its dilation; groups split x's
    # channels (batch_group_count) so each group's kernels see only their own channels
    w_shape = a[5]
    dtype = x.dtype
    if 0 in g.shape:
        return jnp.zeros(w_shape, dtype)
    k = _conv_transpose_kwargs(a, x.shape, w_shape, g.shape)
    sp = k["spatial"]
    pads = [(lo, yd - xd + wd - lo - 1)
            for lo, xd, wd, yd in zip(k["lo"], k["x_d"], k["w_d"], k["y_d"])]
    if x.dtype != g.dtype:
        x = lax.convert_element_type(x, g.dtype)
    t = (1, 0) + sp
    dn = lax.ConvDimensionNumbers(lhs_spec=t, rhs_spec=t, out_spec=t)
    out = lax.conv_general_dilated(x, g, window_strides=k["rhs_dil"], padding=pads,
                                   lhs_dilation=k["lhs_dil"], rhs_dilation=k["strides"],
                                   dimension_numbers=dn, batch_group_count=k["groups"],
                                   precision=_precision(x, g))
    return out if out.dtype == dtype else lax.convert_element_type(out, dtype)


conv_input_grad_p = prim(
    "conv_input_grad", _conv_input_grad_lower,
    lambda a, i, o, gg: (_conv_raw(gg, i[1], a[:5]), _conv_weight_grad(gg, i[0], a[:5],
                                                                          tuple(i[1].shape))),
    bucket=B.rule_batch(1, shape_attr=5))


conv_weight_grad_p = prim(
    "conv_weight_grad", _conv_weight_grad_lower,
    lambda a, i, o, gg: (_conv_input_grad(i[1], gg, a[:5], tuple(i[0].shape)),
                         _conv_raw(i[0], gg, a[:5])), bucket=B.rule_batch(2))


def _window(a, x):
    kind, dims, strides, padding = a
    # numpy init values keep these the monoid reductions jax can differentiate/transpose
    if kind == "max":
        init = -np.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
        return _reduce_window(x, np.array(init, x.dtype), lax.max, dims, strides, padding)
    return _reduce_window(x, np.array(0, x.dtype), lax.add, dims, strides, padding)


def _reduce_window(x, init, op, dims, strides, padding):
    """lax.reduce_window; in a CPU program, for a small window, `op` over the window's
    strided slices instead: one fused loop, LeNet's 2x2 max-pools 1.8-2.8x and sum windows
    3-6x faster than XLA:CPU's reduce_window (bench/lowering_choices.py)."""
    def xla_window(x):
        return lax.reduce_window(x, init, op, dims, strides, padding)
    if math.prod(dims) <= _MAX_TAPS and 0 not in x.shape:
        return lax.platform_dependent(
            x, cpu=lambda x: _window_slices(x, init, op, dims, strides, padding),
            default=xla_window)
    return xla_window(x)


def _window_out(shape, dims, strides, padding):
    """A window reduction's output shape."""
    return tuple(max(0, (n + lo + hi - k) // s + 1)
                 for n, k, s, (lo, hi) in zip(shape, dims, strides, padding))


def _tap(x, offset, out, strides):
    """The elements at `offset` in every window: a strided slice of shape `out`."""
    return lax.slice(x, offset, [o + s * (m - 1) + 1 for o, m, s in zip(offset, out, strides)],
                     strides)


def _window_slices(x, init, op, dims, strides, padding):
    out = _window_out(x.shape, dims, strides, padding)
    if 0 in out:
        return jnp.zeros(out, x.dtype)
    if any(lo or hi for lo, hi in padding):
        x = lax.pad(x, init, [(lo, hi, 0) for lo, hi in padding])
    m = None
    for o in np.ndindex(*dims):
        v = _tap(x, o, out, strides)
        m = v if m is None else op(m, v)
    return m


def _window_vjp(a, i, o, g):
    if a[0] == "max":
        return (_max_window_grad(i[0], g, a),)
    return (_sum_window_transpose(g, a, tuple(i[0].shape)),)


reduce_window_p = prim("reduce_window", _window, _window_vjp, bucket=B.rule_batch(1, True))


def _sum_window_transpose_lower(a, g):
    # each input element receives the sum of the cotangents of the windows covering it:
    # pad the cotangent (interior padding undoes the stride), then sum-window it again
    _, dims, strides, padding, x_shape = a
    pads = []
    for n, k, st, (lo, hi), m in zip(x_shape, dims, strides, padding, g.shape):
        before = k - 1 - lo
        after = n + lo + hi - k - (m - 1) * st + (k - 1 - hi)
        pads.append((before, after, st - 1))
    padded = lax.pad(g, np.array(0, g.dtype), pads)
    ones = (1,) * len(dims)
    return _reduce_window(padded, np.array(0, g.dtype), lax.add, dims, ones,
                          ((0, 0),) * len(dims))


sum_window_transpose_p = prim(
    "sum_window_transpose", _sum_window_transpose_lower,
    lambda a, i, o, gg: (_window_raw(gg, a[:4]),), bucket=B.rule_batch(1, True, shape_attr=4))


def _window_choice(x, dims, strides, padding):
    # Which element of each window PyTorch's max-pool gradient goes to, from public ops:
    # scanning the window's elements in row-major order, padding skipped, the running
    # choice c gives way to the next element v when v > c or v is NaN (PyTorch's CPU rule:
    # the first maximum, or the last NaN).
    # Returns the index into the window of each choice (int32, output-shaped; None for an
    # empty output), the window offsets in that order, and the output shape.
    out = _window_out(x.shape, dims, strides, padding)
    offs = list(np.ndindex(*dims))
    if 0 in out or 0 in x.shape:
        return None, offs, out
    shape = x.shape
    padded = any(lo or hi for lo, hi in padding)
    if padded:
        x = lax.pad(x, np.zeros((), x.dtype), [(lo, hi, 0) for lo, hi in padding])
    floating = jnp.issubdtype(x.dtype, jnp.floating)
    sel = idx = have = None
    for j, o in enumerate(offs):
        v = _tap(x, o, out, strides)
        # which windows' element at this offset is input, not padding (static)
        valid = _unpadded(shape, o, out, strides, padding) if padded else None
        if j == 0:
            sel, idx, have = v, jnp.zeros(out, jnp.int32), valid
            continue
        take = v > sel
        if floating:
            take = take | jnp.isnan(v)
        if have is not None:          # a window whose choice so far is padding takes v
            take = take | ~have
        if valid is None:
            have = None
        else:
            take = take & valid
            if have is not None:
                have = have | valid
                if have.all():
                    have = None
        sel = jnp.where(take, v, sel)
        idx = jnp.where(take, jnp.int32(j), idx)
    # materialised on CPU: fused into every element of the gradient XLA would recompute each
    # window's choice once per element (LeNet's first pool gradient 3.4x faster)
    return _cpu_materialized(idx), offs, out


def _unpadded(shape, offset, out, strides, padding):
    """Per window, whether its element at `offset` lies inside the unpadded input: a numpy
    bool array broadcastable to the output shape (None: everywhere)."""
    mask = np.ones((1,) * len(shape), bool)
    for d, (n, o, m, s, (lo, _)) in enumerate(zip(shape, offset, out, strides, padding)):
        pos = o + s * np.arange(m)
        inside = (pos >= lo) & (pos < lo + n)
        if not inside.all():
            mask = mask & inside.reshape((1,) * d + (m,) + (1,) * (len(shape) - d - 1))
    return None if mask.all() else mask


def _max_window_grad_lower(a, x, g):
    # scatter g onto each window's (first) maximum -- select-and-scatter from public ops (no
    # autodiff of the forward)
    _, dims, strides, padding = a
    idx, offs, out = _window_choice(x, dims, strides, padding)
    zero = np.array(0, g.dtype)
    if idx is None:
        return jnp.zeros(x.shape, g.dtype)
    if tuple(dims) == tuple(strides):
        # non-overlapping windows: every input element lies in at most one window, so the
        # scatter is a broadcast of g over (out_i, k_i) pairs, masked by the choice, then a
        # reshape back (and a crop/zero-fill of the padding and the uncovered tail)
        pair = tuple(v for m, k in zip(out, dims) for v in (m, k))
        bd = tuple(range(0, 2 * len(dims), 2))
        local = np.arange(len(offs), dtype=np.int32).reshape(
            tuple(v for k in dims for v in (1, k)))
        c = jnp.where(lax.broadcast_in_dim(idx, pair, bd) == local,
                      lax.broadcast_in_dim(g, pair, bd), zero)
        c = lax.reshape(c, tuple(m * k for m, k in zip(out, dims)))
        pads = [(-lo, n - m * k + lo, 0)
                for n, k, m, (lo, _) in zip(x.shape, dims, out, padding)]
        return lax.pad(c, zero, pads) if any(p[:2] != (0, 0) for p in pads) else c
    # overlapping windows: each window offset's share lands on a strided grid of x (interior
    # padding undoes the stride); sum the shares
    total = None
    for j, o in enumerate(offs):
        pads = []
        for n, s, (lo, _), st, m in zip(x.shape, strides, padding, o, out):
            before = st - lo
            pads.append((before, n - before - (m - 1) * s - 1, s - 1))
        c = lax.pad(jnp.where(idx == j, g, zero), zero, pads)
        total = c if total is None else total + c
    return total


def _max_window_grad_vjp(a, i, o, gg):
    # linear in g: its transpose gathers gg at each window's selected maximum
    x = i[0]
    return None, _max_window_select(x, gg, a)


max_window_grad_p = prim("max_window_grad", _max_window_grad_lower, _max_window_grad_vjp,
                         bucket=B.rule_batch(2, True))


def _max_window_select_lower(a, x, gg):
    # gather gg at each window's chosen maximum (the transpose of _max_window_grad_lower, the
    # same choice): select-and-gather from public ops
    _, dims, strides, padding = a
    idx, offs, out = _window_choice(x, dims, strides, padding)
    zero = np.array(0, gg.dtype)
    if idx is None:
        return jnp.zeros(out, gg.dtype)
    if any(lo or hi for lo, hi in padding):
        gg = lax.pad(gg, zero, [(lo, hi, 0) for lo, hi in padding])
    total = None
    for j, o in enumerate(offs):
        v = _tap(gg, o, out, strides)
        v = jnp.where(idx == j, v, zero)
        total = v if total is None else total + v
    return total


max_window_select_p = prim("max_window_select", _max_window_select_lower,
                           lambda a, i, o, g: (None, _max_window_grad(i[0], g, a)),
                           bucket=B.rule_batch(2, True))


softmax_p = prim("softmax", lambda a, x: jax.nn.softmax(x, axis=a[0]),
                 lambda a, i, o, g: (o * (g - sum(g * o, dim=a[0], keepdim=True)),),
                                     bucket=B.rule_softmax)


log_softmax_p = prim("log_softmax", lambda a, x: jax.nn.log_softmax(x, axis=a[0]),
                     lambda a, i, o, g: (g - exp(o) * sum(g, dim=a[0], keepdim=True),),
                                         bucket=B.rule_softmax)



# ---- neural-network primitives ---------------------------------------------------------------
def _conv_raw(x, w, attrs, bias=None):
    return apply(conv_p, (x, w) if bias is None else (x, w, bias), tuple(attrs))


def _conv_input_grad(g, w, attrs, x_shape):
    return apply(conv_input_grad_p, (g, w), tuple(attrs[:5]) + (tuple(x_shape),))


def _conv_weight_grad(x, g, attrs, w_shape):
    return apply(conv_weight_grad_p, (x, g), tuple(attrs[:5]) + (tuple(w_shape),))


def _window_raw(x, attrs):
    return apply(reduce_window_p, (x,), tuple(attrs))


def _sum_window_transpose(g, attrs, x_shape):
    return apply(sum_window_transpose_p, (g,), tuple(attrs[:4]) + (tuple(x_shape),))


def _max_window_grad(x, g, attrs):
    return apply(max_window_grad_p, (x, g), tuple(attrs[:4]), x._node.shape, x._node.dtype)


def _max_window_select(x, gg, attrs):
    return apply(max_window_select_p, (x, gg), tuple(attrs[:4]))


@torch_op
def softmax(x, dim, dtype=None):
    if dtype is not None:                   # PyTorch casts the input first
        x = to_dtype(x, D.from_any(dtype))
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    d = _norm_dim(dim, builtins.max(x.ndim, 1), "softmax")
    if x.ndim == 0:     # one element: 1, with PyTorch's (zero) gradient to the input
        return reshape(softmax(reshape(x, (1,)), 0), ())
    return apply(softmax_p, (x,), (d,), x._node.shape, x._node.dtype)


@torch_op
def log_softmax(x, dim, dtype=None):
    if dtype is not None:
        x = to_dtype(x, D.from_any(dtype))
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    if x.ndim == 0:     # one element: 0, with PyTorch's (zero) gradient to the input
        _norm_dim(dim, 1, "log_softmax")
        return reshape(log_softmax(reshape(x, (1,)), 0), ())
    d = _norm_dim(dim, x.ndim, "log_softmax")
    return apply(log_softmax_p, (x,), (d,), x._node.shape, x._node.dtype)
