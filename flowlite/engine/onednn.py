"""Batched matmuls through oneDNN inside XLA:CPU programs, opt-in (issue 49 item 2).

Layer: engine — imports nothing of flowlite.

XLA:CPU runs a batched dot (attention's q kᵀ and p v: 96 x 128x128 @ 128x32 in nanoGPT's mid
config) on one thread, with YNNPACK and with Eigen alike: 4.2-5.0 ms on a 2-core AMD EPYC
where PyTorch's bmm takes 2.1.  jaxlib links oneDNN, and its matmul primitive, reached as
XLA's `__onednn$matmul` custom call (run by XLA's OneDnnOpThunk), uses every core: 1.9-2.0 ms.
With FLOWLITE_ONEDNN=1 the CPU lowering of a float32 matmul or two-operand einsum with the
same batch dims on both operands (every matrix dim at least 8) emits that custom call; all
else stays XLA's.  nanoGPT's mid config: step 857-861 -> 790-809 ms (bench/RESULTS.md).

Off by default because, on jaxlib 0.10.2, XLA can't serialize a program that holds the
custom call (`serialize_executable` fails with std::bad_alloc): neither flowlite's store of
executables nor JAX's persistent cache keeps it, so every process compiles such programs
again (nanoGPT's README config, warm first iteration: 1.9 -> 5.3 s).  Where training runs
long, the steady gain outweighs that.  jaxlib 0.12.1 serializes and reloads such programs.

Not XLA's oneDNN *fusion* path (`--xla_cpu_experimental_onednn_fusion_type=dot`): it also
takes the elementwise producers of a dot's operands into the fusion, and when oneDNN's graph
API fails to compile such a partition ("partition compile failed") the process dies of SIGILL
— `jax.jit(lambda a, b, v: (a * b) @ v)` under that flag reproduces it.  The custom call is
one oneDNN matmul primitive on materialised row-major operands, nothing fused.

Only on the jaxlib versions in _TESTED_JAXLIB (the custom call's configuration is XLA-internal;
tests/test_onednn.py checks values, gradients and the call in the program on each) on x86-64.  Decided once, at the first lowering; part of the executable store's key.
"""
from __future__ import annotations

import functools
import json
import os
import platform
import warnings

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax import lax

_TESTED_JAXLIB = ("0.10.", "0.12.")
_MIN_DIM = 8            # smaller matrices: XLA's own dot is as fast (a primitive per call)


@functools.cache
def enabled() -> bool:
    if os.environ.get("FLOWLITE_ONEDNN", "").strip().lower() not in ("1", "on", "true", "yes"):
        return False
    try:
        from importlib.metadata import version
        jl = version("jaxlib")
    except Exception:       # noqa: BLE001 - no version: not a measured build
        return False
    if not jl.startswith(_TESTED_JAXLIB) or \
            platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    # a program holding the custom call can't be written to JAX's persistent cache either:
    # JAX warns at every such compile; the program is simply compiled again next time
    warnings.filterwarnings("ignore", message="Error writing persistent compilation cache")
    return True


# ---- the custom call -------------------------------------------------------------------------
_matmul_p = jax.extend.core.Primitive("flowlite_onednn_matmul")


def _abstract(a, b, *, ta, tb):
    m = a.shape[-1] if ta else a.shape[-2]
    n = b.shape[-2] if tb else b.shape[-1]
    return jax.core.ShapedArray(a.shape[:-2] + (m, n), a.dtype)


def _lower_cpu(ctx, a, b, *, ta, tb):
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo
    from jax.interpreters import mlir
    out = ctx.avals_out[0]
    cfg = json.dumps({"onednn_matmul_config": {"transpose_a": ta, "transpose_b": tb}})

    def row_major(v):       # operands and result dense, last dim fastest
        return ir.DenseIntElementsAttr.get(np.arange(len(v.shape) - 1, -1, -1, dtype=np.int64),
                                           type=ir.IndexType.get())
    op = stablehlo.CustomCallOp(
        [mlir.aval_to_ir_type(ctx.module_context, out)], [a, b],
        ir.StringAttr.get("__onednn$matmul"), has_side_effect=ir.BoolAttr.get(False),
        backend_config=ir.StringAttr.get(cfg),
        api_version=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1),
        operand_layouts=ir.ArrayAttr.get([row_major(v) for v in ctx.avals_in]),
        result_layouts=ir.ArrayAttr.get([row_major(out)]))
    return op.results


