"""The transforms pytorch/examples use, on the stand-in datasets' numpy images (H, W[, C])."""
from __future__ import annotations

import numpy as np


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ToTensor:
    """uint8 (H, W[, C]) -> float32 tensor (C, H, W) in [0, 1]."""

    def __call__(self, img):
        import torch
        a = np.asarray(img, dtype=np.float32) / 255.0
        a = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(a))


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = tuple(mean), tuple(std)

    def __call__(self, t):
        import torch
        m = torch.tensor(self.mean, dtype=t.dtype).reshape(-1, 1, 1)
        s = torch.tensor(self.std, dtype=t.dtype).reshape(-1, 1, 1)
        return (t - m) / s


class _SameSize:
    """Resize / CenterCrop: the stand-in datasets are made at the requested size already."""

    def __init__(self, size, *args, **kwargs):
        self.size = size

    def __call__(self, img):
        h = img.shape[0] if isinstance(img, np.ndarray) else img.shape[-2]
        want = self.size if isinstance(self.size, int) else self.size[0]
        if h != want:
            raise ValueError(f"torchvision stand-in: {type(self).__name__}({self.size}) of an "
                             f"image of height {h}: make the dataset at the wanted size")
        return img


class Resize(_SameSize):
    pass


class CenterCrop(_SameSize):
    pass
