"""More creation: logspace, range, asarray, frombuffer, from_dlpack, scalar_tensor,
empty_strided/empty_permuted, the spectral windows (hann, hamming, blackman, bartlett, kaiser)
and fftfreq/rfftfreq.

Layer: frontend — imports engine.dtypes, linspace_values, ops._core, ops._registry,
ops.creation, tensor. Values that depend only on the arguments are computed on the host, in the
requested dtype the way PyTorch's kernels compute them, and enter programs as data (no device
program, no recompiling for another length).
"""
from __future__ import annotations

import builtins
import math

import jax
import numpy as np

from ...engine import dtypes as D
from ..linspace_values import linspace_values
from ..tensor import from_jax, from_numpy, Tensor, tensor
from ._core import _creation_dtype, as_tensor, to_dtype
from ._registry import torch_op
from .creation import full, zeros


def _finish(arr, dtype, device, requires_grad):
    out = from_numpy(np.asarray(arr).astype(dtype.np), device=device)
    if requires_grad:
        out.requires_grad_(True)
    return out


@torch_op(method=False)
def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    """base ** linspace(start, end, steps), computed as PyTorch's kernel does (the exponent in
    the result's float type, the power in double)."""
    d = _creation_dtype(dtype)
    steps = builtins.int(steps)
    if steps < 0:
        raise RuntimeError(f"number of steps must be non-negative, got {steps}")
    if d is D.bool_:
        raise RuntimeError("logspace: not implemented for 'Bool'")
    wide = d.np if d.kind == "f" else np.float64
    expo = linspace_values(float(start), float(end), steps, wide).astype(np.float64)
    vals = np.power(float(base), expo)
    if d.kind in "iu":
        vals = np.trunc(vals)
    return _finish(vals, d, device, requires_grad)


@torch_op(method=False)
def range(start=0, end=None, step=1, *, dtype=None, device=None,  # noqa: A001
          requires_grad=False):
    """torch.range (deprecated in PyTorch): start, start + step, ... up to and INCLUDING end;
    the default float dtype unless given."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    d = _creation_dtype(dtype)
    n = builtins.int(math.floor((end - start) / step)) + 1
    vals = float(start) + float(step) * np.arange(n, dtype=np.float64)
    return _finish(vals, d, device, requires_grad)


@torch_op(method=False)
def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """obj as a tensor: a tensor itself (converted if dtype asks, copied if copy=True), or new
    data from a sequence, scalar or array (torch.asarray)."""
    if isinstance(obj, Tensor):
        out = to_dtype(obj, dtype) if dtype is not None else obj
        if copy and out is obj:
            out = out.clone()
    else:
        out = tensor(obj, dtype=dtype, device=device) if not isinstance(
            obj, (int, float, bool)) else as_tensor(obj, dtype=dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out


@torch_op(method=False)
def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-D tensor of the buffer's bytes read as dtype (torch.frombuffer). flowlite copies
    the bytes: later writes to the buffer do not show in the tensor (PyTorch shares them)."""
    d = D.from_any(dtype)
    arr = np.frombuffer(buffer, dtype=d.np, count=count, offset=offset)
    if arr.size == 0:
        raise ValueError("both buffer length and count must be greater than 0")
    return _finish(arr, D.canonical(d), None, requires_grad)


@torch_op(method=False)
def from_dlpack(ext_tensor):
    """A tensor from any object with `__dlpack__` (a NumPy array, a JAX array, a PyTorch
    tensor) — copied onto flowlite's device."""
    if isinstance(ext_tensor, Tensor):
        return ext_tensor
    return from_jax(jax.dlpack.from_dlpack(ext_tensor))


