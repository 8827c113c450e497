"""Creating tensors: `full`, `zeros`, `ones`, `*_like`, `arange`, `linspace`, `eye`.

Layer: op front end (flowlite.ops) — imports dtypes, device, ir, tensor, primitives and
the op modules listed before it in ops/__init__.py.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from .. import dtypes as D
from .. import primitives as P
from ..tensor import Tensor, apply, Size
from ._core import (_BAKED, _creation_dtype, _dev, _scalar, broadcast_to, to_dtype)
from ._registry import torch_op


@torch_op(method=False)
def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if isinstance(size, int):
        size = (size,)
    shape = tuple(builtins.int(s) for s in size)
    if builtins.any(s < 0 for s in shape):
        raise ValueError(f"full: negative dimension in size {shape}")
    d = _creation_dtype(dtype, fill_value)
    dev = _dev(device)
    if isinstance(fill_value, Tensor):
        out = broadcast_to(to_dtype(fill_value, d), shape)
    elif isinstance(fill_value, (bool, np.bool_)) or fill_value in _BAKED or d is D.bool_:
        v = fill_value if d.kind == "f" else (builtins.bool(fill_value) if d is D.bool_
                                              else builtins.int(fill_value))
        out = apply(P.full, (), (shape, v, d), shape, d)
        out._node.device = dev
    else:
        s = _scalar(fill_value, d)
        out = apply(P.broadcast_to, (s,), (shape,), shape, d)
        out._node.device = dev
    if requires_grad:
        out.requires_grad_(True)
    return out


def _size_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        return tuple(size[0])
    return tuple(size)


@torch_op(method=False, aliases=("empty",))
def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_size_arg(size), 0, dtype=dtype or D.default_float(), device=device,
                requires_grad=requires_grad)


@torch_op(method=False)
def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_size_arg(size), 1, dtype=dtype or D.default_float(), device=device,
                requires_grad=requires_grad)




@torch_op(method=False, aliases=("empty_like",))
def zeros_like(x, dtype=None, device=None, requires_grad=False):
    return full(x._node.shape, 0, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)


@torch_op(method=False)
def ones_like(x, dtype=None, device=None, requires_grad=False):
    return full(x._node.shape, 1, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)




@torch_op(method=False)
def full_like(x, fill_value, dtype=None, device=None, requires_grad=False):
    return full(x._node.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)


@torch_op(method=False)
def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    vals = (start, end, step)
    if dtype is None:
        d = D.default_float() if builtins.any(isinstance(v, float) for v in vals) \
            else D.canonical(D.int64)
    else:
        d = D.canonical(D.from_any(dtype))
    n = builtins.max(0, math.ceil((end - start) / step))
    attrs = (start, end, step, n, d)
    out = apply(P.iota, (), attrs, (n,), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


@torch_op(method=False)
def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    d = _creation_dtype(dtype)
    if d is D.bool_ or builtins.int(steps) < 0:
        raise RuntimeError(f"linspace: expected a non-negative number of steps and a numeric "
                           f"dtype (got steps={steps}, dtype {d})")
    out = apply(P.linspace, (), (float(start), float(end), builtins.int(steps), d),
                (builtins.int(steps),), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


@torch_op(method=False)
def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    m = n if m is None else m
    d = _creation_dtype(dtype)
    out = apply(P.eye, (), (builtins.int(n), builtins.int(m), d), (n, m), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out
