"""Creating tensors: `full`, `zeros`, `ones`, `*_like`, `arange`, `linspace`, `eye`.

Layer: frontend — imports engine.buckets, engine.dtypes, engine.errors, linspace_values,
ops._core, ops._registry, tensor. The family's primitives (`<name>_p`) are declared here, beside
the front end that records them: their gradient rules call the ops of this module and of those
before it.
"""
from __future__ import annotations

import builtins
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...engine.errors import ArgumentError, UnsupportedError
from ...engine import buckets as B, dtypes as D
from ..tensor import apply, Size, Tensor
from ..linspace_values import linspace_values
from ._core import (int_size, _BAKED, _creation_dtype, _dev, _scalar, broadcast_to, broadcast_to_p, full_p,
                    nondiff, to_dtype)
from ._registry import torch_op


# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
def _iota(a):
    start, end, step, n, d = a
    if d.kind == "f":
        # start + i * step in the widest float available (asking for float64 with x64 off
        # would warn at every compile), then cast
        wide = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
        return (start + step * jnp.arange(n, dtype=wide)).astype(d.np)
    return jnp.arange(start, end, step, dtype=d.np)


iota_p = nondiff("arange", _iota, bucket=B.rule_arange)


# PyTorch's exact values (fused multiply-adds, two halves), computed once on the host per
# (start, end, steps, dtype): a constant of the program
linspace_p = nondiff("linspace", lambda a: jnp.asarray(linspace_values(a[0], a[1], a[2], a[3].np)))


eye_p = nondiff("eye", lambda a: jnp.eye(a[0], a[1], dtype=a[2].np))


# Counter-based random numbers: element i of the n-th draw is a hash of (seed key, n, i) —
# two rounds of murmur3's 32-bit finaliser.  One fused elementwise computation per draw: it
# compiles ~4x faster and runs ~4x faster on XLA:CPU than jax.random's threefry, and is
# statistically fine for initialisation, dropout and sampling (it is not cryptographic).
_M1, _M2, _M3, _GOLD = 0x85EBCA6B, 0xCC9E2D51, 0x1B873593, 0x9E3779B9
_WIDE = 0x6A09E667        # the second key of a 64-bit draw: sqrt(2)'s fraction


def _bits(k, n, shape):
    size = 1
    for d in shape:
        size *= d
    return _bits_at(k, n, lax.iota(jnp.uint32, size)).reshape(shape)


def _bits_at(k, n, i):
    """The draw's bits for the elements at flat (row-major) positions `i`."""
    k0 = k[0]
    k1 = k[1] ^ (n.astype(jnp.uint32) * jnp.uint32(_GOLD))
    x = (i * jnp.uint32(_M1)) ^ k0
    for c in (_M2, _M3):
        x = x ^ k1
        x = x ^ (x >> 16)
        x = x * jnp.uint32(_M1)
        x = x ^ (x >> 13)
        x = x * jnp.uint32(c)
        x = x ^ (x >> 16)
    return x


def _unit(bits, open_interval=False):
    """float32 in [0, 1) (or (0, 1) when open_interval) from the top 23 bits."""
    m = (bits >> 9).astype(jnp.float32)
    return (m + 0.5) * (1.0 / 8388608.0) if open_interval else m * (1.0 / 8388608.0)


def _uniform(a, k, n, bits=None):
    shape, dt = a[0], a[1]
    return _unit(_bits(k, n, shape) if bits is None else bits).astype(dt.np)


def _normal(a, k, n, bits=None):
    shape, dt = a[0], a[1]
    u = _unit(_bits(k, n, shape) if bits is None else bits, open_interval=True)
    return (jnp.float32(np.sqrt(2.0)) * lax.erf_inv(2.0 * u - 1.0)).astype(dt.np)


