"""Activation modules (thin wrappers over nn.functional, PyTorch's arguments and reprs)."""
from __future__ import annotations

from ...extend import ArgumentError
from .. import functional as Fn
from .. import init as _init
from ..module import Module
from ._util import new_param


class _Inplace(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    def forward(self, input):
        return Fn.relu(input, self.inplace)


class ReLU6(_Inplace):
    def forward(self, input):
        return Fn.relu6(input, self.inplace)


class SiLU(_Inplace):
    def forward(self, input):
        return Fn.silu(input, self.inplace)


class Mish(_Inplace):
    def forward(self, input):
        return Fn.mish(input, self.inplace)


class SELU(_Inplace):
    def forward(self, input):
        return Fn.selu(input, self.inplace)


class Hardsigmoid(_Inplace):
    def forward(self, input):
        return Fn.hardsigmoid(input, self.inplace)


class Hardswish(_Inplace):
    def forward(self, input):
        return Fn.hardswish(input, self.inplace)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return Fn.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace
                                                          else "")


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ArgumentError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return Fn.gelu(input, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return Fn.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, input):
        return Fn.celu(input, self.alpha, self.inplace)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return Fn.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if min_val > max_val:
            raise ArgumentError("Hardtanh: min_val cannot be greater than max_val")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input):
        return Fn.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + \
            (", inplace=True" if self.inplace else "")


class Sigmoid(Module):
    def forward(self, input):
        return Fn.sigmoid(input)


class Tanh(Module):
    def forward(self, input):
        return Fn.tanh(input)


class LogSigmoid(Module):
    def forward(self, input):
        return Fn.logsigmoid(input)


class Softsign(Module):
    def forward(self, input):
        return Fn.softsign(input)


class Tanhshrink(Module):
    def forward(self, input):
        return Fn.tanhshrink(input)


class GLU(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return Fn.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class _SoftmaxBase(Module):
    _fn = None

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return type(self)._fn(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_SoftmaxBase):
    _fn = staticmethod(Fn.softmax)


class LogSoftmax(_SoftmaxBase):
    _fn = staticmethod(Fn.log_softmax)


class Softmin(_SoftmaxBase):
    _fn = staticmethod(Fn.softmin)


class PReLU(Module):
    """max(0, x) + a · min(0, x) with a learnt slope `a` (one, or one per channel at dim 1),
    initialised to `init`."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = new_param((num_parameters,), dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _init.constant_(self.weight, self.init)

    def forward(self, input):
        return Fn.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"
