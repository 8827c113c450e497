"""flowlite: PyTorch-style eager-looking code, one compiled XLA executable per step.

Tensors are lazy: every op records an IR node; `loss.backward()` records the
backward pass with flowlite's own tape; a sync (explicit, at the end of
`Optimizer.step()`, or when a value must reach the host) compiles the pending
graph once through JAX/XLA, caches it by structure and replays it afterwards.

Layer: package — imports autograd, compat.accelerator, compat.amp, compat.backends, compat.cpu,
compat.cuda, compat.onnx, compat.profiler, compat.utils, data, debug, distributed,
engine.buckets, engine.cache, engine.cuts, engine.device, engine.dtypes, engine.executor,
engine.matmul_precision, engine.metrics, engine.reroll, engine.rollback, engine.tape,
engine.xla_flags, extend, fft, formats.serialization, frontend.checks, frontend.compile,
frontend.control_flow, frontend.ops, frontend.printing, frontend.random, frontend.surface,
frontend.tensor, frontend.tensor_extras, frontend.tensor_methods, frontend.views, linalg, nn,
nn.torch_level, optim, special.
"""
from __future__ import annotations

from .engine import xla_flags as _xla_flags  # noqa: F401  (first: XLA reads its flags once)
from .engine import dtypes as _dtypes
from .engine.dtypes import (DType, float32, float16, bfloat16, float64, int8, int16, int32, int64,
                            uint8, uint32, bool_ as bool, half, double, long, set_default_dtype,
                            get_default_dtype)
from .engine.dtypes import float as float  # noqa: PLC0414
from .engine.dtypes import int as int  # noqa: PLC0414
from .engine.device import device, Device, default_device, set_default_device
from .engine.matmul_precision import get as get_float32_matmul_precision
from .engine.matmul_precision import set as set_float32_matmul_precision
from .frontend.tensor import Tensor, Size, tensor, from_numpy, from_jax
from .frontend.printing import set_printoptions, get_printoptions, printoptions
from .frontend import ops as _ops
from .frontend import tensor_methods as _tensor_methods  # noqa: F401
from .frontend.tensor_methods import isclose, allclose, equal, diag, LEGACY_TYPES as _LEGACY
globals().update(_LEGACY)    # FloatTensor, LongTensor, ...: torch's legacy constructors
# every op declared `top` (@torch_op in flowlite/frontend/ops): flowlite.zeros, flowlite.exp, ...
globals().update({_n: _e.fn for _n, _e in _ops.OPS.items() if _e.top})
# PyTorch's view ops: their results alias the input (flowlite.frontend.views)
from .frontend.views import (reshape, flatten, ravel, unflatten, squeeze, unsqueeze, permute,
                             transpose, swapaxes, swapdims, movedim, moveaxis, t, narrow, select,
                             split, chunk, unbind, broadcast_to, diagonal, as_strided)
from .frontend.views import (tensor_split, hsplit, vsplit, dsplit, adjoint, broadcast_tensors,
                             atleast_1d, atleast_2d, atleast_3d)
# PyTorch's remaining small names (torch.exp_, *_copy, gradient, isin, promote_types, ...)
from .frontend import tensor_extras as _tensor_extras  # noqa: E402
globals().update({_n: _f for _n, _f in _tensor_extras.TOP.items() if _n not in globals()})
from .frontend.random import (manual_seed, seed, initial_seed, rand, randn, randint, randperm,
                              rand_like, randn_like, randint_like, get_rng_state, set_rng_state,
                              multinomial, normal, bernoulli, default_generator, Generator)
from .engine.tape import no_grad, enable_grad, set_grad_enabled, is_grad_enabled
from .engine import executor as _executor
from .engine.metrics import user_site as _user_site


from .engine.cache import clear_cache, set_cache_limit
from .engine.buckets import set_buckets, buckets_enabled  # noqa: E402
from .engine.cuts import set_graph_cuts, graph_cuts_enabled  # noqa: E402
from .engine.reroll import set_reroll, reroll_enabled  # noqa: E402
# checked execution (index bounds, integer division by zero) and its errors
from .frontend.checks import (set_checks, checks_enabled, IndexOutOfRangeError,  # noqa: E402
                              IntegerDivisionByZeroError)
from .engine.rollback import OutOfMemoryError  # noqa: E402


def sync() -> None:
    """Run all pending work now (one executable per device); returns once it is enqueued."""
    _executor.sync(f"flowlite.sync() at {_user_site(2)}")


from .formats.serialization import save, load
from .frontend.control_flow import scan
from .frontend.compile import compile
from .engine import metrics
from .frontend import random
from .formats import serialization
from . import autograd
from . import linalg, special, fft  # noqa: E402  (torch.linalg, torch.special, torch.fft)
from .autograd import grad, inference_mode, is_inference_mode_enabled
from . import debug
from . import distributed
from .debug import strict, eager, detect_anomaly


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def numel(x) -> int:
    return x.numel()


__version__ = "0.1.0"

from . import extend  # noqa: E402,F401  (the extension API nn/optim/data build on)
from . import nn, optim, data  # noqa: E402  (fl.nn, fl.optim, fl.data like torch.nn/optim)
# torch.conv2d, torch.layer_norm, torch.dropout, ...: nn.functional's, with ATen's signatures
from .nn import torch_level as _nn_torch_level  # noqa: E402
globals().update({_n: _f for _n, _f in _nn_torch_level.TOP.items() if _n not in globals()})
Tensor.hardshrink = nn.functional.hardshrink
Tensor.prelu = nn.functional.prelu
# PyTorch's other namespaces, so `import flowlite as torch` reaches torch.utils.data,
# torch.cuda, torch.accelerator, torch.backends.cudnn (see flowlite.run for `import torch`)
from .compat import utils, cuda, cpu, accelerator, backends, onnx, amp, profiler  # noqa: E402
cuda.amp = amp      # torch.cuda.amp.GradScaler / autocast
autocast = amp.autocast      # torch.autocast is torch.amp.autocast
is_autocast_enabled = amp.is_autocast_enabled
get_autocast_dtype = amp.get_autocast_dtype
is_autocast_available = amp.is_autocast_available

# the PyTorch names flowlite does not implement raise NotImplementedError naming them
# (flowlite/frontend/surface.py: one classified table)
from .frontend import surface as _surface  # noqa: E402
_surface.install("torch", globals())
_surface.install_methods(Tensor)

# Lazy tracing allocates a few small objects per op; Python's full (generation-2) garbage
# collections would rescan the ~100k long-lived objects JAX creates at import on every
# pass.  Freezing them once keeps those pauses proportional to flowlite's own objects.
import gc as _gc

_gc.freeze()
metrics.imported()      # startup ends here; FLOWLITE_SUMMARY=1 starts the run summary
