"""`nn.init`: PyTorch's initialisers, with PyTorch's numbers.

Every initialiser rebinds the tensor in place under `no_grad` (`uniform_`, `normal_`, `fill_`
...) and follows PyTorch's own code step for step — the same arithmetic for its bounds, the same
draws in the same order — so on a CPU tensor (drawn on the host from the global or a CPU
generator, flowlite.frontend.cpu_stream) it gives PyTorch's values bit for bit: `uniform_`,
`normal_`, `xavier_*`, `kaiming_*`, `trunc_normal_` (its rejection loop; a narrow interval's
float32 log may, rarely, round differently), `sparse_` (whose zeros' rows PyTorch 2.13 draws from
the global generator even when given one); `orthogonal_` draws PyTorch's normals and takes
their QR factor with numpy's LAPACK (equal up to rounding). Elsewhere (another device, a mesh,
a device generator) the draws are flowlite's device stream, recorded lazily.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..extend import Tensor, from_numpy, no_grad, ops as F, random as R, rebind


def calculate_gain(nonlinearity: str, param=None) -> float:
    """Recommended gain for a nonlinearity (PyTorch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d")
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         f"dimensions (shape {tuple(tensor.shape)})")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _check(tensor, name):
    if not isinstance(tensor, Tensor):
        raise TypeError(f"nn.init.{name}: expected a flowlite Tensor, got {type(tensor).__name__}")
    if not tensor.dtype.is_floating_point:
        raise TypeError(f"nn.init.{name}: expected a floating-point tensor, got {tensor.dtype}")


def uniform_(tensor, a: float = 0.0, b: float = 1.0, generator=None):
    _check(tensor, "uniform_")
    with no_grad():
        return tensor.uniform_(float(a), float(b), generator=generator)


def normal_(tensor, mean: float = 0.0, std: float = 1.0, generator=None):
    _check(tensor, "normal_")
    with no_grad():
        return tensor.normal_(float(mean), float(std), generator=generator)


def _norm_cdf(x: float) -> float:
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def trunc_normal_(tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None):
    """N(mean, std²) truncated to [a, b] (absolute bounds, as in PyTorch)."""
    _check(tensor, "trunc_normal_")
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    mt = R.cpu_stream(generator, tensor.device, "trunc_normal_")
    if mt is not None:
        with no_grad():
            v = _trunc_normal_host(mt, tensor, mean, std, a, b)
            return rebind(tensor, R.host_tensor(v, tensor.dtype, tensor.device),
                          "trunc_normal_")
    if std <= 0:
        raise ValueError(f"trunc_normal_: std must be positive, got {std}")
    lo, hi = (a - mean) / std, (b - mean) / std
    with no_grad():
        z = R.trunc_normal(tuple(tensor.shape), lo, hi, dtype=tensor.dtype,
                           device=tensor.device, generator=generator)
        return rebind(tensor, z * float(std) + float(mean), "trunc_normal_")


def _trunc_normal_host(mt, tensor, mean, std, a, b):
    """PyTorch 2.13's _no_grad_trunc_normal_ in numpy, draw for draw: for an interval
    holding more than 30% of the mass, normals redrawn (whole tensors) where outside it; else
    uniforms on [a, b] accepted with the normal's density."""
    shape = tuple(tensor.shape)
    n, dt = R._numel(shape), tensor.dtype.np
    contiguous = tensor.is_contiguous()
    p = _norm_cdf((b - mean) / std) - _norm_cdf((a - mean) / std)
    if p > 0.3:
        lo, hi = float(np.asarray(a, dt)), float(np.asarray(b, dt))
        res = mt.normal(n, dt, mean, std, contiguous)
        while True:
            mask = (res < lo) | (res > hi)
            if not mask.any():
                break
            res = np.where(mask, mt.normal(n, dt, mean, std, contiguous), res)
        return res.reshape(shape)
    mode = max(a, min(mean, b))
    log_peak = -0.5 * ((mode - mean) / std) ** 2
    c = dt.type

    def log_pdf(x):
        y = (x - c(mean)) / c(std)
        return (y * y) * c(-0.5) - c(log_peak)

    res = mt.uniform(n, dt, a, b)
    pending = np.log(mt.uniform(n, dt)) > log_pdf(res)
    while pending.any():
        cand = mt.uniform(n, dt, a, b)
        res = np.where(pending, cand, res)
        pending = np.where(pending, np.log(mt.uniform(n, dt)) > log_pdf(cand), pending)
    return res.reshape(shape)


def constant_(tensor, val: float):
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    with no_grad():
        return tensor.zero_()


def eye_(tensor):
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with no_grad():
        return rebind(tensor, F.eye(tensor.shape[0], tensor.shape[1], dtype=tensor.dtype,
                                    device=tensor.device), "eye_")


