"""flowlite.data: datasets and the DataLoader that feeds them to a model as flowlite tensors.

Datasets and batching work at the numpy level; the core is reached (through
`flowlite.extend`) only to place a batch on a device as a tensor.
"""

from .dataset import Dataset, Subset, TensorDataset, batch_getter, random_split
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
from .loader import DataLoader, collate_numpy, default_collate, to_device

__all__ = [
    "Dataset",
    "TensorDataset",
    "Subset",
    "random_split",
    "batch_getter",
    "DataLoader",
    "collate_numpy",
    "to_device",
    "default_collate",
    "DatasetError",
    "DatasetNotFoundError",
    "load_digits",
    "digits_split",
    "read_idx",
    "load_mnist",
    "load_cifar10",
    "stdlib_text",
    "CharCorpus",
    "load_text",
    "LMWindowDataset",
    "random_windows",
]
