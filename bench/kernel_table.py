"""Where a training step's time goes, kernel by kernel: flowlite's XLA program beside PyTorch
eager (issue 49 item 1).

    python bench/kernel_table.py --nanogpt ~/src/nanoGPT [--config small|mid]
                                 [--autocast bf16] [--steps 10] [--json out.json]

nanoGPT's own `model.py` (read from the checkout whose path you give) at its README CPU config
("small") or a mid-size one, AdamW from its `configure_optimizers`, one fixed batch; a fresh
process per framework.  Two views of the same step:

  in the step   flowlite: XLA's profile of the compiled step (`jax.profiler`), each thunk's
                time summed over XLA's threads (thread-ms: on 2 cores the sum can reach twice
                the step's wall time), grouped by kind — dot, convolution, other (elementwise,
                reductions, copies) — from the optimised HLO.  PyTorch: `torch.profiler`, each
                leaf op's self time on the calling thread (its kernels use every core),
                grouped as mm/bmm, attention (the fused CPU attention kernel) and other.
  alone         every distinct dot of the compiled step (shapes, batch and contracting
                dimensions, dtype), timed alone: as XLA compiles a lone `lax.dot_general` of
                that form, and as `torch.mm`/`torch.bmm` on operands laid out the same way
                (a transposed operand is a transposed view, as BLAS takes it).  Both use
                every core; each dot's count per step (from the profile: a loop's body runs
                once per iteration), times and their ratio.

The alone table locates a kernel gap per dot shape and per CPU; the in-step table says how
much of each step the kernels are.  Convolutions are counted in the step, not timed alone.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# nanoGPT GPTConfig fields and the batch size: the README's CPU config and a mid-size one
# (the same two as bench/real_programs.py's nanogpt-small / nanogpt-mid)
CONFIGS = {
    "small": dict(block_size=64, n_layer=4, n_head=4, n_embd=128, batch=12),
    "mid": dict(block_size=128, n_layer=6, n_head=6, n_embd=192, batch=16),
}
VOCAB = 65                  # shakespeare_char's
TORCH_DOTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm")
TORCH_ATTENTION = "scaled_dot_product"
TOP = 8                     # the costliest non-dot kernels listed


# ---- the optimised HLO: instructions, what each thunk is, the dots ------------------------
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_INSTR = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\S+?)(?:\{[\d,]*\})?\s+([\w\-]+)\((.*)$")
_CALLS = re.compile(r"(?:calls|body|condition|to_apply|branch_computations)=\{?%?([\w.\-, %]+)\}?")
_SHAPE = re.compile(r"^(\w+)\[([\d,]*)\]$")


def _dims(attr, text):
    m = re.search(attr + r"=\{([\d,]*)\}", text)
    return tuple(int(d) for d in m.group(1).split(",") if d) if m else ()


def parse_hlo(text):
    """The optimised module as {computation: [(name, type, opcode, rest)]}, with every
    instruction's type by name (names are unique in a module)."""
    comps, types, cur = {}, {}, None
    for line in text.splitlines():
        m = _COMP.match(line)
        if m and not line.startswith(" "):
            cur = comps.setdefault(m.group(1), [])
            continue
        m = _INSTR.match(line)
        if m and cur is not None:
            name, typ, op, rest = m.groups()
            cur.append((name, typ, op, rest))
            types[name] = typ
    return comps, types


def _shape(typ):
    m = _SHAPE.match(typ)
    if not m:
        return None, None
    return m.group(1), tuple(int(d) for d in m.group(2).split(",") if d)


def _called(rest):
    out = []
    for m in _CALLS.finditer(rest):
        out += [c.strip().lstrip("%") for c in m.group(1).split(",") if c.strip()]
    return out


def dot_signature(typ, rest, types):
    """A dot instruction as (dtype, lhs shape, rhs shape, dimension numbers)."""
    operands = re.findall(r"%([\w.\-]+)", rest.split(")")[0])[:2]
    dt, lhs = _shape(types[operands[0]])
    _, rhs = _shape(types[operands[1]])
    dims = ((_dims("lhs_contracting_dims", rest), _dims("rhs_contracting_dims", rest)),
            (_dims("lhs_batch_dims", rest), _dims("rhs_batch_dims", rest)))
    return dt, lhs, rhs, dims


_PLUMBING = ("parameter", "constant", "bitcast", "broadcast", "tuple", "get-tuple-element")


