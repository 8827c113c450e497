"""Where each PyTorch-named op appears: its one declaration, next to its definition.

Layer: frontend — imports nothing of flowlite.

`@torch_op` on a front-end function says whether it is `flowlite.<name>` (`top`), a `Tensor`
method (`method`) and has an in-place `Tensor.<name>_` (`inplace`); `aliases` are more names
for it.  `flowlite.frontend.ops`, the package namespace and `Tensor`'s methods are generated from
`OPS`, so a new op is declared once, in the module of its family.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Entry:
    fn: object
    top: bool        # flowlite.<name> (PyTorch's torch.<name>)
    method: bool     # Tensor.<name>
    inplace: bool    # Tensor.<name>_ (computed out of place, then rebound)


OPS: dict[str, Entry] = {}


def register(name, fn, *, top=True, method=True, inplace=False, aliases=()):
    for n in (name, *aliases):
        if n in OPS:
            raise RuntimeError(f"flowlite.frontend.ops: '{n}' is declared twice")
        OPS[n] = Entry(fn, top, method, inplace)
    return fn


def torch_op(fn=None, *, top=True, method=True, inplace=False, aliases=()):
    """Declare a front-end function (a decorator, bare or with flags)."""
    def declare(f):
        return register(f.__name__, f, top=top, method=method, inplace=inplace,
                        aliases=aliases)
    return declare(fn) if fn is not None else declare
