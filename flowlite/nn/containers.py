"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict (PyTorch's)."""
from __future__ import annotations

import collections
import operator

from ..extend import Tensor
from .module import Module, Parameter, _addindent


def _index(idx, n, what):
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for {what} of length {n}")
    return idx + n if idx < 0 else idx


class _Container(Module):
    """A container keeps its items in one of the module's registries (`_modules`,
    `_parameters`), named by `_registry`, and has no forward() of its own."""
    _registry = ""

    def _items(self):
        return self.__dict__[self._registry]

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} is a container and has no forward()")


class _IndexedContainer(_Container):
    """The list protocol over the registry, items keyed "0", "1", ...: what Sequential,
    ModuleList and ParameterList share; they differ in how an item is registered."""

    def _register(self, key, value):
        raise NotImplementedError

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._items().values())[idx])
        return self._items()[str(_index(idx, len(self), type(self).__name__))]

    def __setitem__(self, idx, value):
        self._register(str(_index(idx, len(self), type(self).__name__)), value)

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter(self._items().values())

    def append(self, value):
        self._register(str(len(self)), value)
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self


class _ModuleSequence(_IndexedContainer):
    """Sequential and ModuleList: child modules, kept numbered consecutively (as PyTorch
    renumbers them after a deletion or insertion)."""
    _registry = "_modules"

    def _register(self, key, module):
        self.add_module(key, module)

    def _renumber(self, items):
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)

    def __delitem__(self, idx):
        items = list(self._modules.values())
        if isinstance(idx, slice):
            del items[idx]
        else:
            del items[_index(idx, len(self), type(self).__name__)]
        self._renumber(items)

    def pop(self, index: int = -1):
        m = self[index]
        del self[index]
        return m


class Sequential(_ModuleSequence):
    """Modules applied in order; indexable (`seq[0]`, `seq[-1]`) and sliceable (`seq[1:]`)."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for key, m in args[0].items():
                self.add_module(key, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(collections.OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(idx, len(self), "Sequential")]

    def __setitem__(self, idx, module):
        key = list(self._modules)[_index(idx, len(self), "Sequential")]
        self.add_module(key, module)

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise TypeError(f"add operator supports only objects of Sequential class, but "
                            f"{type(other)} is given.")
        out = Sequential()
        for m in list(self) + list(other):
            out.append(m)
        return out

    def insert(self, index: int, module) -> "Sequential":
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += n
        items = list(self._modules.values())
        items.insert(index, module)
        self._renumber(items)
        return self

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_ModuleSequence):
    """A list of modules, registered (their parameters belong to the parent)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def extend(self, modules) -> "ModuleList":
        if isinstance(modules, Module) and not isinstance(modules, (ModuleList, Sequential)):
            raise TypeError("ModuleList.extend should be called with an iterable of modules")
        return super().extend(modules)

    def insert(self, index: int, module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._renumber(items)

    def __repr__(self):
        # runs of identical children are shown once, as PyTorch does: "(0-5): 6 x Block(...)"
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        blocks = [[0, 0, reprs[0]]]
        for i, r in enumerate(reprs[1:], 1):
            if r == blocks[-1][2]:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        lines = []
        for start, end, r in blocks:
            head = f"({start})" if start == end else f"({start}-{end}): {end - start + 1} x"
            lines.append(_addindent(f"{head}: {r}" if start == end else f"{head} {r}", 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList is a container and has no forward(); iterate over "
                                  "it in the parent's forward")


class _RegistryDict(_Container):
    """The dict protocol over the registry: ModuleDict and ParameterDict differ only in
    which one, and how an item is registered."""

    def __init__(self, items=None):
        super().__init__()
        if items is not None:
            self.update(items)

    def __getitem__(self, key):
        return self._items()[key]

    def __delitem__(self, key):
        del self._items()[key]

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter(self._items())

    def __contains__(self, key):
        return key in self._items()

    def keys(self):
        return self._items().keys()

    def items(self):
        return self._items().items()

    def values(self):
        return self._items().values()

    def get(self, key, default=None):
        return self._items().get(key, default)

    def pop(self, key):
        return self._items().pop(key)

    def clear(self):
        self._items().clear()

    def update(self, items):
        pairs = items.items() if isinstance(items, (collections.abc.Mapping, _RegistryDict)) \
            else items
        for k, v in pairs:
            self[k] = v


class ModuleDict(_RegistryDict):
    """An ordered dict of modules, registered under their keys."""
    _registry = "_modules"

    def __setitem__(self, key, module):
        self.add_module(key, module)


def _params_repr(params):
    return "\n".join(f"  ({k}): {'Parameter' if isinstance(p, Parameter) else 'Tensor'} "
                     f"containing: [{p.dtype!r} of size {'x'.join(str(s) for s in p.shape)}]"
                     for k, p in params.items() if p is not None)


def _as_parameter(value):
    if isinstance(value, Parameter) or value is None:
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    raise TypeError(f"expected a Parameter or Tensor, got {type(value).__name__}")


class ParameterList(_IndexedContainer):
    """A list of parameters registered under keys "0", "1", ... (PyTorch's)."""
    _registry = "_parameters"

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def _register(self, key, value):
        self.register_parameter(key, _as_parameter(value))

    def __iadd__(self, values):
        return self.extend(values)

    def extra_repr(self):
        return _params_repr(self._parameters)


class ParameterDict(_RegistryDict):
    """An ordered dict of parameters registered under their keys."""
    _registry = "_parameters"

    def __setitem__(self, key, value):
        self.register_parameter(key, _as_parameter(value))

    def extra_repr(self):
        return _params_repr(self._parameters)
