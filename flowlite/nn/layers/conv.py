"""Conv1d/2d/3d and ConvTranspose1d/2d/3d with PyTorch's arguments, layouts and init.

Weights: convolution (out_channels, in_channels/groups, *kernel); transposed convolution
(in_channels, out_channels/groups, *kernel) — PyTorch's layouts, so checkpoints carry over.
"""
from __future__ import annotations


from ...extend import ArgumentError
from .. import functional as Fn
from ..module import Module
from ._util import ntuple, reset_kaiming_uniform, weight_and_bias

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", output_padding=0, device=None,
                 dtype=None):
        super().__init__()
        nd = self._nd
        name = type(self).__name__
        if groups <= 0:
            raise ArgumentError(f"{name}: groups must be a positive integer")
        if in_channels % groups:
            raise ArgumentError(f"{name}: in_channels ({in_channels}) must be divisible by groups "
                                f"({groups})")
        if out_channels % groups:
            raise ArgumentError(f"{name}: out_channels ({out_channels}) must be divisible by "
                                f"groups ({groups})")
        if padding_mode not in _PADDING_MODES:
            raise ArgumentError(f"{name}: padding_mode must be one of {_PADDING_MODES}, but got "
                                f"padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = ntuple(kernel_size, nd)
        self.stride = ntuple(stride, nd)
        self.dilation = ntuple(dilation, nd)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ArgumentError(f"{name}: invalid padding string {padding!r}, should be one "
                                    f"of ['valid', 'same']")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ArgumentError(f"{name}: padding='same' is not supported for strided "
                                    f"convolutions")
            self.padding = padding
        else:
            self.padding = ntuple(padding, nd)
        self.output_padding = ntuple(output_padding, nd)
        self.groups = groups
        self.padding_mode = padding_mode
        self.transposed = self._transposed
        # F.pad order (last dim first) for non-zero padding modes
        if isinstance(self.padding, str):
            pads = []
            if self.padding == "same":
                for d, k in zip(self.dilation, self.kernel_size):
                    total = d * (k - 1)
                    pads.append((total // 2, total - total // 2))
            else:
                pads = [(0, 0)] * nd
        else:
            pads = [(p, p) for p in self.padding]
        self._reversed_padding_repeated_twice = tuple(v for lo, hi in reversed(pads)
                                                      for v in (lo, hi))
        if self._transposed:
            wshape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            wshape = (out_channels, in_channels // groups) + self.kernel_size
        weight_and_bias(self, wshape, out_channels, bias, dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_kaiming_uniform(self)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, " \
            f"stride={self.stride}"
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def _conv_forward(self, input, weight, bias):
        fn = (Fn.conv1d, Fn.conv2d, Fn.conv3d)[self._nd - 1]
        if self.padding_mode != "zeros":
            return fn(Fn.pad(input, self._reversed_padding_repeated_twice,
                             mode=self.padding_mode), weight, bias, self.stride, 0,
                      self.dilation, self.groups)
        return fn(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_ConvNd):
    """1-D convolution over (N, C_in, L) (or unbatched (C_in, L))."""
    _nd = 1


class Conv2d(_ConvNd):
    """2-D convolution over (N, C_in, H, W) (or unbatched (C_in, H, W))."""
    _nd = 2


class Conv3d(_ConvNd):
    _nd = 3


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        if padding_mode != "zeros":
            raise ArgumentError(f'Only "zeros" padding mode is supported for '
                                f'{type(self).__name__}')
        if isinstance(padding, str):
            raise ArgumentError(f"{type(self).__name__}: string padding is not supported")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, device, dtype)

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        nd = self._nd
        output_size = list(output_size)[-nd:]
        if len(output_size) != nd:
            raise ArgumentError(f"output_size must have {nd} or {nd + 2} elements "
                                f"(got {len(output_size)})")
        res = []
        for i in range(nd):
            n_in = input.shape[input.ndim - nd + i]
            lo = (n_in - 1) * self.stride[i] - 2 * self.padding[i] + \
                self.dilation[i] * (self.kernel_size[i] - 1) + 1
            hi = lo + self.stride[i] - 1
            if not lo <= output_size[i] <= hi:
                raise ArgumentError(f"requested an output size of {output_size}, but valid sizes "
                                    f"range from {lo} to {hi} (for an input of "
                                    f"{tuple(input.shape[2:])})")
            res.append(output_size[i] - lo)
        return tuple(res)

    def forward(self, input, output_size=None):
        fn = (Fn.conv_transpose1d, Fn.conv_transpose2d, Fn.conv_transpose3d)[self._nd - 1]
        op = self._output_padding(input, output_size)
        return fn(input, self.weight, self.bias, self.stride, self.padding, op, self.groups,
                  self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    _nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution; weight (in_channels, out_channels/groups, kH, kW)."""
    _nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    _nd = 3
