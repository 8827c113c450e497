"""More of `torch.nn.functional`: the margin, embedding and likelihood losses
(margin_ranking, hinge_embedding, soft_margin, multilabel_soft_margin, multi_margin,
multilabel_margin, cosine_embedding, triplet_margin(_with_distance), poisson_nll,
gaussian_nll), pdist, channel_shuffle, fold, affine_grid/grid_sample, gumbel_softmax,
hardshrink/softshrink.

Each is PyTorch's formula composed of flowlite's ops (gradients come from them); functional.py
re-exports them, so they are `flowlite.nn.functional.<name>` (`torch.nn.functional.<name>`).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .. import extend as X
from ..extend import ArgumentError, Tensor, from_numpy, ops as F


def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _reduce(loss, reduction, op):
    if reduction == "mean":
        return F.mean(loss)
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "none":
        return loss
    raise ArgumentError(f"{op}: {reduction!r} is not a valid value for reduction (expected "
                        f"'mean', 'sum' or 'none')")


def _pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return F.norm(x1 - x2 + eps, p, -1, keepdim)


# ---- activations -------------------------------------------------------------------------------
def hardshrink(input, lambd=0.5):  # noqa: A002 - PyTorch's names
    """x where |x| > lambd, else 0."""
    return F.where(F.logical_and(input >= -lambd, input <= lambd), 0.0, input)


def softshrink(input, lambd=0.5):  # noqa: A002
    """x - lambd above lambd, x + lambd below -lambd, 0 between."""
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return F.where(input > lambd, input - lambd, F.where(input < -lambd, input + lambd, 0.0))


# ---- losses ------------------------------------------------------------------------------------
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -target * (input1 - input2) + margin)."""
    red = _legacy_reduction(size_average, reduce, reduction)
    loss = F.clamp_min(-target * (input1 - input2) + margin, 0)
    return _reduce(loss, red, "margin_ranking_loss")


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,  # noqa: A002
                         reduction="mean"):
    """input where target is 1, max(0, margin - input) where it is -1 (PyTorch's formula)."""
    red = _legacy_reduction(size_average, reduce, reduction)
    margin_clamp = F.clamp_min(margin - input, 0)
    out_margin = F.where(target != 1, margin_clamp, 0.0)
    out_self = F.where(target != -1, input, 0.0)
    return _reduce(out_margin + out_self, red, "hinge_embedding_loss")


def soft_margin_loss(input, target, size_average=None, reduce=None,  # noqa: A002
                     reduction="mean"):
    """log(1 + exp(-target * input))."""
    red = _legacy_reduction(size_average, reduce, reduction)
    return _reduce(F.log1p(F.exp(-input * target)), red, "soft_margin_loss")


