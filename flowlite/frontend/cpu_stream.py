"""PyTorch's CPU random stream, bit for bit: MT19937 and ATen's transforms of its words.

Layer: frontend — imports nothing of flowlite. `MT19937Stream` is the state of one
`torch.Generator` on the CPU: a Mersenne Twister seeded with the low 32 bits of the seed
(`at::mt19937`, the `std::mt19937` recurrence), PyTorch's cached second Box–Muller normal, and
the 5056-byte state layout `torch.get_rng_state()` uses. Its draws reproduce PyTorch 2.13's CPU
kernels (ATen/core/TransformationHelper.h, DistributionsHelper.h,
native/cpu/DistributionTemplates.h, MultinomialKernel.cpp, TensorFactories.cpp randperm),
verified against torch itself (tests/test_torch_streams.py):

* a 32-bit draw is one word (`random()`), a 64-bit draw two (`random64()`: first word high);
* uniform floats: float32 from the low 24 bits of a word, float64 from the low 53 bits of a
  64-bit draw, then `x * (to - from) + from` as one fused multiply-add (the build contracts it);
  float16/bfloat16 round float32 draws (a rounded-up `to` becomes `from`);
* normal: `numel >= 16` and contiguous fills uniforms first and transforms blocks of 16 by
  Box–Muller (the last 16 redrawn when numel % 16; for 16-bit floats the last uniforms are
  completed to a block instead); float32 (and 16-bit) uses the AVX2 kernel's polynomial
  log/sincos (avx_mathfun), float64 libm's; otherwise one double Box–Muller pair per two
  elements, the sine cached in the generator for the next scalar normal;
* integers: `random() % range + low`, 64-bit draws when the range is at least 2**28;
  randperm: Fisher–Yates with `random() % (n - i)`;
* exponential: `-1/lambda * log1p(-u)` in double; bernoulli: `u < p`; multinomial: the
  exponential race (argmax/top-k of p / q) without replacement or for one sample, else a
  binary search of double uniforms in the normalised cumulative sum.

Words come from numpy's MT19937 bit generator (C, 624 words per twist): its key and position
are the engine's state array and `625 - left`.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["MT19937Stream", "DEFAULT_SEED", "STATE_BYTES", "fma32", "fma64"]

DEFAULT_SEED = 67280421310721       # c10's default_rng_seed_val (torch.Generator())
STATE_BYTES = 5056                  # sizeof(CPUGeneratorImplState)
_N = 624
_MASK64 = (1 << 64) - 1
_U64 = np.uint64
_F32, _F64 = np.float32, np.float64
_TWO_PI = 2.0 * math.pi
_CHUNK = 1 << 14                    # elements transformed per pass (stays in cache)

# the state layout (CPUGeneratorImplState): legacy POD then the float normal cache
_O_SEED, _O_LEFT, _O_SEEDED, _O_NEXT, _O_STATE = 0, 8, 12, 16, 24
_O_NX, _O_NY, _O_RHO, _O_NVALID, _O_FLOAT, _O_FVALID = 5016, 5024, 5032, 5040, 5048, 5052


def _key(seed32: int) -> np.ndarray:
    """init_genrand: the engine's state array for a 32-bit seed."""
    key = np.empty(_N, np.uint32)
    x = seed32 & 0xFFFFFFFF
    key[0] = x
    for j in range(1, _N):
        x = (1812433253 * (x ^ (x >> 30)) + j) & 0xFFFFFFFF
        key[j] = x
    return key


# ---- correctly rounded fused multiply-adds (the kernels are built with FMA contraction) ----
_TIE = _U64(0x10000000)
_LOW29 = _U64(0x1FFFFFFF)


def fma32(a, b, c):
    """float32 a * b + c rounded once. The product is exact in float64; the sum is rounded
    twice only when it lands exactly half-way between two floats: those are redone."""
    if np.ndim(a):
        s = a.astype(_F64)
        s *= b
    else:
        s = b.astype(_F64)
        s *= a
    s += c
    r = s.astype(_F32)
    tie = (s.view(_U64) & _LOW29) == _TIE
    if tie.any():
        r = _fix_ties(a, b, c, s, r, tie)
    return r


