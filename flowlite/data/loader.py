"""DataLoader: PyTorch's loader (same signature), batches collated to flowlite tensors and
prepared ahead in background threads.

flowlite dispatches a training step asynchronously, so the host is free while the device
runs. The loader uses that time: background threads gather, stack and place the next
batches on the device, so the step after this one finds its inputs ready.

* ``num_workers=0``: one background thread prepares ``prefetch`` (default 2) batches ahead
  — flowlite's overlap; ``get_worker_info()`` is None there, as in PyTorch's main process.
* ``num_workers=N``: N worker *threads* (not processes), each preparing every N-th batch,
  ``prefetch_factor`` (default 2) ahead; batches arrive in order.  Inside a worker
  ``get_worker_info()`` says which one it is; ``worker_init_fn(worker_id)`` runs first (once
  per loader with ``persistent_workers``).  Threads share the dataset object and the
  process's global RNGs (PyTorch's worker processes get copies and reseeded RNGs); they
  speed up loading where ``__getitem__`` releases the GIL (numpy, file reads, decoding).
* ``pin_memory`` is accepted: placement is done by the workers already (a ``device_put``).
* ``timeout`` > 0: waiting longer than that for a batch raises RuntimeError.
* flowlite extras (keyword-only): ``seed`` (reproducible shuffles, epoch ``e`` uses
  ``seed + e``, see ``set_epoch``), ``prefetch``, ``device`` (where batches are placed;
  default: the default device), ``num_replicas``/``rank`` (a built-in DistributedSampler).
"""

from __future__ import annotations

import atexit
import itertools
import math
import numbers
import queue
import threading
import weakref
from typing import Any, Callable, Iterator, Optional

import numpy as np

from .. import extend
from .collate import (collate_numpy, default_collate, default_convert, to_device,
                      torch_structure)
from .dataset import IterableDataset, batch_getter
from .generator import host_rng, host_seed, seeded_stream, torch_stream
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "collate_numpy", "to_device", "default_collate", "default_convert",
           "get_worker_info", "WorkerInfo"]

THREAD_NAME = "flowlite-data-loader"


# ---------------------------------------------------------------- worker threads


