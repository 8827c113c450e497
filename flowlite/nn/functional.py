"""`nn.functional`: PyTorch's functional API composed from flowlite's core ops.

Everything here records lazy ops (no primitive is added): convolution and pooling go through
the core `conv` / `reduce_window` primitives, everything else is a short composition.  Layers
are written to record few ops, since tracing cost per op is what a LazyTensor framework pays
on every step; geometry that depends only on shapes (pooling divisors, interpolation weights,
padding indices, causal masks) is computed once on the host and cached as device data.
"""
from __future__ import annotations

import builtins
import functools
import math
import numbers
import warnings

import numpy as np

from ..extend import (ArgumentError, DTypeError, IndexShapeError, UnsupportedError,
                      UnsupportedModeError)
from .. import extend as X
from ..extend import (Tensor, check_index, dtypes as D, from_numpy, no_grad, on_clear_cache,
                      ops as F, prims as P, random as R, rebind, record)

__all__ = [
    "linear", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
    "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "dropout", "dropout1d", "dropout2d", "alpha_dropout", "batch_norm",
    "layer_norm", "group_norm", "rms_norm", "instance_norm", "embedding", "one_hot", "pad",
    "normalize", "interpolate", "upsample", "scaled_dot_product_attention", "relu", "relu6",
    "leaky_relu", "gelu", "silu", "mish", "elu", "selu", "celu", "softplus", "hardtanh",
    "hardsigmoid", "hardswish", "logsigmoid", "softsign", "tanhshrink", "glu", "sigmoid", "tanh",
    "softmax", "log_softmax", "softmin", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "kl_div", "cosine_similarity", "pairwise_distance", "unfold", "pixel_shuffle",
    "pixel_unshuffle", "prelu",
]

_NEG_INF = float("-inf")


# ---- helpers -----------------------------------------------------------------------------------
def _ntuple(v, n, name="argument"):
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return tuple(builtins.int(v[0]) for _ in range(n))
        if len(v) != n:
            raise ArgumentError(f"{name} must be an int or a tuple of {n} ints, got {v!r}")
        return tuple(builtins.int(x) for x in v)
    return (builtins.int(v),) * n


_const_cache: dict = {}
on_clear_cache(_const_cache.clear)     # flowlite.clear_cache() frees these device buffers too


def _const(key, build, dtype, device) -> Tensor:
    """A host-computed constant (shape-only geometry), uploaded once and reused as data."""
    k = (key, dtype, device)
    t = _const_cache.get(k)
    if t is None:
        arr = np.asarray(build())
        t = _const_cache[k] = from_numpy(arr.astype(dtype.np), device=device)
    return t


def _maybe_inplace(x, out, inplace, name):
    return rebind(x, out, name) if inplace else out


def _check_float(x, op):
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: expected a flowlite Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating-point input, got {x.dtype}")


def _check_float_target(input, target, op):
    # PyTorch: RuntimeError ("Found dtype Long but expected Float"); no silent promotion
    if isinstance(target, Tensor) and not target.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating-point target like the input "
                         f"({input.dtype}), got {target.dtype}")


def _reduce(loss, reduction, op):
    if reduction == "mean":
        return F.mean(loss)
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "none":
        return loss
    raise ArgumentError(f"{op}: {reduction!r} is not a valid value for reduction "
                        f"(expected 'mean', 'sum' or 'none')")


def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


# ---- autocast --------------------------------------------------------------------------------
# Inside torch.autocast regions the ops of PyTorch's CPU lower-precision list (linear,
# convolutions, prelu, scaled_dot_product_attention) cast their floating arguments with
# X.autocast.lower; those of its fp32 list (the losses, 3-D pooling, reflect/replicate padding)
# are decorated with _autocast_fp32.

_REDUCED = (D.bfloat16, D.float16)     # computed in float32 inside fused composites


def _autocast_fp32(fn):
    """fn computing in float32 inside autocast regions (PyTorch's fp32 list): bfloat16 and
    float16 tensor arguments are cast to float32 first."""
    @functools.wraps(fn)
    def fp32_in_autocast(*args, **kwargs):
        if X.autocast.current() is not None:
            args = X.autocast.fp32(*args)
            if kwargs:
                kwargs = dict(zip(kwargs, X.autocast.fp32(*kwargs.values())))
        return fn(*args, **kwargs)
    return fp32_in_autocast


# ---- linear ------------------------------------------------------------------------------------
def linear(input, weight, bias=None):
    """y = x Wᵀ + b with W of shape (out_features, in_features)."""
    shp = input.shape
    wshp = weight.shape
    if not shp or shp[-1] != wshp[-1]:
        raise ArgumentError(f"linear: input of shape {tuple(shp)} doesn't match weight of shape "
                            f"{tuple(wshp)} (expected in_features={wshp[-1]} in the last "
                            f"dimension)")
    if X.autocast.current() is not None:
        input, weight, bias = X.autocast.lower(input, weight, bias)
    wdt = weight.dtype
    if len(wshp) == 2 and input.dtype is wdt and wdt.kind == "f" and (
            bias is None or (bias.shape == wshp[:1] and bias.dtype is wdt)):
        args = (input, weight) if bias is None else (input, weight, bias)
        return record(P.linear, args, (), shp[:-1] + wshp[:1], wdt)
    if len(wshp) == 1:
        y = F.matmul(input, weight)
    elif len(shp) <= 2:
        y = F.matmul(input, F.transpose(weight, 0, 1))
    else:
        # one einsum: no reshapes, and its weight gradient is a single dot_general over all
        # leading dims (a batched matmul would build a per-batch gradient and then sum it)
        y = F.einsum("...i,oi->...o", input, weight)
    return y if bias is None else y + bias


def bilinear(input1, input2, weight, bias=None):
    with X.autocast.suspended():         # PyTorch's bilinear is in none of CPU autocast's lists
        y = F.einsum("...i,oij,...j->...o", input1, weight, input2)
        return y if bias is None else y + bias


