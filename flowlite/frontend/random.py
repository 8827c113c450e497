"""Device-resident randomness.

Layer: frontend — imports engine.device, engine.dtypes, engine.errors, engine.host_data,
engine.ir, engine.runtime, generator, ops, ops._core, ops.creation, primitives, tensor. The seed
key is device data (one per device) and every draw folds a host draw counter (`rt.rng_draws`,
entering the graph as data) into it inside the graph, so masks differ every step, are
reproducible per seed, nothing recompiles, and the seed is never baked into a program.

Every draw takes `generator=` as in PyTorch (flowlite.frontend.generator: a host stream or a
device stream of its own, never touching the global one). States are opaque uint8 tensors
(`get_rng_state`/`set_rng_state`, `Generator.get_state`); `fork_rng` puts the global streams
back after a block; `default_generator` is the global stream seen as a Generator.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from ..engine import dtypes as D
from ..engine.errors import ArgumentError, DTypeError, UnsupportedError
from . import primitives as P
from ..engine.device import default_device, device as _device
from ..engine.ir import scalar_node
from .generator import DEFAULT_SEED, Generator, counter, host_stream, place_key, seed_key
from .ops import _dev, reshape
from .ops import broadcast_shapes as _broadcast_shapes, broadcast_to as _broadcast_to
from .ops import full_like as _full_like, zeros_like as _zeros_like
from .ops._core import int_size, pointwise
from .ops.creation import host_permutation, host_randint
from ..engine.host_data import host_node, on_host
from ..engine.runtime import rt
from .tensor import Tensor, apply, from_numpy

_MASK64 = (1 << 64) - 1

_keys: dict = {}       # Device -> Tensor holding the global stream's key (device data)
_raws: dict = {}       # Device -> the same key on the host (states are read without a sync)


class _DefaultGenerator:
    """`torch.default_generator` (what `manual_seed` returns): the global stream seen as a
    Generator; passed as `generator=` it draws what no generator would."""
    is_global = True

    @property
    def device(self):       # (a property: importing flowlite must not start JAX's backend)
        return _device("cpu")

    def manual_seed(self, s):
        manual_seed(s)
        return self

    def seed(self) -> int:
        s = int.from_bytes(os.urandom(8), "little") >> 1
        manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return initial_seed()

    def get_state(self) -> Tensor:
        return get_rng_state()

    def set_state(self, state) -> "_DefaultGenerator":
        set_rng_state(state)
        return self

    def __repr__(self):
        return f"<flowlite default_generator seed={rt.rng_seed}>"


default_generator = _DefaultGenerator()


def manual_seed(seed) -> _DefaultGenerator:
    """Reset every device's global stream (like torch.manual_seed; returns the default
    generator). Generators made with `Generator()` keep their own streams."""
    rt.rng_seed = int(seed)
    _keys.clear()
    _raws.clear()
    rt.rng_draws = 0
    return default_generator


def seed() -> int:
    """Seed the global stream from OS entropy (torch.seed); returns the seed."""
    s = int.from_bytes(os.urandom(8), "little") >> 1
    manual_seed(s)
    return s


def initial_seed() -> int:
    return rt.rng_seed


def _raw(device):
    raw = _raws.get(device)
    if raw is None:
        raw = _raws[device] = seed_key(rt.rng_seed)
    return raw


def _state(device) -> Tensor:
    t = _keys.get(device)
    if t is None:
        t = _keys[device] = place_key(_raw(device), device)
    return t


def next_key(device=None):
    """(seed key, draw counter) for the next random op on `device`.

    The key stays fixed device data; the counter is a host integer that enters the graph
    as data (never a constant), so every draw differs, nothing recompiles, and no chain of
    key splits has to be computed.  `flowlite.compile` replays advance it too."""
    device = device or default_device()
    key = _state(device)
    n = rt.rng_draws
    rt.rng_draws = n + 1
    c = counter(n)
    c._node.tag = ("rng", n)
    return key, c


def draw_key(generator, device, op):
    """(key, counter) for one draw of `op` on `device`: from `generator` (a Generator of
    either kind) or, without one, from the global stream."""
    if generator is None or getattr(generator, "is_global", False):
        return next_key(device)
    if isinstance(generator, Generator):
        return generator.draw_key(device, op)
    raise TypeError(f"{op}: generator must be a flowlite.Generator (torch.Generator), got "
                    f"{type(generator).__name__}")


_STATE_BYTES = 24       # seed, key, draw counter: 8 bytes each (little-endian)


def get_rng_state(device=None) -> Tensor:
    """The global stream's state on `device` as an opaque uint8 tensor (PyTorch's
    ByteTensor): save it to resume a run; `set_rng_state` puts it back."""
    device = _dev(device)
    n = rt.rng_draws
    raw = ((rt.rng_seed & _MASK64).to_bytes(8, "little")
           + np.asarray(_raw(device), "<u4").tobytes() + (n & _MASK64).to_bytes(8, "little"))
    return from_numpy(np.frombuffer(raw, np.uint8).copy())


def set_rng_state(state: Tensor, device=None) -> None:
    """Restore a state from `get_rng_state` (also the uint32[4] states of older flowlite)."""
    device = _dev(device)
    if not isinstance(state, Tensor):
        raise TypeError(f"set_rng_state: expected a uint8 tensor from get_rng_state(), got "
                        f"{type(state).__name__}")
    if tuple(state.shape) == (4,) and state.dtype is D.uint32:       # flowlite <= 0.1's
        v = np.asarray(state.numpy(), np.uint32)
        key, n, s = v[:2].copy(), int(v[2]) | (int(v[3]) << 32), rt.rng_seed
    elif tuple(state.shape) == (_STATE_BYTES,) and state.dtype is D.uint8:
        raw = bytes(np.asarray(state.numpy(), np.uint8))
        s = int.from_bytes(raw[:8], "little")
        key = np.frombuffer(raw[8:16], "<u4").astype(np.uint32)
        n = int.from_bytes(raw[16:], "little")
    else:
        raise RuntimeError(f"set_rng_state: expected the uint8 tensor of shape "
                           f"({_STATE_BYTES},) that get_rng_state() returns, got {state.dtype} "
                           f"{tuple(state.shape)}")
    if s != rt.rng_seed:
        _keys.clear()
        _raws.clear()
    rt.rng_seed = s
    _raws[device] = key
    _keys[device] = place_key(key, device)
    rt.rng_draws = n


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
             device_type=None):
    """torch.random.fork_rng: the global streams of every device as they were on entry
    are put back on exit (what the block draws leaves no trace outside it).  Generators
    are untouched, as in PyTorch."""
    if not enabled:
        yield
        return
    saved = (rt.rng_seed, rt.rng_draws, dict(_keys), dict(_raws))
    try:
        yield
    finally:
        rt.rng_seed, rt.rng_draws = saved[0], saved[1]
        _keys.clear()
        _keys.update(saved[2])
        _raws.clear()
        _raws.update(saved[3])


# integer draws of the global stream of at most this many elements on a plain CPU device
# are computed on the host (numpy, the program's numbers bit for bit): `ix =
# torch.randint(len(data) - block, (batch,))` is iterated on the host next, and a tiny
# program plus its read costs ~15x the numpy
_HOST_DRAW_MAX = 1 << 16


def _host_draw(generator, device, shape, requires_grad):
    """(device, the global key on the host, the draw's counter) when this draw is computed
    on the host — the counter is taken then — else None."""
    if requires_grad or rt.observers or rt.local.tracing_body or not (
            generator is None or getattr(generator, "is_global", False)):
        return None
    dev = _dev(device)
    size = 1
    for s in shape:
        size *= s
    if size > _HOST_DRAW_MAX or not on_host(dev):
        return None
    n = rt.rng_draws
    rt.rng_draws = n + 1
    return dev, _raw(dev), n % (2 ** 32)


def _shape(size, op="rand"):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    shape = tuple(int_size(s, op) for s in size)
    if any(s < 0 for s in shape):
        raise ArgumentError(f"{op}: trying to create a tensor with a negative dimension "
                            f"{list(shape)}")
    return shape


def _make(prim, shape, attrs, dtype, device, requires_grad, generator=None, op="rand"):
    dev = _dev(device)
    key, n = draw_key(generator, dev, op)
    out = apply(prim, (key, n), attrs, shape, dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out


def _float_dtype(dtype, op="rand"):
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.default_float()
    if not d.is_floating_point:
        # PyTorch: NotImplementedError ("check_uniform_bounds" not implemented for 'Long')
        raise UnsupportedError(f"{op}: expected a floating-point dtype, got {d}")
    return d


def _host_generator(generator, op):
    """The generator's numpy stream when it is a host Generator (then the values are drawn
    on the host), else None (a device draw, from a device Generator or the global stream)."""
    if generator is None or getattr(generator, "is_global", False):
        return None
    if not isinstance(generator, Generator):
        raise TypeError(f"{op}: generator must be a flowlite.Generator (torch.Generator), got "
                        f"{type(generator).__name__}")
    return None if generator.is_device else generator.rng


def _from_host(rng, draw, d, device, requires_grad=False):
    """Values drawn on the host from a host Generator's numpy stream (as DataLoader's
    generator=): reproducible per generator, materialised data rather than a lazy draw."""
    out = from_numpy(np.asarray(draw(rng)).astype(d.np, copy=False))
    if device is not None:
        out = out.to(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    shape = _shape(size)
    d = _float_dtype(dtype)
    rng = _host_generator(generator, "rand")
    if rng is not None:
        return _from_host(rng, lambda g: g.random(shape), d, device, requires_grad)
    return _make(P.rng_uniform, shape, (shape, d), d, device, requires_grad, generator, "rand")


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    shape = _shape(size, "randn")
    d = _float_dtype(dtype, "randn")
    rng = _host_generator(generator, "randn")
    if rng is not None:
        return _from_host(rng, lambda g: g.standard_normal(shape), d, device, requires_grad)
    return _make(P.rng_normal, shape, (shape, d), d, device, requires_grad, generator, "randn")


def _integer_grad(requires_grad, d, op):
    if requires_grad and d.kind != "f":
        raise DTypeError(f"{op}: only tensors of floating point dtype can require gradients "
                         f"(got dtype {d})")


def int_range(d):
    """The integers dtype `d` holds exactly (floats: up to 2**mantissa, PyTorch's rule)."""
    if d is D.bool_:
        return 0, 1
    if d.kind == "f":
        m = {2: 11, 4: 24, 8: 53}.get(np.dtype(d.np).itemsize, 8)
        m = 8 if d is D.bfloat16 else m
        return -(2 ** m), 2 ** m
    info = np.iinfo(d.np)
    return int(info.min), int(info.max)


def _check_int_bounds(low, high, d, op):
    if d.kind == "f":
        return
    lo, hi = int_range(d)
    x64 = "" if D.x64_enabled() or d is not D.int32 else (
        " (int64 is stored as int32 while JAX's x64 mode is off: "
        "jax.config.update('jax_enable_x64', True), as `python -m flowlite.run` does)")
    if not lo <= low <= hi:
        raise ArgumentError(f"{op}: from={low} is out of bounds for {d}{x64}")
    if not lo <= high - 1 <= hi:
        raise ArgumentError(f"{op}: to - 1 = {high - 1} is out of bounds for {d}{x64}")


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
    low, high = int(low), int(high)
    if high <= low:
        raise ArgumentError(f"randint: expected low < high, got low={low}, high={high}")
    _integer_grad(requires_grad, d, "randint")
    _check_int_bounds(low, high, d, "randint")
    return _randint(low, high, shape, d, device, requires_grad, generator, "randint")


def _randint(low, high, shape, d, device, requires_grad, generator, op):
    rng = _host_generator(generator, op)
    if rng is not None:
        return _from_host(rng, lambda g: g.integers(low, high, size=shape, dtype=np.int64),
                          d, device, requires_grad)
    if -2 ** 31 <= low and high <= 2 ** 31 - 1:
        host = _host_draw(generator, device, shape, requires_grad)
        if host is not None:
            dev, k, n = host
            return Tensor(host_node(host_randint(k, n, shape, low, high, d), d, dev))
        # the bounds travel as data: train and validation splits of different lengths
        # (randint(len(data) - block, ...)) draw with one program
        key, n = draw_key(generator, _dev(device), op)
        bounds = (Tensor(scalar_node(low, D.int32)), Tensor(scalar_node(high, D.int32)))
        out = apply(P.rng_randint, (key, n) + bounds,
                    (shape, d, None, None, high - low <= 1 << 23), shape, d)
        if requires_grad:
            out.requires_grad_(True)
        return out
    if not D.x64_enabled() and (high - low > 2 ** 32 or np.dtype(d.np).itemsize > 4):
        raise ArgumentError(f"{op}: bounds [{low}, {high}) beyond 32 bits need JAX's x64 mode "
                            "(jax.config.update('jax_enable_x64', True), as `python -m "
                            "flowlite.run` does)")
    return _make(P.rng_randint, shape, (shape, d, low, high - 1), d, device, requires_grad,
                 generator, op)


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    n = int_size(n, "randperm")
    if n < 0:
        raise ArgumentError(f"randperm: n must be non-negative, got {n}")
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.canonical(D.int64)
    _integer_grad(requires_grad, d, "randperm")
    rng = _host_generator(generator, "randperm")
    if rng is not None:
        return _from_host(rng, lambda g: g.permutation(int(n)), d, device, requires_grad)
    host = _host_draw(generator, device, (n,), requires_grad)
    if host is not None:
        dev, k, c = host
        return Tensor(host_node(host_permutation(k, c, n, d), d, dev))
    return _make(P.rng_permutation, (int(n),), (int(n), d), d, device, requires_grad,
                 generator, "randperm")


def rand_like(x, *, generator=None, dtype=None, device=None, requires_grad=False):
    return rand(x.shape, generator=generator, dtype=dtype or x.dtype, device=device or x.device,
                requires_grad=requires_grad)


def randn_like(x, *, generator=None, dtype=None, device=None, requires_grad=False):
    return randn(x.shape, generator=generator, dtype=dtype or x.dtype,
                 device=device or x.device, requires_grad=requires_grad)


def randint_like(x, low=0, high=None, *, generator=None, dtype=None, device=None,
                 requires_grad=False):
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(x.shape), generator=generator, dtype=dtype or x.dtype,
                   device=device or x.device, requires_grad=requires_grad)


