"""PyTorch's in-place random draws, `Tensor.uniform_`, `normal_`, `bernoulli_`, `random_`,
`exponential_`, `geometric_`, `cauchy_`, `log_normal_`, and `Tensor.bernoulli`.

Layer: frontend — imports engine.dtypes, engine.errors, ops, random, tensor. Each takes
`generator=` (flowlite.Generator, either kind) as PyTorch's do, checks its parameters as PyTorch
does (RuntimeError naming the op) and rebinds the tensor to the draw (in-place semantics: views
and `.data` see it). On a CPU tensor from the global or a CPU generator the draw is PyTorch's
(frontend.cpu_stream), element by element in PyTorch's order (memory order: a transposed view is
filled as its storage is); in a program (random.cpu_stream is None) distributions come from the
device stream's uniforms and normals by the textbook transforms, flowlite's numbers.
"""
from __future__ import annotations

import math

import numpy as np

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


def _host(self, generator, op):
    """The PyTorch stream this in-place draw takes on the host, or None (in a program)."""
    return R.cpu_stream(generator, self.device, op)


def _fill(self, values, op):
    """Rebind self to host draws: `values` (flat, in PyTorch's serial order — the tensor's
    memory order) arranged into self's shape."""
    shape = tuple(self.shape)
    flat = np.asarray(values)
    if len(shape) > 1 and not self.is_contiguous():
        st = self.stride()
        order = sorted(range(len(shape)), key=lambda d: -st[d])
        flat = flat.reshape([shape[d] for d in order]).transpose(np.argsort(order))
    return self._rebind(R.host_tensor(flat.reshape(shape), self.dtype, self.device), op)


def _numel(self):
    return R._numel(tuple(self.shape))


def _unit(self, generator):
    """Uniforms in [0, 1) shaped and typed like `self`, on its device."""
    return R.rand(tuple(self.shape), generator=generator, dtype=self.dtype, device=self.device)


def uniform_(self, a=0.0, b=1.0, *, generator=None):
    a, b = float(a), float(b)
    if a > b:
        raise ArgumentError(f"uniform_ expects to return a [from, to) range, but found "
                            f"from={a:g} > to={b:g}")
    _floating(self, "uniform_")
    mt = _host(self, generator, "uniform_")
    if mt is not None:
        return _fill(self, mt.uniform(_numel(self), self.dtype.np, a, b), "uniform_")
    u = _unit(self, generator)
    return self._rebind(u * (b - a) + a if (a, b) != (0.0, 1.0) else u, "uniform_")


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    if float(std) < 0:
        raise ArgumentError(f"normal expects std >= 0.0, but found std {float(std):g}")
    _floating(self, "normal_")
    mt = _host(self, generator, "normal_")
    if mt is not None:
        v = mt.normal(_numel(self), self.dtype.np, float(mean), float(std),
                      self.is_contiguous())
        return _fill(self, v, "normal_")
    n = R.randn(tuple(self.shape), generator=generator, dtype=self.dtype, device=self.device)
    return self._rebind(n * std + mean if (mean, std) != (0.0, 1.0) else n, "normal_")


def bernoulli_(self, p=0.5, *, generator=None):
    """Each element 1 with probability `p` (a number, or a tensor broadcast to self)."""
    if not isinstance(p, Tensor):
        p = R.check_probability(p, "bernoulli_")
    mt = _host(self, generator, "bernoulli_")
    if mt is not None:
        if not isinstance(p, Tensor):
            return _fill(self, mt.bernoulli(_numel(self), p), "bernoulli_")
        prob = np.asarray(F.broadcast_to(p.detach(), tuple(self.shape)).numpy())
        prob = prob if prob.dtype == np.float64 else prob.astype(np.float32)
        if not self.is_contiguous() and prob.ndim > 1:
            st = self.stride()
            prob = prob.transpose(sorted(range(prob.ndim), key=lambda d: -st[d]))
        return _fill(self, mt.bernoulli_from(np.ascontiguousarray(prob)).reshape(-1),
                     "bernoulli_")
    u = R.rand(tuple(self.shape), generator=generator, device=self.device)
    return self._rebind(F.to_dtype(u < p, self.dtype), "bernoulli_")


def bernoulli(self, p=None, *, generator=None):
    """Tensor.bernoulli(): a draw with self's values as the probabilities."""
    return R.bernoulli(self, p, generator=generator)


def random_(self, *args, generator=None, **kw):
    """Integers uniform in [from, to); `random_(to)` is [0, to); without `to` up to what the
    dtype holds exactly (floats: 2**mantissa, PyTorch's rule)."""
    given = dict(kw)
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
    bare = not args and "from" not in given and to is None
    low = int(from_)
    high = R.int_range(d)[1] + 1 if to is None else int(to)
    if low >= high:
        raise ArgumentError(f"random_ expects 'from' to be less than 'to', but got "
                            f"from={low} >= to={high}")
    if d.kind != "f":
        R._check_int_bounds(low, high, d, "random_")
    mt = _host(self, generator, "random_")
    if mt is not None:
        n = _numel(self)
        if bare:                                # uniform_int_distribution
            v = mt.random_bits(n, d.np)
        elif to is None and low == -2 ** 63:    # the full 64-bit range
            v = mt.full_range(n)
        else:
            v = mt.from_range(n, (high - low) & ((1 << 64) - 1), low)
        return _fill(self, v.astype(d.np), "random_")
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
    mt = _host(self, generator, "exponential_")
    if mt is not None:
        return _fill(self, mt.exponential(_numel(self), lambd), "exponential_")
    u = _unit(self, generator)
    return self._rebind(F.neg(F.log1p(F.neg(u))) / lambd, "exponential_")


def geometric_(self, p, *, generator=None):
    """Trials up to the first success, each succeeding with probability p: 1, 2, ..."""
    p = R.check_probability(p, "geometric_", open_interval=True)
    mt = _host(self, generator, "geometric_")
    if mt is not None:
        return _fill(self, mt.geometric(_numel(self), p), "geometric_")
    u = R.rand(tuple(self.shape), generator=generator, device=self.device)
    k = F.ceil(F.log1p(F.neg(u)) / math.log1p(-p))
    return self._rebind(F.to_dtype(F.clamp(k, min=1.0), self.dtype), "geometric_")


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    sigma = float(sigma)
    if not sigma > 0.0:
        raise ArgumentError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma:g}")
    _floating(self, "cauchy_", "the Cauchy", DTypeError)
    mt = _host(self, generator, "cauchy_")
    if mt is not None:
        return _fill(self, mt.cauchy(_numel(self), float(median), sigma), "cauchy_")
    u = _unit(self, generator)
    return self._rebind(F.tan((u - 0.5) * math.pi) * sigma + float(median), "cauchy_")


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    std = float(std)
    if not std > 0.0:
        raise ArgumentError(f"log_normal_ expects std > 0.0, but found std={std:g}")
    _floating(self, "log_normal_")
    mt = _host(self, generator, "log_normal_")
    if mt is not None:
        return _fill(self, mt.log_normal(_numel(self), float(mean), std), "log_normal_")
    z = R.randn(tuple(self.shape), generator=generator, dtype=self.dtype, device=self.device)
    return self._rebind(F.exp(z * std + float(mean)), "log_normal_")