def _randint(a, k, n, *bounds):
    # bounds: (low, high) as data (int32 scalars: one program for every range of the same
    # size class), or in the attributes (low, high - 1: int64 holds both) when they don't
    shape, dt, low, last = a[:4]
    if bounds:
        low, high = bounds
        small = a[4]
        span = high - low
        if small:
            r = jnp.floor(_unit(_bits(k, n, shape)) * span.astype(jnp.float32))
            return (r.astype(jnp.int32) + low).astype(dt.np)
        b = _bits(k, n, shape)
        return (low + (b % span.astype(jnp.uint32)).astype(jnp.int32)).astype(dt.np)
    span = last + 1 - low
    b = _bits(k, n, shape)
    if span <= 2 ** 32 and np.dtype(dt.np).itemsize <= 4:       # 32-bit arithmetic wraps
        r = (b if span == 2 ** 32 else b % jnp.uint32(span)) + jnp.uint32(low % 2 ** 32)
        signed = np.issubdtype(np.dtype(dt.np), np.signedinteger) or dt.kind == "f"
        return (lax.bitcast_convert_type(r, jnp.int32) if signed else r).astype(dt.np)
    # 64-bit: two 32-bit draws (the second from a key of its own) when the span needs them
    b = b.astype(jnp.uint64)
    if span > 2 ** 32:
        lo = _bits(k ^ jnp.uint32(_WIDE), n, shape).astype(jnp.uint64)
        b = (b << jnp.uint64(32)) | lo
    r = (b if span == 2 ** 64 else b % jnp.uint64(span)) + jnp.uint64(low % 2 ** 64)      # wraps as two's complement
    return lax.bitcast_convert_type(r, jnp.int64).astype(dt.np)


def _permutation(a, k, n):
    size, dt = a
    b = _bits(k, n, (size,))
    return jnp.argsort(b, stable=True).astype(dt.np)


def _trunc_normal(a, k, n):
    shape, dt, lo, hi = a
    from jax.scipy.special import ndtr, ndtri
    u = _unit(_bits(k, n, shape), open_interval=True)
    plo, phi = ndtr(jnp.float32(lo)), ndtr(jnp.float32(hi))
    return jnp.clip(ndtri(plo + u * (phi - plo)), lo, hi).astype(dt.np)


def _multinomial(a, k, n, p):
    # p: (B, K) non-negative weights, not necessarily normalised.  With replacement: inverse
    # CDF, one uniform per sample, searched in the running sum (made monotone, and flat across
    # zero weights, by a running max: a zero-weight category can never be drawn).  Without:
    # an exponential race (the S largest p / E, E ~ Exp(1)), which draws S categories in turn,
    # each with probability proportional to its weight among those not yet drawn.
    num, replacement, out = a
    wide = jnp.float64 if p.dtype == jnp.float64 else jnp.float32
    p = p.astype(wide)
    B, K = p.shape
    if replacement:
        u = _unit(_bits(k, n, (B, num))).astype(wide)
        cdf = lax.cummax(jnp.where(p > 0, jnp.cumsum(p, axis=1), 0), axis=1)
        r = u * cdf[:, -1:]
        idx = jax.vmap(lambda c, x: jnp.searchsorted(c, x, side="right"))(cdf, r)
        return jnp.minimum(idx, K - 1).astype(out.np)
    e = -jnp.log(_unit(_bits(k, n, (B, K)), open_interval=True)).astype(wide)
    return lax.top_k(p / e, num)[1].astype(out.np)


rng_multinomial_p = nondiff("rng_multinomial", _multinomial)


def _rng_bucket(ctx, op, a, shape, ins, vals):
    """A draw of a padded shape in a training step (dropout over a batch's length) or in a
    piece of a loop cut where it grows (dropout left on while generating): each element
    hashes its position in the logical shape, so the real elements get the exact program's
    numbers, bit for bit.  Elsewhere a draw would stay a padded buffer (parameters
    initialised for models of several widths): exact programs."""
    if B._syms(a[1:]) or not (ctx.step or ctx.grows):
        raise B.Unsupported(op.name + " outside a training step")
    k, n = vals
    bits = _bits_at(k, n, B.logical_index(ctx, a[0]))
    return op.lower(a, k, n, bits=bits)


