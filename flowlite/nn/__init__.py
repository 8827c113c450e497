"""flowlite.nn: PyTorch's `torch.nn` on lazy tensors.

`Module` (registration, traversal, state_dict with PyTorch key names and layouts, modes),
`Parameter`, containers, layers, `functional`, `init` and `utils`.  Layers record few ops per
call; BatchNorm's running statistics and Dropout's RNG advance are pending nodes of the same
graph, so a training step stays one executable.
"""
from . import functional, init, layers as _layers, utils
from .containers import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .layers import *  # noqa: F401,F403
from .module import Module, Parameter
from .rnn import GRU, LSTM, RNN
from . import parallel
from .parallel import DataParallel

__all__ = ["RNN", "LSTM", "GRU", "Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "functional", "init", "utils", "parallel", "DataParallel"] + sorted(
    k for k, v in vars(_layers).items() if isinstance(v, type) and not k.startswith("_"))