# ---- convolution -------------------------------------------------------------------------------
def _conv_padding(padding, nd, stride, dilation, kernel, op):
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding == "same":
            if builtins.any(s != 1 for s in stride):
                raise ArgumentError(f"{op}: padding='same' is not supported for strided "
                                    f"convolutions (stride={stride})")
            pads = []
            for d, k in zip(dilation, kernel):
                total = d * (k - 1)
                pads.append((total // 2, total - total // 2))
            return tuple(pads)
        raise ArgumentError(f"{op}: invalid padding string {padding!r}, should be one of "
                            f"'valid' or 'same'")
    p = _ntuple(padding, nd, "padding")
    if builtins.any(v < 0 for v in p):
        raise ArgumentError(f"{op}: negative padding is not supported (padding={p})")
    return tuple((v, v) for v in p)


def _batchify(x, nd, op, what="input"):
    if x.ndim == nd + 2:
        return x, True
    if x.ndim == nd + 1:
        return F.unsqueeze(x, 0), False
    raise ArgumentError(f"{op}: expected a {nd + 1}D (unbatched) or {nd + 2}D (batched) {what}, "
                        f"but got {what} of shape {tuple(x.shape)}")


def _positive(values, what, op):
    # PyTorch: RuntimeError "non-positive stride is not supported" (dilation likewise)
    if builtins.any(v <= 0 for v in values):
        raise ArgumentError(f"{op}: non-positive {what} is not supported (got {what}="
                            f"{tuple(values)})")
    return values


def _convnd(x, weight, bias, stride, padding, dilation, groups, nd, op):
    if X.autocast.current() is not None:
        x, weight, bias = X.autocast.lower(x, weight, bias)
    x, batched = _batchify(x, nd, op)
    xs, ws = x.shape, weight.shape
    if len(ws) != nd + 2:
        raise ArgumentError(f"{op}: expected a {nd + 2}D weight, got shape {tuple(ws)}")
    cin = xs[1]
    cout = ws[0]
    if groups < 1 or cin != ws[1] * groups or cout % groups:
        raise ArgumentError(f"{op}: input of shape {tuple(xs)} (channels {cin}) doesn't "
                            f"match weight of shape {tuple(ws)} with groups={groups} "
                            f"(expected {ws[1] * groups} input channels and out "
                            f"channels divisible by groups)")
    stride = _positive(_ntuple(stride, nd, "stride"), "stride", op)
    dilation = _positive(_ntuple(dilation, nd, "dilation"), "dilation", op)
    pads = _conv_padding(padding, nd, stride, dilation, ws[2:], op)
    for i in range(nd):
        eff = dilation[i] * (ws[2 + i] - 1) + 1
        if xs[2 + i] + pads[i][0] + pads[i][1] < eff:
            raise ArgumentError(f"{op}: input of shape {tuple(xs)} (padded by {pads}) is "
                                f"smaller than the kernel {tuple(ws[2:])} with dilation "
                                f"{dilation}")
    attrs = (stride, pads, (1,) * nd, dilation, groups)
    xdt = x.dtype
    if bias is not None and bias.shape == (cout,) and bias.dtype is xdt \
            and weight.dtype is xdt:
        y = X.conv(x, weight, attrs, bias)
    else:
        y = X.conv(x, weight, attrs)
        if bias is not None:
            y = y + F.reshape(bias, (1, cout) + (1,) * nd)
    return y if batched else F.squeeze(y, 0)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def _conv_transpose_nd(x, weight, bias, stride, padding, output_padding, groups, dilation, nd,
                       op):
    if X.autocast.current() is not None:
        x, weight, bias = X.autocast.lower(x, weight, bias)
    x, batched = _batchify(x, nd, op)
    xs, ws = x.shape, weight.shape
    cin = xs[1]
    if len(ws) != nd + 2 or ws[0] != cin or cin % groups:
        raise ArgumentError(f"{op}: input of shape {tuple(xs)} doesn't match weight of shape "
                            f"{tuple(ws)} (expected weight (in_channels={cin}, "
                            f"out_channels/groups, *kernel) and in_channels divisible by "
                            f"groups={groups})")
    stride = _positive(_ntuple(stride, nd, "stride"), "stride", op)
    pad = _ntuple(padding, nd, "padding")
    opad = _ntuple(output_padding, nd, "output_padding")
    dilation = _positive(_ntuple(dilation, nd, "dilation"), "dilation", op)
    for s, d, o in zip(stride, dilation, opad):
        if not (o < s or o < d):
            raise ArgumentError(f"{op}: output padding must be smaller than either stride or "
                                f"dilation, but got output_padding={opad}, stride={stride}, "
                                f"dilation={dilation}")
    cout = ws[1] * groups
    spatial = []
    for i in range(nd):
        k = ws[2 + i]
        n = (xs[2 + i] - 1) * stride[i] - 2 * pad[i] + dilation[i] * (k - 1) + \
            opad[i] + 1
        if n <= 0:
            raise ArgumentError(f"{op}: computed output size {n} is not positive for input of "
                                f"shape {tuple(xs)} and weight {tuple(ws)}")
        spatial.append(n)
    out_shape = (xs[0], cout) + tuple(spatial)
    # the transpose of the convolution that maps out_shape back to x; output_padding extends
    # the high side, i.e. that convolution pads the high side by p - output_padding
    attrs = (stride, tuple((p, p - o) for p, o in zip(pad, opad)), (1,) * nd, dilation, groups)
    y = X.conv_input_grad(x, weight, attrs, out_shape)
    if bias is not None:
        y = y + F.reshape(bias, (1, cout) + (1,) * nd)
    return y if batched else F.squeeze(y, 0)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,
                              dilation, 1, "conv_transpose1d")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,
                              dilation, 2, "conv_transpose2d")


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,
                              dilation, 3, "conv_transpose3d")


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L), as a grouped convolution with one-hot kernels."""
    if input.ndim < 3:
        # PyTorch indexes the input's channel dim first: IndexError (dimension out of range)
        raise IndexShapeError(f"unfold: expected a 3D (unbatched) or 4D (batched) input, got "
                              f"shape {tuple(input.shape)}")
    x, batched = _batchify(input, 2, "unfold")
    k = _ntuple(kernel_size, 2, "kernel_size")
    c = x.shape[1]
    kk = k[0] * k[1]

    def build():
        w = np.zeros((c * kk, 1) + k)
        for ci in range(c):
            for j in range(kk):
                w[ci * kk + j, 0, j // k[1], j % k[1]] = 1
        return w
    w = _const(("unfold", c, k), build, x.dtype, x.device)
    y = conv2d(x, w, None, stride, padding, dilation, groups=c)
    y = F.reshape(y, (y.shape[0], c * kk, -1))
    return y if batched else F.squeeze(y, 0)


# ---- pooling -----------------------------------------------------------------------------------
def _pool_dims(length, k, s, p, d, ceil_mode, op):
    eff = d * (k - 1) + 1
    if p > k // 2:
        raise ArgumentError(f"{op}: pad should be at most half of effective kernel size, but got "
                            f"pad={p}, kernel_size={k}")
    num = length + 2 * p - eff
    if num < 0:
        raise ArgumentError(f"{op}: input size {length} (padding {p}) is smaller than the kernel "
                            f"{k} (dilation {d})")
    out = (num + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= length + p:
        out -= 1
    hi = builtins.max(0, (out - 1) * s + eff - (length + 2 * p))
    return out, (p, p + hi)


def _pool_setup(x, kernel_size, stride, padding, dilation, ceil_mode, nd, op):
    if x.ndim not in (nd + 1, nd + 2):
        # PyTorch's pools index the input's trailing dims first: IndexError for too few
        raise IndexShapeError(f"{op}: expected a {nd + 1}D or {nd + 2}D input, got shape "
                              f"{tuple(x.shape)}")
    k = _ntuple(kernel_size, nd, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) \
        else _ntuple(stride, nd, "stride")
    if builtins.any(v <= 0 for v in s):
        raise ArgumentError(f"{op}: stride should be greater than zero, got stride={tuple(s)}")
    p = _ntuple(padding, nd, "padding")
    d = _ntuple(dilation, nd, "dilation")
    lead = x.ndim - nd
    outs, pads = [], []
    for i in range(nd):
        o, pp = _pool_dims(x.shape[lead + i], k[i], s[i], p[i], d[i], ceil_mode, op)
        outs.append(o)
        pads.append(pp)
    return k, s, d, lead, outs, pads


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd, op):
    k, s, d, lead, outs, pads = _pool_setup(x, kernel_size, stride, padding, dilation,
                                            ceil_mode, nd, op)
    if return_indices:      # (values, flat spatial indices): functional_more's
        return _more.max_pool_with_indices(x, k, s, d, lead, outs, pads)
    if builtins.all(v == 1 for v in d):
        attrs = ("max", (1,) * lead + k, (1,) * lead + s, ((0, 0),) * lead + tuple(pads))
        return X.reduce_window(x, attrs)
    # the reduce_window primitive has no window dilation: dilated windows take the max of the
    # k strided slices of the (-inf)-padded input
    lo = [0] * lead + [p[0] for p in pads]
    hi = [0] * lead + [p[1] for p in pads]
    fill = _NEG_INF if x.dtype.kind == "f" else builtins.int(np.iinfo(x.dtype.np).min)
    xp = X.pad_general(x, lo, hi, [0] * x.ndim, fill) if builtins.any(lo + hi) else x
    out = None
    for offs in np.ndindex(*k):
        starts = [0] * lead + [o * dd for o, dd in zip(offs, d)]
        stops = list(xp.shape[:lead]) + [st + (n - 1) * ss + 1
                                         for st, n, ss in zip(starts[lead:], outs, s)]
        sl = X.slice_strided(xp, starts, stops, [1] * lead + list(s))
        out = sl if out is None else F.maximum(out, sl)
    return out


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _named(_max_pool(input, kernel_size, stride, padding, dilation, ceil_mode,
                            return_indices, 1, "max_pool1d"), "SqueezeBackward1")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _named(_max_pool(input, kernel_size, stride, padding, dilation, ceil_mode,
                            return_indices, 2, "max_pool2d"), "MaxPool2DWithIndicesBackward0")


@_autocast_fp32
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _named(_max_pool(input, kernel_size, stride, padding, dilation, ceil_mode,
                            return_indices, 3, "max_pool3d"), "MaxPool3DWithIndicesBackward0")


def _avg_divisor_1d(length, out, k, s, p, count_include_pad):
    div = np.empty(out)
    for o in range(out):
        start = o * s - p
        end = builtins.min(start + k, length + p)
        size = end - start
        start, end = builtins.max(start, 0), builtins.min(end, length)
        div[o] = size if count_include_pad else end - start
    return div


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
              nd, op):
    _check_float(x, op)
    k, s, _, lead, outs, pads = _pool_setup(x, kernel_size, stride, padding, 1, ceil_mode, nd,
                                            op)
    attrs = ("sum", (1,) * lead + k, (1,) * lead + s, ((0, 0),) * lead + tuple(pads))
    total = X.reduce_window(x, attrs)
    if divisor_override:
        return total / float(divisor_override)
    uniform = (count_include_pad and builtins.all(p[1] == p[0] for p in pads)) or \
        builtins.all(p == (0, 0) for p in pads)
    if uniform:
        return total / float(math.prod(k))
    spatial = x.shape[lead:]

    def build():
        div = np.ones(())
        for i in range(nd):
            d1 = _avg_divisor_1d(spatial[i], outs[i], k[i], s[i], pads[i][0], count_include_pad)
            div = np.multiply.outer(div, d1)
        return div
    key = ("avgdiv", tuple(spatial), k, s, tuple(pads), builtins.bool(count_include_pad))
    return total / _const(key, build, x.dtype, x.device)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    return _named(_avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                            None, 1, "avg_pool1d"), "SqueezeBackward1")


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _named(_avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                            divisor_override, 2, "avg_pool2d"), "AvgPool2DBackward0")


@_autocast_fp32
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _named(_avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                            divisor_override, 3, "avg_pool3d"), "AvgPool3DBackward0")


def _adaptive_bins(n_in, n_out):
    starts = [(i * n_in) // n_out for i in range(n_out)]
    ends = [-(-((i + 1) * n_in) // n_out) for i in range(n_out)]
    return starts, ends


def _adaptive_sizes(x, output_size, nd, op):
    if x.ndim not in (nd + 1, nd + 2):
        raise ArgumentError(f"{op}: expected a {nd + 1}D or {nd + 2}D input, got shape "
                            f"{tuple(x.shape)}")
    lead = x.ndim - nd
    spatial = x.shape[lead:]
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != nd:
            raise ArgumentError(f"{op}: output_size must have {nd} elements, got {output_size!r}")
        out = tuple(spatial[i] if o is None else builtins.int(o)
                    for i, o in enumerate(output_size))
    else:
        out = (builtins.int(output_size),) * nd
    if builtins.any(o <= 0 for o in out):
        raise ArgumentError(f"{op}: output_size must be positive, got {out}")
    return lead, spatial, out


def _adaptive_avg(x, output_size, nd, op):
    _check_float(x, op)
    lead, spatial, out = _adaptive_sizes(x, output_size, nd, op)
    if builtins.all(n % o == 0 for n, o in zip(spatial, out)):
        shape = tuple(x.shape[:lead])
        for n, o in zip(spatial, out):
            shape += (o, n // o)
        axes = tuple(lead + 2 * i + 1 for i in range(nd))
        if builtins.all(o == 1 for o in out):
            return F.mean(x, tuple(range(lead, x.ndim)), keepdim=True)
        return F.mean(F.reshape(x, shape), axes)
    # general case: each output is the mean over PyTorch's [floor(i*n/o), ceil((i+1)*n/o)) bin,
    # i.e. one small averaging matrix per spatial dim
    y = x
    for i in range(nd):
        n, o = spatial[i], out[i]
        dim = lead + i

        def build(n=n, o=o):
            starts, ends = _adaptive_bins(n, o)
            m = np.zeros((n, o))
            for j, (a, b) in enumerate(zip(starts, ends)):
                m[a:b, j] = 1.0 / (b - a)
            return m
        m = _const(("adaptive", n, o), build, x.dtype, x.device)
        y = _apply_along(y, dim, m)
    return y


def _apply_along(x, dim, m):
    """Contract dim `dim` of x with matrix m (n_in, n_out)."""
    last = x.ndim - 1
    if dim != last:
        x = F.transpose(x, dim, last)
    with X.autocast.suspended():         # interpolation follows its input's dtype under autocast
        y = F.matmul(x, m)
    return F.transpose(y, dim, last) if dim != last else y


def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input, output_size):
    out = _adaptive_avg(input, output_size, 2, "adaptive_avg_pool2d")
    # PyTorch pools to 1x1 with a mean
    return _named(out, "MeanBackward1" if tuple(out.shape[-2:]) == (1, 1) else
                  "AdaptiveAvgPool2DBackward0")


def _adaptive_max(x, output_size, return_indices, nd, op):
    lead, spatial, out = _adaptive_sizes(x, output_size, nd, op)
    if return_indices:      # (values, flat spatial indices): functional_more's
        return _more.adaptive_max_pool_with_indices(x, lead, spatial, out)
    if builtins.all(n % o == 0 for n, o in zip(spatial, out)):
        k = tuple(n // o for n, o in zip(spatial, out))
        return X.reduce_window(x, ("max", (1,) * lead + k, (1,) * lead + k, ((0, 0),) * x.ndim))
    # general case: per dim, the max over each (possibly overlapping) bin
    y = x
    for i in range(nd):
        dim = lead + i
        starts, ends = _adaptive_bins(spatial[i], out[i])
        parts = [F.amax(F.narrow(y, dim, a, b - a), dim, keepdim=True)
                 for a, b in zip(starts, ends)]
        y = F.cat(parts, dim)
    return y


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max(input, output_size, return_indices, 1, "adaptive_max_pool1d")


def adaptive_max_pool2d(input, output_size, return_indices=False):
    return _named(_adaptive_max(input, output_size, return_indices, 2, "adaptive_max_pool2d"),
                  "AdaptiveMaxPool2DBackward0")


# ---- dropout -----------------------------------------------------------------------------------
def _check_p(p, op):
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero each element with probability p and scale the rest by 1/(1-p).  The mask comes
    from flowlite's device stream, drawn inside the program (also on the CPU): it differs on
    every call without changing the program. (PyTorch draws it from the CPU generator, so
    after a dropout with p > 0 in training the global stream's later draws differ from
    PyTorch's; with p = 0 or in eval mode nothing is drawn, as in PyTorch.)"""
    _check_p(p, "dropout")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return _maybe_inplace(input, input * 0.0, inplace, "dropout_")
    keep = R.device_rand(input.shape, dtype=_rand_dtype(input), device=input.device) >= p
    out = X.name_grad_fn(F.where(keep, input * (1.0 / (1.0 - p)), 0.0), "MulBackward0")
    return _maybe_inplace(input, out, inplace, "dropout_")


