"""Random draws: PyTorch's CPU stream on the host, flowlite's counter-based stream in programs.

Layer: frontend — imports cpu_stream, engine.device, engine.dtypes, engine.errors,
engine.host_data, engine.ir, engine.runtime, generator, ops, ops._core, primitives, tensor.

Where a draw happens decides its numbers:

* **on the host, PyTorch's numbers**: a draw for a plain CPU device from the global generator
  or a CPU `Generator` (factories, in-place draws, `multinomial`, `bernoulli`, `nn.init`, the
  layers' default initialisation) is computed here by cpu_stream.MT19937Stream — PyTorch's
  MT19937 and transforms, in PyTorch's order — and becomes host data: materialised values that
  enter later programs as one argument (no program, no compile; a draw in a training step is
  new data for the same executable). `manual_seed(s)` seeds it as `torch.manual_seed(s)` does,
  and `get_rng_state()` is PyTorch's 5056-byte state.
* **in a program, flowlite's numbers**: dropout masks (`F.dropout`, `nn.Dropout`, attention
  and RNN dropout), draws traced by `flowlite.compile`, draws on a mesh or an accelerator and
  from a device `Generator` use the counter-based device stream: the seed key is device data
  (one per device) and every draw folds a host draw counter (`rt.rng_draws`, entering the graph
  as data) into it inside the graph, so masks differ every step, are reproducible per seed,
  nothing recompiles, and the seed is never baked into a program. `manual_seed` reseeds it too;
  its seed and counter ride in the two unused doubles of the CPU state.

`fork_rng` puts both global streams back after a block; `default_generator` is the global
stream seen as a Generator.
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
from .cpu_stream import STATE_BYTES, MT19937Stream
from .generator import (DEFAULT_SEED, Generator, check_seed, counter, host_stream, place_key,
                        seed_key)
from .ops import _dev, reshape
from .ops import broadcast_shapes as _broadcast_shapes, broadcast_to as _broadcast_to
from .ops import full_like as _full_like, zeros_like as _zeros_like
from .ops._core import int_size, pointwise
from ..engine.host_data import host_node, on_host
from ..engine.runtime import rt
from .tensor import Tensor, apply, from_numpy

_MASK64 = (1 << 64) - 1

_keys: dict = {}       # Device -> Tensor holding the global stream's key (device data)
_raws: dict = {}       # Device -> the same key on the host (states are read without a sync)
_cpu = MT19937Stream(0)     # the default CPU generator (flowlite starts seeded with 0)


class _DefaultGenerator:
    """`torch.default_generator` (what `manual_seed` returns): the global stream seen as a
    Generator; passed as `generator=` it draws what no generator would."""
    is_global = True

    @property
    def device(self):       # (a property: importing flowlite must not start JAX's backend)
        return _device("cpu")

    @property
    def mt(self):
        return _cpu

    def manual_seed(self, s):
        manual_seed(s)
        return self

    def seed(self) -> int:
        return seed()

    def initial_seed(self) -> int:
        return initial_seed()

    def get_state(self) -> Tensor:
        return get_rng_state()

    def set_state(self, state) -> "_DefaultGenerator":
        set_rng_state(state)
        return self

    def __repr__(self):
        return f"<flowlite default_generator seed={_cpu.seed}>"


default_generator = _DefaultGenerator()


def manual_seed(seed) -> _DefaultGenerator:
    """Seed the global streams (like torch.manual_seed; returns the default generator): the
    CPU stream (PyTorch's, bit for bit) and every device's counter-based stream. Generators
    made with `Generator()` keep their own streams."""
    s = check_seed(int(seed))       # (torch.manual_seed("x"): int()'s ValueError)
    _cpu.manual_seed(s)
    _seed_device_streams(s)
    return default_generator


def manual_seed_devices(seed) -> None:
    """Seed the device streams only (torch.cuda.manual_seed: the CPU stream is untouched)."""
    _seed_device_streams(check_seed(seed))


def _seed_device_streams(s, draws=0):
    rt.rng_seed = s
    _keys.clear()
    _raws.clear()
    rt.rng_draws = draws


def seed() -> int:
    """Seed the global streams from OS entropy (torch.seed); returns the seed."""
    s = int.from_bytes(os.urandom(8), "little") >> 1
    manual_seed(s)
    return s


def initial_seed() -> int:
    return _cpu.seed


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
    """(seed key, draw counter) for the next random op on `device` drawn in a program.

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
    """(key, counter) for one draw of `op` on `device` in a program: from `generator` (a
    Generator of either kind) or, without one, from the global device stream."""
    if generator is None or getattr(generator, "is_global", False):
        return next_key(device)
    if isinstance(generator, Generator):
        return generator.draw_key(device, op)
    raise TypeError(f"{op}: generator must be a flowlite.Generator (torch.Generator), got "
                    f"{type(generator).__name__}")


def cpu_stream(generator, device, op):
    """The PyTorch stream a draw for `device` takes on the host — the global CPU stream or a
    CPU Generator's — or None when the draw happens in a program (device stream): another
    device, a mesh, a device Generator, a function `flowlite.compile` is tracing."""
    if generator is not None and not getattr(generator, "is_global", False):
        if not isinstance(generator, Generator):
            raise TypeError(f"{op}: generator must be a flowlite.Generator (torch.Generator), "
                            f"got {type(generator).__name__}")
        if generator.device.type != device.type:
            raise RuntimeError(f"{op}: Expected a '{device.type}' device type for generator "
                               f"but found '{generator.device.type}'")
    if rt.observers or rt.local.tracing_body or _device_only or not on_host(device):
        return None
    if generator is None or getattr(generator, "is_global", False):
        return _cpu
    return generator.mt


_device_only = 0        # > 0 inside device_draws()


@contextlib.contextmanager
def device_draws():
    """Draws in this block that would be PyTorch's CPU numbers on the host use flowlite's
    counter-based device stream instead: lazy, recorded into the next program (a large
    initialisation compiled with the model's first step rather than computed in numpy), not
    PyTorch's numbers. The global CPU stream is not advanced by them; a CPU Generator gives
    each such draw a key (two of its words)."""
    global _device_only
    _device_only += 1
    try:
        yield
    finally:
        _device_only -= 1


def torch_stream(generator, where=""):
    """The PyTorch stream a host-side draw of the data pipeline takes (samplers, splits,
    DataLoader seeds): the global CPU stream, a CPU Generator's, or None (a numpy Generator or
    a device Generator: no PyTorch counterpart)."""
    if generator is None or getattr(generator, "is_global", False):
        return _cpu
    if isinstance(generator, Generator):
        return generator.mt
    if isinstance(generator, np.random.Generator):
        return None
    raise TypeError(f"{where}: generator must be a flowlite.Generator (torch.Generator) or a "
                    f"numpy.random.Generator, got {type(generator).__name__}")


def host_tensor(arr, d, device, requires_grad=False) -> Tensor:
    """Values drawn on the host as a tensor of dtype `d` on CPU `device` (host data)."""
    arr = np.array(arr, dtype=d.np, order="C", copy=None)
    out = Tensor(host_node(arr, d, device))
    if requires_grad:
        out.requires_grad_(True)
    return out


def draw_dtype(dtype, d):
    """The numpy dtype a draw follows: the one asked for (float64 draws PyTorch's float64
    numbers even where flowlite stores them as float32, JAX's x64 off)."""
    return D.from_any(dtype).np if dtype is not None else d.np


_STATE_BYTES = 24       # a device stream's state: seed, key, draw counter, 8 bytes each


def get_rng_state(device=None) -> Tensor:
    """The global stream's state as a uint8 tensor (PyTorch's ByteTensor): for the CPU,
    PyTorch's 5056 bytes (`torch.set_rng_state` takes them; the device stream's seed and
    counter ride in two doubles PyTorch ignores); for another device, its counter-based
    stream's 24 bytes. Save it to resume a run; `set_rng_state` puts it back."""
    device = _device("cpu") if device is None else _dev(device)
    n = rt.rng_draws
    if device.type == "cpu":
        aux = (rt.rng_seed & _MASK64).to_bytes(8, "little") + (n & _MASK64).to_bytes(8, "little")
        return from_numpy(np.frombuffer(_cpu.get_state(aux), np.uint8).copy())
    raw = ((rt.rng_seed & _MASK64).to_bytes(8, "little")
           + np.asarray(_raw(device), "<u4").tobytes() + (n & _MASK64).to_bytes(8, "little"))
    return from_numpy(np.frombuffer(raw, np.uint8).copy())


def set_rng_state(state: Tensor, device=None) -> None:
    """Restore a state from `get_rng_state` or `torch.get_rng_state()` (a state PyTorch made
    starts the device stream at its seed); the 24-byte and uint32[4] states of older flowlite
    restore the device stream only."""
    device = _device("cpu") if device is None else _dev(device)
    if not isinstance(state, Tensor):
        raise TypeError(f"set_rng_state: expected a uint8 tensor from get_rng_state(), got "
                        f"{type(state).__name__}")
    shape = tuple(state.shape)
    if shape == (STATE_BYTES,) and state.dtype is D.uint8 and device.type == "cpu":
        aux = _cpu.set_state(bytes(np.asarray(state.numpy(), np.uint8)))
        s, n = int.from_bytes(aux[:8], "little"), int.from_bytes(aux[8:], "little")
        if aux == bytes(16):                  # PyTorch's state: the device stream from its seed
            s = _cpu.seed
        _seed_device_streams(s, n)
        return
    if shape == (4,) and state.dtype is D.uint32:       # flowlite <= 0.1's
        v = np.asarray(state.numpy(), np.uint32)
        key, n, s = v[:2].copy(), int(v[2]) | (int(v[3]) << 32), rt.rng_seed
    elif shape == (_STATE_BYTES,) and state.dtype is D.uint8:
        raw = bytes(np.asarray(state.numpy(), np.uint8))
        s = int.from_bytes(raw[:8], "little")
        key = np.frombuffer(raw[8:16], "<u4").astype(np.uint32)
        n = int.from_bytes(raw[16:], "little")
    else:
        want = f"({STATE_BYTES},)" if device.type == "cpu" else f"({_STATE_BYTES},)"
        raise RuntimeError(f"set_rng_state: expected the uint8 tensor of shape {want} that "
                           f"get_rng_state() returns, got {state.dtype} {shape}")
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
    """torch.random.fork_rng: the global streams (the CPU stream and every device's) as
    they were on entry are put back on exit (what the block draws leaves no trace outside
    it).  Generators are untouched, as in PyTorch."""
    if not enabled:
        yield
        return
    saved = (rt.rng_seed, rt.rng_draws, dict(_keys), dict(_raws), _cpu.clone())
    try:
        yield
    finally:
        rt.rng_seed, rt.rng_draws = saved[0], saved[1]
        _keys.clear()
        _keys.update(saved[2])
        _raws.clear()
        _raws.update(saved[3])
        _cpu.set_state(saved[4].get_state())


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


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    shape = _shape(size)
    d = _float_dtype(dtype)
    dev = _dev(device)
    mt = cpu_stream(generator, dev, "rand")
    if mt is not None:
        v = mt.uniform(_numel(shape), draw_dtype(dtype, d))
        return host_tensor(v.reshape(shape), d, dev, requires_grad)
    return _make(P.rng_uniform, shape, (shape, d), d, dev, requires_grad, generator, "rand")


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    shape = _shape(size, "randn")
    d = _float_dtype(dtype, "randn")
    dev = _dev(device)
    mt = cpu_stream(generator, dev, "randn")
    if mt is not None:
        v = mt.normal(_numel(shape), draw_dtype(dtype, d))
        return host_tensor(v.reshape(shape), d, dev, requires_grad)
    return _make(P.rng_normal, shape, (shape, d), d, dev, requires_grad, generator, "randn")


def device_rand(shape, dtype=None, device=None):
    """Uniforms in [0, 1) from the global device stream, always drawn in the program: the
    masks of dropout (a training step's, which must stay in its one executable)."""
    d = _float_dtype(dtype)
    shape = tuple(shape)
    return _make(P.rng_uniform, shape, (shape, d), d, device, False, None, "dropout")


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


def _randint(low, high, shape, d, device, requires_grad, generator, op, draw=None):
    dev = _dev(device)
    mt = cpu_stream(generator, dev, op)
    if mt is not None:
        v = mt.randint(_numel(shape), low, high) if draw is None else draw(mt, _numel(shape))
        return host_tensor(v.reshape(shape), d, dev, requires_grad)
    if -2 ** 31 <= low and high <= 2 ** 31 - 1:
        # the bounds travel as data: train and validation splits of different lengths
        # (randint(len(data) - block, ...)) draw with one program
        key, n = draw_key(generator, dev, op)
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
    return _make(P.rng_randint, shape, (shape, d, low, high - 1), d, dev, requires_grad,
                 generator, op)


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    n = int_size(n, "randperm")
    if n < 0:
        raise ArgumentError(f"randperm: n must be non-negative, got {n}")
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.canonical(D.int64)
    _integer_grad(requires_grad, d, "randperm")
    dev = _dev(device)
    mt = cpu_stream(generator, dev, "randperm")
    if mt is not None:
        return host_tensor(mt.randperm(n), d, dev, requires_grad)
    return _make(P.rng_permutation, (int(n),), (int(n), d), d, dev, requires_grad,
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
    """Bool mask with P(True) = p_keep, drawn in the program (RNN dropout); p_keep may be a
    Python float (data, never baked)."""
    return device_rand(shape, dtype=dtype, device=device) < p_keep


def bernoulli(input, p=None, *, generator=None):  # noqa: A002
    """torch.bernoulli: 1 with probability `input` (or the number `p`) per element, in
    input's dtype. On the host (PyTorch's numbers) the probabilities are read (a pending
    tensor: one read); in a program, probabilities outside [0, 1] act as clamped."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if not input.dtype.is_floating_point and p is None:
        raise UnsupportedError(f"bernoulli: not implemented for probabilities of dtype "
                               f"{input.dtype} (a floating-point tensor is needed)")
    if p is not None and not isinstance(p, Tensor):
        check_probability(p, "bernoulli")
    dev = input.device
    mt = cpu_stream(generator, dev, "bernoulli")
    if mt is not None and not isinstance(p, Tensor):
        shape = tuple(input.shape)
        if p is None:
            prob = np.asarray(input.detach().numpy())
            if prob.dtype != np.float64:
                prob = prob.astype(np.float32)
            if np.any((prob < 0) | (prob > 1)) or np.isnan(prob).any():
                raise ArgumentError("bernoulli: Expected p_in >= 0 && p_in <= 1 to be true, "
                                    "but got false")
            v = mt.bernoulli_from(prob)
        else:
            v = mt.bernoulli(_numel(shape), p).reshape(shape)
        return host_tensor(v, input.dtype, dev)
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
# a draw computed on the host, joined to its mean and std for their (zero) gradients
_normal_drawn_p = pointwise("normal_drawn", lambda a, m, sd, out: out, _normal_vjp)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None,
           requires_grad=False):
    """torch.normal: mean and std are tensors (broadcast together) or numbers (then `size`
    gives the shape). As PyTorch computes it: numbers go into the draw (`normal_(mean, std)`),
    tensors are applied after a standard draw (`* std + mean`, two roundings)."""
    if not isinstance(std, Tensor) and std < 0:
        raise ArgumentError(f"normal expects std >= 0.0, but found std {std}")
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    if not tensors:
        if size is None:
            raise TypeError("normal(): with a float mean and std, size is required")
        shape = _shape((size,) if isinstance(size, int) else tuple(size), "normal")
        d = _float_dtype(dtype, "normal")
        dev = _dev(device)
        mt = cpu_stream(generator, dev, "normal")
        if mt is not None:
            v = mt.normal(_numel(shape), draw_dtype(dtype, d), float(mean), float(std))
            return host_tensor(v.reshape(shape), d, dev, requires_grad)
        z = randn(*shape, generator=generator, dtype=dtype, device=device)
        out = z * float(std) + float(mean)
        return out.requires_grad_(True) if requires_grad else out
    like = tensors[0]
    m = mean if isinstance(mean, Tensor) else _full_like(like, mean)
    shape = _broadcast_shapes(m.shape, std.shape if isinstance(std, Tensor) else (),
                              op="normal")
    mt = cpu_stream(generator, like.device, "normal")
    if mt is not None:
        return _normal_host(mt, mean, std, m, shape, like)
    if isinstance(std, Tensor):
        sd = std
        z = randn(*shape, generator=generator, dtype=like.dtype, device=like.device)
    else:           # normal_(0, std) then + mean
        sd = _full_like(like, 1.0)
        dev = like.device
        mt = cpu_stream(generator, dev, "normal")
        if mt is not None:
            z = host_tensor(mt.normal(_numel(shape), like.dtype.np, 0.0, float(std))
                            .reshape(shape), like.dtype, dev)
        else:
            z = randn(*shape, generator=generator, dtype=like.dtype, device=dev) * float(std)
    return apply(_normal_p, (_broadcast_to(m, shape), _broadcast_to(sd, shape), z))


def _normal_host(mt, mean, std, m, shape, like):
    """torch.normal with a tensor mean or std on the host, as ATen computes it: a standard
    draw (`normal_(0, std)` for a number std), then `* std` and `+ mean` as separate
    roundings (the tensors are read). Gradients reach mean and std as PyTorch's do: zeros."""
    dt = like.dtype
    n = _numel(shape)
    if isinstance(std, Tensor):
        z = mt.normal(n, dt.np).reshape(shape)
        z = z * np.broadcast_to(np.asarray(std.detach().numpy(), dt.np), shape)
    else:
        z = mt.normal(n, dt.np, 0.0, float(std)).reshape(shape)
    if isinstance(mean, Tensor):
        z = z + np.broadcast_to(np.asarray(mean.detach().numpy(), dt.np), shape)
    else:
        z = z + dt.np.type(mean)
    out = host_tensor(z, dt, like.device)
    grads = [t for t in (mean, std) if isinstance(t, Tensor) and t.requires_grad]
    if not grads:
        return out
    sd = std if isinstance(std, Tensor) else _full_like(like, 1.0)
    return apply(_normal_drawn_p, (_broadcast_to(m, shape), _broadcast_to(sd, shape), out))


def multinomial(input, num_samples, replacement=False, *, generator=None):  # noqa: A002
    """Sample category indices from each row of non-negative weights (PyTorch's
    torch.multinomial); rows need not sum to 1.

    On the host (a CPU tensor, the global or a CPU generator): PyTorch's numbers, from the
    weights read to the host (a pending tensor — `softmax(logits)` in a sampling loop — costs
    one read, as reading the sample does in PyTorch), with PyTorch's checks. In a program (a
    device Generator, another device, `flowlite.compile`): drawn in the graph, lazy, a new draw
    every call without recompiling; a row with a negative, infinite or NaN weight or of zeros
    is not checked there (unspecified in-range indices)."""
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
    out = D.canonical(D.int64)
    dev = input.device
    mt = cpu_stream(generator, dev, "multinomial")
    if mt is not None:
        p = np.asarray(input.detach().numpy())
        if p.dtype not in (np.float32, np.float64):
            p = p.astype(np.float32)
        idx = mt.multinomial(p.reshape(-1, k), num, bool(replacement))
        return host_tensor(idx if input.ndim == 2 else idx.reshape(num), out, dev)
    p = input.detach()
    rows = p if p.ndim == 2 else reshape(p, (1, k))
    key, n = draw_key(generator, dev, "multinomial")
    idx = apply(P.rng_multinomial, (key, n, rows), (num, bool(replacement), out),
                (rows.shape[0], num), out)
    return idx if input.ndim == 2 else reshape(idx, (num,))


def host_rng(generator=None, where: str = "") -> np.random.Generator:
    """A numpy stream for host-side draws without a PyTorch counterpart: the generator's
    (either kind, or a numpy Generator), else one seeded by the global CPU stream."""
    return host_stream(generator, where, host_seed)


def host_seed(generator=None) -> int:
    """`torch.empty((), dtype=torch.int64).random_(generator=generator).item()`: a 63-bit
    seed drawn from the global CPU stream (or a CPU generator's), as PyTorch's samplers and
    DataLoader draw theirs: reproducible per `manual_seed`, different on every call."""
    mt = torch_stream(generator, "host_seed") or _cpu
    return int(mt.random_bits(1, np.int64)[0])
