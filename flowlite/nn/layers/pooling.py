"""Max / average / adaptive pooling modules."""
from __future__ import annotations

from .. import functional as Fn
from ..module import Module


class _MaxPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, " \
               f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, self.dilation,
                              self.ceil_mode, self.return_indices)


class MaxPool1d(_MaxPoolNd):
    _fn = staticmethod(Fn.max_pool1d)


class MaxPool2d(_MaxPoolNd):
    _fn = staticmethod(Fn.max_pool2d)


class MaxPool3d(_MaxPoolNd):
    _fn = staticmethod(Fn.max_pool3d)


class _AvgPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding,
                              self.ceil_mode, self.count_include_pad, self.divisor_override)


class AvgPool1d(_AvgPoolNd):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):    # PyTorch's AvgPool1d has no divisor_override
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)

    def forward(self, input):
        return Fn.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)


class AvgPool2d(_AvgPoolNd):
    _fn = staticmethod(Fn.avg_pool2d)


class AvgPool3d(_AvgPoolNd):
    _fn = staticmethod(Fn.avg_pool3d)


class _AdaptivePool(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size
        if return_indices:
            raise NotImplementedError(f"{type(self).__name__}: return_indices=True is not "
                                      f"supported by flowlite")
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    def forward(self, input):
        return Fn.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptivePool):
    """Average over PyTorch's adaptive bins [floor(i·n/o), ceil((i+1)·n/o))."""

    def forward(self, input):
        return Fn.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveMaxPool1d(_AdaptivePool):
    def forward(self, input):
        return Fn.adaptive_max_pool1d(input, self.output_size)


class AdaptiveMaxPool2d(_AdaptivePool):
    def forward(self, input):
        return Fn.adaptive_max_pool2d(input, self.output_size)
