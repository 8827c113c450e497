"""Matmuls through oneDNN inside XLA:CPU programs, where measured faster (issues 49, 62).

Layer: engine — imports nothing of flowlite.

jaxlib links oneDNN, and its matmul primitive, reached as XLA's `__onednn$matmul` custom call
(run by XLA's OneDnnOpThunk), uses every core and the CPU's bf16 units (AMX, AVX512_BF16):
on a 2-core Xeon with AMX (jaxlib 0.12.1) a bfloat16 2048x768 @ 768x768 takes 1.05 ms where
XLA's dot takes 9.2 (PyTorch 1.2), float32 weight gradients AᵀB 1.7x less; on a 2-core AVX2
EPYC a batched float32 96 x 128x128 @ 128x32 1.9 ms vs 4.5 (XLA runs it on one thread) — but
on the Xeon that one is slower in oneDNN.  So the CPU lowering of a float32 or bfloat16
matmul, nn.Linear or two-operand einsum that fits (equal batch dims, every matrix dim at
least 8) asks `choose`, which times the shape both ways once per CPU (see below).

Modes (`mode`): by default "auto" where programs holding the call serialize (jaxlib 0.12:
flowlite's store of executables and JAX's cache keep them, so a warm start compiles
nothing), "off" on jaxlib 0.10.2, where `serialize_executable` fails with std::bad_alloc
(warm starts would compile again: nanoGPT's README config 1.9 -> 5.3 s).
FLOWLITE_ONEDNN=1 sends every matmul that fits to oneDNN, untimed; =0 none.

Not XLA's oneDNN *fusion* path (`--xla_cpu_experimental_onednn_fusion_type=dot`): it also
takes the elementwise producers of a dot's operands into the fusion, and when oneDNN's graph
API fails to compile such a partition ("partition compile failed") the process dies of SIGILL
— `jax.jit(lambda a, b, v: (a * b) @ v)` under that flag reproduces it.  The custom call is
one oneDNN matmul primitive on materialised row-major operands, nothing fused.

Only on the jaxlib versions in _TESTED_JAXLIB (the custom call's configuration is XLA-internal;
tests/test_onednn.py checks values, gradients and the call in the program on each) on x86-64.
The mode is decided once, at the first lowering, and is part of the executable store's key.
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
_MIN_WORK = 1 << 20     # in "auto", fewer multiply-adds keep XLA's dot untimed (microseconds
                        # either way: not worth a measurement)


_SERIALIZES = ("0.12.",)   # jaxlibs that store programs holding the call: measured by default
_RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
                   "avx_vnni", "amx_bf16", "amx_fp16", "amx_int8", "amx_tile")


def _jaxlib() -> str:
    try:
        from importlib.metadata import version
        return version("jaxlib")
    except Exception:       # noqa: BLE001 - no version: not a measured build
        return ""


@functools.cache
def mode() -> str:
    """"off", "on" (every matmul that fits takes oneDNN) or "auto" (each matmul shape takes
    what was measured faster on this CPU).  FLOWLITE_ONEDNN=1 is "on", =0 "off"; unset, "auto"
    where such programs serialize (jaxlib 0.12), else "off"."""
    setting = os.environ.get("FLOWLITE_ONEDNN", "").strip().lower()
    jl = _jaxlib()
    if setting in ("0", "off", "false", "no") or not jl.startswith(_TESTED_JAXLIB) or \
            platform.machine().lower() not in ("x86_64", "amd64"):
        return "off"
    if setting in ("1", "on", "true", "yes"):
        if not jl.startswith(_SERIALIZES):
            # such a program can't be written to JAX's persistent cache either: JAX warns at
            # every such compile; the program is simply compiled again next time
            warnings.filterwarnings("ignore", message="Error writing persistent compilation cache")
        return "on"
    return "auto" if jl.startswith(_SERIALIZES) else "off"


def enabled() -> bool:
    return mode() != "off"


enabled.cache_clear = mode.cache_clear      # (tests reset the mode through either name)


# ---- which kernel, by measurement ------------------------------------------------------------
# Measured per matmul shape on the CPU at hand (Xeon, AVX-512 + AMX, 2 cores, jaxlib 0.12.1):
# bf16 2048x768 @ 768x768 1.05 ms in oneDNN vs 9.2 in XLA's dot (PyTorch 1.2); float32 AᵀB
# weight gradients 1.7x faster; float32 96 x 128x128 @ 128x32 slower (0.76 vs 0.58 ms) — so
# no rule: each shape is timed once, both ways, and the faster kept.  The table is the
# machine's, not the programs': it lives outside the compile cache (a cold compile cache does
# not time again), keyed by the CPU's model and vector features, its core count and jaxlib.
_choices: dict = {}
_table_state = {"loaded": False, "path": None}


def cpu_fingerprint() -> str:
    model, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") and model in ("?", "x86_64", ""):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    have = ",".join(f for f in _RELEVANT_FLAGS if f in flags)
    return f"{model}|{have}|{cores} cores|jaxlib {_jaxlib()}"


def _table_path():
    path = os.environ.get("FLOWLITE_KERNEL_TABLE")
    if path is None:
        path = os.path.join(os.path.expanduser("~"), ".cache", "flowlite", "kernels.json")
    return None if path in ("", "0", "off", "none") else path


def _load_table():
    _table_state["loaded"] = True
    path = _table_state["path"] = _table_path()
    if path is None:
        return
    try:
        with open(path, encoding="utf-8") as fh:
            table = json.load(fh)
        _choices.update({k: bool(v) for k, v in table.get(cpu_fingerprint(), {}).items()})
    except (OSError, ValueError, AttributeError):
        pass


def _save_choice(key: str, faster: bool) -> None:
    path = _table_state["path"]
    if path is None:
        return
    fp = cpu_fingerprint()
    try:
        try:
            with open(path, encoding="utf-8") as fh:
                table = json.load(fh)
        except (OSError, ValueError):
            table = {}
        table.setdefault(fp, {})[key] = faster
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(table, fh, indent=0, sort_keys=True)
        os.replace(tmp, path)         # atomic: another process reads the old or the new
    except OSError:
        pass


def _best_of(fn, args, budget_s=0.05, reps=7):
    import time
    fn(*args).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args).block_until_ready()
        best = min(best, time.perf_counter() - t0)
        if best * reps > budget_s * 4:
            break
    return best


def _measure(sa, sb, dt, ta, tb) -> bool:
    """Whether oneDNN's matmul beats XLA's dot at these shapes, timed here (both compiled
    standalone, run with concrete inputs outside any trace)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(dt)
    b = rng.standard_normal(sb).astype(dt)
    nb = len(sa) - 2
    batch = tuple(range(nb))
    dims = (((nb if ta else nb + 1,), (nb + 1 if tb else nb,)), (batch, batch))
    spec = (jax.ShapeDtypeStruct(sa, dt), jax.ShapeDtypeStruct(sb, dt))
    with jax.default_device(jax.devices("cpu")[0]):
        xla = jax.jit(lambda a, b: lax.dot_general(a, b, dims)).lower(*spec).compile()
        dnn = jax.jit(lambda a, b: _matmul_p.bind(a, b, ta=ta, tb=tb)).lower(*spec).compile()
    t_xla, t_dnn = _best_of(xla, (a, b)), _best_of(dnn, (a, b))
    t_xla, t_dnn = min(t_xla, _best_of(xla, (a, b))), min(t_dnn, _best_of(dnn, (a, b)))
    return t_dnn < 0.9 * t_xla          # a tie keeps XLA's (it can fuse around its dot)


