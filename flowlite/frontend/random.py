"""Device-resident randomness.

Layer: frontend — imports engine.device, engine.dtypes, engine.errors, engine.host_data,
engine.ir, engine.mesh, engine.runtime, ops, ops._core, ops.creation, primitives, tensor. The
seed key is device data (one per device) and every draw folds a host draw counter
(`rt.rng_draws`, entering the graph as data) into it inside the graph, so masks differ every
step, are reproducible per seed, nothing recompiles, and the seed is never baked into a program.
"""
from __future__ import annotations

import jax
import numpy as np

from ..engine import dtypes as D
from ..engine.errors import ArgumentError, DTypeError
from . import primitives as P
from ..engine.device import default_device
from ..engine.ir import scalar_node
from ..engine.mesh import put
from .ops import _dev, reshape
from .ops import broadcast_shapes as _broadcast_shapes, broadcast_to as _broadcast_to
from .ops import full_like as _full_like, zeros_like as _zeros_like
from .ops._core import int_size, pointwise
from .ops.creation import host_permutation, host_randint
from ..engine.host_data import host_node, host_value, on_host
from ..engine.runtime import rt
from .tensor import Tensor, apply, from_jax, from_numpy

_keys: dict = {}       # Device -> Tensor holding the seed's raw uint32[2] key data


def manual_seed(seed: int) -> None:
    """Reset every device's generator (like torch.manual_seed)."""
    rt.rng_seed = int(seed)
    _keys.clear()
    rt.rng_draws = 0


seed = manual_seed


def initial_seed() -> int:
    return rt.rng_seed


def _state(device) -> Tensor:
    t = _keys.get(device)
    if t is None:
        raw = np.asarray(jax.random.key_data(jax.random.key(rt.rng_seed % (2 ** 63),
                                                            dtype="threefry2x32")))
        t = _keys[device] = _place_key(raw.astype(np.uint32), device)
    return t


def _place_key(raw, device):
    mesh = getattr(device, "mesh", None)
    if mesh is not None:                   # the key is replicated, never split like a batch
        return from_jax(put(raw, mesh.replicated))
    return from_numpy(raw, device=device)


def next_key(device=None):
    """(seed key, draw counter) for the next random op on `device`.

    The key stays fixed device data; the counter is a host integer that enters the graph
    as data (never a constant), so every draw differs, nothing recompiles, and no chain of
    key splits has to be computed.  `flowlite.compile` replays advance it too."""
    device = device or default_device()
    key = _state(device)
    n = rt.rng_draws
    rt.rng_draws = n + 1
    c = Tensor(scalar_node(n % (2 ** 32), D.uint32))
    c._node.tag = ("rng", n)
    return key, c


def get_rng_state(device=None) -> Tensor:
    """uint32 tensor [key0, key1, counter_lo, counter_hi] (save it to resume a run)."""
    device = device or default_device()
    k = np.asarray(_state(device).numpy(), np.uint32)
    n = rt.rng_draws
    return from_numpy(np.array([k[0], k[1], n & 0xFFFFFFFF, n >> 32], np.uint32),
                      device=device)


def set_rng_state(state: Tensor, device=None) -> None:
    device = device or default_device()
    if tuple(state.shape) != (4,) or state.dtype is not D.uint32:
        raise ValueError(f"set_rng_state: expected a uint32 tensor of shape (4,) from "
                         f"get_rng_state(), got {state.dtype} {tuple(state.shape)}")
    v = np.asarray(state.numpy(), np.uint32)
    _keys[device] = _place_key(v[:2].copy(), device)
    rt.rng_draws = int(v[2]) | (int(v[3]) << 32)


# integer draws of at most this many elements on a plain CPU device are computed on the host
# (numpy, the program's numbers bit for bit): `ix = torch.randint(len(data) - block, (batch,))`
# is iterated on the host next, and a tiny program plus its read costs ~15x the numpy
_HOST_DRAW_MAX = 1 << 16


def _host_draw(device, shape, requires_grad):
    """(device, its key as a host array) when a draw of `shape` is computed on the host."""
    if requires_grad or rt.observers or rt.local.tracing_body:
        return None
    dev = _dev(device)
    size = 1
    for s in shape:
        size *= s
    if size > _HOST_DRAW_MAX or not on_host(dev):
        return None
    k = host_value(_state(dev)._node)
    return None if k is None else (dev, k)