def classify(text):
    """{instruction name: (kind, [dot signatures], what it computes)} for every instruction
    of the module outside fusions (what XLA's profile names): a fusion (or a loop, a call) is a "dot" / "convolution" when what it
    calls holds one; what it computes is its opcodes, most frequent first ("reduce x2, exp")."""
    comps, types = parse_hlo(text)
    memo = {}

    def inside(comp):
        if comp not in memo:
            memo[comp] = ([], False, collections.Counter())
            dots, conv, ops = [], False, collections.Counter()
            for name, typ, op, rest in comps.get(comp, ()):
                if op == "dot":
                    dots.append(dot_signature(typ, rest, types))
                conv = conv or op == "convolution"
                if op not in _PLUMBING:
                    ops[op] += 1
                for c in _called(rest):
                    d, cv, o = inside(c)
                    dots, conv = dots + d, conv or cv
                    ops.update(o)
            memo[comp] = (dots, conv, ops)
        return memo[comp]

    fused = {c for instrs in comps.values() for _, _, op, rest in instrs
             if op == "fusion" for c in _called(rest)}
    out = {}      # the instructions that run as thunks: not those inside a fusion
    for comp, instrs in comps.items():
        if comp in fused:
            continue
        for name, typ, op, rest in instrs:
            dots, conv, ops = [], op == "convolution", collections.Counter({op: 1})
            if op == "dot":
                dots = [dot_signature(typ, rest, types)]
            elif op in ("fusion", "call", "custom-call", "while", "conditional"):
                ops = collections.Counter()
                for c in _called(rest):
                    d, cv, o = inside(c)
                    dots, conv = dots + d, conv or cv
                    ops.update(o)
            what = ", ".join(f"{o} x{n}" if n > 1 else o for o, n in ops.most_common(5))
            out[name] = ("dot" if dots else "convolution" if conv else "other", dots,
                         f"{typ} {what}")
    return out


def _split(sig):
    dt, lhs, rhs, ((lc, rc), (lb, rb)) = sig
    lf = [i for i in range(len(lhs)) if i not in lc and i not in lb]
    rf = [i for i in range(len(rhs)) if i not in rc and i not in rb]
    return lhs, rhs, list(lb), list(lc), lf, list(rb), list(rc), rf


def _prod(shape, idx):
    n = 1
    for i in idx:
        n *= shape[i]
    return n


def canonical(sig):
    """A dot as batch B, M x K times K x N, and whether each operand is stored transposed
    (its contracting dims before its free dims) — the form torch.mm/bmm take it in."""
    lhs, rhs, lb, lc, lf, rb, rc, rf = _split(sig)
    # (batch, free, contract) is the natural lhs; (batch, contract, free) the natural rhs
    lhs_t = lb + lc + lf == list(range(len(lhs))) and bool(lf) and bool(lc)
    rhs_t = rb + rf + rc == list(range(len(rhs))) and bool(rf) and bool(rc)
    return dict(dtype=sig[0], b=_prod(lhs, lb), m=_prod(lhs, lf), k=_prod(lhs, lc),
                n=_prod(rhs, rf), lhs_t=lhs_t, rhs_t=rhs_t)


def as_bmm(sig, x, w):
    """A dot's operands (numpy, of the HLO's shapes) as (B, M, K) and (B, K, N) arrays laid
    out as the HLO has them: an operand stored transposed becomes a transposed view of a
    contiguous array (what BLAS takes without a copy); any other order is copied."""
    import numpy as np
    _, _, lb, lc, lf, rb, rc, rf = _split(sig)
    c = canonical(sig)
    b, m, k, n = c["b"], c["m"], c["k"], c["n"]
    if c["lhs_t"]:
        x = np.ascontiguousarray(x.transpose(lb + lc + lf).reshape(b, k, m)).swapaxes(1, 2)
    else:
        x = np.ascontiguousarray(x.transpose(lb + lf + lc).reshape(b, m, k))
    if c["rhs_t"]:
        w = np.ascontiguousarray(w.transpose(rb + rf + rc).reshape(b, n, k)).swapaxes(1, 2)
    else:
        w = np.ascontiguousarray(w.transpose(rb + rc + rf).reshape(b, k, n))
    return x, w


def _label(sig):
    c = canonical(sig)
    ops = ("A^T" if c["lhs_t"] else "A") + ("B^T" if c["rhs_t"] else "B")
    b = f"{c['b']}x " if c["b"] > 1 else ""
    return f"{c['dtype']} {b}{c['m']}x{c['k']} @ {c['k']}x{c['n']} {ops}"


