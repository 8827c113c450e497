"""flowlite.data: datasets, samplers and the DataLoader that feeds them to a model as
flowlite tensors (PyTorch's `torch.utils.data` API, which `flowlite.utils.data` re-exports),
plus readers for real datasets already on disk.

Datasets, sampling and batching work at the numpy level; the core is reached (through
`flowlite.extend`) only to place a batch on a device as a tensor.
"""

from .collate import collate_numpy, default_collate, default_convert, to_device
from .dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    batch_getter,
    random_split,
)
from .datasets import (
    CharCorpus,
    DatasetError,
    DatasetNotFoundError,
    LMWindowDataset,
    digits_split,
    load_cifar10,
    load_digits,
    load_mnist,
    load_text,
    random_windows,
    read_idx,
    stdlib_text,
)
from . import datasets as _datasets
from .generator import Generator
from .loader import DataLoader, WorkerInfo, get_worker_info
from .sampler import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "Subset",
    "ConcatDataset",
    "ChainDataset",
    "StackDataset",
    "random_split",
    "batch_getter",
    "DataLoader",
    "get_worker_info",
    "WorkerInfo",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DistributedSampler",
    "Generator",
    "collate_numpy",
    "to_device",
    "default_collate",
    "default_convert",
    *_datasets.__all__,         # the readers of real datasets (flowlite.data.datasets)
]
