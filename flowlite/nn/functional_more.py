"""More of `torch.nn.functional`: the margin, embedding and likelihood losses
(margin_ranking, hinge_embedding, soft_margin, multilabel_soft_margin, multi_margin,
multilabel_margin, cosine_embedding, triplet_margin(_with_distance), poisson_nll,
gaussian_nll), pdist, channel_shuffle, fold, gumbel_softmax, hardshrink/softshrink.

Each is PyTorch's formula composed of flowlite's ops (gradients come from them); functional.py
re-exports them, so they are `flowlite.nn.functional.<name>` (`torch.nn.functional.<name>`).
"""
from __future__ import annotations

import math

import numpy as np

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
           "channel_shuffle", "native_channel_shuffle", "gumbel_softmax", "fold"]
