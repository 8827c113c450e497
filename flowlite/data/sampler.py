"""Samplers: which dataset indices a DataLoader visits, and in what order (PyTorch's API).

Every sampler yields plain Python ints; `BatchSampler` groups them into lists.  Randomness is
PyTorch's, drawn on the host: with `generator=` (a CPU Generator) from that stream, otherwise
from the global CPU stream — RandomSampler first draws a seed there and shuffles with a
generator of its own, as PyTorch's does — so with the same seeds the orders are PyTorch's. A
numpy Generator (or a device Generator) draws numpy's numbers instead.
"""
from __future__ import annotations

import math
import numbers
from typing import Iterator, Optional, Sequence

import jax
import numpy as np

from .generator import host_rng, host_seed, seeded_stream, torch_stream

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "DistributedSampler"]


class Sampler:
    """Base class: an iterable of indices (subclasses define `__iter__`, usually `__len__`)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


def _positive_int(where, name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{where}: {name} should be a positive integer value, but got "
                         f"{name}={value!r}")
    return int(value)


def _bool(where, name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {name} should be a boolean value, but got {name}={value!r}")
    return value


class RandomSampler(Sampler):
    """Random order; with `replacement`, `num_samples` independent uniform draws."""

    def __init__(self, data_source, replacement: bool = False,
                 num_samples: Optional[int] = None, generator=None):
        self.data_source = data_source
        self.replacement = _bool("RandomSampler", "replacement", replacement)
        self._num_samples = num_samples
        self.generator = generator
        if num_samples is not None:
            _positive_int("RandomSampler", "num_samples", num_samples)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else int(self._num_samples)

    def __iter__(self):
        # a generator, drawn chunk by chunk: minGPT asks for num_samples=1e10 with replacement
        n = len(self.data_source)
        mt = torch_stream(self.generator, "RandomSampler")
        if mt is not None:
            if self.generator is None:          # PyTorch: a seed from the global stream
                mt = seeded_stream(host_seed())
            if self.replacement:
                for _ in range(self.num_samples // 32):
                    yield from mt.randint(32, 0, n).tolist()
                yield from mt.randint(self.num_samples % 32, 0, n).tolist()
                return
            if not n:
                return
            for _ in range(self.num_samples // n):
                yield from mt.randperm(n).tolist()
            yield from mt.randperm(n)[:self.num_samples % n].tolist()   # (drawn even if empty)
            return
        rng = host_rng(self.generator, "RandomSampler")
        if self.replacement:
            full, rest = divmod(self.num_samples, 32)
            for _ in range(full):
                yield from rng.integers(0, n, size=32).tolist()
            yield from rng.integers(0, n, size=rest).tolist()
            return
        rounds, rest = divmod(self.num_samples, n) if n else (0, 0)
        for _ in range(rounds):
            yield from rng.permutation(n).tolist()
        if rest:
            yield from rng.permutation(n)[:rest].tolist()

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices, in a random order (without replacement)."""

    def __init__(self, indices: Sequence[int], generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        mt = torch_stream(self.generator, "SubsetRandomSampler")
        if mt is not None:
            for i in mt.randperm(len(self.indices)).tolist():
                yield self.indices[i]
            return
        order = host_rng(self.generator, "SubsetRandomSampler").permutation(len(self.indices))
        yield from [self.indices[i] for i in order.tolist()]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probabilities proportional to `weights`."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        _positive_int("WeightedRandomSampler", "num_samples", num_samples)
        _bool("WeightedRandomSampler", "replacement", replacement)
        w = np.asarray(weights.numpy() if hasattr(weights, "numpy") else weights,
                       dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"WeightedRandomSampler: weights should be a 1d sequence but "
                             f"given weights have shape {tuple(w.shape)}")
        if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise RuntimeError("WeightedRandomSampler: invalid multinomial distribution "
                               "(weights must be finite, >= 0 and not all zero)")
        if not replacement and num_samples > int(np.count_nonzero(w)):
            raise RuntimeError(f"WeightedRandomSampler: cannot sample {num_samples} samples "
                               f"without replacement from {int(np.count_nonzero(w))} "
                               "non-zero weights")
        self.weights = w
        self.num_samples = int(num_samples)
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        mt = torch_stream(self.generator, "WeightedRandomSampler")
        if mt is not None:          # torch.multinomial of the float64 weights
            w = self.weights[None]
            return iter(mt.multinomial(w, self.num_samples, self.replacement)[0].tolist())
        rng = host_rng(self.generator, "WeightedRandomSampler")
        p = self.weights / self.weights.sum()
        return iter(rng.choice(len(p), size=self.num_samples, replace=self.replacement,
                               p=p).tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of `batch_size` (the last one shorter
    unless `drop_last`)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        self.sampler = sampler
        self.batch_size = _positive_int("BatchSampler", "batch_size", batch_size)
        self.drop_last = _bool("BatchSampler", "drop_last", drop_last)

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler):
    """This replica's share of the dataset: PyTorch's scheme (pad by wrapping around, or
    drop the tail, so every replica gets `num_samples` indices; reshuffled per
    `set_epoch`).  num_replicas / rank default to JAX's process count and index."""

    def __init__(self, dataset, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False):
        if num_replicas is None:
            num_replicas = jax.process_count()
        if rank is None:
            rank = jax.process_index()
        if not isinstance(num_replicas, numbers.Integral) or num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be an integer >= 1, got "
                             f"{num_replicas!r}")
        if not isinstance(rank, numbers.Integral) or not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.epoch = 0
        self.drop_last = bool(drop_last)
        n = len(dataset)
        if self.drop_last and n % self.num_replicas:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = bool(shuffle)
        self.seed = int(seed)

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            order = seeded_stream(self.seed + self.epoch).randperm(n).tolist()
        else:
            order = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(order)
            if pad > 0 and order:
                order += (order * math.ceil(pad / len(order)))[:pad]
        else:
            order = order[:self.total_size]
        return iter(order[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
