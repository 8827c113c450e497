"""float32 matmul precision: PyTorch's `torch.set_float32_matmul_precision`.

Layer: facts — imports nothing of flowlite.

PyTorch computes float32 matmuls in full float32 unless the program asks for less
("highest", `torch.backends.cuda.matmul.allow_tf32 = False`, both its defaults), while JAX's
default lets a GPU use TF32 and a TPU bfloat16 passes — 1e-3 relative errors where PyTorch's
are 1e-7.  flowlite follows PyTorch: programs for a GPU or TPU are lowered under
`jax.default_matmul_precision` of this setting ("highest" -> float32, "high" -> TF32,
"medium" -> bfloat16).  CPU programs are lowered without it: XLA:CPU computes float32 dots
in float32 whatever the setting, and its programs stay byte-identical.  Convolutions follow
the same setting (PyTorch lets cuDNN use TF32 for them by default; flowlite stays exact
unless asked — the safer of the two).

The precision is baked into compiled programs, so a change drops them (`on_change`): the
next sync compiles again under the new setting.
"""
from __future__ import annotations

_JAX_NAME = {"highest": "float32", "high": "tensorfloat32", "medium": "bfloat16"}
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
    """The `jax.default_matmul_precision` value to lower a `platform` program under, or None
    (CPU: JAX's default, which is float32 there)."""
    return None if platform == "cpu" else _JAX_NAME[_state["precision"]]
