"""InstanceNorm1d/2d/3d: per-(sample, channel) normalisation, PyTorch's flags and buffers.

affine=False and track_running_stats=False by default, as in PyTorch.  With
track_running_stats the buffers (running_mean, running_var, num_batches_tracked — PyTorch's
state_dict keys) are updated in training by `functional.instance_norm` in-graph, and used for
normalisation in eval mode.  Unbatched input (one fewer dim) is accepted as PyTorch does.
"""
from __future__ import annotations

import warnings

from ...extend import ArgumentError, ops as F
from .. import functional as Fn
from .normalization import _NormBase


class _InstanceNorm(_NormBase):
    _spatial: int = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, *,
                 bias: bool = True):
        # PyTorch keeps (and never advances) num_batches_tracked for InstanceNorm
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias)

    def forward(self, input):
        k = self._spatial
        name = type(self).__name__
        if input.ndim not in (k + 1, k + 2):
            raise ArgumentError(f"{name}: expected {k + 1}D (unbatched) or {k + 2}D (batched) "
                                f"input, got {input.ndim}D input of shape {tuple(input.shape)}")
        unbatched = input.ndim == k + 1
        c = input.shape[0 if unbatched else 1]
        if c != self.num_features:
            if self.affine:
                raise ArgumentError(f"{name}: expected input's size at dim "
                                    f"{0 if unbatched else 1} to match num_features "
                                    f"({self.num_features}), but got input of shape "
                                    f"{tuple(input.shape)}")
            warnings.warn(f"input's size at dim {0 if unbatched else 1} does not match "
                          f"num_features. You can silence this warning by not passing in "
                          f"num_features, which is not used because affine=False")
        x = F.unsqueeze(input, 0) if unbatched else input
        y = Fn.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                             self.training or not self.track_running_stats,
                             0.0 if self.momentum is None else self.momentum, self.eps)
        return F.squeeze(y, 0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """(N, C, L) or (C, L)."""
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """(N, C, H, W) or (C, H, W)."""
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """(N, C, D, H, W) or (C, D, H, W)."""
    _spatial = 3
