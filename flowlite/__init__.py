"""flowlite: PyTorch-style eager-looking code, one compiled XLA executable per step.

Tensors are lazy: every op records an IR node; `loss.backward()` records the
backward pass with flowlite's own tape; a sync (explicit, at the end of
`Optimizer.step()`, or when a value must reach the host) compiles the pending
graph once through JAX/XLA, caches it by structure and replays it afterwards.
"""
from __future__ import annotations

from . import xla_flags as _xla_flags  # noqa: F401  (first: XLA reads its flags once)
from . import dtypes as _dtypes
from .dtypes import (DType, float32, float16, bfloat16, float64, int8, int16, int32, int64,
                     uint8, uint32, bool_ as bool, half, double, long, set_default_dtype,
                     get_default_dtype)
from .dtypes import float as float  # noqa: PLC0414
from .dtypes import int as int  # noqa: PLC0414
from .device import device, Device, default_device, set_default_device
from .matmul_precision import get as get_float32_matmul_precision
from .matmul_precision import set as set_float32_matmul_precision
from .tensor import Tensor, Size, tensor, from_numpy, from_jax
from . import ops as _ops
from . import tensor_methods as _tensor_methods  # noqa: F401
from .tensor_methods import isclose, allclose, equal, diag, LEGACY_TYPES as _LEGACY
globals().update(_LEGACY)    # FloatTensor, LongTensor, ...: torch's legacy constructors
# every op declared `top` (@torch_op in flowlite/ops): flowlite.zeros, flowlite.exp, ...
globals().update({_n: _e.fn for _n, _e in _ops.OPS.items() if _e.top})
from .views import (  # PyTorch's view ops: their results alias the input (flowlite.views)
    reshape, flatten, unflatten, squeeze, unsqueeze, permute, transpose, swapaxes, swapdims,
    movedim, moveaxis, t, narrow, select, split, chunk, unbind, broadcast_to, diagonal,
    as_strided)
from .random import (manual_seed, seed, initial_seed, rand, randn, randint, randperm, rand_like,
                     randn_like, get_rng_state, set_rng_state, multinomial)
from .tape import no_grad, enable_grad, set_grad_enabled, is_grad_enabled
from . import autograd as _autograd, executor as _executor
from .metrics import user_site as _user_site


clear_cache = _executor.clear_cache
set_cache_limit = _executor.set_cache_limit
from .buckets import set_buckets, buckets_enabled  # noqa: E402
# checked execution (index bounds, integer division by zero) and its errors
from .checks import (set_checks, checks_enabled, IndexOutOfRangeError,  # noqa: E402
                     IntegerDivisionByZeroError)
OutOfMemoryError = _executor.OutOfMemoryError


def sync() -> None:
    """Run all pending work now (one executable per device); returns once it is enqueued."""
    _executor.sync(f"flowlite.sync() at {_user_site(2)}")


from .serialization import save, load
from .control_flow import scan
from .compile import compile
from . import metrics
from . import debug
from . import distributed
from .debug import strict, eager, detect_anomaly



def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of `outputs` w.r.t. `inputs` (like torch.autograd.grad), as lazy tensors."""
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    ins_single = isinstance(inputs, Tensor)
    ins = [inputs] if ins_single else list(inputs)
    if grad_outputs is None:
        gos = [None] * len(outs)
    elif isinstance(grad_outputs, Tensor):
        gos = [grad_outputs]
    else:
        gos = list(grad_outputs)
    grads = []
    for o, g in zip(outs, gos):
        if g is None:
            if o.shape != ():
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs "
                                   f"(output of shape {tuple(o.shape)})")
            g = ones_like(o)
        grads.append(g)
    if retain_graph is None:
        retain_graph = create_graph
    res = _autograd.run_backward(outs, grads, retain_graph=retain_graph,
                                create_graph=create_graph, inputs=ins, accumulate=False,
                                allow_unused=allow_unused)
    return tuple(res)


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def numel(x) -> int:
    return x.numel()


__version__ = "0.1.0"

from . import extend  # noqa: E402,F401  (the extension API nn/optim/data build on)
from . import nn, optim, data  # noqa: E402  (fl.nn, fl.optim, fl.data like torch.nn/optim)
# PyTorch's other namespaces, so `import flowlite as torch` reaches torch.utils.data,
# torch.cuda, torch.accelerator, torch.backends.cudnn (see flowlite.run for `import torch`)
from . import utils, cuda, accelerator, backends, onnx, amp  # noqa: E402
cuda.amp = amp      # torch.cuda.amp.GradScaler / autocast
from .data import Generator  # noqa: E402

# Lazy tracing allocates a few small objects per op; Python's full (generation-2) garbage
# collections would rescan the ~100k long-lived objects JAX creates at import on every
# pass.  Freezing them once keeps those pauses proportional to flowlite's own objects.
import gc as _gc

_gc.freeze()
