"""`flowlite.backends`: PyTorch's `torch.backends.{cudnn,cuda,mps}` flags and questions.

The availability questions are answered from JAX's backends.  The tuning flags
(`cudnn.benchmark`, `cudnn.deterministic`, `allow_tf32`, ...) are accepted and kept so that
scripts which set and read them run unchanged; they do not steer XLA, which picks its own
algorithms (on GPUs JAX's default float32 matmul precision already uses TF32).
"""
from . import cuda, cudnn, mps  # noqa: F401

__all__ = ["cuda", "cudnn", "mps"]