@torch_op(method=False)
def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor holding s, of the default float dtype unless given."""
    return full((), s, dtype=_creation_dtype(dtype), device=device, requires_grad=requires_grad)


@torch_op(method=False)
def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False,
                  pin_memory=False):
    """A tensor of `size` (flowlite's tensors are contiguous: `stride` only has to be valid;
    the values, uninitialised in PyTorch, are zeros)."""
    if len(tuple(size)) != len(tuple(stride)):
        raise RuntimeError(f"mismatch in length of strides and shape ({len(tuple(stride))} "
                           f"strides for {len(tuple(size))} dims)")
    return zeros(tuple(size), dtype=dtype, device=device, requires_grad=requires_grad)


@torch_op(method=False)
def empty_permuted(size, physical_layout, *, dtype=None, device=None, requires_grad=False,
                   pin_memory=False):
    """A tensor of `size` (the physical layout is moot for flowlite; the values are zeros)."""
    if sorted(physical_layout) != list(builtins.range(len(tuple(size)))):
        raise RuntimeError(f"Number of dimensions in size does not match the length of the "
                           f"physical_layout ({tuple(size)} vs {tuple(physical_layout)})")
    return zeros(tuple(size), dtype=dtype, device=device, requires_grad=requires_grad)


# ---- spectral windows: PyTorch's formulas, in the window's dtype ------------------------------
def _window(op, window_length, periodic, dtype, device, requires_grad, body):
    d = _creation_dtype(dtype)
    if d.kind != "f":
        raise RuntimeError(f"{op} expects floating point dtypes, got: {d}")
    n = builtins.int(window_length)
    if n < 0:
        raise RuntimeError(f"{op} requires non-negative window length, got "
                           f"window_length={n}")
    if n == 0:
        return _finish(np.zeros((0,)), d, device, requires_grad)
    if n == 1:
        return _finish(np.ones((1,)), d, device, requires_grad)
    m = n + 1 if periodic else n
    t = np.dtype(d.np).type
    w = body(np.arange(m).astype(d.np), m, t)
    return _finish(w[:n], d, device, requires_grad)


def _hamming_body(alpha, beta):
    def body(k, m, t):
        return np.cos(k * t(math.pi * 2.0 / (m - 1))) * t(-beta) + t(alpha)
    return body


@torch_op(method=False)
def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   device=None, requires_grad=False, layout=None, pin_memory=False):
    """alpha - beta * cos(2 pi k / (N - 1)) (N = length + 1 when periodic)."""
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   _hamming_body(alpha, beta))


@torch_op(method=False)
def hann_window(window_length, periodic=True, *, dtype=None, device=None,
                requires_grad=False, layout=None, pin_memory=False):
    """0.5 - 0.5 * cos(2 pi k / (N - 1)) (N = length + 1 when periodic)."""
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   _hamming_body(0.5, 0.5))


@torch_op(method=False)
def blackman_window(window_length, periodic=True, *, dtype=None, device=None,
                    requires_grad=False, layout=None, pin_memory=False):
    """0.42 - 0.5 cos(2 pi k / (N - 1)) + 0.08 cos(4 pi k / (N - 1))."""
    def body(k, m, t):
        w = k * t(math.pi / (m - 1))
        return np.cos(w * t(4)) * t(0.08) - np.cos(w * t(2)) * t(0.5) + t(0.42)
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   body)


@torch_op(method=False)
def bartlett_window(window_length, periodic=True, *, dtype=None, device=None,
                    requires_grad=False, layout=None, pin_memory=False):
    """The triangular window 1 - |2k / (N - 1) - 1|."""
    def body(k, m, t):
        w = k * t(2.0 / (m - 1))
        half = ((m - 1) >> 1) + 1
        w[half:] = w[half:] * t(-1) + t(2)
        return w
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   body)


@torch_op(method=False)
def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, device=None,
                  requires_grad=False, layout=None, pin_memory=False):
    """I0(beta * sqrt(1 - ((k - a) / a) ** 2)) / I0(beta), a = (N - 1) / 2."""
    def body(k, m, t):
        a = t((m - 1) / 2.0)
        r = (k - a) / a
        return (np.i0(t(beta) * np.sqrt(np.abs(t(1) - r * r))) / np.i0(t(beta))).astype(
            k.dtype)
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   body)


def fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, layout=None,
            pin_memory=False):
    """torch.fft.fftfreq: the sample frequencies [0, 1, ..., -(n // 2), ..., -1] / (d n)."""
    dt = _creation_dtype(dtype)
    t = np.dtype(dt.np).type
    k = np.concatenate([np.arange((n + 1) // 2), np.arange(-(n // 2), 0)]).astype(dt.np)
    return _finish(k * t(1.0 / (n * d)), dt, device, requires_grad)


def rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, layout=None,
             pin_memory=False):
    """torch.fft.rfftfreq: the non-negative sample frequencies [0, 1, ..., n // 2] / (d n)."""
    dt = _creation_dtype(dtype)
    t = np.dtype(dt.np).type
    return _finish(np.arange(n // 2 + 1).astype(dt.np) * t(1.0 / (n * d)), dt, device,
                   requires_grad)