def _rand_dtype(x):
    return x.dtype if x.dtype.is_floating_point else D.default_float()


def _channel_dropout(input, p, training, inplace, batched_ndim, op):
    _check_p(p, op)
    if not training or p == 0.0:
        return input
    shp = input.shape
    if len(shp) == batched_ndim:
        mshape = shp[:2] + (1,) * (len(shp) - 2)
    elif len(shp) == batched_ndim - 1:
        mshape = shp[:1] + (1,) * (len(shp) - 1)
    else:
        raise ArgumentError(f"{op}: expected a {batched_ndim - 1}D or {batched_ndim}D input, got "
                            f"shape {tuple(shp)}")
    if p == 1.0:
        return _maybe_inplace(input, input * 0.0, inplace, op + "_")
    keep = R.device_rand(mshape, dtype=_rand_dtype(input), device=input.device) >= p
    out = F.where(keep, input * (1.0 / (1.0 - p)), 0.0)
    return _maybe_inplace(input, out, inplace, op + "_")


def dropout1d(input, p=0.5, training=True, inplace=False):
    return _channel_dropout(input, p, training, inplace, 3, "dropout1d")


def dropout2d(input, p=0.5, training=True, inplace=False):
    if input.ndim == 2:     # PyTorch 2.13: deprecated, warns and drops elements
        warnings.warn("dropout2d: Received a 2-D input to dropout2d, which is deprecated and "
                      "will result in an error in a future release. To retain the behavior and "
                      "silence this warning, please use dropout instead.",
                      stacklevel=X.user_stacklevel())
        return dropout(input, p, training, inplace)
    return _channel_dropout(input, p, training, inplace, 4, "dropout2d")


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_p(p, "alpha_dropout")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    alpha_p = -1.7580993408473766  # -selu_scale * selu_alpha
    a = ((1 - p) * (1 + p * alpha_p ** 2)) ** -0.5
    b = -a * alpha_p * p
    keep = R.device_rand(input.shape, dtype=_rand_dtype(input), device=input.device) >= p
    out = F.where(keep, input, alpha_p) * a + b
    return _maybe_inplace(input, out, inplace, "alpha_dropout_")