class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker (PyTorch's fields)."""

    def __init__(self, id: int, num_workers: int, seed: int, dataset: Any):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


_worker_local = threading.local()


def get_worker_info() -> Optional[WorkerInfo]:
    """This worker thread's WorkerInfo, or None outside a DataLoader worker."""
    return getattr(_worker_local, "info", None)


_END = object()


class _Failure:
    """Carries an exception raised in a loader thread over to the consumer."""

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


def _produce(batches: Callable[[], Iterator], info: Optional[WorkerInfo],
             init_fn: Optional[Callable], out: queue.Queue, stop: threading.Event) -> None:
    """Loader-thread body. Deliberately holds no reference to the iterator, so dropping
    the iterator (e.g. ``break`` out of a for loop) garbage-collects it, which stops us."""
    try:
        if info is not None:
            _worker_local.info = info
            if init_fn is not None:
                init_fn(info.id)
        for batch in batches():
            if stop.is_set():
                return
            if not _put(out, batch, stop):
                return
    except BaseException as exc:  # noqa: BLE001 — every failure must reach the consumer
        _put(out, _Failure(exc), stop)
        return
    _put(out, _END, stop)


# Iterators whose threads may still run.  At interpreter exit they are stopped and joined
# BEFORE Python tears down: a daemon thread frozen inside a C++ call (a jax device_put) at
# shutdown aborts the process ("terminate called without an active exception").
_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _shutdown_loader_threads() -> None:
    for it in list(_live):
        it.close(timeout=5.0)
    # threads of iterators already dropped (a `break` out of the loop sets their stop event
    # but nobody joined them) may still be finishing a batch inside a device transfer
    for t in threading.enumerate():
        if t.name == THREAD_NAME and t is not threading.current_thread():
            t.join(timeout=5.0)


class _Pass:
    """What both kinds of pass over a loader's batches share: their threads, registered in
    `_live` while they may run and joined by close() (unless close() runs in one of them),
    the consumer's wait bounded by the loader's timeout, and the iterator and
    context-manager protocols."""

    def _start(self, threads: list) -> None:
        self._threads = threads
        _live.add(self)
        for t in threads:
            t.start()

    def _join(self, timeout: float) -> None:
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join(timeout=timeout)
        _live.discard(self)

    def _take(self, q: queue.Queue) -> Any:
        try:
            return q.get(timeout=self._timeout)
        except queue.Empty:
            self.close()
            raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds "
                               "waiting for a batch") from None

    def close(self, timeout: float = 1.0) -> None:
        raise NotImplementedError

    def __iter__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class _BatchIterator(_Pass):
    """One pass over the loader's batches: from `sources` (one batch generator per
    worker), round-robin — each in a thread of its own when `threaded`."""

    def __init__(self, sources: list, threaded: bool, depth: int, timeout: float,
                 infos: Optional[list] = None, init_fn: Optional[Callable] = None):
        self._done = False
        self._timeout = timeout if timeout > 0 else None
        self._threads: list = []
        self._next = 0
        if not threaded:
            self._inline = [s() for s in sources]
            return
        self._inline = None
        self._stop = threading.Event()
        self._queues = [queue.Queue(maxsize=depth) for _ in sources]
        self._start([threading.Thread(target=_produce, name=THREAD_NAME, daemon=True,
                                      args=(source, infos[k] if infos else None, init_fn, q,
                                            self._stop))
                     for k, (source, q) in enumerate(zip(sources, self._queues))])
        self._live_queues = list(self._queues)

    def __next__(self) -> Any:
        if extend.clock.on and extend.untimed("data"):    # the run summary's "data" phase
            return extend.timed("data", self.__next__)
        if self._done:
            raise StopIteration
        if self._inline is not None:
            return self._next_inline()
        while self._live_queues:
            k = self._next % len(self._live_queues)
            item = self._take(self._live_queues[k])
            if item is _END:
                del self._live_queues[k]       # this worker is exhausted: skip it from now on
                if self._live_queues:
                    self._next = k % len(self._live_queues)
                continue
            if isinstance(item, _Failure):
                self.close()
                raise item.exc
            self._next = k + 1
            return item
        self.close()
        raise StopIteration

    def _next_inline(self) -> Any:
        while self._inline:
            k = self._next % len(self._inline)
            try:
                item = next(self._inline[k])
            except StopIteration:
                del self._inline[k]
                if self._inline:
                    self._next = k % len(self._inline)
                continue
            self._next = k + 1
            return item
        self._done = True
        raise StopIteration

    def close(self, timeout: float = 1.0) -> None:
        """Stop the loader threads; safe to call any number of times."""
        self._done = True
        if not self._threads:
            return
        self._stop.set()
        for q in self._queues:  # free queue slots so a thread blocked in put() notices at once
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self._join(timeout)

    def __del__(self) -> None:
        if self._threads:
            self._stop.set()


def _work(make_batch: Callable, info: WorkerInfo, init_fn: Optional[Callable],
          tasks: queue.Queue, out: queue.Queue, stop: threading.Event) -> None:
    """A map-style worker: build the batch for every index batch the consumer sends."""
    _worker_local.info = info
    try:
        if init_fn is not None:
            init_fn(info.id)
    except BaseException as exc:  # noqa: BLE001
        out.put(_Failure(exc))
        return
    while not stop.is_set():
        try:
            task = tasks.get(timeout=0.05)
        except queue.Empty:
            continue
        if task is _END:
            return
        try:
            out.put(make_batch(task))
        except BaseException as exc:  # noqa: BLE001 — raised at this batch's turn
            out.put(_Failure(exc))


