"""PyTorch's printed form of a tensor (`repr`/`str`; it reads the value: a sync) and its print
options (`set_printoptions`, `get_printoptions`, `printoptions`).

The rules are PyTorch 2.x's (torch/_tensor_str.py), so a learner's printout matches the
lecture's character for character:

* one format for all of a tensor's elements, chosen from its nonzero finite values: integers
  as they are; floats that are all whole numbers as `3.`; else fixed-point with `precision`
  decimals, or scientific notation when the largest magnitude is over 1000 times the smallest,
  over 1e8, or the smallest under 1e-4 (`sci_mode` forces either); every element padded to
  the widest one;
* rows wrap at `linewidth`; a tensor of more than `threshold` elements prints `edgeitems`
  rows/columns at each end around `...`, and its format is chosen from those alone;
* suffixes: `device=` off the default device type, `dtype=` for a dtype other than the
  default float, int64 and bool (and for an empty tensor, other than the default float),
  `size=` for an empty tensor that is not 1-D, then `grad_fn=<...>` or `requires_grad=True`;
  a suffix that would pass `linewidth` starts a new line.

Layer: frontend — imports engine.device, engine.dtypes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

from ..engine import device as _device
from ..engine import dtypes as D


@dataclasses.dataclass
class _PrintOptions:
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: bool | None = None


_OPTS = _PrintOptions()
# profile -> (precision, threshold, edgeitems, linewidth)
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
             "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """`torch.set_printoptions`: digits after the point (`precision`, 4), the element count
    above which a tensor prints summarised (`threshold`, 1000), the items kept at each end
    (`edgeitems`, 3), the line width (`linewidth`, 80), `profile` ('default', 'short' or
    'full') setting those four first, and `sci_mode` (True/False forces scientific notation
    on or off; None, also when left out, lets each tensor choose)."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: unknown profile {profile!r}; expected one of "
                             f"{', '.join(map(repr, _PROFILES))}")
        (_OPTS.precision, _OPTS.threshold, _OPTS.edgeitems,
         _OPTS.linewidth) = _PROFILES[profile]
    if precision is not None:
        _OPTS.precision = precision
    if threshold is not None:
        _OPTS.threshold = threshold
    if edgeitems is not None:
        _OPTS.edgeitems = edgeitems
    if linewidth is not None:
        _OPTS.linewidth = linewidth
    _OPTS.sci_mode = sci_mode          # as PyTorch: a call without sci_mode resets it


def get_printoptions() -> dict:
    """The current print options, as keyword arguments for `set_printoptions`."""
    return dataclasses.asdict(_OPTS)


@contextlib.contextmanager
def printoptions(**kwargs):
    """`set_printoptions(**kwargs)` for a `with` block; the previous options afterwards."""
    old = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**old)


class _Formatter:
    """One element format for a whole tensor (its width, fixed/scientific/whole-number)."""

    def __init__(self, values: np.ndarray, floating: bool):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.width = 1
        p = _OPTS.precision
        if not floating:
            for v in values.ravel().tolist():
                self.width = max(self.width, len(f"{v}"))
            return
        values = values.astype(np.float64)     # exact for every float dtype
        nonzero = values[np.isfinite(values) & (values != 0)]
        if not nonzero.size:
            return
        mag = np.abs(nonzero)
        lo, hi = float(mag.min()), float(mag.max())
        self.int_mode = bool(np.all(nonzero == np.ceil(nonzero)))
        self.sci_mode = (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
                         if _OPTS.sci_mode is None else _OPTS.sci_mode)
        vals = nonzero.tolist()
        if self.sci_mode:
            self.width = max(self.width, *(len(f"{v:.{p}e}") for v in vals))
        elif self.int_mode:                 # room for the "." that marks a float
            self.width = max(self.width, *(len(f"{v:.0f}") + 1 for v in vals))
        else:
            self.width = max(self.width, *(len(f"{v:.{p}f}") for v in vals))

    def __call__(self, v) -> str:
        if self.floating:
            p = _OPTS.precision
            if self.sci_mode:
                s = f"{v:{self.width}.{p}e}"
            elif self.int_mode:
                s = f"{v:.0f}"
                if math.isfinite(v):
                    s += "."
            else:
                s = f"{v:.{p}f}"
        else:
            s = f"{v}"
        return s.rjust(self.width)


