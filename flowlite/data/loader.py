"""DataLoader: batches from a Dataset, collated to flowlite tensors, prepared one step ahead.

flowlite dispatches a training step asynchronously, so the host is free while the device
runs. The loader uses that time: a background thread gathers, stacks and places the next
``prefetch`` batches on the device, so the step after this one finds its inputs ready.
"""

from __future__ import annotations

import math
import numbers
import queue
import threading
from typing import Any, Callable, Iterator, Optional

import numpy as np

from .. import extend
from .dataset import batch_getter

__all__ = ["DataLoader", "collate_numpy", "to_device", "default_collate"]

THREAD_NAME = "flowlite-data-loader"


# ---------------------------------------------------------------- collation


def _python_scalars_to_array(values: list, where: str) -> Optional[np.ndarray]:
    """Stack plain Python numbers with JAX's 32-bit defaults, or return None.

    ``np.asarray`` would make python ints int64 and floats float64, widths that JAX
    (without x64) silently narrows anyway; choosing 32 bits here keeps host and device
    dtypes identical, so the graph key does not depend on how a dataset spelt a label.
    """
    if not all(isinstance(v, (bool, int, float)) for v in values):
        return None
    if all(isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.bool_)
    if all(isinstance(v, int) for v in values):
        try:
            return np.array(values, dtype=np.int32)
        except OverflowError:
            raise ValueError(f"cannot collate {where}: integer values do not fit in int32") from None
    return np.array(values, dtype=np.float32)


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if callable(getattr(value, "numpy", None)) and not isinstance(value, np.generic):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _stack(values: list, where: str) -> Any:
    """Stack one field of every item of a batch into a single array."""
    if isinstance(values[0], (str, bytes)):
        return list(values)  # text stays text: there is no tensor of strings
    stacked = _python_scalars_to_array(values, where)
    if stacked is not None:
        return stacked
    arrays = [_as_array(v) for v in values]
    for k, a in enumerate(arrays):
        if a.shape != arrays[0].shape:
            raise ValueError(
                f"cannot collate {where}: item 0 has shape {arrays[0].shape} but item {k} has "
                f"shape {a.shape}; pass a collate_fn that pads or crops"
            )
        if a.dtype == object:
            raise TypeError(f"cannot collate {where}: item {k} is not numeric ({type(values[k]).__name__})")
    return np.stack(arrays)


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
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (tuple, list)) and not (batch and isinstance(batch[0], (str, bytes))):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def default_collate(items: list, device: Any = None) -> Any:
    """Stack items with :func:`collate_numpy`, then place them with :func:`to_device`."""
    return to_device(collate_numpy(items), device)


# ---------------------------------------------------------------- background thread

_END = object()


class _Failure:
    """Carries an exception raised in the loader thread over to the consumer."""

    def __init__(self, exc: BaseException):
        self.exc = exc


def _put(out: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Put ``item`` unless the consumer went away; polling ``stop`` means a full queue
    that nobody will ever read again cannot block the thread forever."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _produce(make_batch: Callable, index_batches: list, out: queue.Queue, stop: threading.Event) -> None:
    """Loader-thread body. Deliberately holds no reference to the iterator, so dropping
    the iterator (e.g. ``break`` out of a for loop) garbage-collects it, which stops us."""
    try:
        for indices in index_batches:
            if stop.is_set():
                return
            if not _put(out, make_batch(indices), stop):
                return
    except BaseException as exc:  # noqa: BLE001 — every failure must reach the consumer
        _put(out, _Failure(exc), stop)
        return
    _put(out, _END, stop)


class _BatchIterator:
    """One pass over the loader's batches; prefetching in a daemon thread when prefetch > 0."""

    def __init__(self, make_batch: Callable, index_batches: list, prefetch: int):
        self._make_batch = make_batch
        self._pending = iter(index_batches)
        self._done = False
        self._thread: Optional[threading.Thread] = None
        if prefetch > 0 and index_batches:
            self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=_produce,
                args=(make_batch, index_batches, self._queue, self._stop),
                name=THREAD_NAME,
                daemon=True,
            )
            self._thread.start()

    def __iter__(self) -> "_BatchIterator":
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if self._thread is None:
            return self._next_inline()
        item = self._queue.get()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exc
        return item

    def _next_inline(self) -> Any:
        try:
            indices = next(self._pending)
        except StopIteration:
            self._done = True
            raise
        return self._make_batch(indices)

    def close(self) -> None:
        """Stop the loader thread; safe to call any number of times."""
        self._done = True
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        while True:  # free queue slots so a thread blocked in put() notices at once
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def __enter__(self) -> "_BatchIterator":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if self._thread is not None:
            self._stop.set()


