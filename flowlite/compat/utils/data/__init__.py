"""`flowlite.utils.data`: PyTorch's `torch.utils.data`, where PyTorch code imports it from.

Everything is `flowlite.data`'s (one implementation): Dataset, IterableDataset,
TensorDataset, Subset, ConcatDataset, ChainDataset, StackDataset, random_split, DataLoader,
the samplers, default_collate / default_convert, get_worker_info.  The torch submodules
(`torch.utils.data.distributed`, `.sampler`, `.dataloader`, `.dataset`) resolve here too.

Layer: compat — imports data.
"""
from ....data import (BatchSampler, ChainDataset, ConcatDataset, DataLoader, Dataset,
                      DistributedSampler, IterableDataset, RandomSampler, Sampler,
                      SequentialSampler, StackDataset, Subset, SubsetRandomSampler, TensorDataset,
                      WeightedRandomSampler, WorkerInfo, default_collate, default_convert,
                      get_worker_info, random_split)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "ChainDataset", "StackDataset", "random_split", "DataLoader", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "DistributedSampler", "default_collate",
           "default_convert", "get_worker_info", "WorkerInfo"]
