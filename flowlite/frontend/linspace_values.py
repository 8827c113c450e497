"""The exact values of PyTorch's `linspace`, computed on the host (numpy only).

Layer: frontend — imports nothing of flowlite.

PyTorch's CPU kernel computes `step = (end - start) / (steps - 1)` in the output's float type
(double for integer outputs) and then element i as `start + step * i` for the first half and
`end - step * (steps - 1 - i)` for the second, each a fused multiply-add (its AVX2/AVX512
kernels are compiled with FMA contraction).  XLA offers no fused multiply-add to ask for, so
the values are computed here — correctly rounded, vectorised, with exact rational arithmetic
only for the rare elements that sit on a rounding boundary — and enter the program as a
constant (they depend only on the op's attributes).  float16/bfloat16 are computed in float32
and rounded once (PyTorch's rounding of each intermediate to half precision is not
reproduced: they may differ from PyTorch's by one unit in the last place).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np


def _two_prod(a, b):
    """p + e == a * b exactly (Dekker's product)."""
    p = a * b
    c = 134217729.0 * a
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fma64(k, step, base, sign):
    """base + sign * step * k, correctly rounded to float64 (k, base arrays; step a float)."""
    with np.errstate(over="ignore", invalid="ignore"):
        p, e = _two_prod(np.float64(step) * sign, k)
        s, t = _two_sum(base, p)
        w = t + e
        out = s + w
        # w's own rounding can only matter when s + w lies next to a rounding boundary of s
        # (half a unit in the last place, or a quarter below a power of two): redo those
        # elements exactly
        h = np.spacing(np.abs(s)) / 2
        close = (np.abs(np.abs(w) - h) <= h * 2.0 ** -40) | \
            (np.abs(np.abs(w) - h / 2) <= h * 2.0 ** -40) | ~np.isfinite(out) | (s == 0)
    for j in np.nonzero(close)[0]:
        exact = Fraction(float(base[j])) + sign * Fraction(float(step)) * int(k[j])
        out[j] = float(exact)           # Fraction -> float is correctly rounded
    return out


def _round_f32(q: Fraction) -> np.float32:
    """q correctly rounded to float32 (ties to even)."""
    c = np.float32(float(q))
    best = None
    for cand in (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))):
        if not np.isfinite(cand):
            continue
        d = abs(Fraction(float(cand)) - q)
        key = (d, int(np.array(cand).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1] if best is not None else c


def _fma32(k, step, base, sign):
    """base + sign * step * k, correctly rounded to float32 (float32 step and base)."""
    exact64 = np.float64(base) + sign * (np.float64(step) * k)   # product exact (k < 2**29)
    out = exact64.astype(np.float32)
    bits = exact64.view(np.uint64)
    # the float64 sum was rounded once; only a result exactly on a float32 midpoint (or in
    # float32's subnormal range) may then round the wrong way: redo those exactly
    risky = ((bits & np.uint64((1 << 29) - 1)) == np.uint64(1 << 28)) | \
        (np.abs(exact64) < 2.0 ** -126)
    for j in np.nonzero(risky)[0]:
        out[j] = _round_f32(Fraction(float(base[j])) + sign * Fraction(float(step)) * int(k[j]))
    return out


def linspace_values(start: float, end: float, steps: int, np_dtype) -> np.ndarray:
    dt = np.dtype(np_dtype)
    if steps == 0:
        return np.zeros((0,), dt)
    integer = dt.kind in "iu"
    if integer:
        # PyTorch: start/end converted to the integer type, the step in double
        a, b = float(int(start)), float(int(end))
        wide, fma = np.float64, _fma64
    elif dt == np.float64:
        a, b = float(start), float(end)
        wide, fma = np.float64, _fma64
    else:
        a, b = float(np.float32(start)), float(np.float32(end))
        wide, fma = np.float32, _fma32
    if steps == 1:
        vals = np.array([a], wide)
    else:
        step = (wide(b) - wide(a)) / wide(steps - 1)
        i = np.arange(steps, dtype=np.float64)
        half = steps // 2
        lo = fma(i[:half], step, np.full(half, a, wide), 1)
        hi = fma((steps - 1) - i[half:], step, np.full(steps - half, b, wide), -1)
        vals = np.concatenate([lo, hi])
    if integer:
        return np.trunc(vals).astype(np.int64).astype(dt)
    return vals.astype(dt)
