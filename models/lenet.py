"""LeNet: a small convolutional network, the classic first CNN.

Two conv → ReLU → max-pool stages extract local stroke features; two Linear layers classify.
Convolutions share their weights across the image, so this model needs far fewer parameters
than the MLP to beat it on images.
"""
from __future__ import annotations

from flowlite import nn


def _stage_out(size: int, padding: int) -> int:
    """Side length after a 3×3 conv (stride 1) and a 2×2 max-pool."""
    return (size + 2 * padding - 2) // 2


class LeNet(nn.Module):
    """conv1 (in→16, 3×3) → ReLU → pool 2 → conv2 (16→32, 3×3) → ReLU → pool 2 → flatten
    → fc1 (→128) → ReLU → fc2 (→num_classes).

    For 28×28 images (MNIST) the convolutions are unpadded, as in the original LeNet:
    28 → 26 → 13 → 11 → 5, so fc1 sees 32·5·5 = 800 features (the benchmark's layout).
    An 8×8 digit would shrink to nothing that way, so when two unpadded stages leave less than
    2×2 pixels the convolutions pad by one pixel instead ("same" size): 8 → 4 → 2.
    Pass `padding` to choose yourself.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28,
                 padding: int | None = None):
        super().__init__()
        if padding is None:
            padding = 0 if _stage_out(_stage_out(image_size, 0), 0) >= 2 else 1
        side = _stage_out(_stage_out(image_size, padding), padding)
        if side < 1:
            raise ValueError(f"LeNet: images of {image_size}×{image_size} are too small for two "
                             f"conv+pool stages with padding={padding}")
        self.conv1 = nn.Conv2d(in_channels, 16, kernel_size=3, padding=padding)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=padding)
        self.pool = nn.MaxPool2d(2)       # no parameters: one module serves both stages
        self.relu = nn.ReLU()
        self.fc1 = nn.Linear(32 * side * side, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = x.flatten(1)                  # NCHW order, as torch.flatten(x, 1)
        x = self.relu(self.fc1(x))
        return self.fc2(x)
