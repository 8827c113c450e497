"""Neural-network kernels' front ends: convolution and window (pooling) primitives,
softmax, log_softmax.

Layer: op front end (flowlite.ops) — imports dtypes, device, ir, tensor, primitives and
the op modules listed before it in ops/__init__.py.
"""
from __future__ import annotations

import builtins

from .. import dtypes as D
from .. import primitives as P
from ..tensor import apply, _norm_dim
from ._core import (to_dtype)
from .creation import (ones_like, zeros_like)
from ._registry import torch_op


# ---- neural-network primitives ---------------------------------------------------------------
def _conv_raw(x, w, attrs, bias=None):
    return apply(P.conv, (x, w) if bias is None else (x, w, bias), tuple(attrs))


def _conv_input_grad(g, w, attrs, x_shape):
    return apply(P.conv_input_grad, (g, w), tuple(attrs[:5]) + (tuple(x_shape),))


def _conv_weight_grad(x, g, attrs, w_shape):
    return apply(P.conv_weight_grad, (x, g), tuple(attrs[:5]) + (tuple(w_shape),))


def _window_raw(x, attrs):
    return apply(P.reduce_window, (x,), tuple(attrs))


def _sum_window_transpose(g, attrs, x_shape):
    return apply(P.sum_window_transpose, (g,), tuple(attrs[:4]) + (tuple(x_shape),))


def _max_window_grad(x, g, attrs):
    return apply(P.max_window_grad, (x, g), tuple(attrs[:4]), x._node.shape, x._node.dtype)


def _max_window_select(x, gg, attrs):
    return apply(P.max_window_select, (x, gg), tuple(attrs[:4]))


@torch_op
def softmax(x, dim):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    d = _norm_dim(dim, builtins.max(x.ndim, 1), "softmax") if x.ndim else 0
    if x.ndim == 0:
        return ones_like(x)
    return apply(P.softmax, (x,), (d,), x._node.shape, x._node.dtype)


@torch_op
def log_softmax(x, dim):
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    if x.ndim == 0:
        return zeros_like(x)
    d = _norm_dim(dim, x.ndim, "log_softmax")
    return apply(P.log_softmax, (x,), (d,), x._node.shape, x._node.dtype)
