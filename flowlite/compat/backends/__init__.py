"""`flowlite.backends`: PyTorch's `torch.backends.{cudnn,cuda,mps}` flags and questions.

The availability questions are answered from JAX's backends.  `cuda.matmul.allow_tf32` is
the float32 matmul precision (`flowlite.set_float32_matmul_precision`); the other tuning flags
(`cudnn.benchmark`, `cudnn.deterministic`, `cudnn.allow_tf32`, ...) are accepted and kept so
that scripts which set and read them run unchanged; they do not steer XLA, which picks its own
algorithms.

Layer: compat — imports backends.cuda, backends.cudnn, backends.mps.
"""
from . import cuda, cudnn, mps  # noqa: F401

__all__ = ["cuda", "cudnn", "mps"]
