"""Map-style datasets: the indexable collections a DataLoader draws batches from.

Everything here stays on the host as numpy. Turning a batch into flowlite tensors (and
placing it on a device) is the loader's job, so a dataset never triggers device work and
can be used from the loader's background thread without touching lazy graph state.
"""

from __future__ import annotations

import bisect
import math
import numbers
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from .. import extend
from .generator import host_rng, torch_stream

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "ChainDataset", "StackDataset", "random_split", "batch_getter"]


class Dataset:
    """Base class of map-style datasets (PyTorch's): an item per key via ``__getitem__``.

    Subclasses define ``__getitem__`` and usually ``__len__`` (the default samplers need
    it; a custom sampler does not).  ``a + b`` concatenates two datasets.
    """

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: subclasses of Dataset should "
                                  "implement __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """Base class of iterable-style datasets: items come from ``__iter__`` (a stream, not
    indexable).  With ``num_workers > 0`` every worker iterates its own ``iter(dataset)``;
    split the stream with ``get_worker_info()`` as in PyTorch, or items repeat."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__}: subclasses of IterableDataset "
                                  "should implement __iter__")

    def __getitem__(self, index):
        raise TypeError(f"{type(self).__name__} is an IterableDataset: it cannot be indexed")

    def __add__(self, other: "Dataset") -> "ChainDataset":
        return ChainDataset([self, other])


def _to_host_array(value: Any, position: int) -> np.ndarray:
    """Bring one TensorDataset field to a numpy array.

    flowlite tensors (and anything else with ``.numpy()``) are read back once here, so
    that every later item or batch is a cheap numpy slice instead of a lazy indexing op.
    """
    if isinstance(value, np.ndarray):
        array = value
    elif callable(getattr(value, "numpy", None)):
        array = np.asarray(value.numpy())
    else:
        array = np.asarray(value)
    if array.ndim == 0:
        raise ValueError(
            f"TensorDataset: argument {position} is a scalar (shape ()); every argument "
            "needs a first dimension that indexes the samples"
        )
    if array.dtype == object:
        raise TypeError(
            f"TensorDataset: argument {position} has dtype object; pass numeric arrays "
            "(ragged lists cannot be batched)"
        )
    return array


class TensorDataset(Dataset):
    """Dataset whose i-th item is ``tuple(t[i] for t in tensors)`` (flowlite tensors, as in
    PyTorch), for tensors or arrays sharing a first dimension.

    The data are held as numpy (tensors are read back once at construction): an item is a
    host slice placed as a tensor (no graph op, no sync), and the DataLoader fetches a
    whole batch with one fancy-indexing call per array (``get_batch``) instead of one
    Python call per sample.
    """

    def __init__(self, *arrays: Any):
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        self.arrays = tuple(_to_host_array(a, i) for i, a in enumerate(arrays))
        lengths = [a.shape[0] for a in self.arrays]
        if len(set(lengths)) != 1:
            described = ", ".join(
                f"argument {i}: {n} (shape {a.shape})"
                for i, (n, a) in enumerate(zip(lengths, self.arrays))
            )
            raise ValueError(
                "TensorDataset: all arrays must have the same length along the first "
                f"dimension, got {described}"
            )

    def __len__(self) -> int:
        return self.arrays[0].shape[0]

    def __getitem__(self, index: int) -> tuple:
        return tuple(extend.from_numpy(np.asarray(a[index])) for a in self.arrays)

    @property
    def tensors(self) -> tuple:
        """The data as flowlite tensors (PyTorch's ``TensorDataset.tensors``)."""
        return tuple(extend.from_numpy(a) for a in self.arrays)

    def get_batch(self, indices: np.ndarray) -> tuple:
        """Return the stacked batch for ``indices``: one gather per array, no per-item loop."""
        return tuple(a[indices] for a in self.arrays)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{a.shape} {a.dtype}" for a in self.arrays)
        return f"TensorDataset({shapes})"


class Subset(Dataset):
    """A view of ``dataset`` restricted to (and reordered by) ``indices``.

    Indices are validated once here, so an out-of-range index is reported at the split
    that produced it instead of from a loader thread epochs later.
    """

    def __init__(self, dataset: Any, indices: Sequence[int]):
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(dataset)
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            bad = self.indices[(self.indices < -n) | (self.indices >= n)][0]
            raise IndexError(f"Subset: index {int(bad)} is out of range for a dataset of length {n}")

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def __getitem__(self, index: int) -> Any:
        return self.dataset[int(self.indices[index])]

    def __repr__(self) -> str:
        return f"Subset({len(self)} of {type(self.dataset).__name__} of length {len(self.dataset)})"


