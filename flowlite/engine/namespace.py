"""The package name printed forms carry: `flowlite.float32`, `flowlite.Size([4, 100])` — or,
while a program's `import torch` resolves to flowlite (`python -m flowlite.run`,
`flowlite.run.install()`), `torch.float32`, `torch.Size([4, 100])`, so a ported script prints
what it printed on PyTorch. Each printed form is also the expression that names the value in
the program that prints it.

Layer: engine — imports nothing of flowlite.
"""
from __future__ import annotations

_prefix = ["flowlite"]


def prefix() -> str:
    return _prefix[0]


def set_prefix(name: str) -> None:
    """"torch" while the torch import hook serves a program, "flowlite" otherwise."""
    _prefix[0] = name
