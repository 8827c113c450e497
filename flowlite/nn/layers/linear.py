"""Identity, Linear and Bilinear."""
from __future__ import annotations

import math

from .. import functional as Fn
from .. import init
from ..module import Module
from ._util import reset_kaiming_uniform, weight_and_bias


class Identity(Module):
    """Returns its input unchanged (arguments are accepted and ignored, like PyTorch's)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x Wᵀ + b, weight (out_features, in_features); PyTorch's default initialisation:
    W ~ kaiming_uniform(a=√5) = U(-1/√in, 1/√in), b ~ U(-1/√in, 1/√in)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        weight_and_bias(self, (out_features, in_features), out_features, bias, dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_kaiming_uniform(self)

    def forward(self, input):
        return Fn.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """MultiheadAttention's out_proj class (named as in PyTorch, so reprs match)."""


class Bilinear(Module):
    """y = x1ᵀ A x2 + b with weight (out_features, in1_features, in2_features)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        weight_and_bias(self, (out_features, in1_features, in2_features), out_features, bias,
                        dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return Fn.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in1_features={self.in1_features}, in2_features={self.in2_features}, " \
               f"out_features={self.out_features}, bias={self.bias is not None}"
