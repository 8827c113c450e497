"""Where each PyTorch-named op appears: its one declaration, next to its definition.

Layer: frontend — imports nothing of flowlite.

`@torch_op` on a front-end function says whether it is `flowlite.<name>` (`top`), a `Tensor`
method (`method`) and has an in-place `Tensor.<name>_` (`inplace`); `aliases` are more names
for it.  `flowlite.frontend.ops`, the package namespace and `Tensor`'s methods are generated from
`OPS`, so a new op is declared once, in the module of its family.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect


@dataclasses.dataclass(frozen=True)
class Entry:
    fn: object
    top: bool        # flowlite.<name> (PyTorch's torch.<name>)
    method: bool     # Tensor.<name>
    inplace: bool    # Tensor.<name>_ (computed out of place, then rebound)


OPS: dict[str, Entry] = {}


def _numpy_names(fn):
    """PyTorch's argument parser also takes NumPy's names for an op's `dim` and `keepdim`
    (`x.sum(axis=1, keepdims=True)`): the same here for every op with those parameters."""
    params = inspect.signature(fn).parameters
    renames = {a: b for a, b in (("axis", "dim"), ("keepdims", "keepdim"))
               if b in params and a not in params}
    if not renames:
        return fn

    @functools.wraps(fn)
    def numpy_names(*args, **kwargs):
        if kwargs:
            for a, b in renames.items():
                if a in kwargs:
                    if b in kwargs:
                        raise TypeError(f"{fn.__name__}() got multiple values for argument "
                                        f"'{b}' (also given as '{a}')")
                    kwargs[b] = kwargs.pop(a)
        return fn(*args, **kwargs)
    return numpy_names


def register(name, fn, *, top=True, method=True, inplace=False, aliases=()):
    fn = _numpy_names(fn)
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
