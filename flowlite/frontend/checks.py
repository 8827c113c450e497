"""Checked execution: index bounds and integer division by zero, as flags inside the step.

Layer: frontend — imports engine.buckets, engine.dtypes, engine.ir, engine.metrics,
engine.runtime, tensor. The op front end calls `index_in_range` / `nonzero_divisor` where
PyTorch would raise on a bad value; each records one small check node (a 2-vector: bad?, a bad
value) that the executor makes an extra output of the SAME executable as the step, packed with
the others into one array, and reads after the execution (`rollback.verify`). A set flag raises
the error built by the node's `Check` (op, value, valid range, shapes and the user's source
line), and the executor rolls the sync back (a failed sync commits nothing).

Checks are on by default; `set_checks(False)` or FLOWLITE_CHECKS=0 stop recording them.
The switch needs no place of its own in the graph key: with checks off the graph simply
has no check nodes, so it is a different graph with a different key.
"""
from __future__ import annotations

import os
import weakref

import jax
import jax.numpy as jnp

from ..engine import buckets as B, dtypes as D
from ..engine.ir import Prim
from ..engine.metrics import user_site
from ..engine.runtime import rt
from .tensor import apply

_on = {"checks": os.environ.get("FLOWLITE_CHECKS", "1").strip().lower()
       not in ("0", "off", "false", "no")}


def set_checks(enabled: bool) -> None:
    """Turn checked execution (index bounds, integer division by zero) on or off for ops
    recorded from now on (checks already recorded still run)."""
    _on["checks"] = bool(enabled)


def checks_enabled() -> bool:
    return _on["checks"]


class IndexOutOfRangeError(IndexError, RuntimeError):
    """An index tensor held a value outside its op's valid range.  An IndexError (as
    PyTorch's indexing, index_select, embedding and cross_entropy raise) that is also a
    RuntimeError (as PyTorch's gather, scatter and one_hot raise)."""


class IntegerDivisionByZeroError(ZeroDivisionError, RuntimeError):
    """Integer division or modulo by zero (PyTorch raises RuntimeError("ZeroDivisionError"))."""


class LinAlgError(RuntimeError):
    """A linear-algebra routine failed on the values it was given (a singular matrix, one that
    is not positive-definite) — PyTorch's torch.linalg.LinAlgError."""


class Check:
    """What the error of one check says: which op, where it was recorded, the valid range."""
    __slots__ = ("op", "kind", "lo", "hi", "dim", "size", "index_shape", "shape", "site",
                 "detail", "out", "index")

    def __init__(self, op, kind, lo=0, hi=0, dim=0, size=0, index_shape=(), shape=(),
                 detail="", out=None, index=None):
        self.op, self.kind, self.lo, self.hi = op, kind, lo, hi
        self.dim, self.size, self.index_shape, self.shape = dim, size, index_shape, shape
        self.detail = detail
        self.site = user_site(3)
        # the result the check guards (weakly): a failed check fails the outputs computed
        # from it, and only those (cache._check_masks)
        self.out = None if out is None else weakref.ref(out._node)
        # ...and what reads the checked index tensor (the op's backward reads it, not `out`)
        self.index = None if index is None else weakref.ref(index._node)

    def __str__(self):           # a check prints as its source line
        return self.site

    def error(self, value) -> Exception:
        at = f" (recorded at {self.site})"
        if self.kind == "linalg":
            return LinAlgError(self.detail.format(int(value)) + at)
        if self.kind == "div":
            return IntegerDivisionByZeroError(
                f"ZeroDivisionError: {self.op}: integer division by zero (divisor of shape "
                f"{self.index_shape}, {self.detail}){at}")
        v, lo, hi = int(value), self.lo, self.hi
        rng = f"[{lo}, {hi - 1}]" if hi > lo else "empty (the dimension has size 0)"
        if self.kind == "target":
            head = f"Target {v} is out of bounds."
        elif self.kind == "class":
            head = "Class values must be non-negative." if v < 0 else \
                "Class values must be smaller than num_classes."
        elif self.kind == "take":
            head = f"out of range: tried to access index {v} on a tensor of {self.size} " \
                   "elements."
        else:
            head = f"index {v} is out of bounds for dimension {self.dim} with size {self.size}"
        extra = f"; {self.detail}" if self.detail else ""
        return IndexOutOfRangeError(
            f"{self.op}: {head} (valid range {rng}{extra}; index of shape {self.index_shape}, "
            f"input of shape {self.shape}){at}")


