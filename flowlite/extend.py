"""flowlite.extend — the one public API for building on flowlite's core.

Layer: extension API — imports distributed, engine.cache, engine.device, engine.dtypes,
engine.errors, engine.executor, engine.ir, engine.mesh, engine.metrics, engine.phases,
engine.runtime, engine.tape, frontend.checks, frontend.compile, frontend.control_flow,
frontend.ops, frontend.ops._autocast, frontend.primitives, frontend.random, frontend.recording,
frontend.surface, frontend.tensor. `flowlite.nn`, `flowlite.optim`, `flowlite.data` and user
code that defines its own fused operations import this module (never `executor`, `lowering`,
`ir` or the tape), so the core can change underneath them.

What it offers:

* the lazy tensor and the front end: `Tensor`, `Size`, `ops` (PyTorch-named functions),
  `random`, `dtypes`, `no_grad` / `enable_grad`, `scan`, creation from host data;
* `surface`: the table of PyTorch names flowlite does not implement (`surface.install(group,
  namespace)` adds their NotImplementedError stubs to a layer's namespace);
* defining a fused primitive — its lowering to jax, its VJP written in flowlite ops (so it
  differentiates again) and, optionally, its shape/dtype — and recording it:

      def lower(attrs, x):            # jax values in, jax value out
          return jnp.tanh(x) * attrs[0]
      def vjp(attrs, ins, out, g):    # flowlite tensors in, one cotangent per input out
          return (g * (1 - out * out / (attrs[0] * attrs[0])) * attrs[0],)
      scaled_tanh = extend.primitive("scaled_tanh", lower, vjp)
      y = extend.record(scaled_tanh, (x,), attrs=(2.0,))     # shape inferred once

* rebinding a tensor to a new value (in-place semantics, or replacing a parameter's value
  while keeping its identity), and recording an update whose outputs replace tensors in
  place (an optimizer step);
* reading what a tensor is without a sync: `is_pending`, `device_array`;
* autocast (`autocast.lower(*xs)`, `autocast.fp32(*xs)`: an op's tensor arguments cast as
  PyTorch's autocast casts them for its lower-precision and fp32 lists; the arguments
  themselves outside an autocast region) and the region's state (`autocast.current()`,
  `autocast.set_current(state)`);
* `on_clear_cache(fn)`: `fn()` runs in every `flowlite.clear_cache()` (a layer's own caches
  of device data are dropped with the executables);
* primitive-level recorders for layers built below PyTorch's names (`nn.functional`):
  `conv(x, w, attrs, bias)`, `conv_input_grad(g, w, attrs, x_shape)`,
  `reduce_window(x, attrs)`, `slice_strided(x, starts, stops, steps)`,
  `pad_general(x, lo, hi, interior, value)`, `take_along(x, index, dim)` (unchecked indices);
* checked execution: `check_index(index, size, op, out=result)` records an in-graph bounds
  check of an index tensor that raises IndexError at the sync (flowlite.checks);
* devices and placement: `Device`, `device(...)` (PyTorch's `torch.device`), and `put`
  (place a jax array on a device or sharding, across processes too);
* data parallelism over device meshes (`Mesh`, `data_parallel`, `shard_batch`,
  `global_batch`: flowlite.distributed's GSPMD placement, for `nn.parallel`);
* the run summary's phase clock (flowlite.engine.phases): `clock.on` is true while
  `--summary` / `FLOWLITE_SUMMARY=1` times the host's phases; then `timed(phase, fn, *args)`
  counts fn's time as "data", "backward", ... (`untimed(phase)`: not inside it already);
  an optimizer step (a training iteration) is `prev = step_enter()`, its recording,
  `step_sync()`, its sync, `step_leave(prev)` — or `timed_step(fn, *args)` for a step whose
  parts are timed by what they are;
* `name_grad_fn(out, "EmbeddingBackward0")`: the autograd node name PyTorch prints for the
  call that made `out` (`grad_fn=<...>`), where the primitives recorded don't say it;
* a Tensor subclass whose constructor takes a tensor (`nn.Parameter`) initialises itself as
  a handle on that tensor's value with `share_into(self, t)`.
"""
from __future__ import annotations

from .engine import dtypes, ir as _ir
from .frontend import ops, primitives as prims, random, surface
from .frontend.ops import _autocast as autocast
from .frontend.control_flow import scan
from .engine.device import Device, device
from .engine.errors import (ArgumentError, DTypeError, IndexRangeError, IndexShapeError,
                            LayerArgumentError, UnsupportedError, UnsupportedModeError)