# ---- normalisation -----------------------------------------------------------------------------
def _check_channel_params(op, shp, running_mean, running_var, weight, bias):
    """The number of channels (dim 1); each per-channel tensor given must have that length."""
    c = shp[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ArgumentError(f"{op}: {name} of shape {tuple(t.shape)} doesn't match the {c} "
                                f"channels of input {tuple(shp)}")
    return c


def _centered_moments(x, axes):
    """mean, x - mean and the biased variance over `axes` (kept as size-1 dims)."""
    mean = F.mean(x, axes, keepdim=True)
    d = x - mean
    return mean, d, F.mean(d * d, axes, keepdim=True)


def _channel_affine(y, weight, bias):
    """y (N, C, *) scaled by weight (C,) and shifted by bias (C,), either may be None."""
    bshape = (1, y.shape[1]) + (1,) * (y.ndim - 2)
    if weight is not None:
        y = y * F.reshape(weight, bshape)
    if bias is not None:
        y = y + F.reshape(bias, bshape)
    return y


def _update_running_stats(op, running_mean, running_var, mean, var, per_channel, n,
                          momentum):
    """r <- (1 - momentum) r + momentum * stat for each running buffer given, rebound in place
    to pending nodes (the update is part of the same executable).  `per_channel` reduces a
    batch statistic to (C,); the variance is made unbiased over the `n` values it spans."""
    if running_mean is None and running_var is None:
        return
    with no_grad():
        if running_mean is not None:
            m = per_channel(mean)
            rebind(running_mean, running_mean * (1.0 - momentum) + m * momentum,
                   f"{op} running_mean")
        if running_var is not None:   # n/(n-1) folded into the factor
            v = per_channel(var)
            rebind(running_var, running_var * (1.0 - momentum) +
                   v * (momentum * (n / (n - 1))), f"{op} running_var")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalisation over (N, C, *).  In training mode the batch statistics normalise and,
    when running buffers are given, they are updated in place (rebound to pending nodes, so the
    update is part of the same executable): r <- (1 - momentum) r + momentum * stat, with the
    unbiased batch variance.  `momentum` may be a tensor (the cumulative-average factor)."""
    _check_float(input, "batch_norm")
    shp = input.shape
    if len(shp) < 2:
        raise ArgumentError(f"batch_norm: expected an input with at least 2 dims (N, C, *), got "
                            f"shape {tuple(shp)}")
    c = _check_channel_params("batch_norm", shp, running_mean, running_var, weight, bias)
    bshape = (1, c) + (1,) * (len(shp) - 2)
    axes = (0,) + tuple(range(2, len(shp)))
    if training:
        n = math.prod(shp) // c
        if n <= 1:
            raise ArgumentError(f"Expected more than 1 value per channel when training, got input "
                                f"size {tuple(shp)}")
        mean, d, var = _centered_moments(input, axes)
        _update_running_stats("batch_norm", running_mean, running_var, mean, var,
                              lambda s: F.reshape(s, (c,)), n, momentum)
    else:
        if running_mean is None or running_var is None:
            raise ArgumentError("batch_norm: running_mean and running_var are required when "
                                "training=False")
        mean = F.reshape(running_mean, bshape)
        var = F.reshape(running_var, bshape)
        d = input - mean
    scale = F.rsqrt(var + eps)
    if weight is not None:
        scale = scale * F.reshape(weight, bshape)
    y = d * scale
    if bias is not None:
        y = y + F.reshape(bias, bshape)
    return _named(y, "NativeBatchNormBackward0")


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalise each (sample, channel) over its spatial dims.  With `use_input_stats` and
    running buffers, the buffers move towards the batch average of the per-instance mean and
    unbiased variance (PyTorch's rule), in-graph like batch_norm's update."""
    _check_float(input, "instance_norm")
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    shp = input.shape
    if len(shp) < 3:
        raise ArgumentError(f"instance_norm: expected an input (N, C, *) with at least one "
                            f"spatial dim, got shape {tuple(shp)}")
    c = _check_channel_params("instance_norm", shp, running_mean, running_var, weight, bias)
    n = math.prod(shp[2:])
    if n == 1:
        raise ArgumentError(f"Expected more than 1 spatial element when training, got input "
                            f"size {tuple(shp)}")
    mean, d, var = _centered_moments(input, tuple(range(2, len(shp))))
    # per instance (unbiased), then averaged over N
    _update_running_stats("instance_norm", running_mean, running_var, mean, var,
                          lambda s: F.mean(F.reshape(s, (shp[0], c)), 0), n, momentum)
    return _channel_affine(d * F.rsqrt(var + eps), weight, bias)


def _norm_shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return (builtins.int(normalized_shape),)
    return tuple(builtins.int(s) for s in normalized_shape)


def _trailing_norm_shape(input, normalized_shape, op):
    """normalized_shape as a tuple, checked against the input's trailing dims."""
    ns = _norm_shape(normalized_shape)
    shp = input.shape
    if len(ns) > len(shp) or tuple(shp[len(shp) - len(ns):]) != ns:
        raise ArgumentError(f"{op}: normalized_shape {list(ns)} doesn't match the trailing "
                            f"dims of input of shape {tuple(shp)}")
    return ns


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    _check_float(input, "layer_norm")
    ns = _trailing_norm_shape(input, normalized_shape, "layer_norm")
    shp, k = input.shape, len(ns)
    dt = input.dtype
    affine = [t for t in (weight, bias) if t is not None]
    if all(t.shape == ns and t.dtype is dt for t in affine):
        return record(P.layer_norm, (input, *affine), (k, float(eps), weight is not None,
                                                       bias is not None), tuple(shp), dt)
    # affine parameters of another dtype or a broadcastable shape: the composed ops
    _, d, var = _centered_moments(input, tuple(range(len(shp) - k, len(shp))))
    y = d * F.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    _check_float(input, "group_norm")
    shp = input.shape
    if len(shp) < 2 or shp[1] % num_groups:
        raise ArgumentError(f"group_norm: expected an input (N, C, *) with C divisible by "
                            f"num_groups={num_groups}, got shape {tuple(shp)}")
    _, d, var = _centered_moments(F.reshape(input, (shp[0], num_groups, -1)), 2)
    return _named(_channel_affine(F.reshape(d * F.rsqrt(var + eps), shp), weight, bias),
                  "NativeGroupNormBackward0")


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x², last dims) + eps) * weight; eps=None means finfo(dtype).eps."""
    _check_float(input, "rms_norm")
    ns = _trailing_norm_shape(input, normalized_shape, "rms_norm")
    shp, k = input.shape, len(ns)
    if eps is None:
        import ml_dtypes
        eps = builtins.float(ml_dtypes.finfo(input.dtype.np).eps)
    axes = tuple(range(len(shp) - k, len(shp)))
    y = input * F.rsqrt(F.mean(input * input, axes, keepdim=True) + eps)
    return y if weight is None else y * weight


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """x / max(‖x‖_p, eps) along `dim`."""
    if p == 2 or p == 2.0:
        # sqrt(max(Σx², eps²)) == max(‖x‖, eps), and its gradient stays finite at x = 0
        n = F.sqrt(F.maximum(F.sum(input * input, dim, keepdim=True), eps * eps))
    else:
        n = F.maximum(F.norm(input, p, dim, keepdim=True), eps)
    return input / n


# ---- embedding ---------------------------------------------------------------------------------
def _named(out, name):
    """`out` with the autograd node name PyTorch prints for this function's call."""
    return X.name_grad_fn(out, name)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` picked by integer `input`; the row at padding_idx gets no gradient."""
    if not isinstance(input, Tensor) or input.dtype.kind not in "iu":
        raise DTypeError(f"embedding: expected an integer index tensor, got "
                         f"{getattr(input, 'dtype', type(input).__name__)}")
    if weight.ndim != 2:
        raise ArgumentError(f"embedding: weight must be 2-D, got shape {tuple(weight.shape)}")
    if scale_grad_by_freq:
        raise NotImplementedError("embedding: scale_grad_by_freq=True is not supported")
    if max_norm is not None:
        _embedding_renorm_(weight, input, max_norm, norm_type)
    num = weight.shape[0]
    # weight[input] without indexing's negative wrap-around: embedding takes [0, num)
    out = record(P.index, (weight, input), ((("t",),),),
                 tuple(input.shape) + (weight.shape[1],), weight.dtype)
    check_index(input, num, "embedding", shape=tuple(weight.shape), out=out)
    if padding_idx is not None:
        num = weight.shape[0]
        if padding_idx < 0:
            padding_idx += num
        if not 0 <= padding_idx < num:
            raise ArgumentError(f"embedding: padding_idx must be within num_embeddings ({num})")
        if out.requires_grad:
            pad = F.unsqueeze(F.eq(input, padding_idx), -1)
            out = F.where(pad, out.detach(), out)
    return X.name_grad_fn(out, "EmbeddingBackward0")


def _embedding_renorm_(weight, input, max_norm, norm_type):
    """Rescale (in place, no grad) the looked-up rows whose norm exceeds max_norm."""
    with no_grad():
        num = weight.shape[0]
        used = F.any(F.eq(F.reshape(input, (-1, 1)), F.arange(num, device=input.device)), 0)
        norms = F.norm(weight, norm_type, 1, keepdim=True)
        scale = F.where(F.unsqueeze(used, 1) & (norms > max_norm),
                        max_norm / (norms + 1e-7), 1.0)
        rebind(weight, weight * scale, "embedding_renorm_")


def one_hot(tensor, num_classes=-1):
    return F.one_hot(tensor, num_classes)


# ---- padding -----------------------------------------------------------------------------------
def _pad_index(n, lo, hi, mode):
    if mode == "circular" and (lo < 0 or hi < 0):
        # negative circular padding crops first and wraps within the kept range (PyTorch)
        kept = np.arange(max(-lo, 0), n - max(-hi, 0))
        return kept[_pad_index(len(kept), max(lo, 0), max(hi, 0), mode)]
    # reflect/replicate index the input itself, a negative pad dropping its edge (PyTorch's
    # kernels): pad (-1, 2) of [a, b, c] reflects into the dropped a: [b, c, b, a]
    j = np.arange(-lo, n + hi)
    if mode == "reflect":
        if lo >= n or hi >= n:
            raise ArgumentError(f"pad: reflect padding ({lo}, {hi}) must be smaller than the "
                                f"dimension size {n}")
        period = 2 * (n - 1) if n > 1 else 1
        j = np.abs(j) % period
        return np.where(j >= n, period - j, j)
    if mode == "replicate":
        return np.clip(j, 0, n - 1)
    if mode == "circular":
        if lo > n or hi > n:
            raise ArgumentError(f"pad: circular padding ({lo}, {hi}) must be at most the "
                                f"dimension size {n}")
        return np.mod(j, n)
    raise UnsupportedModeError(f"pad: unsupported mode {mode!r}; expected 'constant', "
                               "'reflect', 'replicate' or 'circular'")


def pad(input, pad, mode="constant", value=None):
    """PyTorch's F.pad: `pad` lists (left, right) pairs starting from the LAST dimension."""
    if mode == "constant":
        return F.pad(input, tuple(pad), "constant", 0.0 if value is None else value)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ArgumentError(f"pad: padding length {len(pad)} must be even and at most twice the "
                            f"number of dims ({input.ndim})")
    k = len(pad) // 2
    if (mode == "replicate" or mode == "reflect" and k < 3) and \
            X.autocast.current() is not None:
        # PyTorch's fp32 list: reflection_pad1d/2d, replication_pad1d/2d/3d
        (input,) = X.autocast.fp32(input)
    if mode in ("reflect", "replicate", "circular") and (
            k not in (1, 2, 3) or input.ndim not in (k + 1, k + 2)):
        # PyTorch pads 1-3 trailing dims in these modes, of an unbatched or batched input
        raise UnsupportedModeError(f"pad: {mode} padding of {k} dims (pad={tuple(pad)}) "
                                   f"expects a {k + 1}D or {k + 2}D input, got shape "
                                   f"{tuple(input.shape)}")
    y = input
    for i in range(len(pad) // 2):
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if lo == 0 and hi == 0:
            continue
        dim = input.ndim - 1 - i
        n = input.shape[dim]
        idx = _const(("pad", n, lo, hi, mode), lambda: _pad_index(n, lo, hi, mode),
                     D.canonical(D.int32), input.device)
        y = F.index_select(y, dim, idx)
    return y


# ---- pixel shuffle -----------------------------------------------------------------------------
def _check_factor(r, op):
    if not isinstance(r, numbers.Integral) or isinstance(r, bool) or r <= 0:
        raise ArgumentError(f"{op}: the factor must be a positive integer, got {r!r}")
    return builtins.int(r)


def pixel_shuffle(input, upscale_factor):
    """(*, C·r², H, W) -> (*, C, H·r, W·r): channel blocks become r×r spatial tiles."""
    r = _check_factor(upscale_factor, "pixel_shuffle")
    shp = tuple(input.shape)
    if len(shp) < 3 or shp[-3] % (r * r):
        raise ArgumentError(f"pixel_shuffle: expected an input (*, C, H, W) with C divisible by "
                            f"upscale_factor**2 = {r * r}, got shape {shp}")
    *b, c, h, w = shp
    nb = len(b)
    y = F.reshape(input, (*b, c // (r * r), r, r, h, w))
    y = F.permute(y, (*range(nb), nb, nb + 3, nb + 1, nb + 4, nb + 2))
    return F.reshape(y, (*b, c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H·r, W·r) -> (*, C·r², H, W): the inverse of pixel_shuffle."""
    r = _check_factor(downscale_factor, "pixel_unshuffle")
    shp = tuple(input.shape)
    if len(shp) < 3 or shp[-2] % r or shp[-1] % r:
        raise ArgumentError(f"pixel_unshuffle: expected an input (*, C, H, W) with H and W "
                            f"divisible by downscale_factor = {r}, got shape {shp}")
    *b, c, h, w = shp
    nb = len(b)
    y = F.reshape(input, (*b, c, h // r, r, w // r, r))
    y = F.permute(y, (*range(nb), nb, nb + 2, nb + 4, nb + 1, nb + 3))
    return F.reshape(y, (*b, c * r * r, h // r, w // r))


# ---- interpolation -----------------------------------------------------------------------------
def _interp_scale(n_in, n_out, align_corners, scale, acc=np.float32):
    if align_corners:
        return acc(n_in - 1) / acc(n_out - 1) if n_out > 1 else acc(0)
    if scale is not None and scale > 0:
        return acc(1.0 / scale)
    return acc(n_in) / acc(n_out)


def _linear_matrix(n_in, n_out, align_corners, scale, acc):
    """(n_in, n_out) matrix of PyTorch's linear-interpolation weights for one dimension,
    computed in PyTorch's accumulation precision `acc` (float64 for double inputs, else
    float32)."""
    sc = acc(_interp_scale(n_in, n_out, align_corners, scale, acc))
    m = np.zeros((n_in, n_out))
    for o in range(n_out):
        if align_corners:
            src = sc * acc(o)
        else:
            src = builtins.max(sc * (acc(o) + acc(0.5)) - acc(0.5), acc(0))
        i0 = builtins.int(src)
        i1 = i0 + (1 if i0 < n_in - 1 else 0)
        l1 = builtins.float(src) - i0
        m[i0, o] += 1.0 - l1
        m[i1, o] += l1
    return m


def _nearest_index(n_in, n_out, scale, exact):
    if n_out == n_in and not exact:
        return None
    sc = _interp_scale(n_in, n_out, False, scale)
    o = np.arange(n_out, dtype=np.float32)
    src = np.floor((o + np.float32(0.5)) * sc if exact else o * sc).astype(np.int64)
    return np.minimum(src, n_in - 1)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of (N, C, *spatial): modes nearest, nearest-exact, linear,
    bilinear, trilinear (PyTorch's index and weight formulas, align_corners included)."""
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    nd = input.ndim - 2
    if nd < 1:
        raise ArgumentError(f"interpolate: expected an input (N, C, *spatial), got shape "
                            f"{tuple(input.shape)}")
    linear_modes = {"linear": 1, "bilinear": 2, "trilinear": 3}
    if mode in linear_modes:
        if linear_modes[mode] != nd:
            raise UnsupportedModeError(f"interpolate: mode {mode!r} expects a "
                                       f"{linear_modes[mode] + 2}D input, got shape "
                                       f"{tuple(input.shape)}")
        align_corners = builtins.bool(align_corners)
    elif mode in ("nearest", "nearest-exact"):
        if align_corners is not None:
            raise ArgumentError("align_corners option can only be set with the interpolating "
                                "modes: linear | bilinear | bicubic | trilinear")
    else:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported (nearest, "
                                  f"nearest-exact, linear, bilinear, trilinear)")
    spatial = input.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ArgumentError("interpolate: exactly one of size or scale_factor must be given")
    if size is not None:
        out = _ntuple(size, nd, "size")
        scales = (None,) * nd
    else:
        sf = scale_factor if isinstance(scale_factor, (list, tuple)) else (scale_factor,) * nd
        if len(sf) != nd:
            raise ArgumentError(f"interpolate: scale_factor must have {nd} elements, got {sf!r}")
        out = tuple(builtins.int(math.floor(n * builtins.float(s)))
                    for n, s in zip(spatial, sf))
        scales = (None,) * nd if recompute_scale_factor else tuple(builtins.float(s)
                                                                    for s in sf)
    if mode in linear_modes and input.dtype.kind != "f":
        if input.dtype is not D.uint8 or mode != "bilinear":
            raise UnsupportedError(f"interpolate: mode {mode!r} is not implemented for "
                                   f"{input.dtype} input (PyTorch: bilinear on uint8 only)")
        return _bilinear_uint8(input, spatial, out, scales, align_corners)
    y = input
    for i in range(nd):
        n_in, n_out, sc = spatial[i], out[i], scales[i]
        dim = 2 + i
        if mode in linear_modes:
            if n_in == n_out and (sc is None or sc == 1.0):
                continue
            acc = np.float64 if input.dtype is D.float64 else np.float32
            m = _const(("lin", n_in, n_out, align_corners, sc, acc),
                       lambda: _linear_matrix(n_in, n_out, align_corners, sc, acc),
                       y.dtype, input.device)
            y = _apply_along(y, dim, m)
        else:
            exact = mode == "nearest-exact"
            idx = _nearest_index(n_in, n_out, sc, exact)
            if idx is None:
                continue
            if not exact and n_out % n_in == 0 and np.array_equal(
                    idx, np.repeat(np.arange(n_in), n_out // n_in)):
                # integer upscale: a broadcast + reshape (its gradient is a plain sum)
                r = n_out // n_in
                shp = y.shape
                z = F.unsqueeze(y, dim + 1)
                z = F.broadcast_to(z, shp[:dim + 1] + (r,) + shp[dim + 1:])
                y = F.reshape(z, shp[:dim] + (n_out,) + shp[dim + 1:])
                continue
            t = _const(("nearest", n_in, n_out, sc, exact), lambda: idx,
                       D.canonical(D.int32), input.device)
            y = F.index_select(y, dim, t)
    return y


def _fixed_point_weights(n_in, n_out, align_corners, scale):
    """PyTorch's uint8 resampling weights: the float64 weights as integers with `p` fraction
    bits, p the largest (<= 22) that keeps the largest weight within int16."""
    m = _linear_matrix(n_in, n_out, align_corners, scale, np.float64)
    p = 0
    while p < 22 and int(np.abs(m).max() * (1 << (p + 1)) + 0.5) < (1 << 15):
        p += 1
    return np.floor(m * (1 << p) + 0.5).astype(np.int32), p


def _bilinear_uint8(input, spatial, out, scales, align_corners):
    """Bilinear resize of uint8 images bit for bit as PyTorch's uint8 kernel: the width pass,
    then the height pass, each in fixed point and rounded back to uint8."""
    y = F.to_dtype(input, D.int32)
    for i in (1, 0):
        n_in, n_out, sc = spatial[i], out[i], scales[i]
        if n_in == n_out and (sc is None or sc == 1.0):
            continue
        w, p = _fixed_point_weights(n_in, n_out, align_corners, sc)
        m = _const(("lin_u8", n_in, n_out, align_corners, sc), lambda: w, D.int32,
                   input.device)
        y = F.floor_divide(_apply_along(y, 2 + i, m) + (1 << (p - 1)), 1 << p)
        y = F.clamp(y, 0, 255)
    return F.to_dtype(y, D.uint8)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)


# ---- attention ---------------------------------------------------------------------------------
def _causal_mask(L, S, device):
    # built in the graph (an iota comparison XLA fuses into the scores' select), not uploaded:
    # no host constant per length, and a growing context stays one program (buckets.py)
    return F.tril(F.full((L, S), True, dtype=D.bool_, device=device))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(q kᵀ · scale + mask) v over (..., L, E) / (..., S, E) / (..., S, Ev).

    A bool attn_mask marks positions that TAKE PART in attention (True = keep); a float mask is
    added to the scores.  is_causal applies the lower-triangular mask."""
    qs, ks, vs = query.shape, key.shape, value.shape
    L, E = qs[-2], qs[-1]
    S = ks[-2]
    if ks[-1] != E or vs[-2] != S:
        raise ArgumentError(f"scaled_dot_product_attention: query {tuple(query.shape)}, key "
                            f"{tuple(key.shape)} and value {tuple(value.shape)} don't match "
                            f"(expected (..., L, E), (..., S, E), (..., S, Ev))")
    if enable_gqa and query.ndim >= 3:
        hq, hk = qs[-3], ks[-3]
        if hq != hk:
            if hq % hk:
                raise ArgumentError(f"scaled_dot_product_attention: {hq} query heads are not a "
                                    f"multiple of {hk} key/value heads")
            key = _repeat_heads(key, hq // hk)
            value = _repeat_heads(value, hq // hk)
    if is_causal:
        if attn_mask is not None:
            raise ArgumentError("scaled_dot_product_attention: pass either attn_mask or "
                                "is_causal=True, not both")
        attn_mask = _causal_mask(L, S, query.device)
    sc = 1.0 / math.sqrt(E) if scale is None else builtins.float(scale)
    if X.autocast.current() is not None:
        query, key, value, attn_mask = X.autocast.lower(query, key, value, attn_mask)
    dt = query.dtype
    if dt in _REDUCED:      # PyTorch's CPU attention kernel accumulates these in float
        query, key, value = map(_float_inside, (query, key, value))
        if attn_mask is not None and attn_mask.dtype is not D.bool_:
            attn_mask = _float_inside(attn_mask)
        return F.to_dtype(_sdpa(query, key, value, sc, ((attn_mask, True),), dropout_p)[0], dt)
    return _sdpa(query, key, value, sc, ((attn_mask, True),), dropout_p)[0]


def _sdpa(query, key, value, sc, masks, dropout_p, layout=None):
    """scaled_dot_product_attention's computation -> (output, attention weights).

    masks: (mask, keep) pairs applied in order (None masks are skipped); a bool mask keeps its
    True positions when `keep`, else it excludes them (multi-head attention's convention); a
    float mask is added to the scores.  layout: None for (..., L, E) operands, or the einsum
    subscripts of the query and key/value layout over n (batch), h (head), l / s (target /
    source position) and d (feature) — the weights are then (n, h, l, s) and the output has
    the query's layout — so multi_head_attention_forward records no transpose."""
    if layout is None:
        scores = F.einsum("...le,...se->...ls", query * sc, key)
    else:
        ql, kl = layout
        scores = F.einsum(f"{ql},{kl}->nhls", query * sc, key)
    for m, keep in masks:
        if m is None:
            continue
        if m.dtype is D.bool_:
            scores = F.where(m, scores, _NEG_INF) if keep else F.where(m, _NEG_INF, scores)
        else:
            scores = scores + m
    w = F.softmax(scores, -1)
    if dropout_p > 0.0:
        w = dropout(w, dropout_p, True)
    if layout is None:
        return F.matmul(w, value), w
    return F.einsum(f"nhls,{kl}->{ql}", w, value), w


def _repeat_heads(x, r):
    shp = x.shape
    z = F.broadcast_to(F.unsqueeze(x, -3), shp[:-2] + (r,) + shp[-2:])
    return F.reshape(z, shp[:-3] + (shp[-3] * r,) + shp[-2:])


def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight,
                                 out_proj_bias, training=True, key_padding_mask=None,
                                 need_weights=True, attn_mask=None, use_separate_proj_weight=False,
                                 q_proj_weight=None, k_proj_weight=None, v_proj_weight=None,
                                 static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False, batch_first=False):
    """PyTorch's multi_head_attention_forward.  Inputs are (L, N, E) — or (N, L, E) with
    batch_first=True — or unbatched (L, E).  attn_mask: (L, S) or (N*num_heads, L, S), bool
    (True = NOT allowed to attend) or float (added); key_padding_mask: (N, S), bool (True =
    ignore that key) or float (added).

    Both layouts are handled by the einsum subscripts, so no transpose is ever recorded."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k/static_v are not "
                                  "supported")
    batched = query.ndim == 3
    bdim = 0 if batch_first else 1
    if not batched:
        if query.ndim != 2:
            raise ArgumentError(f"MultiheadAttention: query should be 2-D (unbatched) or 3-D, got "
                                f"shape {tuple(query.shape)}")
        same_kv, same_qk = key is value, query is key
        query = F.unsqueeze(query, bdim)
        key = query if same_qk else F.unsqueeze(key, bdim)
        value = key if same_kv else F.unsqueeze(value, bdim)
        if key_padding_mask is not None:
            key_padding_mask = F.unsqueeze(key_padding_mask, 0)
    qs, ks, vs = query.shape, key.shape, value.shape
    n, L, E = qs[bdim], qs[1 - bdim], qs[2]
    S = ks[1 - bdim]
    if ks[bdim] != n or vs[bdim] != n or vs[1 - bdim] != S:
        raise ArgumentError(f"MultiheadAttention: query {tuple(query.shape)}, key "
                            f"{tuple(key.shape)} and value {tuple(value.shape)} don't agree on "
                            f"batch size / source length (batch_first={batch_first})")
    if E % num_heads:
        raise ArgumentError(f"embed_dim {E} not divisible by num_heads {num_heads}")
    hd = E // num_heads
    q, k, v = _mha_in_projection(query, key, value, E, in_proj_weight, in_proj_bias,
                                 use_separate_proj_weight, q_proj_weight, k_proj_weight,
                                 v_proj_weight)
    attn_mask, key_padding_mask = _mha_masks(attn_mask, key_padding_mask, is_causal, n,
                                             num_heads, L, S, query.device)
    if bias_k is not None or add_zero_attn:
        k, v, attn_mask, key_padding_mask = _mha_extra_kv(
            k, v, attn_mask, key_padding_mask, bias_k, bias_v, add_zero_attn, n, E,
            batch_first)
    q = F.reshape(q, q.shape[:2] + (num_heads, hd))
    k = F.reshape(k, k.shape[:2] + (num_heads, hd))
    v = F.reshape(v, v.shape[:2] + (num_heads, hd))
    ql, kl = ("nlhd", "nshd") if batch_first else ("lnhd", "snhd")
    out, w = _sdpa(q, k, v, 1.0 / math.sqrt(hd), ((attn_mask, False), (key_padding_mask, False)),
                   dropout_p if training else 0.0, (ql, kl))
    out = linear(F.reshape(out, out.shape[:2] + (E,)), out_proj_weight, out_proj_bias)
    if not batched:
        out = F.squeeze(out, bdim)
    if not need_weights:
        return out, None
    if average_attn_weights:
        w = F.mean(w, 1)
    if not batched:
        w = F.squeeze(w, 0)
    return out, w


def _mha_in_projection(query, key, value, E, in_proj_weight, in_proj_bias,
                       use_separate_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight):
    """q, k, v in the inputs' layout: one projection for self-attention (query is key is
    value), one for the keys and values together when key is value."""
    if use_separate_proj_weight:
        bq = bk = bv = None
        if in_proj_bias is not None:
            bq, bk, bv = F.split(in_proj_bias, E)
        return (linear(query, q_proj_weight, bq), linear(key, k_proj_weight, bk),
                linear(value, v_proj_weight, bv))
    same_kv = key is value
    if same_kv and query is key:
        return F.split(linear(query, in_proj_weight, in_proj_bias), E, -1)
    wq, wkv = F.split(in_proj_weight, (E, 2 * E))
    bq = bkv = None
    if in_proj_bias is not None:
        bq, bkv = F.split(in_proj_bias, (E, 2 * E))
    q = linear(query, wq, bq)
    if same_kv:
        k, v = F.split(linear(key, wkv, bkv), E, -1)
    else:
        wk, wv = F.split(wkv, E)
        bk, bv = F.split(bkv, E) if bkv is not None else (None, None)
        k = linear(key, wk, bk)
        v = linear(value, wv, bv)
    return q, k, v


def _mha_masks(attn_mask, key_padding_mask, is_causal, n, num_heads, L, S, device):
    """The masks, checked, in the (N, H, L, S) layout of the scores (True = excluded)."""
    if is_causal and attn_mask is None:
        attn_mask = F.logical_not(_causal_mask(L, S, device))
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (L, S):
                raise ArgumentError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, "
                                    f"but should be {(L, S)}.")
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (n * num_heads, L, S):
                raise ArgumentError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, "
                                    f"but should be {(n * num_heads, L, S)}.")
            attn_mask = F.reshape(attn_mask, (n, num_heads, L, S))
        else:
            raise ArgumentError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (n, S):
            raise ArgumentError(f"expected key_padding_mask of shape {(n, S)}, got "
                                f"{tuple(key_padding_mask.shape)}")
        key_padding_mask = F.reshape(key_padding_mask, (n, 1, 1, S))
    return attn_mask, key_padding_mask


def _mha_extra_kv(k, v, attn_mask, key_padding_mask, bias_k, bias_v, add_zero_attn, n, E,
                  batch_first):
    """One more key/value position per extra — the learned bias_k/bias_v, then zeros
    (add_zero_attn) — with a column of the masks that lets it be attended."""
    sdim = 1 if batch_first else 0     # the source-length dim of k and v
    kv_shape = (n, 1, E) if batch_first else (1, n, E)
    for extra in ((bias_k, bias_v) if bias_k is not None else None,
                  "zero" if add_zero_attn else None):
        if extra is None:
            continue
        if extra == "zero":
            ek = ev = F.zeros(kv_shape, dtype=k.dtype, device=k.device)
        else:
            ek = F.broadcast_to(F.reshape(extra[0], (1, 1, E)), kv_shape)
            ev = F.broadcast_to(F.reshape(extra[1], (1, 1, E)), kv_shape)
        k = F.cat([k, ek], sdim)
        v = F.cat([v, ev], sdim)
        attn_mask = _pad_mask_column(attn_mask)
        key_padding_mask = _pad_mask_column(key_padding_mask)
    return k, v, attn_mask, key_padding_mask


def _pad_mask_column(m):
    if m is None:
        return None
    return F.pad(m, (0, 1), "constant", False if m.dtype is D.bool_ else 0.0)


# ---- activations -------------------------------------------------------------------------------
def relu(input, inplace=False):
    return _maybe_inplace(input, F.relu(input), inplace, "relu_")


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    out = X.name_grad_fn(F.where(input > 0, input, input * negative_slope), "LeakyReluBackward0")
    return _maybe_inplace(input, out, inplace, "leaky_relu_")


def prelu(input, weight):
    """max(0, x) + weight · min(0, x); a weight of C entries applies per channel (dim 1)."""
    if X.autocast.current() is not None:
        input, weight = X.autocast.lower(input, weight)
    if weight.ndim > 1:
        raise ArgumentError(f"prelu: expected weight to be a scalar or 1D tensor, got shape "
                            f"{tuple(weight.shape)}")
    k = math.prod(weight.shape)
    if k != 1:
        c = input.shape[1] if input.ndim > 1 else 1
        if input.ndim == 0 or c != k:
            raise ArgumentError(f"prelu: weight of {k} parameters doesn't match the channel size "
                                f"{c} of input of shape {tuple(input.shape)}")
        w = F.reshape(weight, (k,) + (1,) * (input.ndim - 2))
    else:
        w = F.reshape(weight, ())
    return F.where(input > 0, input, input * w)


_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _float_inside(t):
    """A bfloat16/float16 tensor as float32, for a composite that PyTorch computes as one
    kernel: its CPU kernels (gelu and its backward, attention) compute reduced-precision
    inputs in float and round once, at the output. Composed from ops that each round, it
    would differ from PyTorch by several roundings, and XLA:CPU, which has no bf16
    arithmetic, would convert around every op (bf16 gelu's backward: 27 converts)."""
    return F.to_dtype(t, D.float32) if t is not None and t.dtype in _REDUCED else t


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got "
                            f"{approximate!r}")
    x = _float_inside(input)
    if approximate == "none":
        y = x * (F.erf(x * _SQRT1_2) + 1.0) * 0.5
    else:
        inner = (x + x * x * x * 0.044715) * _SQRT_2_OVER_PI
        y = x * (F.tanh(inner) + 1.0) * 0.5
    return X.name_grad_fn(y if x is input else F.to_dtype(y, input.dtype), "GeluBackward0")


def silu(input, inplace=False):
    out = X.name_grad_fn(input * F.sigmoid(input), "SiluBackward0")
    return _maybe_inplace(input, out, inplace, "silu_")


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, linear above `threshold` (the overflow branch is clamped
    so its unused gradient stays finite)."""
    bx = input * beta if beta != 1 else input
    linear_part = bx > threshold
    soft = F.log1p(F.exp(F.where(linear_part, 0.0, bx)))
    if beta != 1:
        soft = soft / beta
    return _named(F.where(linear_part, input, soft), "SoftplusBackward0")


def mish(input, inplace=False):
    return _maybe_inplace(input, _named(input * F.tanh(softplus(input)), "MishBackward0"),
                          inplace, "mish_")


def elu(input, alpha=1.0, inplace=False):
    pos = input > 0
    neg = F.expm1(F.where(pos, 0.0, input))   # the unused branch never overflows
    if alpha != 1:
        neg = neg * alpha
    return _maybe_inplace(input, _named(F.where(pos, input, neg), "EluBackward0"), inplace,
                          "elu_")


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    pos = input > 0
    out = F.where(pos, input, F.expm1(F.where(pos, 0.0, input)) * _SELU_ALPHA) * _SELU_SCALE
    return _maybe_inplace(input, _named(out, "EluBackward0"), inplace, "selu_")


def celu(input, alpha=1.0, inplace=False):
    pos = input > 0
    out = F.where(pos, input, F.expm1(F.where(pos, 0.0, input) / alpha) * alpha)
    return _maybe_inplace(input, out, inplace, "celu_")


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ArgumentError("hardtanh: min_val cannot be greater than max_val")
    # where-based so the gradient is 0 at the bounds, as PyTorch's
    out = F.where(input <= min_val, min_val, F.where(input >= max_val, max_val, input))
    return _maybe_inplace(input, _named(out, "HardtanhBackward0"), inplace, "hardtanh_")


def hardsigmoid(input, inplace=False):
    out = _named(hardtanh(input / 6.0 + 0.5, 0.0, 1.0), "HardsigmoidBackward0")
    return _maybe_inplace(input, out, inplace, "hardsigmoid_")


def hardswish(input, inplace=False):
    out = _named(input * hardtanh(input / 6.0 + 0.5, 0.0, 1.0), "HardswishBackward0")
    return _maybe_inplace(input, out, inplace, "hardswish_")


def logsigmoid(input):
    return _named(-softplus(-input), "LogSigmoidBackward0")


def softsign(input):
    return input / (F.abs(input) + 1.0)


def tanhshrink(input):
    return input - F.tanh(input)


def glu(input, dim=-1):
    if input.ndim == 0:
        raise ArgumentError("glu: does not support scalars (0-d input) because halving size "
                            "must be even")
    a, b = F.chunk(input, 2, dim)
    if a.shape != b.shape:
        raise ArgumentError(f"glu: halving dimension must be even, got shape {tuple(input.shape)}")
    return _named(a * F.sigmoid(b), "GluBackward0")


def sigmoid(input):
    return F.sigmoid(input)


def tanh(input):
    return F.tanh(input)


def _softmax_dim(ndim):
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return F.softmax(input, _softmax_dim(input.ndim) if dim is None else dim, dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return F.log_softmax(input, _softmax_dim(input.ndim) if dim is None else dim, dtype)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, dtype=dtype)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    dot = F.sum(x1 * x2, dim)
    n1 = F.sqrt(F.maximum(F.sum(x1 * x1, dim), eps * eps))
    n2 = F.sqrt(F.maximum(F.sum(x2 * x2, dim), eps * eps))
    return dot / (n1 * n2)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return F.norm(x1 - x2 + eps, p, -1, keepdim)


# ---- losses ------------------------------------------------------------------------------------
def _class_targets(input, target, op):
    """-> (input with a class dim 1, target, unbatched flag) after shape checks."""
    if input.ndim == 1:
        if target.ndim != 0:
            raise ArgumentError(f"{op}: for unbatched input of shape {tuple(input.shape)} the "
                                f"target must be 0-D, got shape {tuple(target.shape)}")
        return F.unsqueeze(input, 0), F.unsqueeze(target, 0), True
    shp = input.shape
    want = (shp[0],) + shp[2:]
    if tuple(target.shape) != want:
        raise ArgumentError(f"{op}: expected target of shape {want} for input of shape "
                            f"{tuple(input.shape)}, got {tuple(target.shape)}")
    return input, target, False


def _nll(logp, target, weight, ignore_index, reduction, op):
    """-logp picked at the target class; (N, 1, *) layout until the reduction."""
    if target.dtype.kind not in "iu":
        raise DTypeError(f"{op}: expected integer class-index targets, got {target.dtype}")
    logp, target, unbatched = _class_targets(logp, target, op)
    c = logp.shape[1]
    if weight is not None and tuple(weight.shape) != (c,):
        raise ArgumentError(f"{op}: weight of shape {tuple(weight.shape)} should have {c} "
                            f"elements (one per class)")
    if weight is None:
        if reduction not in ("none", "sum", "mean"):
            raise ArgumentError(f"{op}: {reduction!r} is not a valid value for reduction")
        shape = tuple(target.shape) if reduction == "none" else ()
        loss = record(P.nll, (logp, target), (int(ignore_index), reduction), shape,
                      logp.dtype)
        _check_targets(target, c, ignore_index, op, logp, loss)
        loss = F.squeeze(loss, 0) if unbatched and reduction == "none" else loss
        return loss
    t1 = F.unsqueeze(target, 1)
    keep = F.ne(t1, ignore_index)
    safe = F.where(keep, t1, 0)                        # ignored targets pick class 0, masked
    picked = X.take_along(logp, safe, 1)         # (N, 1, *); checked just below
    _check_targets(target, c, ignore_index, op, logp, picked)
    if weight is not None:
        wt = F.where(keep, weight[safe], 0.0)
        loss = -(picked * wt)
    else:
        wt = None
        loss = F.where(keep, -picked, 0.0)
    if reduction == "none":
        out = F.squeeze(loss, 1)
        return F.squeeze(out, 0) if unbatched else out
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "mean":
        denom = F.sum(wt) if wt is not None else F.sum(F.to_dtype(keep, loss.dtype))
        return F.sum(loss) / denom
    raise ArgumentError(f"{op}: {reduction!r} is not a valid value for reduction")


def _check_targets(target, c, ignore_index, op, logp, out):
    """Class targets must lie in [0, C) unless equal to ignore_index (checked in the graph,
    raised at the sync as PyTorch's IndexError "Target 5 is out of bounds.")."""
    check_index(target, c, op, kind="target", ignore=int(ignore_index), shape=tuple(logp.shape),
                detail=f"ignore_index={int(ignore_index)}", out=out)


@_autocast_fp32
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _named_nll(_nll(input, target, weight, ignore_index, reduction, "nll_loss"), input)


def _named_nll(loss, input):
    # PyTorch's node: nll_loss, or nll_loss2d for inputs with spatial dims (N, C, d1, ...)
    return X.name_grad_fn(loss, "NllLoss2DBackward0" if input.ndim > 2 else "NllLossBackward0")


@_autocast_fp32
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """log_softmax over the class dim (1, or 0 for unbatched input) + NLL; targets are class
    indices (integer, shape (N, *)) or class probabilities (float, the input's shape)."""
    if isinstance(input, Tensor) and not input.dtype.is_floating_point:
        # PyTorch: NotImplementedError (no log_softmax kernel for the dtype)
        raise UnsupportedError(f"cross_entropy: expected floating-point logits, got "
                               f"{input.dtype}")
    _check_float(input, "cross_entropy")
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got "
                            f"{label_smoothing}")
    cdim = 1 if input.ndim >= 2 else 0
    c = input.shape[cdim]
    logp = F.log_softmax(input, cdim)
    if target.dtype.is_floating_point:
        if tuple(target.shape) != tuple(input.shape):
            raise ArgumentError(f"cross_entropy: probability targets must have the input's shape "
                                f"{tuple(input.shape)}, got {tuple(target.shape)}")
        if label_smoothing > 0:
            target = target * (1.0 - label_smoothing) + label_smoothing / c
        prod = logp * target
        if weight is not None:
            prod = prod * F.reshape(weight, (c,) + (1,) * (input.ndim - cdim - 1))
        loss = -F.sum(prod, cdim)
        if reduction == "mean":
            return F.sum(loss) / builtins.max(input.numel() // c, 1) if input.ndim >= 2 \
                else loss
        return _reduce(loss, reduction, "cross_entropy")
    nll = _named_nll(_nll(logp, target, weight, ignore_index, reduction, "cross_entropy"), input)
    if label_smoothing == 0.0:
        return nll
    lp, t, unbatched = _class_targets(logp, target, "cross_entropy")
    if weight is not None:
        smooth = -F.sum(lp * F.reshape(weight, (c,) + (1,) * (lp.ndim - 2)), 1)
    else:
        smooth = -F.sum(lp, 1)
    keep = F.ne(t, ignore_index)
    smooth = F.where(keep, smooth, 0.0)
    if reduction == "mean":
        denom = F.sum(F.where(keep, weight[F.where(keep, t, 0)], 0.0)) if weight is not None \
            else \
            F.sum(F.to_dtype(keep, smooth.dtype))
        smooth = F.sum(smooth) / denom
    elif reduction == "sum":
        smooth = F.sum(smooth)
    elif unbatched:
        smooth = F.squeeze(smooth, 0)
    return nll * (1.0 - label_smoothing) + smooth * (label_smoothing / c)


def _check_same_shape(input, target, op):
    if tuple(input.shape) != tuple(target.shape):
        raise ArgumentError(f"{op}: target size {tuple(target.shape)} must be the same as input "
                            f"size {tuple(input.shape)}")


@_autocast_fp32
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    d = input - target
    loss = d * d
    if weight is not None:
        loss = loss * weight
    return X.name_grad_fn(_reduce(loss, reduction, "mse_loss"), "MseLossBackward0")


@_autocast_fp32
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = F.abs(input - target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "l1_loss")


@_autocast_fp32
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise ArgumentError("smooth_l1_loss does not support negative values for beta.")
    d = input - target
    ad = F.abs(d)
    if beta == 0.0:
        return _named(_reduce(ad, reduction, "smooth_l1_loss"), "SmoothL1LossBackward0")
    loss = F.where(ad < beta, d * d * (0.5 / beta), ad - 0.5 * beta)
    return _named(_reduce(loss, reduction, "smooth_l1_loss"), "SmoothL1LossBackward0")


@_autocast_fp32
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    if delta <= 0:
        raise ArgumentError("huber_loss does not support non-positive values for delta.")
    d = input - target
    ad = F.abs(d)
    loss = F.where(ad < delta, d * d * 0.5, (ad - 0.5 * delta) * delta)
    if weight is not None:
        loss = loss * weight
    return _named(_reduce(loss, reduction, "huber_loss"), "HuberLossBackward0")


@_autocast_fp32
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 as in PyTorch."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_shape(input, target, "binary_cross_entropy")
    _check_float_target(input, target, "binary_cross_entropy")
    log_x = F.maximum(F.log(input), -100.0)
    log_1mx = F.maximum(F.log(1.0 - input), -100.0)
    loss = -(target * (log_x - log_1mx) + log_1mx)
    if weight is not None:
        loss = loss * weight
    return X.name_grad_fn(_reduce(loss, reduction, "binary_cross_entropy"),
                          "BinaryCrossEntropyBackward0")


@_autocast_fp32
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """(1 - t) x + (1 + (pos_weight - 1) t) log(1 + exp(-x)), computed stably."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_shape(input, target, "binary_cross_entropy_with_logits")
    _check_float_target(input, target, "binary_cross_entropy_with_logits")
    sp_neg = F.maximum(-input, 0.0) + F.log1p(F.exp(-F.abs(input)))   # log(1 + e^-x)
    if pos_weight is not None:
        loss = (1.0 - target) * input + (target * (pos_weight - 1.0) + 1.0) * sp_neg
    else:
        loss = (1.0 - target) * input + sp_neg
    if weight is not None:
        loss = loss * weight
    return X.name_grad_fn(_reduce(loss, reduction, "binary_cross_entropy_with_logits"),
                          "BinaryCrossEntropyWithLogitsBackward0")


@_autocast_fp32
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise target * (log target - input) (input holds log-probabilities); reduction
    'batchmean' divides the sum by the batch size (PyTorch's recommended mode)."""
    if reduction == "batchmean":
        red = "batchmean"
    else:
        red = _legacy_reduction(size_average, reduce, reduction)
    if log_target:
        loss = F.exp(target) * (target - input)
    else:
        pos = target > 0
        tlogt = F.where(pos, target * F.log(F.where(pos, target, 1.0)), 0.0)  # xlogy(t, t)
        loss = tlogt - target * input
    if red == "batchmean":
        s = F.sum(loss)
        return s / input.shape[0] if input.ndim > 0 else s
    return _reduce(loss, red, "kl_div")


# ---- more of PyTorch's names: in-place variants, 3-d and Lp pooling, LRN, aliases -------------
def relu_(input):
    return relu(input, inplace=True)


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def celu_(input, alpha=1.0):
    return celu(input, alpha, inplace=True)


def selu_(input):
    return selu(input, inplace=True)


def threshold(input, threshold, value, inplace=False):
    """value where input <= threshold, else input."""
    return _maybe_inplace(input, F.where(input <= threshold, value, input), inplace,
                          "threshold_")


def threshold_(input, threshold, value):
    return _maybe_inplace(input, F.where(input <= threshold, value, input), True, "threshold_")


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Leaky ReLU with slope (lower + upper) / 2 in eval mode; in training a slope drawn
    uniformly from [lower, upper] per element (from flowlite's generator, as dropout's masks)."""
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    a = R.rand(input.shape, dtype=_rand_dtype(input), device=input.device) * (upper - lower) \
        + lower
    return _maybe_inplace(input, F.where(input >= 0, input, input * a), inplace, "rrelu_")


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, inplace=True)


def dropout3d(input, p=0.5, training=True, inplace=False):
    return _channel_dropout(input, p, training, inplace, 5, "dropout3d")


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout with one mask per channel (PyTorch's feature noise: shape (N, C, 1, ...))."""
    _check_p(p, "feature_alpha_dropout")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return _maybe_inplace(input, input * 0.0, inplace, "feature_alpha_dropout_")
    shp = tuple(input.shape)
    mshape = shp[:2] + (1,) * (len(shp) - 2)
    alpha = 1.7580993408473766
    a = 1.0 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    keep = (R.rand(mshape, dtype=_rand_dtype(input), device=input.device) >= p).to(input.dtype)
    b = (keep - 1) * (alpha * a) + alpha * a * p
    return _maybe_inplace(input, input * (keep * a) + b, inplace, "feature_alpha_dropout_")


def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg(input, output_size, 3, "adaptive_avg_pool3d")


def adaptive_max_pool3d(input, output_size, return_indices=False):
    return _adaptive_max(input, output_size, return_indices, 3, "adaptive_max_pool3d")


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, nd, pool):
    k = _ntuple(kernel_size, nd, "kernel_size")
    out = pool(F.pow(input, norm_type), kernel_size, stride, 0, ceil_mode)
    return F.pow((F.sign(out) * F.relu(F.abs(out))) * math.prod(k), 1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x ** p) ** (1/p)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1, avg_pool1d)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2, avg_pool2d)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3, avg_pool3d)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x**2 over `size` neighbouring channels) ** beta (PyTorch's
    composition of pad and average pooling)."""
    dim = input.ndim
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {dim} dimensions)")
    if input.numel() == 0:
        return input
    div = input * input
    if dim == 3:
        div = F.unsqueeze(div, 1)
        div = pad(div, (0, 0, size // 2, (size - 1) // 2))
        div = F.squeeze(avg_pool2d(div, (size, 1), stride=1), 1)
    else:
        sizes = tuple(input.shape)
        div = F.reshape(div, (sizes[0], 1, sizes[1], sizes[2], -1))
        div = pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = F.reshape(F.squeeze(avg_pool3d(div, (size, 1, 1), stride=1), 1), sizes)
    div = F.pow(div * alpha + k, beta)
    return input / div


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    return adaptive_max_pool2d(input, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):
    return adaptive_max_pool3d(input, output_size, True)


def upsample_nearest(input, size=None, scale_factor=None):
    """interpolate(mode='nearest') (PyTorch's deprecated name)."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """interpolate(mode='bilinear', align_corners=True) (PyTorch's deprecated name)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


from .functional_more import *  # noqa: E402,F401,F403
from . import functional_more as _more  # noqa: E402

__all__ += ["relu_", "elu_", "leaky_relu_", "hardtanh_", "celu_", "selu_", "threshold",
            "threshold_", "rrelu", "rrelu_", "dropout3d", "feature_alpha_dropout",
            "adaptive_avg_pool3d", "adaptive_max_pool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d",
            "local_response_norm", "upsample_nearest", "upsample_bilinear",
            "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
            "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
            "adaptive_max_pool3d_with_indices",
            *_more.__all__]

# the names this module does not implement raise NotImplementedError naming them
X.surface.install("torch.nn.functional", globals())
