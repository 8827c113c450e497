"""The PyTorch surface flowlite does not provide, in one classified table.

Layer: frontend — imports nothing of flowlite.

Every public function of `torch`, `torch.nn.functional`, `torch.linalg`, `torch.special`,
`torch.fft` and every public method of `torch.Tensor` in PyTorch 2.13 is either provided by
flowlite or listed here, in one of two tables:

* NOT_IMPLEMENTED — in scope, not (yet) provided: each name is installed in its flowlite
  namespace as a stub that raises `NotImplementedError("flowlite: torch.fft.rfft is not
  implemented (<reason>)")` when called, so a ported program stops at the call that needs
  it, with the name, never with a bare AttributeError or a silently different result;
* OUT_OF_SCOPE — what flowlite deliberately has no equivalent of (CUDA/cuDNN/MKL-DNN kernels,
  sparse and quantized tensors, TorchScript and FX internals, ...): not installed, so
  `hasattr(torch, name)` feature tests keep answering False, and `python -m flowlite.run`
  reports the name when a program reaches it.

Each entry: (group, category, names, reason); the category is PyTorch's documentation section.
tests/test_torch_coverage.py enumerates PyTorch's names and fails on any name that is neither
provided nor listed, on a listed name flowlite now provides (a stale entry), and on a
NOT_IMPLEMENTED name whose stub does not raise NotImplementedError naming it;
`python tools/torch_coverage.py --surface` prints the classification.
"""
from __future__ import annotations

GROUPS = ("torch", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft",
          "Tensor")

# (group, category, "name name ...", reason)
NOT_IMPLEMENTED = [
]

OUT_OF_SCOPE = [
]


def _table(entries):
    out = {}
    for group, category, names, reason in entries:
        if group not in GROUPS:
            raise ValueError(f"surface: unknown group {group!r}")
        for name in names.split():
            key = (group, name)
            if key in out:
                raise ValueError(f"surface: {group}.{name} is listed twice")
            out[key] = (category, reason)
    return out


def not_implemented() -> dict:
    """{(group, name): (category, reason)} of the names installed as NotImplementedError stubs."""
    return _table(NOT_IMPLEMENTED)


def out_of_scope() -> dict:
    """{(group, name): (category, reason)} of the names flowlite deliberately lacks."""
    return _table(OUT_OF_SCOPE)


def qualified(group: str, name: str) -> str:
    return f"torch.Tensor.{name}" if group == "Tensor" else f"{group}.{name}"


def stub(group: str, name: str, reason: str):
    """A function that raises NotImplementedError naming `torch.<...>.name` and why."""
    qual = qualified(group, name)
    message = f"flowlite: {qual} is not implemented ({reason})"

    def not_implemented_stub(*args, **kwargs):
        raise NotImplementedError(message)
    not_implemented_stub.__name__ = not_implemented_stub.__qualname__ = name
    not_implemented_stub.__doc__ = message
    not_implemented_stub.__flowlite_not_implemented__ = reason
    return not_implemented_stub


def is_stub(obj) -> bool:
    """Whether obj is one of this table's NotImplementedError stubs."""
    return getattr(obj, "__flowlite_not_implemented__", None) is not None


def install(group: str, namespace: dict) -> None:
    """Add the group's NOT_IMPLEMENTED stubs to a module namespace (names it lacks only)."""
    for (g, name), (_, reason) in _table(NOT_IMPLEMENTED).items():
        if g == group and name not in namespace:
            namespace[name] = stub(g, name, reason)


def install_methods(cls) -> None:
    """Add the Tensor group's NOT_IMPLEMENTED stubs as methods of cls (names it lacks only)."""
    for (g, name), (_, reason) in _table(NOT_IMPLEMENTED).items():
        if g == "Tensor" and not hasattr(cls, name):
            setattr(cls, name, stub(g, name, reason))      # takes (self, ...) and raises