class _WorkerPool(_Pass):
    """Map-style loading with N worker threads, PyTorch's way: the consumer walks the plan
    and hands index batch j to worker j % N, keeping ``depth`` batches per worker in
    flight, and takes results back in order."""

    def __init__(self, make_batch, plan, infos, init_fn, depth, timeout):
        n = len(infos)
        self._plan = plan
        self._timeout = timeout if timeout > 0 else None
        self._stop = threading.Event()
        self._tasks = [queue.Queue() for _ in range(n)]
        self._results = [queue.Queue() for _ in range(n)]
        self._sent = self._taken = 0
        self._exhausted = self._done = False
        self._start([threading.Thread(target=_work, name=THREAD_NAME, daemon=True,
                                      args=(make_batch, infos[k], init_fn, self._tasks[k],
                                            self._results[k], self._stop))
                     for k in range(n)])
        for _ in range(depth * n):
            self._dispatch()

    def _dispatch(self) -> None:
        if self._exhausted:
            return
        try:
            task = next(self._plan)
        except StopIteration:
            self._exhausted = True
            for q in self._tasks:
                q.put(_END)
            return
        self._tasks[self._sent % len(self._tasks)].put(task)
        self._sent += 1

    def __next__(self) -> Any:
        if extend.clock.on and extend.untimed("data"):    # the run summary's "data" phase
            return extend.timed("data", self.__next__)
        if self._done or (self._exhausted and self._taken == self._sent):
            self.close()
            raise StopIteration
        item = self._take(self._results[self._taken % len(self._results)])
        if isinstance(item, _Failure):
            self.close()
            raise item.exc
        self._taken += 1
        self._dispatch()
        return item

    def close(self, timeout: float = 1.0) -> None:
        self._done = True
        self._stop.set()
        self._join(timeout)

    def __del__(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------- the loader


def _check_int(name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"DataLoader: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class DataLoader:
    """Iterate over ``dataset`` in batches of flowlite tensors (PyTorch's DataLoader).

    PyTorch's arguments mean what they mean there (see the module docstring for workers,
    which are threads).  Without a sampler, a map-style dataset is visited in order, or
    shuffled: with ``seed``, epoch ``e`` uses the permutation drawn from ``seed + e`` (a
    resumed run replays an epoch with :meth:`set_epoch`); without, each epoch draws its
    order from ``generator`` or flowlite's global generator (``manual_seed``).
    ``num_replicas`` / ``rank``: each replica takes every ``num_replicas``-th index of the
    order, padded by wrapping around to a multiple of ``num_replicas`` (DistributedSampler's
    scheme). Datasets with ``get_batch(indices)`` (TensorDataset, LMWindowDataset and
    Subsets of them) are gathered a whole batch at a time; ``__getitems__`` is used too.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Optional[Callable[[list], Any]] = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: Optional[int] = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: Optional[int] = None,
        prefetch: Optional[int] = None,
        device: Any = None,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.dataset = dataset
        self._iterable = isinstance(dataset, IterableDataset)
        if not self._iterable and not hasattr(dataset, "__getitem__"):
            raise TypeError(f"DataLoader: dataset must support indexing (a map-style Dataset) "
                            f"or be an IterableDataset, got {type(dataset).__name__}")
        self.num_workers = _check_int("num_workers", num_workers, 0)
        if not isinstance(timeout, numbers.Real) or timeout < 0:
            raise ValueError(f"DataLoader: timeout option should be non-negative, got {timeout!r}")
        if self.num_workers == 0 and prefetch_factor is not None:
            raise ValueError("DataLoader: prefetch_factor option could only be specified in "
                             "multiprocessing. let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if persistent_workers and self.num_workers == 0:
            raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
        self.prefetch_factor = 2 if prefetch_factor is None and self.num_workers else prefetch_factor
        if self.prefetch_factor is not None:
            _check_int("prefetch_factor", self.prefetch_factor, 1)
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError("DataLoader: worker_init_fn must be callable")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got {type(collate_fn).__name__}")
        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler "
                                 f"option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("DataLoader: batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size = None
        elif batch_size is None:
            if drop_last:
                raise ValueError("DataLoader: batch_size=None option disables auto-batching and "
                                 "is mutually exclusive with drop_last")
        else:
            batch_size = _check_int("batch_size", batch_size, 1)
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self.timeout = float(timeout)
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.pin_memory = bool(pin_memory)
        self.pin_memory_device = pin_memory_device
        self.persistent_workers = bool(persistent_workers)
        self.in_order = bool(in_order)
        self.generator = generator
        self.collate_fn = collate_fn
        self.device = device
        if prefetch is None:
            prefetch = 2
        self.prefetch = _check_int("prefetch", prefetch, 0)
        self.num_replicas = _check_int("num_replicas", num_replicas, 1)
        self.rank = _check_int("rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"DataLoader: rank {rank} is out of range for num_replicas={num_replicas}")
        if self.num_replicas > 1 and (sampler is not None or batch_sampler is not None
                                      or self._iterable):
            raise ValueError("DataLoader: num_replicas/rank shard the built-in order; with a "
                             "sampler use DistributedSampler instead")
        if seed is not None:
            seed = _check_int("seed", seed, 0)
        elif self.shuffle and self.num_replicas > 1:
            raise ValueError(
                "DataLoader: shuffle with num_replicas > 1 needs a seed shared by all replicas, "
                "otherwise their shards overlap"
            )
        self.seed = seed
        # PyTorch's sampler / batch_sampler attributes; the built-in order (sampler=None)
        # is flowlite's (seeded epochs, replica sharding) and needs no Sampler object.
        self._builtin_order = sampler is None and batch_sampler is None and not self._iterable
        if sampler is None and not self._iterable:
            sampler = (RandomSampler(dataset, generator=generator) if self.shuffle
                       else SequentialSampler(dataset))
        self.sampler = sampler
        if batch_sampler is None and batch_size is not None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, self.drop_last)
        elif self._builtin_order:
            batch_sampler = None
        self.batch_sampler = batch_sampler
        self._user_batch_sampler = not self._builtin_order and batch_sampler is not None
        self._epoch = 0
        self._initialised_workers: set = set()

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
        """This replica's sample indices for ``epoch``, in the order they will be batched
        (the built-in order; with a sampler, the sampler decides)."""
        n = len(self.dataset)
        mt = torch_stream(self.generator, "DataLoader") if self.seed is None else None
        if self.shuffle and mt is not None:
            # PyTorch's RandomSampler: randperm from the generator or, without one, from a
            # generator seeded by a draw of the global stream
            if self.generator is None:
                mt = seeded_stream(host_seed())
            order = mt.randperm(n)
            if self.generator is not None and n:
                # the sampler ends its epoch with one more randperm(n) (num_samples % n of
                # it: none) — from the loader's own generator, drawn here, with the epoch's
                mt.randperm(n)
        elif self.shuffle:
            rng = (np.random.default_rng(self.seed + epoch) if self.seed is not None
                   else host_rng(self.generator, "DataLoader"))
            order = rng.permutation(n)
        else:
            order = np.arange(n)
        if self.num_replicas > 1 and n > 0:
            total = self._per_replica(n) * self.num_replicas
            order = np.resize(order, total)[self.rank : total : self.num_replicas]
        return order

    def _index_batches(self, epoch: int) -> Iterator:
        """The epoch's plan, lazily: index batches (or single indices with batch_size=None).
        Lazy because samplers may be effectively endless (minGPT's num_samples=1e10)."""
        if not self._builtin_order:
            if self.batch_sampler is not None:
                it = self._sampler_started(iter(self.batch_sampler))
                return (np.asarray(b, dtype=np.int64) for b in it)
            return self._sampler_started(iter(self.sampler))   # batch_size=None: one index each
        order = self.indices_for_epoch(epoch)
        if self.batch_size is None:
            return iter(order.tolist())
        size = self.batch_size
        stop = len(order) - len(order) % size if self.drop_last else len(order)
        return (order[i : i + size] for i in range(0, stop, size))

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)              # TypeError when the stream has no length
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        if not self._builtin_order:
            return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)
        per_replica = self._per_replica(len(self.dataset))
        if self.batch_size is None:
            return per_replica
        if self.drop_last:
            return per_replica // self.batch_size
        return math.ceil(per_replica / self.batch_size)

    # -- batches

    def _batch_maker(self) -> Callable[[Any], Any]:
        """Build the function the loader thread calls per batch (holds no loader state); it
        runs as data loading (extend.loading: per-sample arithmetic of host data on the host)."""
        return extend.loading(self._make_batch())

    def _make_batch(self) -> Callable[[Any], Any]:
        dataset, device, collate_fn = self.dataset, self.device, self.collate_fn
        if self.batch_size is None and not self._user_batch_sampler:
            convert = collate_fn or (lambda item: default_convert(item, device))
            return lambda index: convert(dataset[index])
        getitems = getattr(dataset, "__getitems__", None)
        fetch = ((lambda indices: getitems([int(i) for i in indices])) if callable(getitems)
                 else (lambda indices: [dataset[int(i)] for i in indices]))
        if collate_fn is not None:
            return lambda indices: collate_fn(fetch(indices))
        getter = batch_getter(dataset)
        if getter is not None:
            return lambda indices: to_device(torch_structure(getter(indices)), device)
        return lambda indices: default_collate(fetch(indices), device)

    def _iterable_batches(self) -> Callable[[], Iterator]:
        """A generator function over this worker's own stream of the IterableDataset."""
        dataset, device, size, drop = self.dataset, self.device, self.batch_size, self.drop_last
        collate = self.collate_fn or ((lambda items: default_collate(items, device)) if size
                                      else (lambda item: default_convert(item, device)))

        def batches():
            stream = iter(dataset)
            take = extend.loading(lambda: next(stream, _END))   # the dataset's transforms
            collated = extend.loading(collate)
            if size is None:
                while (item := take()) is not _END:
                    yield collated(item)
                return
            while True:
                items = []
                while (item := take()) is not _END:
                    items.append(item)
                    if len(items) == size:
                        break
                if not items or (drop and len(items) < size):
                    return
                yield collated(items)
                if len(items) < size:
                    return
        return batches

    def _base_seed(self) -> int:
        """The iterator's base seed, drawn as PyTorch's DataLoader iterator draws it (an int64
        `random_()` of the loader's generator, or the global stream) before any sampler draw."""
        if torch_stream(self.generator, "DataLoader") is not None:
            return host_seed(self.generator)
        return int(host_rng(self.generator, "DataLoader").integers(0, 2 ** 62))

    def _sampler_started(self, it):
        """`it` with its first item drawn now, on the caller's thread (a sampler's first
        draws from the global stream come in PyTorch's order, never from the loader thread)."""
        first = next(it, _END)
        if first is _END:
            return iter(())
        return itertools.chain((first,), it)

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch
        self._epoch += 1
        workers = self.num_workers
        base = self._base_seed()            # (PyTorch draws it for every iterator)
        if workers == 0:
            if self._iterable:
                source = self._iterable_batches()
            else:
                make_batch, plan = self._batch_maker(), self._index_batches(epoch)
                source = lambda: map(make_batch, plan)  # noqa: E731 (the plan runs in the thread)
            return _BatchIterator([source], threaded=self.prefetch > 0, depth=self.prefetch,
                                  timeout=self.timeout)
        infos = [WorkerInfo(k, workers, base + k, self.dataset) for k in range(workers)]
        init_fn = self.worker_init_fn
        if init_fn is not None and self.persistent_workers:
            # persistent workers are initialised once per loader, not once per epoch
            done = self._initialised_workers

            def init_fn(worker_id, _fn=self.worker_init_fn, _done=done):
                if worker_id not in _done:
                    _done.add(worker_id)
                    _fn(worker_id)
        if self._iterable:
            return _BatchIterator([self._iterable_batches()] * workers, threaded=True,
                                  depth=self.prefetch_factor, timeout=self.timeout,
                                  infos=infos, init_fn=init_fn)
        return _WorkerPool(self._batch_maker(), self._index_batches(epoch), infos, init_fn,
                           self.prefetch_factor, self.timeout)

    def __repr__(self) -> str:
        try:
            n = f" of {len(self.dataset)}"
        except TypeError:
            n = ""
        return (f"DataLoader({type(self.dataset).__name__}{n}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last}, "
                f"num_workers={self.num_workers}, replica {self.rank}/{self.num_replicas})")
