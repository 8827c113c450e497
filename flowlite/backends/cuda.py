"""`flowlite.backends.cuda` (torch.backends.cuda): `is_built()` and the matmul flags.

`matmul.allow_tf32` and friends are accepted and readable; XLA chooses matmul precision
itself (on GPUs JAX's default float32 precision uses TF32 where the hardware has it).
"""
from __future__ import annotations

from ._platforms import has_platform as _has_platform


class _MatmulFlags:
    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built() -> bool:
    return _has_platform("gpu")


def flash_sdp_enabled() -> bool:
    return False
