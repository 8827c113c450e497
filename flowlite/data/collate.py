"""Collation: turning a list of dataset items into one batch.

* ``default_collate`` is PyTorch's: tensors, numpy arrays and numbers are stacked into
  tensors along a new first dim; dicts, namedtuples and sequences are collated field by
  field (a tuple item gives a *list* of fields, as in PyTorch); strings stay lists.
  Python ints become int64 and floats float64 — which, like every flowlite dtype, are
  stored as int32 / float32 unless JAX's x64 mode is on.
* ``default_convert`` (PyTorch's, for ``batch_size=None``) converts without stacking.
* ``collate_numpy`` is flowlite's numpy-level stacker (keeps tuples as tuples, Python
  numbers as 32-bit) and ``to_device`` places a numpy batch as tensors.

Stacking happens in numpy on the host, so a batch becomes one device transfer; items that
are pending lazy tensors are stacked lazily instead (no sync in the loader).
"""
from __future__ import annotations

import collections.abc
import copy
from typing import Any, Optional

import jax
import numpy as np

from .. import extend

__all__ = ["default_collate", "default_convert", "collate_numpy", "to_device"]

_ERR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        "found {}")


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)


def _python_scalars_to_array(values: list, where: str, wide: bool) -> Optional[np.ndarray]:
    """Stack plain Python numbers, or return None when they are not all numbers.

    ``wide``: PyTorch's int64/float64 when JAX's x64 mode is on (otherwise the widths JAX
    would narrow them to anyway, so host and device dtypes agree); not ``wide``: always
    int32/float32 (``collate_numpy``)."""
    if not all(isinstance(v, (bool, int, float)) for v in values):
        return None
    if all(isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.bool_)
    big = wide and _x64()
    if all(isinstance(v, int) for v in values):
        try:
            return np.array(values, dtype=np.int64 if big else np.int32)
        except OverflowError:
            raise ValueError(f"cannot collate {where}: integer values do not fit in "
                             f"{'int64' if big else 'int32'}") from None
    return np.array(values, dtype=np.float64 if big else np.float32)


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if callable(getattr(value, "numpy", None)) and not isinstance(value, np.generic):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _check_shapes(shapes, where):
    for k, shape in enumerate(shapes):
        if shape != shapes[0]:
            raise ValueError(f"cannot collate {where}: item 0 has shape {shapes[0]} but item "
                             f"{k} has shape {shape}; pass a collate_fn that pads or crops")


def _stack(values: list, where: str, wide: bool = False) -> Any:
    """Stack one field of every item of a batch into a single array."""
    if isinstance(values[0], (str, bytes)):
        return list(values)  # text stays text: there is no tensor of strings
    stacked = _python_scalars_to_array(values, where, wide)
    if stacked is not None:
        return stacked
    arrays = [_as_array(v) for v in values]
    _check_shapes([a.shape for a in arrays], where)
    for k, a in enumerate(arrays):
        if a.dtype == object or a.dtype.kind in "USV":
            raise TypeError(f"cannot collate {where}: item {k} is not numeric "
                            f"({type(values[k]).__name__} of dtype {a.dtype})")
    return np.stack(arrays)


# ---------------------------------------------------------------- flowlite's numpy collation


def _collate(values: list, where: str) -> Any:
    first = values[0]
    if isinstance(first, dict):
        keys = list(first)
        for k, v in enumerate(values):
            if not isinstance(v, dict) or list(v) != keys:
                raise ValueError(f"cannot collate {where}: item 0 has keys {keys} but item {k} has {v!r:.80}")
        return {key: _collate([v[key] for v in values], f"{where}[{key!r}]") for key in keys}
    if isinstance(first, (tuple, list)):
        width = len(first)
        for k, v in enumerate(values):
            if not isinstance(v, (tuple, list)) or len(v) != width:
                got = len(v) if isinstance(v, (tuple, list)) else type(v).__name__
                raise ValueError(f"cannot collate {where}: item 0 has {width} fields but item {k} has {got}")
        fields = [_collate([v[f] for v in values], f"{where}[{f}]") for f in range(width)]
        return type(first)(*fields) if hasattr(first, "_fields") else tuple(fields)
    return _stack(values, where)


def collate_numpy(items: list) -> Any:
    """Stack a list of dataset items into a batch of numpy arrays, keeping the item structure.

    Items may be arrays, numpy scalars, Python numbers, or tuples / namedtuples / dicts of
    them (nested). Python ints become int32 and floats float32 (JAX's defaults).
    """
    if len(items) == 0:
        raise ValueError("cannot collate an empty batch")
    return _collate(list(items), "batch")


