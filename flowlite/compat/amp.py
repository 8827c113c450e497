"""`torch.amp` / `torch.cuda.amp` for ported scripts: `autocast` and `GradScaler`.

Layer: compat — imports cuda, extend. GPU presence).

flowlite has no automatic mixed precision: ops compute in their tensors' own dtypes (cast a
model with `.to(fl.bfloat16)` for bf16).  So `autocast` is a context manager / decorator
that changes nothing and says so once.  `GradScaler` follows PyTorch: without a GPU it
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

__all__ = ["autocast", "GradScaler"]

_said = {"autocast": False}


class autocast:
    def __init__(self, device_type="cuda", dtype=None, enabled=True, cache_enabled=None):
        self.enabled = enabled
        if enabled and not _said["autocast"]:
            _said["autocast"] = True
            warnings.warn("flowlite: autocast has no effect — ops compute in their tensors' "
                          "own dtypes (no automatic mixed precision); cast the model, e.g. "
                          "model.to(flowlite.bfloat16), for lower precision", stacklevel=2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
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
