"""The data train.py trains on: the image datasets (standardised with the training set's
statistics), the text corpus, and the loader whose batches a resumed run replays exactly."""
from __future__ import annotations

import numpy as np

from trainer.cli import LM_CONTEXT, CLIError


class ImageData:
    def __init__(self, name, train_x, train_y, test_x, test_y):
        # Standardise each channel with the training set's statistics.
        axes = (0, 2, 3)
        mean = train_x.mean(axis=axes, keepdims=True)
        std = train_x.std(axis=axes, keepdims=True) + 1e-6
        self.name = name
        self.train_x = ((train_x - mean) / std).astype(np.float32)
        self.test_x = ((test_x - mean) / std).astype(np.float32)
        self.train_y, self.test_y = train_y.astype(np.int32), test_y.astype(np.int32)
        self.channels, self.size = train_x.shape[1], train_x.shape[2]
        self.num_classes = 10

    def describe(self):
        return (f"{self.name}: {len(self.train_y)} training and {len(self.test_y)} test images "
                f"of {self.channels}x{self.size}x{self.size}")


def load_data(args):
    from flowlite import data

    try:
        if args.data == "digits":
            return ImageData("digits", *data.digits_split(test_fraction=0.2, seed=0))
        if args.data in ("mnist", "fashion-mnist"):
            tr = data.load_mnist(args.data_dir, "train", kind=args.data)
            te = data.load_mnist(args.data_dir, "test", kind=args.data)
            return ImageData(args.data, *tr, *te)
        if args.data == "cifar10":
            tr = data.load_cifar10(args.data_dir, "train")
            te = data.load_cifar10(args.data_dir, "test")
            return ImageData("cifar10", *tr, *te)
        # The stdlib corpus is read as ASCII (128 fixed ids: the benchmark GPT's vocabulary);
        # a user's file keeps its own character set.
        return data.load_text(args.text_file, ascii_only=args.text_file is None)
    except data.DatasetError as e:
        raise CLIError(str(e)) from None


def make_loader(args, ds, lm):
    from flowlite import data

    if lm:
        T = LM_CONTEXT[args.model]
        if len(ds.train) <= T:
            raise CLIError(f"the training split has {len(ds.train)} characters, fewer than one "
                           f"window of {T + 1}; use a longer --text-file")
        train = data.LMWindowDataset(ds.train, T)
    else:
        train = data.TensorDataset(ds.train_x, ds.train_y)
    # drop_last: every step sees the same batch shape, so one executable serves them all.
    loader = data.DataLoader(train, batch_size=args.batch_size, shuffle=True, seed=args.seed,
                             drop_last=True, device=args.fl_device)
    if len(loader) == 0:
        raise CLIError(f"--batch-size {args.batch_size} is larger than the training set "
                       f"({len(train)} items)")
    return loader


def batches_from(loader, step):
    """The training batches from global step `step` on: epoch e is the loader's e-th shuffle,
    so a resumed run replays exactly the batches the interrupted run would have seen."""
    epoch, skip = divmod(step, len(loader))
    loader.set_epoch(epoch)
    while True:
        # `with`: closing this generator also stops (and joins) the loader's prefetch thread
        with iter(loader) as epoch_batches:
            for batch in epoch_batches:
                if skip:
                    skip -= 1
                    continue
                yield batch