def batch_getter(dataset: Any) -> Optional[Callable[[np.ndarray], Any]]:
    """Return a function fetching a whole stacked batch by index array, or None.

    Datasets opt in by defining ``get_batch(indices)``; a Subset inherits the fast path
    of the dataset beneath it by translating its indices first.
    """
    if isinstance(dataset, Subset):
        inner = batch_getter(dataset.dataset)
        if inner is None:
            return None
        positions = dataset.indices
        return lambda indices: inner(positions[indices])
    getter = getattr(dataset, "get_batch", None)
    return getter if callable(getter) else None


def _resolve_lengths(lengths: Sequence[Any], n: int) -> list[int]:
    """Turn integer lengths or fractions into integer lengths summing to ``n``.

    Fractions follow PyTorch: floor each share, then hand the remainder out one item at a
    time to the first subsets, so any fractions summing to 1 cover the dataset exactly.
    """
    lengths = list(lengths)
    if not lengths:
        raise ValueError("random_split: lengths must not be empty")
    if all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in lengths):
        if any(x < 0 for x in lengths):
            raise ValueError(f"random_split: lengths must be non-negative, got {lengths}")
        if sum(lengths) != n:
            raise ValueError(
                f"random_split: lengths {lengths} sum to {sum(lengths)}, but the dataset has {n} items"
            )
        return [int(x) for x in lengths]
    if not all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in lengths):
        raise TypeError(f"random_split: lengths must be all integers or all fractions, got {lengths}")
    if any(not 0 <= x <= 1 for x in lengths) or not math.isclose(sum(lengths), 1.0, abs_tol=1e-6):
        raise ValueError(
            f"random_split: fractions {lengths} must each lie in [0, 1] and sum to 1 "
            f"(they sum to {sum(lengths):g})"
        )
    sizes = [int(math.floor(n * x)) for x in lengths]
    for i in range(n - sum(sizes)):
        sizes[i % len(sizes)] += 1
    return sizes


def random_split(
    dataset: Any,
    lengths: Sequence[Any],
    generator: Any = None,
    *,
    seed: Optional[int] = None,
) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random Subsets of the given lengths.

    ``lengths`` is either integers summing to ``len(dataset)`` or fractions summing to 1
    (PyTorch's rules). The order comes from ``generator`` (a ``flowlite.Generator`` — e.g.
    ``Generator().manual_seed(42)`` — or a numpy Generator), from ``seed``, or else from
    flowlite's global generator (reproducible per ``flowlite.manual_seed``).
    """
    if seed is not None and generator is not None:
        raise ValueError("random_split: pass either seed or generator, not both")
    sizes = _resolve_lengths(lengths, len(dataset))
    mt = torch_stream(generator, "random_split") if seed is None else None
    if mt is not None:                   # torch.randperm(n, generator=generator)
        order = mt.randperm(len(dataset))
    else:
        rng = np.random.default_rng(seed) if seed is not None else \
            host_rng(generator, "random_split")
        order = rng.permutation(len(dataset))
    bounds = np.cumsum([0] + sizes)
    return [Subset(dataset, order[start:stop]) for start, stop in zip(bounds[:-1], bounds[1:])]


class ConcatDataset(Dataset):
    """The datasets one after another (map-style ones only)."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset (use "
                                "ChainDataset)")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> Any:
        n = len(self)
        if index < 0:
            if -index > n:
                raise ValueError(f"ConcatDataset: absolute value of index {index} should not "
                                 f"exceed dataset length {n}")
            index += n
        if index >= n:
            raise IndexError(f"ConcatDataset: index {index} is out of range for length {n}")
        k = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[k - 1] if k else 0
        return self.datasets[k][index - start]


class ChainDataset(IterableDataset):
    """Iterable datasets chained one after another."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class StackDataset(Dataset):
    """Item i is ``(a[i], b[i], ...)`` (positional) or ``{"k": a[i], ...}`` (keywords)."""

    def __init__(self, *args: Dataset, **kwargs: Dataset):
        if args and kwargs:
            raise ValueError("StackDataset: supported either tuple-like (positional) or "
                             "dict-like (keyword) input, but both were given")
        parts = list(args) or list(kwargs.values())
        if not parts:
            raise ValueError("StackDataset: at least one dataset should be passed")
        lengths = {len(d) for d in parts}
        if len(lengths) != 1:
            raise ValueError("StackDataset: size mismatch between datasets")
        self._length = lengths.pop()
        self.datasets = args if args else kwargs

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)