def _logsigmoid(x):
    # -softplus(-x), stable both ways
    return -(F.maximum(-x, 0.0) + F.log1p(F.exp(-F.abs(x))))


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None,  # noqa: A002
                                reduce=None, reduction="mean"):
    """The per-class binary logistic loss averaged over classes."""
    red = _legacy_reduction(size_average, reduce, reduction)
    loss = -(target * _logsigmoid(input) + (1 - target) * _logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.ndim - 1
    loss = F.sum(loss, class_dim) / input.shape[class_dim]
    return _reduce(loss, red, "multilabel_soft_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1."""
    red = _legacy_reduction(size_average, reduce, reduction)
    eps = 1e-12
    d = 1 if input1.ndim == 2 else 0
    prod_sum = F.sum(input1 * input2, d)
    mag1 = F.sum(input1 * input1, d) + eps
    mag2 = F.sum(input2 * input2, d) + eps
    cos = prod_sum / F.sqrt(mag1 * mag2)
    pos = 1 - cos
    neg = F.clamp_min(cos - margin, 0)
    loss = F.where(target == 1, pos, 0.0) + F.where(target == -1, neg, 0.0)
    return _reduce(loss, red, "cosine_embedding_loss")


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the p-norm distance
    (swap: the smaller of d(anchor, negative) and d(positive, negative))."""
    red = _legacy_reduction(size_average, reduce, reduction)
    d_pos = _pairwise_distance(anchor, positive, p, eps)
    d_neg = _pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = F.minimum(d_neg, _pairwise_distance(positive, negative, p, eps))
    return _reduce(F.clamp_min(margin + d_pos - d_neg, 0), red, "triplet_margin_loss")


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """triplet_margin_loss with any distance (default: the pairwise 2-norm distance)."""
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: expected margin to be greater "
                         f"than 0, got {margin} instead")
    dist = distance_function if distance_function is not None else _pairwise_distance
    d_pos = dist(anchor, positive)
    d_neg = dist(anchor, negative)
    if swap:
        d_neg = F.minimum(d_neg, dist(positive, negative))
    return _reduce(F.clamp_min(margin + d_pos - d_neg, 0), reduction,
                   "triplet_margin_with_distance_loss")


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None,  # noqa: A002
                     eps=1e-8, reduce=None, reduction="mean"):
    """exp(input) - target * input (log_input) or input - target * log(input + eps), plus
    Stirling's term for target > 1 when full."""
    red = _legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = F.exp(input) - target * input
    else:
        loss = input - target * F.log(input + eps)
    if full:
        safe = F.where(target > 1, target, 1.0)
        stirling = safe * F.log(safe) - safe + 0.5 * F.log(2 * math.pi * safe)
        loss = loss + F.where(target <= 1, 0.0, stirling)
    return _reduce(loss, red, "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):  # noqa: A002
    """0.5 * (log(var) + (input - target)**2 / var) (+ 0.5 log(2 pi) when full), var clamped to
    eps without affecting its gradient, as in PyTorch. A negative var is an error, found by
    reading var on the host (a sync), as PyTorch does."""
    if not isinstance(var, Tensor):
        var = F.full_like(input, float(var))
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = F.unsqueeze(var, -1)
        elif not (tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if bool(F.any(var < 0).item()):
        raise ValueError("var has negative entry/entries")
    var = var + (F.clamp_min(var, eps) - var).detach()
    loss = 0.5 * (F.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,  # noqa
                      reduce=None, reduction="mean"):
    """sum over classes j != target of max(0, margin - x[target] + x[j]) ** p, divided by the
    number of classes (times weight[target] when given)."""
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    red = _legacy_reduction(size_average, reduce, reduction)
    x = input if input.ndim == 2 else F.reshape(input, (1, -1))
    y = F.reshape(target, (-1, 1))
    c = x.shape[1]
    xy = F.gather(x, 1, y)
    z = F.clamp_min(margin - xy + x, 0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * F.reshape(F.take(weight, F.reshape(y, (-1,))), (-1, 1))
    classes = F.arange(c, device=x.device)
    z = F.where(F.eq(F.unsqueeze(classes, 0), y), 0.0, z)
    loss = F.sum(z, 1) / c
    if input.ndim < 2:
        loss = F.reshape(loss, ())
    return _reduce(loss, red, "multi_margin_loss")


def multilabel_margin_loss(input, target, size_average=None, reduce=None,  # noqa: A002
                           reduction="mean"):
    """For each target class j (target lists them, ended by -1) and each other class i:
    max(0, 1 - (x[j] - x[i])), summed and divided by the number of classes."""
    red = _legacy_reduction(size_average, reduce, reduction)
    x = input if input.ndim == 2 else F.reshape(input, (1, -1))
    t = target if target.ndim == 2 else F.reshape(target, (1, -1))
    c = x.shape[1]
    valid = F.cumprod((t != -1).long(), 1) > 0             # the entries before the first -1
    idx = F.where(valid, t, 0)
    is_target = F.any(F.logical_and(F.unsqueeze(valid, 2),
                                    F.eq(F.unsqueeze(idx, 2),
                                         F.reshape(F.arange(c, device=x.device), (1, 1, c)))),
                      1)
    xj = F.gather(x, 1, idx)
    term = F.clamp_min(1 - (F.unsqueeze(xj, 2) - F.unsqueeze(x, 1)), 0)
    mask = F.logical_and(F.unsqueeze(valid, 2), F.unsqueeze(F.logical_not(is_target), 1))
    loss = F.sum(F.where(mask, term, 0.0), (1, 2)) / c
    if input.ndim < 2:
        loss = F.reshape(loss, ())
    return _reduce(loss, red, "multilabel_margin_loss")


# ---- distances, shuffles, sampling --------------------------------------------------------
def pdist(input, p=2):  # noqa: A002
    """The p-norm distances between the rows of a 2-D input, pairs i < j in row-major order
    (the condensed upper triangle); the gradient at a zero distance is 0, as in PyTorch."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = input.shape[0]
    ij = F.triu_indices(n, n, 1, device=input.device)
    a = F.index_select(input, 0, ij[0])
    b = F.index_select(input, 0, ij[1])
    return F.norm(a - b, p, -1)


def channel_shuffle(input, groups):  # noqa: A002
    """(N, C, *) with the channels regrouped: (N, g, C/g, *) transposed to (N, C/g, g, *)."""
    n, c = input.shape[0], input.shape[1]
    if groups <= 0 or c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels "
                           f"and {groups} groups.")
    rest = tuple(input.shape[2:])
    y = F.reshape(input, (n, groups, c // groups) + rest)
    return F.reshape(F.transpose(y, 1, 2), (n, c) + rest)


native_channel_shuffle = channel_shuffle


def _pair(v, name):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"fold: {name} must be an int or a pair, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _fold_index(c, out_hw, k, d, p, st):
    """For each (channel, kernel offset, block) of unfold's layout, its element in the padded
    (C, H + 2p, W + 2p) image; and the block count."""
    hp, wp = out_hw[0] + 2 * p[0], out_hw[1] + 2 * p[1]
    nh = (hp - d[0] * (k[0] - 1) - 1) // st[0] + 1
    nw = (wp - d[1] * (k[1] - 1) - 1) // st[1] + 1
    ki, kj = np.meshgrid(np.arange(k[0]), np.arange(k[1]), indexing="ij")
    bi, bj = np.meshgrid(np.arange(nh), np.arange(nw), indexing="ij")
    rows = ki.reshape(-1, 1) * d[0] + bi.reshape(1, -1) * st[0]
    cols = kj.reshape(-1, 1) * d[1] + bj.reshape(1, -1) * st[1]
    pos = rows * wp + cols                                   # (kh*kw, L)
    idx = np.arange(c).reshape(-1, 1, 1) * (hp * wp) + pos[None]
    return idx.reshape(-1), nh * nw, hp, wp


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """col2im, the adjoint of unfold: (N, C*kh*kw, L) blocks summed into (N, C, H, W) (the
    blocks' overlaps add up); the index map is computed on the host once per geometry."""
    batched = input.ndim == 3
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are "
                           f"supported (got {input.ndim}D)")
    x = input if batched else F.unsqueeze(input, 0)
    out_hw, k = _pair(output_size, "output_size"), _pair(kernel_size, "kernel_size")
    d, p, st = _pair(dilation, "dilation"), _pair(padding, "padding"), _pair(stride, "stride")
    n, ckk, blocks = x.shape
    if ckk % (k[0] * k[1]):
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product "
                           f"of kernel_size, but got input.size(1)={ckk} and "
                           f"kernel_size={k}")
    c = ckk // (k[0] * k[1])
    idx, nblocks, hp, wp = _fold_index(c, out_hw, k, d, p, st)
    if nblocks != blocks:
        raise RuntimeError(f"Given output_size={out_hw}, kernel_size={k}, dilation={d}, "
                           f"padding={p}, stride={st}, expected size of input's dimension 2 to "
                           f"match the calculated number of sliding blocks {nblocks}, but got "
                           f"input.size(2)={blocks}.")
    flat = F.zeros((n, c * hp * wp), dtype=x.dtype, device=x.device)
    out = F.index_add(flat, 1, from_numpy(idx, device=x.device), F.reshape(x, (n, -1)))
    out = F.reshape(out, (n, c, hp, wp))
    out = F.narrow(F.narrow(out, 2, p[0], out_hw[0]), 3, p[1], out_hw[1])
    return out if batched else F.squeeze(out, 0)


# ---- max pooling with indices, max unpooling -----------------------------------------------------
def max_pool_with_indices(x, k, s, d, lead, outs, pads):
    """(values, indices) of a max pool whose geometry nn.functional's _pool_setup computed:
    the windows' taps are strided slices of the padded input, the index of each window's
    first maximum (PyTorch's scan order) is turned into a flat index over the input's spatial
    dims, and the values are gathered there — so the gradient reaches that element only, as
    in PyTorch."""
    nd = len(k)
    spatial = tuple(x.shape[lead:])
    lo = [0] * lead + [p[0] for p in pads]
    hi = [0] * lead + [p[1] for p in pads]
    fill = float("-inf") if x.dtype.kind == "f" else int(np.iinfo(x.dtype.np).min)
    xp = X.pad_general(x, lo, hi, [0] * x.ndim, fill) if any(lo + hi) else x
    offsets = list(itertools.product(*[range(kk) for kk in k]))
    taps = []
    for off in offsets:
        starts = [0] * lead + [o * dd for o, dd in zip(off, d)]
        stops = list(xp.shape[:lead]) + [st + (n - 1) * ss + 1
                                         for st, n, ss in zip(starts[lead:], outs, s)]
        taps.append(X.slice_strided(xp, starts, stops, [1] * lead + list(s)))
    which = F.argmax(F.stack(taps, -1), -1)                 # (lead..., outs...)
    table = np.asarray(offsets, np.int64).reshape(-1, nd)
    flat = None
    for i in range(nd):
        off_i = F.take(from_numpy(table[:, i] * d[i], device=x.device), which)
        shape = [1] * (lead + nd)
        shape[lead + i] = outs[i]
        start_i = F.reshape(F.arange(outs[i], device=x.device, dtype=off_i.dtype) * s[i] -
                            pads[i][0], tuple(shape))
        pos = start_i + off_i
        stride = int(np.prod(spatial[i + 1:], dtype=np.int64))
        flat = pos * stride if flat is None else flat + pos * stride
    flat = flat.long()
    values = X.take_along(F.reshape(x, tuple(x.shape[:lead]) + (-1,)),
                          F.reshape(flat, tuple(x.shape[:lead]) + (-1,)), lead)
    return F.reshape(values, tuple(x.shape[:lead]) + tuple(outs)), flat


def adaptive_max_pool_with_indices(x, lead, spatial, out):
    """(values, indices) of an adaptive max pool: each output cell's window (PyTorch's bins
    [floor(i n / o), ceil((i + 1) n / o)) per dim) read through one host-computed index map,
    shorter windows padded with a -inf tap; the first maximum in scan order wins, as in
    PyTorch, and the values are gathered there."""
    nd = len(out)
    per_dim = []
    for n, o in zip(spatial, out):
        starts = [(i * n) // o for i in range(o)]
        ends = [-(-((i + 1) * n) // o) for i in range(o)]
        width = max(e - b for b, e in zip(starts, ends))
        taps = np.full((o, width), -1, np.int64)
        for i, (b, e) in enumerate(zip(starts, ends)):
            taps[i, :e - b] = np.arange(b, e)
        per_dim.append(taps)
    strides = [int(np.prod(spatial[i + 1:], dtype=np.int64)) for i in range(nd)]
    # index map over (out cells..., window taps...): flat spatial position, or -1 (padding)
    flat = np.zeros(tuple(out) + tuple(t.shape[1] for t in per_dim), np.int64)
    valid = np.ones(flat.shape, bool)
    for i, taps in enumerate(per_dim):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = taps.shape
        t = taps.reshape(shape)
        flat = flat + np.maximum(t, 0) * strides[i]
        valid = valid & (t >= 0)
    numel = int(np.prod(spatial, dtype=np.int64))
    flat = np.where(valid, flat, numel).reshape(int(np.prod(out)), -1)   # numel: the pad tap
    fill = float("-inf") if x.dtype.kind == "f" else int(np.iinfo(x.dtype.np).min)
    xs = F.reshape(x, tuple(x.shape[:lead]) + (numel,))
    xs = X.pad_general(xs, [0] * (lead + 1), [0] * lead + [1], [0] * (lead + 1), fill)
    cells, ntaps = flat.shape
    taps = from_numpy(flat.reshape(-1), device=x.device)
    windows = F.reshape(F.index_select(xs, lead, taps), tuple(x.shape[:lead]) + (cells, ntaps))
    which = F.argmax(windows, -1, keepdim=True)
    idx = F.take(from_numpy(flat, device=x.device),
                 which + F.reshape(F.arange(cells, device=x.device) * ntaps, (cells, 1)))
    values = X.take_along(xs, F.reshape(idx, tuple(x.shape[:lead]) + (cells,)), lead)
    shape = tuple(x.shape[:lead]) + tuple(out)
    return F.reshape(values, shape), F.reshape(idx, shape).long()


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, nd, op):  # noqa
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor "
                           f"({list(input.shape)}) but got indices tensor with shape: "
                           f"{list(indices.shape)}")
    k = _tuple(kernel_size, nd)
    st = k if stride is None else _tuple(stride, nd)
    p = _tuple(padding, nd)
    lead = input.ndim - nd
    if output_size is None:
        size = tuple((input.shape[lead + i] - 1) * st[i] - 2 * p[i] + k[i] for i in range(nd))
    else:
        size = tuple(int(v) for v in tuple(output_size)[-nd:])
    n = int(np.prod(size, dtype=np.int64))
    flat_in = F.reshape(input, tuple(input.shape[:lead]) + (-1,))
    flat_idx = F.reshape(indices, tuple(input.shape[:lead]) + (-1,))
    out = F.scatter(F.zeros(tuple(input.shape[:lead]) + (n,), dtype=input.dtype,
                            device=input.device), lead, flat_idx, flat_in)
    return F.reshape(out, tuple(input.shape[:lead]) + size)


def _tuple(v, n):
    if isinstance(v, (tuple, list)):
        return tuple(int(a) for a in v) if len(v) == n else tuple(int(v[0]) for _ in range(n))
    return (int(v),) * n


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None):
    """The inverse of max_pool1d(return_indices=True): each value put back at its index."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1,
                       "max_unpool1d")


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2,
                       "max_unpool2d")


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3,
                       "max_unpool3d")


# ---- spatial transformers: affine_grid, grid_sample ---------------------------------------------
def _linspace_from_neg_one(theta, n, align_corners):
    if n <= 1:
        return F.zeros((1,), dtype=theta.dtype, device=theta.device)
    r = F.linspace(-1.0, 1.0, n, dtype=theta.dtype, device=theta.device)
    return r if align_corners else r * ((n - 1) / n)


def affine_grid(theta, size, align_corners=None):
    """The sampling grid of the affine maps theta (N, 2, 3) for an output of size (N, C, H, W)
    — or (N, 3, 4) and (N, C, D, H, W) — in grid_sample's [-1, 1] coordinates (PyTorch's
    base grid and bmm)."""
    ac = bool(align_corners)
    if theta.dtype.kind != "f":
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = tuple(int(v) for v in size)
    if len(size) == 4:
        n, _, h, w = size
        if tuple(theta.shape) != (n, 2, 3):
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                             f"{list(size)}. Got {list(theta.shape)}.")
        xs = F.reshape(_linspace_from_neg_one(theta, w, ac), (1, w, 1))
        ys = F.reshape(_linspace_from_neg_one(theta, h, ac), (h, 1, 1))
        base = F.cat([F.expand(xs, h, w, 1), F.expand(ys, h, w, 1),
                      F.ones((h, w, 1), dtype=theta.dtype, device=theta.device)], 2)
        grid = F.matmul(F.reshape(base, (1, h * w, 3)), F.transpose(theta, 1, 2))
        return F.reshape(grid, (n, h, w, 2))
    if len(size) == 5:
        n, _, d, h, w = size
        if tuple(theta.shape) != (n, 3, 4):
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size "
                             f"{list(size)}. Got {list(theta.shape)}.")
        xs = F.reshape(_linspace_from_neg_one(theta, w, ac), (1, 1, w, 1))
        ys = F.reshape(_linspace_from_neg_one(theta, h, ac), (1, h, 1, 1))
        zs = F.reshape(_linspace_from_neg_one(theta, d, ac), (d, 1, 1, 1))
        base = F.cat([F.expand(xs, d, h, w, 1), F.expand(ys, d, h, w, 1),
                      F.expand(zs, d, h, w, 1),
                      F.ones((d, h, w, 1), dtype=theta.dtype, device=theta.device)], 3)
        grid = F.matmul(F.reshape(base, (1, d * h * w, 4)), F.transpose(theta, 1, 2))
        return F.reshape(grid, (n, d, h, w, 3))
    raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine "
                              f"transforms, respectively. Got size {list(size)}.")


def _reflect(coord, twice_low, twice_high):
    if twice_low == twice_high:
        return coord * 0
    lo = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = F.abs(coord - lo)
    extra = F.fmod(c, span)
    flips = F.floor(c / span)
    return F.where(F.eq(F.remainder(flips, 2), 0), extra + lo, span - extra + lo)


def _source_index(coord, size, padding_mode, align_corners):
    # PyTorch's grid_sampler_compute_source_index: unnormalise, then border / reflection
    if align_corners:
        c = (coord + 1) / 2 * (size - 1)
    else:
        c = ((coord + 1) * size - 1) / 2
    if padding_mode == "border":
        c = F.clamp(c, 0, size - 1)
    elif padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = F.clamp(c, 0, size - 1)
    return c


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros",  # noqa: A002
                align_corners=None):
    """input (N, C, H, W) sampled at grid (N, Ho, Wo, 2) of (x, y) in [-1, 1]: bilinear or
    nearest, padding 'zeros', 'border' or 'reflection' (PyTorch's index arithmetic);
    differentiable in input and grid. (5-D inputs and bicubic are not implemented.)"""
    if input.ndim != 4:
        raise NotImplementedError("flowlite: torch.nn.functional.grid_sample of a "
                                  f"{input.ndim}-D input is not implemented (4-D only)")
    if mode not in ("bilinear", "nearest"):
        raise NotImplementedError(f"flowlite: torch.nn.functional.grid_sample with mode "
                                  f"{mode!r} is not implemented (bilinear, nearest)")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    n, c, h, w = input.shape
    if grid.ndim != 4 or grid.shape[0] != n or grid.shape[3] != 2:
        raise RuntimeError(f"grid_sampler(): expected grid of shape (N, H, W, 2) with N = {n}, "
                           f"got {list(grid.shape)}")
    ac = bool(align_corners)
    ho, wo = grid.shape[1], grid.shape[2]
    ix = _source_index(grid[..., 0], w, padding_mode, ac)
    iy = _source_index(grid[..., 1], h, padding_mode, ac)
    flat = F.reshape(input, (n, c, h * w))

    def tap(yi, xi):
        inside = F.logical_and(F.logical_and(xi >= 0, xi <= w - 1),
                               F.logical_and(yi >= 0, yi <= h - 1))
        idx = F.clamp(yi, 0, h - 1) * w + F.clamp(xi, 0, w - 1)
        idx = F.expand(F.reshape(idx.long(), (n, 1, ho * wo)), n, c, ho * wo)
        vals = F.reshape(F.gather(flat, 2, idx), (n, c, ho, wo))
        return F.where(F.unsqueeze(inside, 1), vals, 0.0)

    if mode == "nearest":
        return tap(F.round(iy), F.round(ix))
    x0, y0 = F.floor(ix), F.floor(iy)
    x1, y1 = x0 + 1, y0 + 1
    wx1, wy1 = ix - x0, iy - y0
    wx0, wy0 = x1 - ix, y1 - iy

    def wt(t):
        return F.unsqueeze(t, 1)
    return (tap(y0, x0) * wt(wx0 * wy0) + tap(y0, x1) * wt(wx1 * wy0) +
            tap(y1, x0) * wt(wx0 * wy1) + tap(y1, x1) * wt(wx1 * wy1))


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + g) / tau) with Gumbel noise g = -log(Exponential(1)) drawn from
    flowlite's generator; hard: the one-hot of the argmax in the forward pass, the soft
    sample's gradient in the backward (the straight-through estimator)."""
    gumbels = -F.log(F.zeros_like(logits).exponential_())
    y_soft = F.softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    index = F.argmax(y_soft, dim, keepdim=True)
    y_hard = F.scatter(F.zeros_like(logits), dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


__all__ = ["hardshrink", "softshrink", "margin_ranking_loss", "hinge_embedding_loss",
           "soft_margin_loss", "multilabel_soft_margin_loss", "cosine_embedding_loss",
           "triplet_margin_loss", "triplet_margin_with_distance_loss", "poisson_nll_loss",
           "gaussian_nll_loss", "multi_margin_loss", "multilabel_margin_loss", "pdist",
           "channel_shuffle", "native_channel_shuffle", "gumbel_softmax", "fold",
           "affine_grid", "grid_sample", "max_unpool1d", "max_unpool2d", "max_unpool3d"]