_matmul_p.def_abstract_eval(_abstract)
jax.interpreters.mlir.register_lowering(_matmul_p, _lower_cpu, platform="cpu")


def _fits(a, b) -> bool:
    return (a.dtype == np.float32 and b.dtype == np.float32 and a.ndim == b.ndim >= 3
            and a.shape[:-2] == b.shape[:-2]
            and min(a.shape[-2:] + b.shape[-2:]) >= _MIN_DIM and enabled())


def bmm(a, b, ta=False, tb=False):
    """a @ b over equal leading batch dims (ta / tb: the operand's last two dims are
    transposed): oneDNN's matmul in a CPU program where it was measured faster, else
    lax.dot_general.  None when the operands are not such a batched matmul."""
    if not _fits(a, b):
        return None
    nb = a.ndim - 2
    batch = tuple(range(nb))
    dims = (((nb if ta else nb + 1,), (nb + 1 if tb else nb,)), (batch, batch))

    def xla(a, b):
        return lax.dot_general(a, b, dims)

    def onednn(a, b):
        return _matmul_p.bind(a, b, ta=bool(ta), tb=bool(tb))
    return lax.platform_dependent(a, b, cpu=onednn, default=xla)


def einsum(eq: str, a, b):
    """A two-operand einsum that is a batched matmul (one contracted index, one free index
    per operand, shared batch indices — attention's "...le,...se->...ls" and its gradients)
    through `bmm`; None for any other equation (the caller uses jnp.einsum)."""
    if not (a.dtype == np.float32 and b.dtype == np.float32 and min(a.ndim, b.ndim) >= 3
            and enabled()):
        return None
    try:
        ins, out = eq.replace(" ", "").split("->")
        sa, sb = ins.split(",")
    except ValueError:          # implicit output, or not two operands
        return None
    if "..." in sa + sb + out:
        n = a.ndim - (len(sa) - 3) if "..." in sa else 0
        if n != (b.ndim - (len(sb) - 3) if "..." in sb else 0) or n <= 0 or \
                set(_FREE[:n]) & set(eq):
            return None
        sa, sb, out = (s.replace("...", _FREE[:n]) for s in (sa, sb, out))
    if len(sa) != a.ndim or len(sb) != b.ndim:
        return None
    return _as_bmm(sa, sb, out, a, b)


_FREE = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"     # letters for an ellipsis's dims


def _as_bmm(sa, sb, so, a, b):
    if len(set(sa)) != len(sa) or len(set(sb)) != len(sb) or len(set(so)) != len(so):
        return None
    batch = [c for c in so if c in sa and c in sb]
    contract = [c for c in sa if c in sb and c not in so]
    m = [c for c in sa if c not in sb]
    n = [c for c in sb if c not in sa]
    if (len(contract), len(m), len(n)) != (1, 1, 1) or not batch or \
            set(so) != set(batch) | set(m) | set(n) or any(c not in so for c in m + n):
        return None
    (k,), (mi,), (ni,) = contract, m, n
    # each operand: batch dims first (a transpose only if they aren't already), its last two
    # in their own order, told to oneDNN as a transposed operand
    a2, ta = _arrange(a, sa, batch, mi, k)
    b2, tb = _arrange(b, sb, batch, k, ni)
    y = bmm(a2, b2, ta, tb)
    if y is None:
        return None
    have = batch + [mi, ni]
    return y if have == list(so) else jnp.transpose(y, [have.index(c) for c in so])


def _arrange(x, sub, batch, first, second):
    rest = [c for c in sub if c not in batch]            # [first, second] in some order
    order = batch + rest
    if order != list(sub):
        x = jnp.transpose(x, [sub.index(c) for c in order])
    return x, rest != [first, second]
