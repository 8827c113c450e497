"""PyTorch's in-place random draws, `Tensor.uniform_`, `normal_`, `bernoulli_`, `random_`,
`exponential_`, `geometric_`, `cauchy_`, `log_normal_`, and `Tensor.bernoulli`.

Layer: frontend — imports engine.dtypes, engine.errors, ops, random, tensor. Each takes
`generator=` (flowlite.Generator, either kind) as PyTorch's do, checks its parameters as PyTorch
does (RuntimeError naming the op) and rebinds the tensor to the draw (in-place semantics: views
and `.data` see it). Distributions come from uniforms and normals by the textbook transforms;
the numbers are flowlite's, not PyTorch's.
"""
from __future__ import annotations

import math

from ..engine import dtypes as D
from ..engine.errors import ArgumentError, DTypeError, UnsupportedError
from . import ops as F
from . import random as R
from .tensor import Tensor

__all__ = ["uniform_", "normal_", "bernoulli_", "bernoulli", "random_", "exponential_",
           "geometric_", "cauchy_", "log_normal_"]


def _floating(self, op, what="a continuous", exc=UnsupportedError):
    # PyTorch: NotImplementedError (no kernel for the dtype) for uniform_/normal_/log_normal_,
    # RuntimeError (a stated check) for exponential_/cauchy_
    if not self.dtype.is_floating_point:
        raise exc(f"{op}: {what} distribution needs a floating-point tensor, got "
                  f"dtype {self.dtype}")


def _unit(self, generator):
    """Uniforms in [0, 1) shaped and typed like `self`, on its device."""
    return R.rand(tuple(self.shape), generator=generator, dtype=self.dtype, device=self.device)


def uniform_(self, a=0.0, b=1.0, *, generator=None):
    a, b = float(a), float(b)
    if a > b:
        raise ArgumentError(f"uniform_ expects to return a [from, to) range, but found "
                            f"from={a:g} > to={b:g}")
    _floating(self, "uniform_")
    u = _unit(self, generator)
    return self._rebind(u * (b - a) + a if (a, b) != (0.0, 1.0) else u, "uniform_")


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    if float(std) < 0:
        raise ArgumentError(f"normal expects std >= 0.0, but found std {float(std):g}")
    _floating(self, "normal_")
    n = R.randn(tuple(self.shape), generator=generator, dtype=self.dtype, device=self.device)
    return self._rebind(n * std + mean if (mean, std) != (0.0, 1.0) else n, "normal_")


def bernoulli_(self, p=0.5, *, generator=None):
    """Each element 1 with probability `p` (a number, or a tensor broadcast to self)."""
    if not isinstance(p, Tensor):
        p = R.check_probability(p, "bernoulli_")
    u = R.rand(tuple(self.shape), generator=generator, device=self.device)
    return self._rebind(F.to_dtype(u < p, self.dtype), "bernoulli_")


def bernoulli(self, p=None, *, generator=None):
    """Tensor.bernoulli(): a draw with self's values as the probabilities."""
    return R.bernoulli(self, p, generator=generator)


def random_(self, *args, generator=None, **kw):
    """Integers uniform in [from, to); `random_(to)` is [0, to); without `to` up to what the
    dtype holds exactly (floats: 2**mantissa, PyTorch's rule)."""
    from_, to = kw.pop("from", 0), kw.pop("to", None)
    if kw:
        raise TypeError(f"random_() got an unexpected keyword argument {next(iter(kw))!r}")
    if len(args) > 2:
        raise TypeError(f"random_() takes at most 2 positional arguments ({len(args)} given)")
    if len(args) == 2:
        from_, to = args
    elif len(args) == 1:
        from_, to = (args[0], to) if to is not None else (0, args[0])
    d = self.dtype
    low = int(from_)
    high = R.int_range(d)[1] + 1 if to is None else int(to)
    if low >= high:
        raise ArgumentError(f"random_ expects 'from' to be less than 'to', but got "
                            f"from={low} >= to={high}")
    if d.kind != "f":
        R._check_int_bounds(low, high, d, "random_")
    draw_d = d if d.kind != "f" else (D.canonical(D.int64) if high - low > 2 ** 31 - 1
                                      else D.int32)
    out = R._randint(low, high, tuple(self.shape), draw_d, self.device, False, generator,
                     "random_")
    return self._rebind(F.to_dtype(out, d), "random_")


def exponential_(self, lambd=1.0, *, generator=None):
    lambd = float(lambd)
    if not lambd > 0.0:
        raise ArgumentError(f"exponential_ expects lambda > 0.0, but found lambda={lambd:g}")
    _floating(self, "exponential_", "the exponential", DTypeError)
    u = _unit(self, generator)
    return self._rebind(F.neg(F.log1p(F.neg(u))) / lambd, "exponential_")


def geometric_(self, p, *, generator=None):
    """Trials up to the first success, each succeeding with probability p: 1, 2, ..."""
    p = R.check_probability(p, "geometric_", open_interval=True)
    u = R.rand(tuple(self.shape), generator=generator, device=self.device)
    k = F.ceil(F.log1p(F.neg(u)) / math.log1p(-p))
    return self._rebind(F.to_dtype(F.clamp(k, min=1.0), self.dtype), "geometric_")


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    sigma = float(sigma)
    if not sigma > 0.0:
        raise ArgumentError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma:g}")
    _floating(self, "cauchy_", "the Cauchy", DTypeError)
    u = _unit(self, generator)
    return self._rebind(F.tan((u - 0.5) * math.pi) * sigma + float(median), "cauchy_")


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    std = float(std)
    if not std > 0.0:
        raise ArgumentError(f"log_normal_ expects std > 0.0, but found std={std:g}")
    _floating(self, "log_normal_")
    z = R.randn(tuple(self.shape), generator=generator, dtype=self.dtype, device=self.device)
    return self._rebind(F.exp(z * std + float(mean)), "log_normal_")
