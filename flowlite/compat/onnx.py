"""`torch.onnx` for ported scripts: importable (scripts import it at the top for an optional
export), but flowlite can't write ONNX, so every export raises at the call, naming it.

Layer: compat — imports nothing of flowlite."""
from __future__ import annotations

__all__ = ["export", "dynamo_export", "is_in_onnx_export"]


def _refuse(name):
    raise NotImplementedError(
        f"torch.onnx.{name}: flowlite can't export ONNX (a step is an XLA executable; "
        "flowlite.debug.hlo(tensors) shows it, flowlite.save writes the weights as safetensors)")


def export(*args, **kwargs):
    _refuse("export")


def dynamo_export(*args, **kwargs):
    _refuse("dynamo_export")


def is_in_onnx_export() -> bool:
    return False