def _py(a: np.ndarray) -> list:
    """Elements as Python numbers (floats as the doubles PyTorch's `tolist()` gives)."""
    return (a.astype(np.float64) if a.dtype.kind in "fV" else a).tolist()


def _summarized(a: np.ndarray) -> np.ndarray:
    """The elements a summarised print shows (the formatter is chosen from these alone)."""
    if a.ndim == 0:
        return a
    e = _OPTS.edgeitems
    n = a.shape[0]
    if a.ndim == 1:
        # (with edgeitems 0, `a[-0:]` is all of a, as in PyTorch)
        return np.concatenate((a[:e], a[-e:])) if n > 2 * e else a
    if not e:
        return np.empty((0,) * a.ndim, a.dtype)
    rows = [*range(e), *range(n - e, n)] if n > 2 * e else range(n)
    return np.stack([_summarized(a[i]) for i in rows])


def _vector(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    per_line = max(1, math.floor((_OPTS.linewidth - indent) / (fmt.width + 2)))
    e = _OPTS.edgeitems
    if summarize and not e:
        items = ["..."]
    elif summarize and a.shape[0] > 2 * e:
        items = [fmt(v) for v in _py(a[:e])] + [" ..."] + [fmt(v) for v in _py(a[-e:])]
    else:
        items = [fmt(v) for v in _py(a)]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _body(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    if a.ndim == 0:
        return fmt(_py(a))
    if a.ndim == 1:
        return _vector(a, indent, summarize, fmt)
    e = _OPTS.edgeitems
    n = a.shape[0]
    if summarize and n > 2 * e:
        rows = ([_body(a[i], indent + 1, summarize, fmt) for i in range(e)] + ["..."]
                + [_body(a[i], indent + 1, summarize, fmt) for i in range(n - e, n)])
    else:
        rows = [_body(a[i], indent + 1, summarize, fmt) for i in range(n)]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def format_array(a: np.ndarray, floating: bool, indent: int) -> str:
    """The bracketed elements of `a` as PyTorch prints them, `indent` columns in."""
    if a.size == 0:
        return "[]"
    summarize = a.size > _OPTS.threshold
    fmt = _Formatter(_summarized(a) if summarize else a, floating)
    return _body(a, indent, summarize, fmt)


def _with_suffixes(text: str, suffixes, indent: int) -> str:
    out = [text]
    last = len(text) - text.rfind("\n") + 1     # PyTorch's count (one more than the column)
    for s in suffixes:
        if last + len(s) + 2 > _OPTS.linewidth:
            out.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    out.append(")")
    return "".join(out)


def tensor_repr(t) -> str:
    prefix = "tensor("
    indent = len(prefix)
    dt = t.dtype
    suffixes = []
    dev = t.device
    if dev is not None and _device.prints_in_repr(dev):
        suffixes.append(f"device='{dev}'")
    arr = np.asarray(t._value("repr()"))
    default_float = D.default_float()
    if arr.size == 0:
        if arr.ndim != 1:
            suffixes.append(f"size={tuple(arr.shape)}")
        if dt is not default_float:
            suffixes.append(f"dtype={dt}")
        body = "[]"
    else:
        if not _OPTS.edgeitems:
            suffixes.append(f"size={tuple(arr.shape)}")
        if dt not in (default_float, D.canonical(D.int64), D.bool_):
            suffixes.append(f"dtype={dt}")
        body = format_array(arr, dt.is_floating_point, indent)
    fn = t.grad_fn
    if fn is not None:
        suffixes.append(f"grad_fn=<{fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + body, suffixes, indent)
