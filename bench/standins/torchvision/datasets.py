"""Synthetic MNIST and FakeData with torchvision's item formats (a uint8 image, an int label)."""
from __future__ import annotations

import os

import numpy as np


def _size(train: bool) -> int:
    key = "REAL_PROGRAMS_DATASET_SIZE" if train else "REAL_PROGRAMS_TEST_SIZE"
    return int(os.environ.get(key, "2048" if train else "512"))


class _Images:
    def __init__(self, images, labels, transform=None, target_transform=None):
        self.images, self.labels = images, labels
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img, label = self.images[i], int(self.labels[i])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return img, label


class MNIST(_Images):
    """28x28 uint8 digits (random strokes) with labels 0-9; `download` is ignored."""

    def __init__(self, root, train=True, transform=None, target_transform=None,
                 download=False):
        n = _size(train)
        rng = np.random.default_rng(1 if train else 2)
        images = (rng.random((n, 28, 28)) < 0.2).astype(np.uint8) * 255
        super().__init__(images, rng.integers(0, 10, n), transform, target_transform)


class FakeData(_Images):
    """torchvision.datasets.FakeData: random images of `image_size` (C, H, W)."""

    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None,
                 target_transform=None, random_offset=0):
        size = int(os.environ.get("REAL_PROGRAMS_DATASET_SIZE", size))
        rng = np.random.default_rng(random_offset)
        c, h, w = image_size
        images = rng.integers(0, 256, (size, h, w, c), dtype=np.uint8)
        super().__init__(images, rng.integers(0, num_classes, size), transform,
                         target_transform)