from .engine.ir import Prim
from .engine.mesh import put
from .engine.metrics import user_site, user_stacklevel
from .engine.runtime import rt as _rt
from .engine.phases import clock, step_enter, step_leave, step_sync, timed, timed_step, untimed
from .frontend.tensor import Size, Tensor, from_jax, from_numpy, name_grad_fn, tensor
from .engine.tape import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .frontend.recording import (host_scalar, rebind, record, record_into, set_value, share,
                                 share_into)
from .engine.cache import on_clear as on_clear_cache
from .engine.executor import sync as _sync, verify_pending as _verify_pending
from .frontend.checks import index_in_range as check_index, checks_enabled
from .frontend.compile import register_guard
from .distributed import Mesh, data_parallel, global_batch, shard_batch

__all__ = ["Tensor", "Size", "ops", "prims", "random", "surface", "autocast", "dtypes", "scan",
           "no_grad",
           "enable_grad", "is_grad_enabled", "set_grad_enabled", "from_numpy", "from_jax",
           "tensor", "Prim", "primitive", "record", "record_into", "rebind", "set_value",
           "share", "share_into", "host_scalar", "is_pending", "device_array", "sync",
           "user_site", "user_stacklevel", "register_guard", "Device", "device", "put", "Mesh",
           "data_parallel", "shard_batch", "global_batch", "check_index", "checks_enabled",
           "on_clear_cache", "conv", "conv_input_grad", "reduce_window", "slice_strided",
           "pad_general", "take_along", "ArgumentError", "DTypeError", "IndexRangeError",
           "IndexShapeError", "LayerArgumentError", "UnsupportedError", "UnsupportedModeError",
           "clock", "timed", "untimed", "step_enter", "step_sync", "step_leave", "timed_step",
           "name_grad_fn"]

_DATA = _ir.DATA

# primitive-level recorders (see the module docstring): the front end's own, under public names
conv = ops._conv_raw
conv_input_grad = ops._conv_input_grad
reduce_window = ops._window_raw
slice_strided = ops._slice_prim
pad_general = ops._pad_prim
take_along = ops._take_along_prim


def primitive(name, lower, vjp=None, *, multi=False, nondiff=False, inplace=None,
              elementwise=False) -> Prim:
    """A new primitive.

    lower(attrs, *jax_values) -> jax value (a tuple when `multi`): runs only while an
        executable is built, inside jax.jit;
    vjp(attrs, inputs, output, cotangent) -> one cotangent Tensor (or None) per input,
        written in flowlite ops; None with `nondiff=True` for non-differentiable ops;
    inplace(attrs, j) -> index of the input that output j replaces (its donated buffer is
        reused), for update-style primitives;
    elementwise: each output element depends on the same element of each input only (XLA
        fuses it with its neighbours; length buckets pad it freely).
    Record it with `record(prim, inputs, attrs)`; attrs must be hashable (they are part of
    the graph key, so changing them recompiles: pass changing values as tensors).
    """
    return Prim(name, lower, vjp, multi=multi, nondiff=nondiff, inplace=inplace,
                elementwise=elementwise)


def is_pending(t: Tensor) -> bool:
    """True while `t` is an unexecuted graph node (reading it would sync)."""
    return t.is_pending


def device_array(t: Tensor):
    """The jax.Array behind a materialised tensor (None while it is pending, or for a host
    scalar, which has no device buffer)."""
    _verify_pending()
    n = t._node
    return n.value if n.op is _DATA else None


def loading(fn):
    """`fn` (a DataLoader's batch maker) running as data loading: arithmetic and casts of host
    data in it (a dataset's per-sample transforms) are done on the host with numpy, so the
    batch is host data, one argument of the step (flowlite.engine.host_data)."""
    def load(*args):
        local = _rt.local
        local.loading += 1
        try:
            return fn(*args)
        finally:
            local.loading -= 1
    return load


def recorded_since_sync() -> int:
    """How many graph nodes this thread recorded since its last full sync (backward
    included): the size of the work a sync would run, or part of which a host read ran."""
    return _rt.local.stream.nxt


def sync(cause: str = "flowlite.extend.sync()") -> None:
    """Run all pending work now; `cause` is what `flowlite.metrics.report()` shows.  A failed
    check of this work raises at the next sync or host read (an optimizer step's sync does
    not wait for the step to finish)."""
    _sync(cause, defer_checks=True)