def choose(sa, sb, dt, ta, tb) -> bool:
    """Whether a matmul of these shapes takes oneDNN: always in mode "on"; in "auto" what
    the table says, timing it now the first time this CPU meets the shape."""
    m = mode()
    if m != "auto":
        return m == "on"
    work = int(np.prod(sa[:-2], dtype=np.int64)) * sa[-1] * sa[-2] * (sb[-2] if tb else sb[-1])
    if work < _MIN_WORK:
        return False
    if not _table_state["loaded"]:
        _load_table()
    key = f"{np.dtype(dt).name}:{'x'.join(map(str, sa))}{'T' if ta else ''}@" \
          f"{'x'.join(map(str, sb))}{'T' if tb else ''}"
    got = _choices.get(key)
    if got is None:
        try:
            got = _measure(tuple(sa), tuple(sb), np.dtype(dt), bool(ta), bool(tb))
        except Exception:       # noqa: BLE001 - a shape oneDNN refuses: XLA's dot
            got = False
        _choices[key] = got
        _save_choice(key, got)
    return got


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


_DTYPES = (np.dtype(np.float32), np.dtype(jnp.bfloat16))


def _fits(a, b) -> bool:
    return (a.dtype == b.dtype and a.dtype in _DTYPES and a.ndim == b.ndim >= 2
            and a.shape[:-2] == b.shape[:-2]
            and min(a.shape[-2:] + b.shape[-2:]) >= _MIN_DIM and enabled())


def bmm(a, b, ta=False, tb=False):
    """a @ b over equal leading batch dims, if any (ta / tb: the operand's last two dims are
    transposed): oneDNN's matmul in a CPU program where it was measured faster, else
    lax.dot_general.  None when the operands are not such a matmul, or XLA's dot is faster."""
    if not _fits(a, b) or not choose(a.shape, b.shape, a.dtype, ta, tb):
        return None
    nb = a.ndim - 2
    batch = tuple(range(nb))
    dims = (((nb if ta else nb + 1,), (nb + 1 if tb else nb,)), (batch, batch))

    def xla(a, b):
        return lax.dot_general(a, b, dims)

    def onednn(a, b):
        return _matmul_p.bind(a, b, ta=bool(ta), tb=bool(tb))
    return lax.platform_dependent(a, b, cpu=onednn, default=xla)


def matmul(x, w, tw=False):
    """x @ w (x @ wᵀ with `tw`) for a 2-D w and x of any rank >= 2, through `bmm` on x's rows
    (a free reshape); None where `bmm` declines."""
    if w.ndim != 2 or x.ndim < 2 or not enabled():
        return None
    rows = x.reshape((-1, x.shape[-1])) if x.ndim > 2 else x
    y = bmm(rows, w, False, tw)
    if y is None:
        return None
    return y.reshape(x.shape[:-1] + y.shape[-1:]) if x.ndim > 2 else y


def einsum(eq: str, a, b):
    """A two-operand einsum that is a batched matmul (one contracted index, one free index
    per operand, shared batch indices — attention's "...le,...se->...ls" and its gradients)
    through `bmm`; None for any other equation (the caller uses jnp.einsum)."""
    if not (a.dtype == b.dtype and a.dtype in _DTYPES and min(a.ndim, b.ndim) >= 3
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
