"""float32 matmul precision: PyTorch's `torch.set_float32_matmul_precision`.

Layer: engine — imports nothing of flowlite.

PyTorch computes float32 matmuls in full float32 unless the program asks for less
("highest", `torch.backends.cuda.matmul.allow_tf32 = False`, both its defaults), while JAX's
default lets a GPU use TF32 and a TPU bfloat16 passes — 1e-3 relative errors where PyTorch's
are 1e-7.  flowlite follows PyTorch: in programs for a GPU or TPU every dot and
convolution with a float32 operand carries this setting's precision ("highest" -> HIGHEST,
"high" -> TF32, "medium" -> JAX's DEFAULT); those of bfloat16/float16 operands keep JAX's
default (a precision attribute there can only make them slower).  CPU programs carry none:
XLA:CPU computes float32 dots in float32 whatever the attribute, and its programs stay
byte-identical.  Convolutions follow the same setting (PyTorch lets cuDNN use TF32 for them by default; flowlite stays exact
unless asked — the safer of the two).

The precision is baked into compiled programs, so a change drops them (`on_change`): the
next sync compiles again under the new setting.
"""
from __future__ import annotations

import contextlib
import threading

_JAX_NAME = {"highest": "highest", "high": "tensorfloat32", "medium": "bfloat16"}
_state = {"precision": "highest", "generation": 0}
_listeners: list = []


def get() -> str:
    return _state["precision"]


def set(precision: str) -> None:  # noqa: A001  (PyTorch's name, module-scoped)
    if precision not in _JAX_NAME:
        raise RuntimeError(f"set_float32_matmul_precision: expected 'highest', 'high' or "
                           f"'medium', got {precision!r}")
    if precision == _state["precision"]:
        return
    _state["precision"] = precision
    _state["generation"] += 1
    for fn in _listeners:
        fn()


def generation() -> int:
    """Bumped at every change: a cached program made under another number is stale."""
    return _state["generation"]


def on_change(fn) -> None:
    _listeners.append(fn)


def jax_setting(platform: str):
    """The precision a `platform` program's float32 dots get, or None (CPU: JAX's default,
    which is float32 there)."""
    return None if platform == "cpu" else _JAX_NAME[_state["precision"]]


_lowering = threading.local()


@contextlib.contextmanager
def lowering(setting):
    """While a program is traced for lowering: the precision its float32 dots get."""
    prev = getattr(_lowering, "setting", None)
    _lowering.setting = setting
    try:
        yield
    finally:
        _lowering.setting = prev


def for_operands(*xs):
    """The `precision=` argument of a dot or convolution of `xs` being lowered: the setting
    when an operand is float32, else None (JAX's default)."""
    setting = getattr(_lowering, "setting", None)
    if setting is None:
        return None
    return setting if any(x.dtype == "float32" for x in xs) else None