def trunc_normal(shape, lower, upper, dtype=None, device=None, generator=None):
    d = _float_dtype(dtype, "trunc_normal_")
    shape = tuple(shape)
    return _make(P.rng_trunc_normal, shape, (shape, d, float(lower), float(upper)), d, device,
                 False, generator, "trunc_normal_")


def bernoulli_mask(shape, p_keep, dtype=None, device=None):
    """Bool mask with P(True) = p_keep; p_keep may be a Python float (data, never baked)."""
    u = rand(shape, dtype=dtype, device=device)
    return u < p_keep


def bernoulli(input, p=None, *, generator=None):  # noqa: A002
    """torch.bernoulli: 1 with probability `input` (or the number `p`) per element, in
    input's dtype.  Probabilities in a tensor are not checked for [0, 1] (a host read):
    outside it they act as clamped."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if not input.dtype.is_floating_point and p is None:
        raise UnsupportedError(f"bernoulli: not implemented for probabilities of dtype "
                               f"{input.dtype} (a floating-point tensor is needed)")
    if p is not None and not isinstance(p, Tensor):
        check_probability(p, "bernoulli")
    prob = input.detach() if p is None else p
    u = rand(tuple(input.shape), generator=generator, device=input.device)
    return (u < prob).to(input.dtype)


def check_probability(p, op, open_interval=False):
    p = float(p)
    ok = 0.0 < p < 1.0 if open_interval else 0.0 <= p <= 1.0
    if not ok:
        rng = "(0, 1)" if open_interval else "[0, 1]"
        raise ArgumentError(f"{op} expects p to be in {rng}, but got p={p}")
    return p


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


def multinomial(input, num_samples, replacement=False, *, generator=None):  # noqa: A002
    """Sample category indices from each row of non-negative weights (PyTorch's
    torch.multinomial), drawn inside the graph: lazy, no sync, and a new draw every call
    without recompiling.  Rows need not sum to 1.  From `generator` when given (a device
    Generator's counter is data like the global one's; a host Generator gives a fresh key
    per draw), else from the global stream.

    Not checked (PyTorch raises, flowlite cannot without reading the data): a row with a
    negative, infinite or NaN weight, a row of zeros, or (without replacement) fewer
    non-zero weights than num_samples gives unspecified (in-range) indices."""
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
    key, n = draw_key(generator, input.device, "multinomial")
    idx = apply(P.rng_multinomial, (key, n, rows), (num, bool(replacement), out),
                (rows.shape[0], num), out)
    return idx if input.ndim == 2 else reshape(idx, (num,))


def host_rng(generator=None, where: str = "") -> np.random.Generator:
    """The numpy stream a host-side draw takes (samplers, random_split, DataLoader): the
    generator's (either kind, or a numpy Generator), else one seeded by the global stream."""
    return host_stream(generator, where, host_seed)


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
