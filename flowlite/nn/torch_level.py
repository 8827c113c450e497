"""PyTorch's top-level (`torch.<name>`) entry points to neural-network functions: `torch.conv2d`,
`torch.layer_norm`, `torch.dropout`, `torch.batch_norm`, ... — undocumented in PyTorch but
public, with ATen's argument orders (`torch.embedding(weight, indices)`, losses taking the
reduction as an integer: 0 none, 1 mean, 2 sum). Each calls the `nn.functional` function;
the package merges `TOP` into the `flowlite` namespace.
"""
from __future__ import annotations

from . import functional as Fn

TOP: dict = {}
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(r):
    return _REDUCTIONS.get(r, r)


def _top(fn):
    TOP[fn.__name__] = fn
    return fn


for _name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "bilinear", "pixel_shuffle", "pixel_unshuffle", "prelu", "celu",
              "selu", "rrelu", "threshold", "hardshrink", "pairwise_distance",
              "cosine_similarity", "pdist", "channel_shuffle", "native_channel_shuffle",
              "rms_norm", "adaptive_avg_pool1d", "celu_", "selu_", "rrelu_", "threshold_",
              "max_pool1d_with_indices"):
    TOP[_name] = getattr(Fn, _name)


def _stride(stride):
    return None if stride is None or (isinstance(stride, (list, tuple)) and not stride) else \
        stride


@_top
def avg_pool1d(input, kernel_size, stride=(), padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True):
    return Fn.avg_pool1d(input, kernel_size, _stride(stride), padding, ceil_mode,
                         count_include_pad)


@_top
def adaptive_max_pool1d(input, output_size):  # noqa: A002
    """torch.adaptive_max_pool1d: (values, indices), always."""
    return Fn.adaptive_max_pool1d(input, output_size, True)


@_top
def max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
               ceil_mode=False):
    return Fn.max_pool1d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


@_top
def max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
               ceil_mode=False):
    return Fn.max_pool2d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


@_top
def max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
               ceil_mode=False):
    return Fn.max_pool3d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


@_top
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5,  # noqa: A002
               cudnn_enable=True):
    return Fn.layer_norm(input, normalized_shape, weight, bias, eps)


@_top
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5,  # noqa: A002
               cudnn_enabled=True):
    return Fn.group_norm(input, num_groups, weight, bias, eps)


@_top
def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,  # noqa
               cudnn_enabled=True):
    """ATen's argument order (weight and bias first)."""
    return Fn.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                         eps)


@_top
def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats,  # noqa
                  momentum, eps, cudnn_enabled=True):
    """ATen's argument order (weight and bias first)."""
    return Fn.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                            momentum, eps)


@_top
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """ATen's order: the table first."""
    return Fn.embedding(indices, weight, None if padding_idx is None or padding_idx < 0 else
                        padding_idx, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def _dropout_family(name, fn, inplace):
    def op(input, p, train):  # noqa: A002
        return fn(input, p, train, inplace)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"torch.{name}(input, p, train): nn.functional's, positional as in ATen."
    TOP[name] = op


def _feature_dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    """Dropout of whole channels (dim 1) of a tensor of any rank >= 2."""
    if input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return Fn._channel_dropout(input, p, training, inplace, input.ndim, "feature_dropout")


for _name, _fn in (("dropout", Fn.dropout), ("alpha_dropout", Fn.alpha_dropout),
                   ("feature_dropout", _feature_dropout),
                   ("feature_alpha_dropout", Fn.feature_alpha_dropout)):
    _dropout_family(_name, _fn, False)
    _dropout_family(_name + "_", _fn, True)


@_top
def kl_div(input, target, reduction=1, *, log_target=False):  # noqa: A002
    return Fn.kl_div(input, target, reduction=_reduction(reduction), log_target=log_target)


@_top
def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None,  # noqa
                                     reduction=1):
    return Fn.binary_cross_entropy_with_logits(input, target, weight,
                                               reduction=_reduction(reduction),
                                               pos_weight=pos_weight)


@_top
def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return Fn.cosine_embedding_loss(input1, input2, target, margin,
                                    reduction=_reduction(reduction))


@_top
def hinge_embedding_loss(input, target, margin=1.0, reduction=1):  # noqa: A002
    return Fn.hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


@_top
def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return Fn.margin_ranking_loss(input1, input2, target, margin,
                                  reduction=_reduction(reduction))


@_top
def poisson_nll_loss(input, target, log_input, full, eps, reduction):  # noqa: A002
    return Fn.poisson_nll_loss(input, target, log_input, full, eps=eps,
                               reduction=_reduction(reduction))


@_top
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        reduction=1):
    return Fn.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                  reduction=_reduction(reduction))


@_top
def convolution(input, weight, bias, stride, padding, dilation, transposed,  # noqa: A002
                output_padding, groups):
    """ATen's generic convolution: conv{1,2,3}d or conv_transpose{1,2,3}d by the input's rank."""
    nd = input.ndim - 2
    if transposed:
        fn = getattr(Fn, f"conv_transpose{nd}d")
        return fn(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return getattr(Fn, f"conv{nd}d")(input, weight, bias, stride, padding, dilation, groups)
