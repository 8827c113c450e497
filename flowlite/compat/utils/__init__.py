"""`flowlite.utils`: PyTorch's `torch.utils` namespace (`flowlite.utils.data`).

Layer: compat — imports utils.data.
"""
from . import data  # noqa: F401

__all__ = ["data"]
