"""`flowlite.backends.cuda` (torch.backends.cuda): `is_built()` and the matmul flags.

`matmul.allow_tf32` is PyTorch's other spelling of the float32 matmul precision
(`flowlite.set_float32_matmul_precision`): True is "high" (TF32 on GPUs), False "highest"
(full float32, the default); the reduced-precision-reduction flags are accepted and readable.

Layer: compat — imports backends._platforms, engine.matmul_precision.
"""
from __future__ import annotations

from ...engine import matmul_precision as _precision
from ._platforms import has_platform as _has_platform


class _MatmulFlags:
    @property
    def allow_tf32(self) -> bool:
        return _precision.get() != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value) -> None:
        _precision.set("high" if value else "highest")

    def __init__(self):
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built() -> bool:
    return _has_platform("gpu")


def flash_sdp_enabled() -> bool:
    return False