def _out_dtype():
    return D.canonical(D.int64)


def _range_lower(a, idx):
    """[bad?, a bad value]: min/max of the index (one fused pass), ignore values excluded."""
    lo, hi, ignore, dt = a
    out = dt.np
    if idx.size == 0:
        return jnp.zeros((2,), out)
    x = idx.astype(out)
    if ignore is not None:
        x = jnp.where(x == ignore, jnp.asarray(max(lo, 0), out), x)
    # min and max in ONE variadic reduce (XLA:CPU compiles a kernel or two per reduction)
    info = jnp.iinfo(out)
    mn, mx = jax.lax.reduce((x, x), (jnp.asarray(info.max, out), jnp.asarray(info.min, out)),
                            lambda a, b: (jnp.minimum(a[0], b[0]), jnp.maximum(a[1], b[1])),
                            tuple(range(x.ndim)))
    over = mx >= hi
    bad = over | (mn < lo)
    return jnp.stack([bad.astype(out), jnp.where(over, mx, mn)])


def _nonzero_lower(a, y):
    out = a[0].np
    if y.size == 0:
        return jnp.zeros((2,), out)
    return jnp.stack([jnp.any(y == 0).astype(out), jnp.zeros((), out)])


range_check = Prim("check_range", _range_lower, nondiff=True, bucket=B.rule_check_range)
nonzero_check = Prim("check_nonzero", _nonzero_lower, nondiff=True,
                     bucket=B.rule_check_nonzero)


def _register(prim, t, attrs, check):
    if rt.local.tracing_body:     # a scan body is traced on placeholders: nothing to check
        return
    node = apply(prim, (t,), attrs, (2,), attrs[-1] if prim is range_check else attrs[0])._node
    node.check = check
    node.site = check.site      # a check always knows its line (debug names it, tracking or not)
    rt.local.checks.append(node)


def index_in_range(index, size, op, *, negative=False, dim=0, shape=(), ignore=None,
                   kind="index", hi=None, detail="", out=None):
    """Check (in the graph) that every value of integer tensor `index` is in [0, size), or
    in [-size, size) when `negative`; values equal to `ignore` are allowed.  `out` is the
    op's result: when the check fails, what was computed from it fails too."""
    if not _on["checks"]:
        return
    n = index._node
    if 0 in n.shape:
        return
    lo = -size if negative else 0
    hi = size if hi is None else hi
    check = Check(op, kind, lo, hi, dim, size, tuple(n.shape), tuple(shape), detail, out,
                  index)
    _register(range_check, index, (lo, hi, None if ignore is None else int(ignore),
                                   _out_dtype()), check)


def nonzero_divisor(y, op, out):
    """Check (in the graph) that integer divisor tensor `y` of result `out` has no zero."""
    if not _on["checks"] or 0 in out._node.shape or 0 in y._node.shape:
        return
    n = y._node
    check = Check(op, "div", index_shape=tuple(n.shape), detail=n.dtype.name, out=out)
    _register(nonzero_check, y, (_out_dtype(),), check)


def linalg_info(info, op, message, out):
    """Check (in the graph) that integer tensor `info` (a LAPACK-style status: 0 = success,
    k > 0 = failed at step k) is all zeros; a failure raises LinAlgError(message.format(k))
    at the sync. `out` is the op's result."""
    if not _on["checks"] or 0 in info._node.shape:
        return
    check = Check(op, "linalg", 0, 1, shape=tuple(out._node.shape), detail=message, out=out)
    _register(range_check, info, (0, 1, None, _out_dtype()), check)
