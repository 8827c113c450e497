"""PyTorch-style `repr` for tensors (it reads the value: a sync).

Layer: frontend — imports engine.dtypes.
"""
from __future__ import annotations

import numpy as np

from ..engine import dtypes as D


def _default_dtypes():
    return (D.default_float(), D.canonical(D.int64), D.bool_)


def tensor_repr(t) -> str:
    arr = np.asarray(t._value("repr()"))
    if t.dtype.is_floating_point and arr.dtype.itemsize < 4:   # float16, bfloat16
        arr = arr.astype(np.float32)
    if arr.dtype.kind == "f":
        finite = arr[np.isfinite(arr)]
        as_int = finite.size and np.all(finite == np.round(finite)) and np.abs(finite).max() < 1e8
        if as_int:
            fmt = {"float_kind": lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)}
        else:
            big = finite.size and (np.abs(finite).max() >= 1e8 or
                                   (np.abs(finite[finite != 0]).min() < 1e-4
                                    if np.any(finite != 0) else False))
            fmt = {"float_kind": (lambda v: f"{v:.4e}") if big else (lambda v: f"{v:.4f}")}
    else:
        fmt = None
    body = np.array2string(arr, separator=", ", prefix="tensor(", formatter=fmt,
                           threshold=1000, edgeitems=3)
    extras = []
    if t.dtype not in _default_dtypes():
        extras.append(f"dtype={t.dtype!r}")
    if arr.size == 0:
        extras.append(f"size={tuple(arr.shape)}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