# ---- the children ------------------------------------------------------------------------------
def _median(ts):
    ts = sorted(ts)
    return ts[len(ts) // 2]


def _build(torch, nanogpt, cfg, autocast):
    sys.path.insert(0, nanogpt)
    from model import GPT, GPTConfig   # nanoGPT's own model.py
    torch.manual_seed(0)
    c = dict(cfg)
    batch = c.pop("batch")
    with contextlib.redirect_stdout(sys.stderr):
        m = GPT(GPTConfig(vocab_size=VOCAB, dropout=0.0, bias=False, **c))
        opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    x = torch.randint(0, VOCAB, (batch, c["block_size"]))
    y = torch.randint(0, VOCAB, (batch, c["block_size"]))
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast == "bf16" \
        else contextlib.nullcontext

    def step():
        with ctx():
            _, loss = m(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    return step


def _timed(fn, reps, warmup=1):
    """Median seconds of `reps` calls of fn, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return _median(ts)


def _time_step(step, n):
    return _timed(step, n, warmup=3) * 1e3        # ms


def _alone(fn, reps=30):
    return _timed(fn, reps) * 1e6                 # µs


def child_flowlite(a):
    import flowlite.run as fr
    fr.install()
    import jax
    import numpy as np
    from jax import lax
    import flowlite as fl
    import torch     # flowlite, through flowlite.run's import hook
    step = _build(torch, a.nanogpt, CONFIGS[a.config], a.autocast)
    step_ms = _time_step(step, a.steps)
    kinds = classify(fl.debug.executable_text(-1))
    prof = tempfile.mkdtemp(prefix="kt_")
    with jax.profiler.trace(prof):
        for _ in range(a.steps):
            step()
    pb = glob.glob(os.path.join(prof, "**", "*.xplane.pb"), recursive=True)[0]
    busy, runs = collections.Counter(), collections.Counter()
    for plane in jax.profiler.ProfileData.from_file(pb).planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLA"):
                continue          # XLA's threads (the client's and the intra-op pool's)
            for e in line.events:
                if e.name in kinds:
                    busy[e.name] += e.duration_ns
                    runs[e.name] += 1
    shutil.rmtree(prof, ignore_errors=True)
    by_kind = collections.Counter()
    for name, ns in busy.items():
        by_kind[kinds[name][0]] += ns / 1e6 / a.steps
    other, n_other = collections.Counter(), collections.Counter()
    for name, ns in busy.items():       # the same kernel in every layer: one row
        if kinds[name][0] != "dot":
            other[kinds[name][2]] += ns / 1e6 / a.steps
            n_other[kinds[name][2]] += runs[name] / a.steps
    top_other = [dict(name=f"x{round(n_other[w])}", ms=ms, what=w)
                 for w, ms in other.most_common(TOP)]
    # every dot of the step, counted as often as the profile saw its thunk run per step (a
    # loop's body runs once per iteration), timed alone as XLA compiles it
    count = collections.Counter()
    for name, (_, sigs, _) in kinds.items():
        for sig in sigs:
            count[sig] += round(runs[name] / a.steps)
    dots = []
    for sig, n in count.items():
        if not n:
            continue
        dt, lhs, rhs, dims = sig
        xs = np.random.default_rng(0).standard_normal(lhs).astype(np.float32)
        ws = np.random.default_rng(1).standard_normal(rhs).astype(np.float32)
        jdt = {"f32": np.float32, "bf16": jax.numpy.bfloat16, "f16": np.float16}[dt]
        xa, wa = jax.numpy.asarray(xs, jdt), jax.numpy.asarray(ws, jdt)
        f = jax.jit(lambda x, w, dims=dims: lax.dot_general(x, w, dims))
        us = _alone(lambda: f(xa, wa).block_until_ready())
        dots.append(dict(sig=[dt, list(lhs), list(rhs), [list(map(list, d)) for d in dims]],
                         label=_label(sig), count=n, xla_us=us, **canonical(sig)))
    return dict(step_ms=step_ms, by_kind=dict(by_kind), dots=dots, top_other=top_other)


def child_torch(a):
    import numpy as np
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    step = _build(torch, a.nanogpt, CONFIGS[a.config], a.autocast)
    step_ms = _time_step(step, a.steps)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(a.steps):
            step()
    by_kind, other = collections.Counter(), collections.Counter()
    for e in p.key_averages():
        kind = "mm/bmm" if e.key in TORCH_DOTS else \
            "attention" if TORCH_ATTENTION in e.key else "other"
        by_kind[kind] += e.self_cpu_time_total / 1e3 / a.steps
        if kind == "other":
            other[e.key] += e.self_cpu_time_total / 1e3 / a.steps
    top_other = [dict(name=k, ms=v) for k, v in other.most_common(TOP)]
    dots = json.load(open(a.dots))
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    for d in dots:
        sig = (d["sig"][0], tuple(d["sig"][1]), tuple(d["sig"][2]),
               tuple(tuple(tuple(x) for x in p) for p in d["sig"][3]))
        rng = np.random.default_rng(0)
        xs, ws = as_bmm(sig, rng.standard_normal(sig[1], np.float32),
                        rng.standard_normal(sig[2], np.float32))
        x = torch.from_numpy(xs).to(dt[sig[0]])     # .to keeps a transposed view's strides
        w = torch.from_numpy(ws).to(dt[sig[0]])
        if d["b"] == 1:
            x, w = x[0], w[0]
            d["torch_us"] = _alone(lambda: torch.mm(x, w))
        else:
            d["torch_us"] = _alone(lambda: torch.bmm(x, w))
    return dict(step_ms=step_ms, by_kind=dict(by_kind), dots=dots, top_other=top_other)


# ---- the table -----------------------------------------------------------------------------
def format_tables(fl, tc, meta):
    out = [f"kernel table: nanoGPT {meta['config']} ({meta['autocast'] or 'float32'}), "
           f"{meta['cpu']}, {meta['cores']} cores",
           f"step (median of {meta['steps']}): flowlite {fl['step_ms']:.1f} ms, PyTorch "
           f"{tc['step_ms']:.1f} ms ({fl['step_ms'] / tc['step_ms']:.2f}x)",
           "", "in the step, ms per step:",
           "  flowlite (XLA thread-ms): " + ", ".join(
               f"{k} {v:.1f}" for k, v in sorted(fl["by_kind"].items())),
           "  PyTorch (op ms):          " + ", ".join(
               f"{k} {v:.1f}" for k, v in sorted(tc["by_kind"].items())),
           "", f"{'dot (as XLA has it)':44s} {'count':>5s} {'XLA us':>9s} {'torch us':>9s} "
           f"{'ratio':>6s}"]
    tx = tt = 0.0
    for d in sorted(tc["dots"], key=lambda d: -d["xla_us"] * d["count"]):
        t = d.get("torch_us")
        tx += d["xla_us"] * d["count"]
        tt += (t or 0.0) * d["count"]
        out.append(f"{d['label']:44s} {d['count']:5d} {d['xla_us']:9.1f} "
                   f"{t if t is not None else float('nan'):9.1f} "
                   f"{d['xla_us'] / t if t else float('nan'):6.2f}")
    out.append(f"{'all dots, alone, x count (ms)':44s} {'':5s} {tx / 1e3:9.2f} "
               f"{tt / 1e3:9.2f} {tx / tt if tt else float('nan'):6.2f}")
    out += ["", "costliest other kernels in the step (ms per step):"]
    out += [f"  flowlite {o['ms']:6.2f}  {o['name']:>4s} {o['what']}"[:150]
            for o in fl["top_other"]]
    out += [f"  PyTorch  {o['ms']:6.2f}  {o['name']}" for o in tc["top_other"]]
    return "\n".join(out)


def _cpu():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
        else:
            name = platform.processor()
        flags = open("/proc/cpuinfo").read()
        isa = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags]
        return f"{name} ({', '.join(isa) or 'no AVX-512/AMX'})"
    except OSError:
        return platform.processor() or "?"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nanogpt", required=True, help="a checkout of karpathy/nanoGPT")
    p.add_argument("--config", choices=list(CONFIGS), default="small")
    p.add_argument("--autocast", choices=["bf16"], default=None)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--child", choices=["flowlite", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--dots", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.nanogpt = os.path.abspath(a.nanogpt)
    if a.child:
        r = (child_flowlite if a.child == "flowlite" else child_torch)(a)
        json.dump(r, open(a.out, "w"))
        return 0
    work = tempfile.mkdtemp(prefix="kernel_table_")
    env = dict(os.environ, FLOWLITE_CACHE_DIR=os.path.join(work, "cache"),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    base = [a.python, os.path.abspath(__file__), "--nanogpt", a.nanogpt, "--config", a.config,
            "--steps", str(a.steps)] + (["--autocast", a.autocast] if a.autocast else [])
    res = {}
    for fw in ("flowlite", "torch"):
        out = os.path.join(work, fw + ".json")
        extra = ["--dots", os.path.join(work, "flowlite_dots.json")] if fw == "torch" else []
        subprocess.run(base + ["--child", fw, "--out", out] + extra, env=env, check=True,
                       cwd=work)
        res[fw] = json.load(open(out))
        if fw == "flowlite":
            json.dump(res[fw]["dots"], open(os.path.join(work, "flowlite_dots.json"), "w"))
    meta = dict(config=a.config, autocast=a.autocast, steps=a.steps, cpu=_cpu(),
                cores=os.cpu_count())
    print(format_tables(res["flowlite"], res["torch"], meta))
    if a.json:
        json.dump(dict(meta=meta, **res), open(a.json, "w"), indent=1)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
