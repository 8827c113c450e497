"""BatchNorm1d/2d/3d, LayerNorm, GroupNorm, RMSNorm.

BatchNorm in training mode updates its running statistics by rebinding the buffers to pending
nodes (`functional.batch_norm`), and counts `num_batches_tracked` the same way: no host sync,
and the update is part of the training step's one executable.
"""
from __future__ import annotations

from ...extend import ArgumentError
from ...extend import dtypes as D, no_grad, ops as F
from .. import functional as Fn
from .. import init
from ..module import Module
from ._util import new_param


class _NormBase(Module):
    """What BatchNorm and InstanceNorm share (as PyTorch's _NormBase): the affine parameters,
    the running-statistics buffers (PyTorch's state_dict keys), their reset and the repr."""

    def __init__(self, num_features: int, eps: float, momentum, affine: bool,
                 track_running_stats: bool, device, dtype, bias: bool):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        _affine_params(self, (num_features,), affine, bias, dtype, device)
        if track_running_stats:
            d = D.canonical(D.from_any(dtype)) if dtype is not None else D.default_float()
            self.register_buffer("running_mean", F.zeros(num_features, dtype=d, device=device))
            self.register_buffer("running_var", F.ones(num_features, dtype=d, device=device))
            self.register_buffer("num_batches_tracked",
                                 F.zeros((), dtype=D.canonical(D.int64), device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, " \
               f"affine={self.affine}, bias={self.bias is not None}, " \
               f"track_running_stats={self.track_running_stats}"


class _BatchNorm(_NormBase):
    _expected_dims: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias)

    def _check_input_dim(self, input):
        if input.ndim not in self._expected_dims:
            want = " or ".join(f"{d}D" for d in self._expected_dims)
            raise ArgumentError(f"{type(self).__name__}: expected {want} input (got {input.ndim}D "
                                f"input of shape {tuple(input.shape)})")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:   # cumulative moving average, computed on device
                factor = 1.0 / F.to_dtype(self.num_batches_tracked,
                                          self.running_mean.dtype)
        use_batch_stats = self.training or (self.running_mean is None and
                                            self.running_var is None)
        update = not self.training or self.track_running_stats
        return Fn.batch_norm(input, self.running_mean if update else None,
                             self.running_var if update else None, self.weight, self.bias,
                             use_batch_stats, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over (N, C) or (N, C, L)."""
    _expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over (N, C, H, W)."""
    _expected_dims = (4,)


class BatchNorm3d(_BatchNorm):
    _expected_dims = (5,)


_shape_tuple = Fn._norm_shape


def _affine_params(module, shape, affine, bias, dtype, device):
    """weight (and bias unless bias=False) of `shape`, or None entries without affine."""
    module.register_parameter("weight", new_param(shape, dtype, device) if affine else None)
    module.register_parameter("bias", new_param(shape, dtype, device) if affine and bias
                              else None)


def _reset_affine(module):
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class LayerNorm(Module):
    """Normalise over the trailing `normalized_shape` dims; weight ones, bias zeros."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _shape_tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine_params(self, self.normalized_shape, elementwise_affine, bias, dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        return Fn.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, " \
               f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"


class GroupNorm(Module):
    """Normalise over groups of channels of (N, C, *); per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        if num_channels % num_groups:
            raise ArgumentError("num_channels must be divisible by num_groups")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _affine_params(self, (num_channels,), affine, bias, dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        return Fn.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, " \
               f"bias={self.bias is not None}"


class RMSNorm(Module):
    """x / sqrt(mean(x²) + eps) * weight over the trailing dims; eps=None: finfo(dtype).eps."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = _shape_tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = new_param(self.normalized_shape, dtype, device)
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        return Fn.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, " \
               f"elementwise_affine={self.elementwise_affine}"
