"""A multi-layer perceptron classifier: the smallest model that learns handwritten digits.

This is the model `python train.py` trains by default. It is written exactly as you would
write it in PyTorch; nothing here knows that flowlite is lazy. When `train.py` calls
`model(x)`, `loss.backward()` and `opt.step()`, flowlite records the forward pass, the
backward pass and the optimizer update as ONE graph and runs it as ONE compiled XLA
executable, reused on every later step.
"""
from __future__ import annotations

from flowlite import nn


class MLP(nn.Module):
    """Flatten the image, then Linear → ReLU → Linear → ReLU → Linear.

    in_features: pixels per image (64 for the bundled 8×8 digits, 784 for MNIST).
    hidden:      widths of the hidden layers.
    num_classes: size of the output (one logit per class; the loss applies the softmax).

    The layers live in one `nn.Sequential` called `net`, so the state_dict keys are
    `net.0.weight, net.0.bias, net.2.*, net.4.*` — the same names PyTorch would give them,
    and the names the benchmark (bench/jax_reference.py) loads its NumPy initialisation into.
    """

    def __init__(self, in_features: int = 64, hidden=(256, 256), num_classes: int = 10):
        super().__init__()
        layers = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        # Accept images (B, C, H, W) as well as flat vectors (B, features): the data
        # loaders give images, and flattening is free (a reshape, no copy).
        if x.ndim > 2:
            x = x.flatten(1)
        return self.net(x)
