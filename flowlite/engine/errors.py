"""The exception classes flowlite raises at a user's call, each also the class PyTorch raises.

Layer: engine — imports nothing of flowlite. PyTorch reports a bad shape, dim, mode or dtype
from its C++ checks as `RuntimeError` (an unsupported dtype for an operator as
`NotImplementedError`), where Python code would say `ValueError` / `TypeError`. flowlite's
errors are both: `except RuntimeError` (what real PyTorch code catches) and `except ValueError`
catch the same error, whose message names the op, shapes and dtypes.
"""
from __future__ import annotations


class ArgumentError(ValueError, RuntimeError):
    """A bad shape, size, dim or mode for an op (PyTorch: RuntimeError)."""


class DTypeError(TypeError, RuntimeError):
    """An argument of the wrong dtype or kind for an op (PyTorch: RuntimeError or TypeError)."""


class IndexDTypeError(DTypeError, IndexError):
    """An index tensor of the wrong dtype where PyTorch raises IndexError (index_fill)."""


class IndexShapeError(ArgumentError, IndexError):
    """An index tensor of the wrong rank (PyTorch: IndexError)."""


class UnsupportedModeError(ArgumentError, NotImplementedError):
    """A mode PyTorch does not implement (`pad(mode="nope")`; PyTorch: NotImplementedError)."""


class IndexRangeError(IndexError, RuntimeError):
    """A position outside a dimension, where PyTorch raises RuntimeError (narrow, select)."""


class UnsupportedError(NotImplementedError, TypeError):
    """An op PyTorch does not implement for these operands' dtypes or this mode
    (PyTorch: NotImplementedError)."""


class LayerArgumentError(ValueError, AssertionError):
    """A layer constructor's inconsistent arguments, where PyTorch's layer asserts
    (`MultiheadAttention(embed_dim=6, num_heads=4)`)."""
