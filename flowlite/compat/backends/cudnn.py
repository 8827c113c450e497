"""`flowlite.backends.cudnn` (torch.backends.cudnn): cuDNN's availability, and its flags.

`is_available()` is true when JAX has a CUDA backend (jax's CUDA build ships cuDNN);
`version()` reads the installed cuDNN wheel's version as PyTorch's integer (9.1.0 ->
90100), None when there is no GPU or no wheel to read.  `enabled`, `benchmark`,
`deterministic` and `allow_tf32` are plain flags: accepted and readable, no effect on XLA
(convolutions follow the float32 matmul precision, full float32 unless the program lowers it:
flowlite.matmul_precision).

Layer: compat — imports backends._platforms.
"""
from __future__ import annotations

from importlib import metadata as _metadata

from ._platforms import has_platform as _has_platform

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True
benchmark_limit = 10


def is_available() -> bool:
    return _has_platform("gpu")


def version():
    if not is_available():
        return None
    for dist in ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-cudnn-cu11"):
        try:
            parts = (_metadata.version(dist).split(".") + ["0", "0"])[:3]
            major, minor, patch = (int("".join(c for c in p if c.isdigit()) or 0)
                                   for p in parts)
            return major * 10000 + minor * 100 + patch
        except _metadata.PackageNotFoundError:
            continue
    return None


def is_acceptable(tensor) -> bool:
    return is_available() and tensor.is_cuda