def _batched(finish):
    """Prim.batch of a draw: the bits of every draw hashed as one vector, each element with
    its own position and draw counter (so the same numbers, bit for bit, as one draw at a
    time), `finish` applied once to all of them; the lowering cuts the draws out of it."""
    def batch(attrs, k, ns):
        sizes = [math.prod(a[0]) for a in attrs]
        i = jnp.concatenate([lax.iota(jnp.uint32, s) for s in sizes])
        n = jnp.concatenate([jnp.broadcast_to(c.astype(jnp.uint32), (s,))
                             for c, s in zip(ns, sizes)])
        return finish(_bits_at(k, n, i))
    return batch


rng_uniform_p = nondiff("rng_uniform", _uniform, bucket=_rng_bucket,
                        batch=_batched(lambda b: _unit(b)))


rng_normal_p = nondiff("rng_normal", _normal, bucket=_rng_bucket,
                       batch=_batched(lambda b: jnp.float32(np.sqrt(2.0)) *
                                      lax.erf_inv(2.0 * _unit(b, open_interval=True) - 1.0)))


rng_randint_p = nondiff("rng_randint", _randint)


rng_permutation_p = nondiff("rng_permutation", _permutation)


rng_trunc_normal_p = nondiff("rng_trunc_normal", _trunc_normal)



@torch_op(method=False)
def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if isinstance(size, int):
        size = (size,)
    elif not hasattr(size, "__iter__"):
        size = (size,)
    shape = tuple(int_size(s, "full") for s in size)
    if builtins.any(s < 0 for s in shape):
        raise ArgumentError(f"full: negative dimension in size {shape}")
    d = _creation_dtype(dtype, fill_value)
    dev = _dev(device)
    if isinstance(fill_value, Tensor):
        out = broadcast_to(to_dtype(fill_value, d), shape)
    elif isinstance(fill_value, (bool, np.bool_)) or fill_value in _BAKED or d is D.bool_:
        v = fill_value if d.kind == "f" else (builtins.bool(fill_value) if d is D.bool_
                                              else builtins.int(fill_value))
        out = apply(full_p, (), (shape, v, d), shape, d)
        out._node.device = dev
    else:
        s = _scalar(fill_value, d)
        out = apply(broadcast_to_p, (s,), (shape,), shape, d)
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
    for v in (start, end, step):
        if isinstance(v, float) and not math.isfinite(v):
            raise ArgumentError(f"arange: unsupported range: {start} -> {end} (step {step})")
    if step == 0:
        raise ArgumentError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise ArgumentError(f"arange: upper bound and lower bound inconsistent with step sign "
                            f"(start={start}, end={end}, step={step})")
    vals = (start, end, step)
    if dtype is None:
        d = D.default_float() if builtins.any(isinstance(v, float) for v in vals) \
            else D.canonical(D.int64)
    else:
        d = D.canonical(D.from_any(dtype))
    if d is D.bool_:
        raise UnsupportedError(f"arange: not implemented for dtype {d}")
    n = builtins.max(0, math.ceil((end - start) / step))
    attrs = (start, end, step, n, d)
    out = apply(iota_p, (), attrs, (n,), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


@torch_op(method=False)
def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    d = _creation_dtype(dtype)
    if d is D.bool_:
        raise UnsupportedError(f"linspace: not implemented for dtype {d}")
    if builtins.int(steps) < 0:
        raise ArgumentError(f"linspace: number of steps must be non-negative, got {steps}")
    out = apply(linspace_p, (), (float(start), float(end), builtins.int(steps), d),
                (builtins.int(steps),), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


@torch_op(method=False)
def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    m = n if m is None else m
    if n < 0 or m < 0:
        raise ArgumentError(f"eye: n and m must be greater or equal to 0, got n={n}, m={m}")
    d = _creation_dtype(dtype)
    out = apply(eye_p, (), (builtins.int(n), builtins.int(m), d), (n, m), d)
    out._node.device = _dev(device)
    if requires_grad:
        out.requires_grad_(True)
    return out
