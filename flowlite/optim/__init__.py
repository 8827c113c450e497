"""flowlite.optim: PyTorch-style optimizers whose math is optax's."""
from .optimizer import Optimizer, Optax, required  # noqa: F401