def _host_counter():
    n = rt.rng_draws
    rt.rng_draws = n + 1
    return n % (2 ** 32)


def _shape(size, op="rand"):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    shape = tuple(int_size(s, op) for s in size)
    if any(s < 0 for s in shape):
        raise ArgumentError(f"{op}: trying to create a tensor with a negative dimension "
                            f"{list(shape)}")
    return shape


def _make(prim, shape, attrs, dtype, device, requires_grad):
    dev = _dev(device)
    key, n = next_key(dev)
    out = apply(prim, (key, n), attrs, shape, dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out


def _float_dtype(dtype):
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.default_float()
    if not d.is_floating_point:
        raise TypeError(f"expected a floating-point dtype, got {d}")
    return d


def _from_generator(generator, op, draw, d, device, requires_grad=False):
    """Values drawn on the host from `generator` (a flowlite.Generator: a seeded numpy
    stream, as DataLoader's generator=): reproducible per generator, not PyTorch's numbers,
    and materialised data rather than a lazy draw."""
    rng = getattr(generator, "rng", None)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{op}: generator must be a flowlite.Generator, got "
                        f"{type(generator).__name__}")
    out = from_numpy(np.asarray(draw(rng)).astype(d.np, copy=False))
    if device is not None:
        out = out.to(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    shape = _shape(size)
    d = _float_dtype(dtype)
    if generator is not None:
        return _from_generator(generator, "rand", lambda g: g.random(shape), d, device,
                               requires_grad)
    return _make(P.rng_uniform, shape, (shape, d), d, device, requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    shape = _shape(size, "randn")
    d = _float_dtype(dtype)
    if generator is not None:
        return _from_generator(generator, "randn", lambda g: g.standard_normal(shape), d,
                               device, requires_grad)
    return _make(P.rng_normal, shape, (shape, d), d, device, requires_grad)


def _integer_grad(requires_grad, d, op):
    if requires_grad and d.kind != "f":
        raise DTypeError(f"{op}: only tensors of floating point dtype can require gradients "
                         f"(got dtype {d})")


def randint(low=0, high=None, size=None, generator=None, dtype=None, device=None,
            requires_grad=False):
    if size is None and isinstance(high, (tuple, list)):   # randint(high, size)
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint: missing required argument 'size'")
    shape = _shape((size,) if not isinstance(size, int) else (size,), "randint")
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.canonical(D.int64)
    if high <= low:
        raise ArgumentError(f"randint: expected low < high, got low={low}, high={high}")
    _integer_grad(requires_grad, d, "randint")
    if generator is not None:
        return _from_generator(generator, "randint",
                               lambda g: g.integers(int(low), int(high), size=shape), d, device,
                               requires_grad)
    low, high = int(low), int(high)
    if -2 ** 31 <= low and high <= 2 ** 31 - 1:
        host = _host_draw(device, shape, requires_grad)
        if host is not None:
            dev, k = host
            return Tensor(host_node(host_randint(k, _host_counter(), shape, low, high, d),
                                    d, dev))
        # the bounds travel as data: train and validation splits of different lengths
        # (randint(len(data) - block, ...)) draw with one program
        key, n = next_key(_dev(device))
        bounds = (Tensor(scalar_node(low, D.int32)), Tensor(scalar_node(high, D.int32)))
        out = apply(P.rng_randint, (key, n) + bounds,
                    (shape, d, None, None, high - low <= 1 << 23), shape, d)
        if requires_grad:
            out.requires_grad_(True)
        return out
    return _make(P.rng_randint, shape, (shape, d, low, high), d, device, requires_grad)


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    n = int_size(n, "randperm")
    if n < 0:
        raise ArgumentError(f"randperm: n must be non-negative, got {n}")
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.canonical(D.int64)
    _integer_grad(requires_grad, d, "randperm")
    if generator is not None:
        return _from_generator(generator, "randperm", lambda g: g.permutation(int(n)), d,
                               device, requires_grad)
    host = _host_draw(device, (n,), requires_grad)
    if host is not None:
        dev, k = host
        return Tensor(host_node(host_permutation(k, _host_counter(), n, d), d, dev))
    return _make(P.rng_permutation, (int(n),), (int(n), d), d, device, requires_grad)


def rand_like(x, dtype=None):
    return rand(x.shape, dtype=dtype or x.dtype, device=x.device)


def randn_like(x, dtype=None):
    return randn(x.shape, dtype=dtype or x.dtype, device=x.device)


def trunc_normal(shape, lower, upper, dtype=None, device=None):
    d = _float_dtype(dtype)
    shape = tuple(shape)
    return _make(P.rng_trunc_normal, shape, (shape, d, float(lower), float(upper)), d, device,
                 False)


def bernoulli_mask(shape, p_keep, dtype=None, device=None):
    """Bool mask with P(True) = p_keep; p_keep may be a Python float (data, never baked)."""
    u = rand(shape, dtype=dtype, device=device)
    return u < p_keep


def _normal_vjp(a, i, o, g):
    # PyTorch's derivative of normal() with respect to mean and std is zero (the draw is not
    # reparameterised): zeros, not None, so `.grad` is set as in PyTorch
    m, sd, _ = i
    return _zeros_like(m), _zeros_like(sd), None


_normal_p = pointwise("normal", lambda a, m, sd, z: m + sd * z, _normal_vjp)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None,
           requires_grad=False):
    """torch.normal: mean and std are tensors (broadcast together) or numbers (then `size`
    gives the shape)."""
    if not isinstance(std, Tensor) and std < 0:
        raise ArgumentError(f"normal expects std >= 0.0, but found std {std}")
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    if not tensors:
        if size is None:
            raise TypeError("normal(): with a float mean and std, size is required")
        z = randn(*_shape((size,) if isinstance(size, int) else tuple(size), "normal"),
                  generator=generator, dtype=dtype, device=device)
        out = z * float(std) + float(mean)
        return out.requires_grad_(True) if requires_grad else out
    like = tensors[0]
    m = mean if isinstance(mean, Tensor) else _full_like(like, mean)
    sd = std if isinstance(std, Tensor) else _full_like(like, std)
    shape = _broadcast_shapes(m.shape, sd.shape, op="normal")
    z = randn(*shape, generator=generator, dtype=like.dtype, device=like.device)
    return apply(_normal_p, (_broadcast_to(m, shape), _broadcast_to(sd, shape), z))


def multinomial(input, num_samples, replacement=False, generator=None):  # noqa: A002
    """Sample category indices from each row of non-negative weights (PyTorch's
    torch.multinomial), drawn inside the graph from the device RNG: lazy, no sync, and a new
    draw every call without recompiling.  Rows need not sum to 1.

    Not checked (PyTorch raises, flowlite cannot without reading the data): a row with a
    negative, infinite or NaN weight, a row of zeros, or (without replacement) fewer
    non-zero weights than num_samples gives unspecified (in-range) indices."""
    if generator is not None:
        raise TypeError("multinomial: generator= is not supported; flowlite has one device "
                        "RNG per device, seeded by flowlite.manual_seed")
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): argument 'input' must be a Tensor, not "
                        f"{type(input).__name__}")
    if input.ndim not in (1, 2):
        raise RuntimeError(f"multinomial(): prob_dist must be 1 or 2 dim (got shape "
                           f"{tuple(input.shape)})")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial(): only supports floating-point dtypes for input, got "
                           f"{input.dtype}")
    num = int(num_samples)
    k = input.shape[-1]
    if num <= 0:
        raise RuntimeError(f"multinomial(): cannot sample n_sample <= 0 samples (got {num})")
    if k == 0:
        raise RuntimeError("multinomial(): number of categories cannot be zero")
    if not replacement and num > k:
        raise RuntimeError(f"multinomial(): cannot sample n_sample > prob_dist.size(-1) samples "
                           f"without replacement (n_sample={num}, {k} categories)")
    p = input.detach()
    rows = p if p.ndim == 2 else reshape(p, (1, k))
    out = D.canonical(D.int64)
    key, n = next_key(input.device)
    idx = apply(P.rng_multinomial, (key, n, rows), (num, bool(replacement), out),
                (rows.shape[0], num), out)
    return idx if input.ndim == 2 else reshape(idx, (num,))


def host_seed() -> int:
    """A 63-bit seed for host-side randomness (DataLoader shuffles, samplers, random_split),
    drawn from the global generator as PyTorch draws those from its default generator:
    reproducible per `manual_seed`, different on every call (it advances the draw counter,
    which `get_rng_state` saves), and no device work."""
    n = rt.rng_draws
    rt.rng_draws = n + 1
    state = np.random.SeedSequence([rt.rng_seed % (2 ** 64), n, 0x5EED]).generate_state(
        1, np.uint64)
    return int(state[0] >> np.uint64(1))
