"""A CIFAR-style residual network (He et al., 2016, section 4.2), small by default.

A residual block learns a *correction* F(x) to its input and outputs relu(x + F(x)). The
identity path lets gradients flow straight through many layers, which is what makes deep
networks trainable. BatchNorm after every convolution keeps activations well scaled; it
behaves differently in training (batch statistics, running averages updated) and in
evaluation (the running averages), so remember `model.train()` / `model.eval()`.
"""
from __future__ import annotations

from flowlite import nn


class BasicBlock(nn.Module):
    """conv3×3 → BN → ReLU → conv3×3 → BN, plus a shortcut, then ReLU.

    When the block changes the shape (stride 2 halves the image, or the width changes) the
    identity no longer fits, so the shortcut becomes a 1×1 convolution with BatchNorm
    ("option B" of the paper) that projects x to the new shape.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        # bias=False: a BatchNorm follows and has its own bias, a conv bias would be redundant.
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """stem (conv3×3 → BN → ReLU) → three stages of BasicBlocks → global average pool → fc.

    blocks: blocks per stage. (1, 1, 1) is ResNet-8 (1 + 2·3 conv layers + fc); the paper's
            CIFAR ResNet-20/32/56 are (3,3,3), (5,5,5), (9,9,9).
    widths: channels per stage; stages 2 and 3 halve the image (stride 2).
    Works on any image size that survives two halvings: 3×32×32 CIFAR (32 → 16 → 8) and the
    1×8×8 digits (8 → 4 → 2) alike, because the head pools globally.
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, blocks=(1, 1, 1),
                 widths=(16, 32, 64)):
        super().__init__()
        if len(blocks) != len(widths):
            raise ValueError(f"ResNet: blocks {tuple(blocks)} and widths {tuple(widths)} must "
                             "have one entry per stage")
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        stages = []
        width = widths[0]
        for i, (n, w) in enumerate(zip(blocks, widths)):
            stride = 1 if i == 0 else 2
            layers = []
            for j in range(n):
                layers.append(BasicBlock(width, w, stride if j == 0 else 1))
                width = w
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(width, num_classes)
        # Kaiming-normal convolutions (fan_out, for ReLU) as in the paper and torchvision.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.stages(self.stem(x))
        x = x.mean(dim=(2, 3))            # global average pool: (B, C, H, W) → (B, C)
        return self.fc(x)


def resnet8(in_channels: int = 3, num_classes: int = 10) -> ResNet:
    return ResNet(in_channels, num_classes, blocks=(1, 1, 1))


def resnet20(in_channels: int = 3, num_classes: int = 10) -> ResNet:
    return ResNet(in_channels, num_classes, blocks=(3, 3, 3))
