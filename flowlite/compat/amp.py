"""`torch.amp` / `torch.cuda.amp` for ported scripts: `autocast` and `GradScaler`.

Layer: compat — imports cuda, extend. GPU presence).

`autocast("cpu", dtype=bfloat16 or float16)` is PyTorch's CPU autocast: inside the region
(a context manager or a decorator; per thread; nested regions and `enabled=False` restore the
state around them) the ops of PyTorch's CPU lower-precision list — matmul/mm/bmm/`@`, linear,
conv1d/2d/3d, conv_transpose1d/2d/3d, prelu, scaled_dot_product_attention, and einsum where
PyTorch's reaches bmm — cast their floating (not float64) inputs to the region's dtype and
compute and return in it; those of its fp32 list that flowlite has (the losses, prod, 3-D
pooling, reflect/replicate padding) compute in float32; every other op follows ordinary
promotion.  The casts are differentiable: float32 parameters get float32 gradients, and the
backward pass is never recast.  Autocast only changes what is recorded, so a training step
under autocast is still one executable, compiled once.

`autocast("cuda", ...)` (and `torch.cuda.amp.autocast`) changes nothing and says so once:
PyTorch's CUDA lists differ from the CPU ones (softmax, layer_norm, exp, sum... in float32),
and flowlite implements the CPU ones only.

`GradScaler` follows PyTorch: without a GPU it
disables itself with a warning (as torch.cuda.amp.GradScaler does without CUDA) and then
scale/unscale_/step/update pass through; enabled, it does dynamic loss scaling — the
inf/nan check of the unscaled gradients is one host read per step.
"""
from __future__ import annotations

import functools
import math
import warnings

from .. import extend
from .cuda import is_available as _gpu_available

__all__ = ["autocast", "GradScaler", "is_autocast_available", "is_autocast_enabled",
           "get_autocast_dtype"]

_said = {"autocast": False}

# device types PyTorch's autocast accepts; flowlite implements "cpu"
_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "ipu", "mtia", "maia",
                 "privateuseone")
_DEFAULT_DTYPE = {"cpu": "bfloat16"}       # every other device type: float16
_CPU_DTYPES = ("bfloat16", "float16")


def is_autocast_available(device_type: str) -> bool:
    return device_type in _DEVICE_TYPES


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    state = extend.autocast.current()
    return state is not None and device_type in state


def get_autocast_dtype(device_type: str):
    state = extend.autocast.current()
    if state is not None and device_type in state:
        return state[device_type]
    return getattr(extend.dtypes, _DEFAULT_DTYPE.get(device_type, "float16"))


class autocast:
    """PyTorch's `torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)`:
    a context manager and a decorator (see the module docstring)."""

    def __init__(self, device_type="cuda", dtype=None, enabled=True, cache_enabled=None):
        if isinstance(device_type, bool):           # torch.cuda.amp.autocast(enabled, ...)
            device_type, enabled = "cuda", device_type
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in _DEVICE_TYPES:
            raise RuntimeError(f"User specified an unsupported autocast device_type "
                               f"'{device_type}'")
        self.device = device_type
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else \
            extend.dtypes.canonical(extend.dtypes.from_any(dtype))
        enabled = bool(enabled)
        if enabled and device_type == "cpu" and self.fast_dtype.name not in _CPU_DTYPES:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nCPU Autocast only supports dtype of torch.bfloat16, "
                          "torch.float16 currently.", stacklevel=2)
            enabled = False
        if enabled and device_type != "cpu":
            if not _said["autocast"]:
                _said["autocast"] = True
                warnings.warn(f"flowlite: autocast(device_type={device_type!r}) has no effect "
                              "— flowlite implements CPU autocast only (PyTorch's CUDA lists "
                              "differ); ops compute in their tensors' own dtypes. Cast the "
                              "model, e.g. model.to(flowlite.bfloat16), for lower precision",
                              stacklevel=2)
            self._active = False
        else:
            self._active = True
        self._enabled = enabled
        self._prev = []

    def __enter__(self):
        prev = extend.autocast.current()
        self._prev.append(prev)
        if self._active:
            state = dict(prev) if prev else {}
            if self._enabled:
                state[self.device] = self.fast_dtype
            else:
                state.pop(self.device, None)
            extend.autocast.set_current(state)
        return self

    def __exit__(self, *exc):
        extend.autocast.set_current(self._prev.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*a, **k):
            with self:
                return fn(*a, **k)
        return wrapped


class GradScaler:
    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        if enabled and not _gpu_available():
            warnings.warn("flowlite: GradScaler is enabled, but no GPU/TPU is available. "
                          "Disabling.", stacklevel=2)
            enabled = False
        self._enabled = enabled
        self._scale = float(init_scale)
        self._growth, self._backoff = float(growth_factor), float(backoff_factor)
        self._interval = int(growth_interval)
        self._good = 0
        self._unscaled = set()
        self._found_inf = False

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        return outputs * self._scale if self._enabled else outputs

    def unscale_(self, optimizer) -> None:
        if not self._enabled or id(optimizer) in self._unscaled:
            return
        self._unscaled.add(id(optimizer))
        inv = 1.0 / self._scale
        bad = None
        with extend.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    p.grad.mul_(inv)
                    b = (~extend.ops.isfinite(p.grad)).any()
                    bad = b if bad is None else (bad | b)
        self._found_inf = bool(bad.item()) if bad is not None else False

    def step(self, optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        self.unscale_(optimizer)
        if self._found_inf:
            return None        # skipped, as PyTorch does when the gradients overflowed
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        elif self._found_inf:
            self._scale *= self._backoff
            self._good = 0
        else:
            self._good += 1
            if self._good % self._interval == 0:
                self._scale *= self._growth
        if not math.isfinite(self._scale) or self._scale <= 0:
            raise RuntimeError(f"GradScaler: scale became {self._scale}")
        self._unscaled.clear()
        self._found_inf = False

    def state_dict(self) -> dict:
        return {"scale": self._scale, "growth_factor": self._growth,
                "backoff_factor": self._backoff, "growth_interval": self._interval,
                "_growth_tracker": self._good} if self._enabled else {}

    def load_state_dict(self, state) -> None:
        if state:
            self._scale = float(state["scale"])
            self._good = int(state.get("_growth_tracker", 0))