def _fix_ties(a, b, c, s, r, tie):
    a, b, c = (np.broadcast_to(np.asarray(v, _F64), s.shape)[tie] for v in (a, b, c))
    p = a * b                                   # exact (24 x 24 bits)
    t = s[tie]
    bb = t - p
    err = (p - (t - bb)) + (c - bb)             # the exact sum is t + err
    nudged = np.where(err > 0, np.nextafter(t, np.inf),
                      np.where(err < 0, np.nextafter(t, -np.inf), t))
    r = r.copy() if not r.flags.writeable else r
    r[tie] = nudged.astype(_F32)
    return r


_SPLIT = 134217729.0                            # 2**27 + 1 (Veltkamp)


def _two_prod(a, b):
    p = a * b
    t = _SPLIT * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLIT * b
    bh = t - (t - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fma64(a, b, c):
    """float64 a * b + c rounded once (Boldo–Melquiond: exact product and sum, the low parts
    added with rounding to odd, then one rounding to nearest)."""
    a, b, c = (np.asarray(v, _F64) for v in (a, b, c))
    uh, ul = _two_prod(a, b)
    th, tl = _two_sum(c, uh)
    v, e = _two_sum(tl, ul)
    odd = (e != 0) & ((v.view(_U64) & _U64(1)) == 0)
    if odd.any():
        v = np.where(odd, np.nextafter(v, np.where(e > 0, np.inf, -np.inf)), v)
    return th + v


def _libm(f, x):
    """libm's double `f` element by element (numpy's own vector log differs in the last bit)."""
    return np.fromiter(map(f, x.ravel().tolist()), _F64, x.size).reshape(x.shape)


# ---- the AVX2 normal kernel's float32 log and sincos (avx_mathfun, as compiled: FMAs) -------
_LOG_P = [_F32(c) for c in (7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1,
                            -1.2420140846E-1, 1.4249322787E-1, -1.6668057665E-1,
                            2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1)]
_LOG_Q1, _LOG_Q2 = _F32(-2.12194440e-4), _F32(0.693359375)
_SQRTHF = _F32(0.707106781186547524)
_FOPI = _F32(1.27323954473516)
_DP = [_F32(-0.78515625), _F32(-2.4187564849853515625e-4), _F32(-3.77489497744594108e-8)]
_COS_P = [_F32(2.443315711809948E-005), _F32(-1.388731625493765E-003),
          _F32(4.166664568298827E-002)]
_SIN_P = [_F32(-1.9515295891E-4), _F32(8.3321608736E-3), _F32(-1.6666654611E-1)]
_HALF, _ONE = _F32(0.5), _F32(1.0)


def _log_avx(x):
    """log256_ps for x in (0, 1] (normal numbers: no clamping or NaN needed)."""
    xi = x.view(np.int32)
    e = ((xi >> 23) - 126).astype(_F32)
    m = ((xi & 0x007FFFFF) | 0x3F000000).view(_F32)           # in [0.5, 1)
    small = m < _SQRTHF
    m = (m - _ONE) + m * small                                  # (x + x - 1 below SQRTHF)
    e -= small
    z = m * m
    y = np.full_like(m, _LOG_P[0])
    for c in _LOG_P[1:]:
        y = fma32(y, m, c)
    y = fma32(y * m, z, e * _LOG_Q1)
    y = y - z * _HALF
    return (m + y) + e * _LOG_Q2           # (e * q2 is exact: the fused form rounds alike)


_SIGN = np.int32(29)


def _sincos_avx(x):
    """sincos256_ps for x >= 0: (sin, cos)."""
    j = (x * _FOPI).astype(np.int32)
    j += 1
    j &= ~1
    y = j.astype(_F32)
    sin_sign = (j & 4) << _SIGN
    cos_sign = (~(j - 2) & 4) << _SIGN
    poly = ((j & 2) >> 1) - 1                 # all ones where the first polynomial is sin's
    # y <= 8 is a small even integer: y * DP1 and y * DP2 are exact, their fused forms round
    # as the plain ones do
    x = x + y * _DP[0]
    x = x + y * _DP[1]
    x = fma32(y, _DP[2], x)
    z = x * x
    yc = fma32(fma32(_COS_P[0], z, _COS_P[1]), z, _COS_P[2])
    yc = fma32(yc * z, z, -(z * _HALF)) + _ONE
    ys = fma32(fma32(_SIN_P[0], z, _SIN_P[1]), z, _SIN_P[2])
    ys = fma32(ys * z, x, x)
    yc, ys = yc.view(np.int32), ys.view(np.int32)
    s = ((ys & poly) | (yc & ~poly)) ^ sin_sign
    c = ((yc & poly) | (ys & ~poly)) ^ cos_sign
    return s.view(_F32), c.view(_F32)


def _fill16_f32(u, mean, std):
    """normal_fill_16_AVX2 over u (float32 uniforms, a multiple of 16), in place."""
    blocks = u.reshape(-1, 16)
    for lo in range(0, blocks.shape[0], _CHUNK // 16):
        b = blocks[lo:lo + _CHUNK // 16]
        r = np.sqrt(_F32(-2.0) * _log_avx(_ONE - b[:, :8]))
        s, c = _sincos_avx(_F32(_TWO_PI) * b[:, 8:])
        b[:, :8] = _scale32(r * c, std, mean)
        b[:, 8:] = _scale32(r * s, std, mean)


def _scale32(z, std, mean):
    """fma(z, std, mean) in float32 (a plain product when mean is 0)."""
    if mean == 0:
        return z if std == 1 else z * std
    return fma32(z, std, mean)


def _fill16_f64(u, mean, std):
    """normal_fill_16<double> over u (float64 uniforms, a multiple of 16), in place."""
    b = u.reshape(-1, 16)
    r = np.sqrt(-2.0 * _libm(math.log, 1.0 - b[:, :8]))
    theta = _TWO_PI * b[:, 8:]
    cos, sin = _libm(math.cos, theta), _libm(math.sin, theta)
    b[:, :8] = fma64(r * cos, std, mean)
    b[:, 8:] = fma64(r * sin, std, mean)


def _digits(dt) -> int:
    return {np.dtype(_F64): 53, np.dtype(_F32): 24, np.dtype(np.float16): 11}.get(
        np.dtype(dt), 8)


class MT19937Stream:
    """One PyTorch CPU generator: the engine, its seed and its cached scalar normal."""
    __slots__ = ("_bg", "_gen", "seed", "_fresh", "normal_cache", "float_cache")

    def __init__(self, seed: int = DEFAULT_SEED):
        self._bg = np.random.MT19937()
        self._gen = np.random.Generator(self._bg)
        self.manual_seed(seed)

    # ---- the engine -----------------------------------------------------------------------
    def manual_seed(self, seed: int) -> None:
        self.seed = int(seed) & _MASK64
        self._set(_key(self.seed), _N)
        self._fresh = True
        self.normal_cache = None        # next_double_normal_sample_
        self.float_cache = None         # next_float_normal_sample_ (kept for the state only)

    def _set(self, key, pos):
        self._bg.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": int(pos)}}

    def words(self, n: int) -> np.ndarray:
        """n draws of `random()`: uint32 (numpy's full-range uint32 draw is one word each)."""
        self._fresh = False
        return self._gen.integers(0, 1 << 32, size=int(n), dtype=np.uint32)

    def words64(self, n: int) -> np.ndarray:
        """n draws of `random64()`: uint64, the first word of each pair the high half."""
        self._fresh = False
        r = self._bg.random_raw(2 * int(n))
        return (r[0::2] << _U64(32)) | r[1::2]

    def clone(self) -> "MT19937Stream":
        out = MT19937Stream.__new__(MT19937Stream)
        out._bg = np.random.MT19937()
        out._bg.state = self._bg.state
        out._gen = np.random.Generator(out._bg)
        out.seed, out._fresh = self.seed, self._fresh
        out.normal_cache, out.float_cache = self.normal_cache, self.float_cache
        return out

    # ---- state: PyTorch's byte layout -----------------------------------------------------
    def get_state(self, aux: bytes = bytes(16)) -> bytes:
        """The 5056 bytes of torch.get_rng_state(); `aux` (16 bytes) goes where PyTorch keeps
        two unused doubles (normal_x, normal_rho: written 0, ignored when loaded)."""
        st = self._bg.state["state"]
        pos = int(st["pos"])
        left, nxt = (1, 0) if self._fresh else (_N + 1 - pos, pos)
        raw = bytearray(STATE_BYTES)
        raw[_O_SEED:_O_SEED + 8] = self.seed.to_bytes(8, "little")
        raw[_O_LEFT:_O_LEFT + 4] = left.to_bytes(4, "little")
        raw[_O_SEEDED:_O_SEEDED + 4] = (1).to_bytes(4, "little")
        raw[_O_NEXT:_O_NEXT + 8] = nxt.to_bytes(8, "little")
        raw[_O_STATE:_O_NX] = np.asarray(st["key"], "<u8").tobytes()
        raw[_O_NX:_O_NX + 8] = aux[:8]
        raw[_O_RHO:_O_RHO + 8] = aux[8:16]
        if self.normal_cache is not None:
            raw[_O_NY:_O_NY + 8] = np.float64(self.normal_cache).tobytes()
            raw[_O_NVALID:_O_NVALID + 4] = (1).to_bytes(4, "little")
        if self.float_cache is not None:
            raw[_O_FLOAT:_O_FLOAT + 4] = np.float32(self.float_cache).tobytes()
            raw[_O_FVALID] = 1
        return bytes(raw)

    def set_state(self, raw: bytes) -> bytes:
        """Load get_state()'s bytes (or torch.get_rng_state()'s); returns the aux bytes."""
        if len(raw) != STATE_BYTES:
            raise RuntimeError(f"Expected a CPUGeneratorImplState of size {STATE_BYTES} but "
                               f"found the input RNG state size to be {len(raw)}")
        left = int.from_bytes(raw[_O_LEFT:_O_LEFT + 4], "little", signed=True)
        seeded = int.from_bytes(raw[_O_SEEDED:_O_SEEDED + 4], "little")
        nxt = int.from_bytes(raw[_O_NEXT:_O_NEXT + 8], "little")
        if not (seeded and 0 < left <= _N and nxt <= _N):
            raise RuntimeError("Invalid mt19937 state")
        key = (np.frombuffer(raw[_O_STATE:_O_NX], "<u8") & _U64(0xFFFFFFFF)).astype(np.uint32)
        self.seed = int.from_bytes(raw[_O_SEED:_O_SEED + 8], "little")
        self._set(key, _N + 1 - left)
        self._fresh = left == 1 and nxt == 0
        valid = int.from_bytes(raw[_O_NVALID:_O_NVALID + 4], "little")
        self.normal_cache = float(np.frombuffer(raw[_O_NY:_O_NY + 8], "<f8")[0]) if valid \
            else None
        self.float_cache = float(np.frombuffer(raw[_O_FLOAT:_O_FLOAT + 4], "<f4")[0]) \
            if raw[_O_FVALID] else None
        return bytes(raw[_O_NX:_O_NX + 8]) + bytes(raw[_O_RHO:_O_RHO + 8])

    # ---- uniform reals --------------------------------------------------------------------
    def unit(self, n: int, dt) -> np.ndarray:
        """uniform_real_distribution<T>(0, 1): float64 from 53 bits of random64, float32
        (and the 16-bit floats: float32 draws) from the low 24 bits of random()."""
        if np.dtype(dt) == _F64:
            return (self.words64(n) & _U64((1 << 53) - 1)).astype(_F64) * (2.0 ** -53)
        return (self.words(n) & np.uint32(0xFFFFFF)).astype(_F32) * _F32(2.0 ** -24)

    def uniform(self, n: int, dt, low: float = 0.0, high: float = 1.0) -> np.ndarray:
        """Tensor.uniform_(low, high) of n elements of dtype dt (serial order). The 16-bit
        floats draw float32 values with float32 bounds, rounded, a rounded-up `high` given
        `low` instead (the interval stays half-open)."""
        dt = np.dtype(dt)
        x = self.unit(n, dt)
        if (low, high) != (0.0, 1.0):
            if dt == _F64:
                fma, width, lo = fma64, high - low, low
            else:
                lo, hi = _F32(low), _F32(high)
                fma, width = fma32, hi - lo
            for i in range(0, n, _CHUNK):
                x[i:i + _CHUNK] = fma(x[i:i + _CHUNK], width, lo)
        if dt == _F64 or dt == _F32:
            return x
        out = x.astype(dt)
        out[out == np.asarray(high, dt)] = np.asarray(low, dt)
        return out

    # ---- normals ---------------------------------------------------------------------------
    def normal(self, n: int, dt, mean: float = 0.0, std: float = 1.0,
               contiguous: bool = True) -> np.ndarray:
        """Tensor.normal_(mean, std) of n elements of dtype dt."""
        dt = np.dtype(dt)
        if n >= 16 and contiguous:
            if dt == _F64:
                u = self.unit(n, _F64)
                fill, m, s = _fill16_f64, float(mean), float(std)
            else:       # float32 (the 16-bit floats too, then rounded)
                u = self.unit(n, _F32)
                fill, m, s = _fill16_f32, _F32(mean), _F32(std)
            k = n - n % 16
            raw = u[k:].copy()
            fill(u[:k], m, s)
            if k != n:
                if dt == _F64 or dt == _F32:
                    tail = self.unit(16, u.dtype)       # the last 16 drawn again
                else:       # 16-bit floats: the last uniforms kept, the block completed
                    tail = np.concatenate([raw, self.unit(16 - n % 16, _F32)])
                fill(tail, m, s)
                u[n - 16:] = tail
            return u.astype(dt, copy=False)
        return fma64(self.scalar_normals(n), float(std), float(mean)).astype(dt)

    def scalar_normals(self, n: int) -> np.ndarray:
        """n draws of normal_distribution<double>(0, 1) (the serial kernel): Box–Muller pairs
        of double uniforms, the sine kept for the next draw."""
        out = np.empty(n, _F64)
        i = 0
        if n and self.normal_cache is not None:
            out[0] = self.normal_cache
            self.normal_cache = None
            i = 1
        pairs = (n - i + 1) // 2
        if pairs:
            u = self.unit(2 * pairs, _F64).reshape(pairs, 2)
            r = np.sqrt(-2.0 * _libm(math.log1p, -u[:, 1]))
            theta = _TWO_PI * u[:, 0]
            z = np.empty((pairs, 2), _F64)
            z[:, 0] = r * _libm(math.cos, theta)
            z[:, 1] = r * _libm(math.sin, theta)
            z = z.reshape(-1)
            out[i:] = z[:n - i]
            if (n - i) % 2:
                self.normal_cache = float(z[-1])
        return out

    # ---- integers ---------------------------------------------------------------------------
    def randint(self, n: int, low: int, high: int) -> np.ndarray:
        """random_(low, high): (random() % range) + low as int64 (random64 for a range of
        2**28 or more)."""
        return self.from_range(n, (high - low) & _MASK64, low)

    def from_range(self, n: int, span: int, low: int) -> np.ndarray:
        v = self.words64(n) if span >= 1 << 28 else self.words(n).astype(_U64)
        if span:
            v = v % _U64(span)
        return (v + _U64(low & _MASK64)).view(np.int64)

    def full_range(self, n: int) -> np.ndarray:
        """random_(-2**63) (no upper bound): a 64-bit draw as int64."""
        return self.words64(n).view(np.int64)

    def random_bits(self, n: int, dt) -> np.ndarray:
        """random_() without bounds: [0, max] for integers, [0, 2**digits] for floats."""
        dt = np.dtype(dt)
        if dt == np.bool_:
            return (self.words(n) & np.uint32(1)).astype(np.bool_)
        if dt == np.int64 or dt == _F64:
            v = self.words64(n)
            mod = (1 << 63) if dt == np.int64 else (1 << 53) + 1
            return (v % _U64(mod)).astype(dt)
        v = self.words(n).astype(_U64)
        if dt.kind == "f":
            mod = (1 << _digits(dt)) + 1
        else:
            mod = int(np.iinfo(dt).max) + 1
        return (v % _U64(mod)).astype(dt)

    def randperm(self, n: int) -> np.ndarray:
        """randperm_cpu (n < 2**32 / 20): swap i with i + random() % (n - i), i < n - 1."""
        n = int(n)
        if n >= (1 << 32) // 20:
            raise NotImplementedError("randperm: n >= 2**32/20 (PyTorch's other algorithm)")
        if n < 2:
            return np.arange(n, dtype=np.int64)
        z = (self.words(n - 1).astype(np.int64) % np.arange(n, 1, -1, dtype=np.int64))
        z += np.arange(n - 1, dtype=np.int64)
        perm = list(range(n))
        for i, j in enumerate(z.tolist()):
            perm[i], perm[j] = perm[j], perm[i]
        return np.array(perm, np.int64)

    # ---- other distributions ----------------------------------------------------------------
    def exponential(self, n: int, lambd: float) -> np.ndarray:
        """exponential_distribution<double>: -1/lambda * log1p(-u), float64."""
        return (-1.0 / float(lambd)) * _libm(math.log1p, -self.unit(n, _F64))

    def bernoulli(self, n: int, p: float) -> np.ndarray:
        """bernoulli_(p) with a number p: a double uniform below p (bool)."""
        return self.unit(n, _F64) < float(p)

    def bernoulli_from(self, p: np.ndarray) -> np.ndarray:
        """bernoulli_(p) with a tensor p (already broadcast, in serial order): a uniform of
        p's precision (double for float64, else float) below p (bool)."""
        if p.dtype == _F64:
            return self.unit(p.size, _F64).reshape(p.shape) < p
        return self.unit(p.size, _F32).reshape(p.shape) < p.astype(_F32)

    def cauchy(self, n: int, median: float, sigma: float) -> np.ndarray:
        t = _libm(math.tan, math.pi * (self.unit(n, _F64) - 0.5))
        return fma64(float(sigma), t, float(median))

    def log_normal(self, n: int, mean: float, std: float) -> np.ndarray:
        return _libm(math.exp, fma64(self.scalar_normals(n), float(std), float(mean)))

    def geometric(self, n: int, p: float) -> np.ndarray:
        return np.ceil(_libm(math.log, self.unit(n, _F64)) / math.log(1.0 - float(p)))

    def multinomial(self, p: np.ndarray, num: int, replacement: bool) -> np.ndarray:
        """torch.multinomial of the rows of p ((rows, k), float32 or float64): int64 (rows,
        num). Checks what PyTorch checks (a RuntimeError with its message)."""
        rows, k = p.shape
        if not replacement or num == 1:
            if not (np.all(p >= 0) and np.all(p < np.inf)):
                raise RuntimeError("probability tensor contains either `inf`, `nan` or "
                                   "element < 0")
            if np.any(p.sum(axis=1) == 0):
                raise RuntimeError("invalid multinomial distribution (sum of probabilities "
                                   "<= 0)")
            q = self.exponential(p.size, 1.0).astype(p.dtype).reshape(p.shape)
            r = p / q
            if num == 1:
                return np.argmax(r, axis=1).astype(np.int64)[:, None]
            # (top-k; PyTorch's order among equal ratios — zero weights drawn once the
            # non-zero ones run out — is its sort's own, not reproduced)
            return np.argsort(-r, axis=1, kind="stable")[:, :num].astype(np.int64)
        out = np.empty((rows, num), np.int64)
        for i in range(rows):
            row = p[i]
            if np.any(row < 0):
                raise RuntimeError("invalid multinomial distribution (encountering probability "
                                   "entry < 0)")
            if not np.all(np.isfinite(row)):
                raise RuntimeError("invalid multinomial distribution (encountering probability "
                                   "entry = infinity or NaN)")
            cum = np.cumsum(row, dtype=row.dtype)
            total = cum[-1]
            if not total > 0:
                raise RuntimeError("invalid multinomial distribution (sum of probabilities "
                                   "<= 0)")
            cum = (cum / total).astype(_F64)
            cum[-1] = 1.0
            u = self.unit(num, _F64)
            # the kernel's binary search (the first slot whose cumulative value is >= u),
            # step for step: the forced last 1 may break monotonicity
            left = np.zeros(num, np.int64)
            right = np.full(num, k, np.int64)
            while True:
                live = right > left
                if not live.any():
                    break
                mid = left + (right - left) // 2
                below = cum[np.minimum(mid, k - 1)] < u
                left = np.where(live & below, mid + 1, left)
                right = np.where(live & ~below, mid, right)
            out[i] = left
        return out