# ---------------------------------------------------------------- the loader


def _check_int(name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"DataLoader: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class DataLoader:
    """Iterate over ``dataset`` in batches of flowlite tensors.

    - ``shuffle`` with ``seed``: epoch ``e`` uses the permutation drawn from ``seed + e``, so
      a run is reproducible and a resumed run can replay an epoch with :meth:`set_epoch`.
      Each ``iter(loader)`` is one epoch. Without a seed the order is random per loader.
    - ``num_replicas`` / ``rank``: each replica takes every ``num_replicas``-th index of the
      (shuffled) order, after the order is padded by wrapping around to a multiple of
      ``num_replicas`` — DistributedSampler's scheme, so replicas run equally many steps.
    - Default collation stacks items to numpy and calls ``flowlite.from_numpy(a,
      device=device)`` on each array. Datasets with ``get_batch(indices)`` (TensorDataset,
      LMWindowDataset and Subsets of them) are gathered a whole batch at a time.
      A custom ``collate_fn(items)`` replaces both stacking and placement.
    - ``prefetch`` batches are prepared ahead in a daemon thread (0: no thread, batches are
      built on demand). Exceptions raised there re-raise from the consumer's ``next()``.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: Optional[int] = None,
        drop_last: bool = False,
        collate_fn: Optional[Callable[[list], Any]] = None,
        prefetch: int = 2,
        device: Any = None,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"DataLoader: dataset must support len() and indexing, got {type(dataset).__name__}"
            )
        self.dataset = dataset
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.prefetch = _check_int("prefetch", prefetch, 0)
        self.num_replicas = _check_int("num_replicas", num_replicas, 1)
        self.rank = _check_int("rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"DataLoader: rank {rank} is out of range for num_replicas={num_replicas}")
        if seed is not None:
            seed = _check_int("seed", seed, 0)
        elif shuffle and self.num_replicas > 1:
            raise ValueError(
                "DataLoader: shuffle with num_replicas > 1 needs a seed shared by all replicas, "
                "otherwise their shards overlap"
            )
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got {type(collate_fn).__name__}")
        self.shuffle = bool(shuffle)
        self.seed = seed
        self._base_seed = seed if seed is not None else int(np.random.SeedSequence().entropy)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        self.device = device
        self._epoch = 0

    # -- epochs and index plans

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` will run."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run epoch ``epoch`` (later ones continue from it).

        Calling it before every epoch behaves exactly like DistributedSampler.set_epoch;
        calling it once after resuming from a checkpoint replays the remaining epochs.
        """
        self._epoch = _check_int("epoch", epoch, 0)

    def _per_replica(self, n: int) -> int:
        return math.ceil(n / self.num_replicas) if self.num_replicas > 1 else n

    def indices_for_epoch(self, epoch: int) -> np.ndarray:
        """This replica's sample indices for ``epoch``, in the order they will be batched."""
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng(self._base_seed + epoch).permutation(n)
        else:
            order = np.arange(n)
        if self.num_replicas > 1 and n > 0:
            total = self._per_replica(n) * self.num_replicas
            order = np.resize(order, total)[self.rank : total : self.num_replicas]
        return order

    def _index_batches(self, epoch: int) -> list:
        order = self.indices_for_epoch(epoch)
        stop = len(order) - len(order) % self.batch_size if self.drop_last else len(order)
        return [order[i : i + self.batch_size] for i in range(0, stop, self.batch_size)]

    def __len__(self) -> int:
        per_replica = self._per_replica(len(self.dataset))
        if self.drop_last:
            return per_replica // self.batch_size
        return math.ceil(per_replica / self.batch_size)

    # -- batches

    def _batch_maker(self) -> Callable[[np.ndarray], Any]:
        """Build the function the loader thread calls per batch (holds no loader state)."""
        dataset, device, collate_fn = self.dataset, self.device, self.collate_fn
        if collate_fn is not None:
            return lambda indices: collate_fn([dataset[int(i)] for i in indices])
        getter = batch_getter(dataset)
        if getter is not None:
            return lambda indices: to_device(getter(indices), device)
        return lambda indices: default_collate([dataset[int(i)] for i in indices], device)

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch
        self._epoch += 1
        return _BatchIterator(self._batch_maker(), self._index_batches(epoch), self.prefetch)

    def __repr__(self) -> str:
        return (
            f"DataLoader({type(self.dataset).__name__} of {len(self.dataset)}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, batches={len(self)}, "
            f"replica {self.rank}/{self.num_replicas})"
        )
