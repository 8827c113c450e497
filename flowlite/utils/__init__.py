"""`flowlite.utils`: PyTorch's `torch.utils` namespace (`flowlite.utils.data`)."""
from . import data  # noqa: F401

__all__ = ["data"]