def dirac_(tensor, groups: int = 1):
    nd = tensor.dim()
    if nd not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    import numpy as np
    shape = tuple(tensor.shape)
    if shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    out_per = shape[0] // groups
    m = min(out_per, shape[1])
    w = np.zeros(shape, dtype=tensor.dtype.np)
    centre = tuple(s // 2 for s in shape[2:])
    for g in range(groups):
        for d in range(m):
            w[(g * out_per + d, d) + centre] = 1
    with no_grad():
        return rebind(tensor, from_numpy(w, device=tensor.device), "dirac_")


def xavier_uniform_(tensor, gain: float = 1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain: float = 1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None):
    if 0 in tuple(tensor.shape):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    std = gain / math.sqrt(fan)
    bound = math.sqrt(3.0) * std      # (PyTorch's arithmetic: the bound rounds as its does)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None):
    if 0 in tuple(tensor.shape):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)


# Quintic Newton–Schulz coefficients: every singular value in (0, 1] grows by ~3.4x per step
# until all lie in about [0.7, 1.2]; cubic steps then converge them to exactly 1.
_NS5 = (3.4445, -4.7750, 2.0315)


def orthogonal_(tensor, gain: float = 1.0, generator=None):
    """A (semi-)orthogonal matrix uniformly distributed on its Stiefel manifold, times `gain`.

    PyTorch takes the Q factor (signs fixed by R's diagonal) of a Gaussian matrix's QR
    decomposition. Drawn on the host, so does flowlite: PyTorch's normals, numpy's QR (equal
    to PyTorch's up to rounding). In a program flowlite has no QR primitive, so it takes the
    polar factor of the Gaussian matrix instead (it has the same Haar distribution), computed
    lazily in-graph by Newton–Schulz iterations."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    mt = R.cpu_stream(generator, tensor.device, "orthogonal_")
    if mt is not None:
        dt = tensor.dtype.np
        flat = mt.normal(rows * cols, dt).reshape(rows, cols)
        if rows < cols:
            flat = flat.T
        q, r = np.linalg.qr(flat)
        q = (q * np.sign(np.diag(r))).astype(dt)
        if rows < cols:
            q = q.T
        q = q.reshape(tuple(tensor.shape)) * dt.type(gain)
        with no_grad():
            return rebind(tensor, R.host_tensor(q, tensor.dtype, tensor.device), "orthogonal_")
    with no_grad():
        x = R.randn((rows, cols), dtype=tensor.dtype, device=tensor.device,
                    generator=generator)
        if rows > cols:
            x = F.transpose(x, 0, 1)
        # X X^T is the small (min(rows, cols))^2 Gram matrix
        x = x / F.norm(x)
        a, b, c = _NS5
        for _ in range(18):
            gram = F.matmul(x, F.transpose(x, 0, 1))
            x = x * a + F.matmul(gram * b + F.matmul(gram, gram) * c, x)
        for _ in range(6):
            gram = F.matmul(x, F.transpose(x, 0, 1))
            x = x * 1.5 - F.matmul(gram, x) * 0.5
        if rows > cols:
            x = F.transpose(x, 0, 1)
        q = F.reshape(x * float(gain), tuple(tensor.shape))
        return rebind(tensor, q, "orthogonal_")


def sparse_(tensor, sparsity, std=0.01, generator=None):
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    num_zeros = int(math.ceil(sparsity * rows))
    mt = R.cpu_stream(generator, tensor.device, "sparse_")
    if mt is not None:
        # PyTorch: normal_(0, std) from the generator, then each column's zero rows from
        # torch.randperm(rows) of the global generator
        vals = mt.normal(rows * cols, tensor.dtype.np, 0.0, float(std),
                         tensor.is_contiguous()).reshape(rows, cols)
        glob = R.cpu_stream(None, tensor.device, "sparse_")
        for col in range(cols):
            vals[glob.randperm(rows)[:num_zeros], col] = 0
        with no_grad():
            return rebind(tensor, R.host_tensor(vals, tensor.dtype, tensor.device), "sparse_")
    with no_grad():
        vals = R.randn((rows, cols), dtype=tensor.dtype, device=tensor.device,
                       generator=generator) * float(std)
        # rank of a uniform key within each column: the num_zeros smallest become zero
        keys = R.rand((rows, cols), device=tensor.device, generator=generator)
        ranks = F.sum(F.lt(F.unsqueeze(keys, 0), F.unsqueeze(keys, 1)).to(vals.dtype), dim=1)
        return rebind(tensor, F.where(ranks < num_zeros, 0.0, vals), "sparse_")


# PyTorch's deprecated non-underscore aliases
uniform = uniform_
normal = normal_
constant = constant_
xavier_uniform = xavier_uniform_
xavier_normal = xavier_normal_
kaiming_uniform = kaiming_uniform_
kaiming_normal = kaiming_normal_
orthogonal = orthogonal_
