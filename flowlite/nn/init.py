"""`nn.init`: PyTorch's initialisers, recorded lazily.

Every initialiser rebinds the tensor in place under `no_grad` (`uniform_`, `normal_`, `fill_`
...), drawing from flowlite's device RNG: nothing runs until the next sync, and a freshly built
model's whole initialisation compiles into one program.
"""
from __future__ import annotations

import math

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


def trunc_normal_(tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None):
    """N(mean, std²) truncated to [a, b] (absolute bounds, as in PyTorch)."""
    _check(tensor, "trunc_normal_")
    if std <= 0:
        raise ValueError(f"trunc_normal_: std must be positive, got {std}")
    lo, hi = (a - mean) / std, (b - mean) / std
    with no_grad():
        z = R.trunc_normal(tuple(tensor.shape), lo, hi, dtype=tensor.dtype,
                           device=tensor.device, generator=generator)
        return rebind(tensor, z * float(std) + float(mean), "trunc_normal_")


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
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
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

    PyTorch takes the Q factor of a Gaussian matrix's QR decomposition; flowlite has no QR
    primitive, so it takes the polar factor of the Gaussian matrix instead (it has the same
    Haar distribution), computed lazily in-graph by Newton–Schulz iterations."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
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