def to_device(batch: Any, device: Any = None) -> Any:
    """Turn every numpy array of a collated batch into a flowlite tensor on ``device``.

    ``flowlite.from_numpy`` does the placement (a ``jax.device_put``); running it in the
    loader thread is what overlaps host-to-device copies with the current step.
    """
    if isinstance(batch, (np.ndarray, np.generic)):
        return extend.from_numpy(np.asarray(batch), device=device)
    if isinstance(batch, extend.Tensor):
        return batch if device is None else batch.to(device)
    if isinstance(batch, dict):
        return _same_mapping(batch, {k: to_device(v, device) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (tuple, list)) and not (batch and isinstance(batch[0], (str, bytes))):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


# ---------------------------------------------------------------- PyTorch's collation


def _same_mapping(like, fields: dict) -> Any:
    """`fields` in the mapping type of `like` (OrderedDict stays OrderedDict), as PyTorch
    keeps it; a plain dict when that type cannot be rebuilt."""
    if type(like) is dict:
        return fields
    try:
        if isinstance(like, collections.abc.MutableMapping):
            clone = copy.copy(like)
            clone.update(fields)
            return clone
        return type(like)(fields)
    except TypeError:
        return fields


def _collate_leaf(values, where: str) -> Any:
    first = values[0]
    if isinstance(first, (str, bytes)):
        return values                          # as PyTorch: the strings, in their container
    if isinstance(first, extend.Tensor):
        if not all(isinstance(v, extend.Tensor) for v in values):
            raise TypeError(f"cannot collate {where}: item 0 is a Tensor but not every item is")
        if any(extend.is_pending(v) for v in values):
            # stack lazily: reading pending items back would force a sync per batch
            _check_shapes([tuple(v.shape) for v in values], where)
            return extend.ops.stack(values, 0)
        return _stack(values, where, wide=True)
    if isinstance(first, (np.ndarray, np.generic, bool, int, float)):
        return _stack(list(values), where, wide=True)
    raise TypeError(_ERR.format(type(first)))


def _torch_collate(batch, where: str) -> Any:
    """PyTorch's default_collate recursion (a field's values arrive as zip's tuples)."""
    elem = batch[0]
    if isinstance(elem, collections.abc.Mapping):
        return _same_mapping(elem, {key: _torch_collate([d[key] for d in batch],
                                                        f"{where}[{key!r}]") for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(_torch_collate(s, f"{where}.{name}")
                            for name, s in zip(elem._fields, zip(*batch))))
    if isinstance(elem, collections.abc.Sequence) and not isinstance(elem, (str, bytes)):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError(f"each element in list of batch should be of equal size "
                               f"({where}: item 0 has {len(elem)} fields)")
        fields = [_torch_collate(s, f"{where}[{i}]") for i, s in enumerate(zip(*batch))]
        if isinstance(elem, tuple):
            return fields                       # PyTorch collates a tuple into a list
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    return _collate_leaf(batch, where)


def default_collate(batch: list, device: Any = None) -> Any:
    """PyTorch's default_collate: stack a list of items into a batch of tensors (on
    ``device``, default: flowlite's default device)."""
    if len(batch) == 0:
        raise ValueError("default_collate: cannot collate an empty batch")
    return to_device(_torch_collate(list(batch), "batch"), device)


def default_convert(data: Any, device: Any = None) -> Any:
    """PyTorch's default_convert (no batching): numpy arrays and numpy scalars become
    tensors, containers are converted element by element, everything else is unchanged."""
    if isinstance(data, np.ndarray):
        if data.dtype == object or data.dtype.kind in "USV":
            return data
        return extend.from_numpy(data, device=device)
    if isinstance(data, np.generic) and not isinstance(data, (np.str_, np.bytes_)):
        return extend.from_numpy(np.asarray(data), device=device)
    if isinstance(data, collections.abc.Mapping):
        return _same_mapping(data, {k: default_convert(v, device) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d, device) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d, device) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d, device) for d in data])
        except TypeError:
            return [default_convert(d, device) for d in data]
    return data


def torch_structure(batch: Any) -> Any:
    """A gathered batch (a tuple of arrays from ``get_batch``) shaped as PyTorch's
    default_collate would have shaped it: plain tuples become lists."""
    if type(batch) is tuple:
        return list(batch)
    return batch
