"""Do XLA:CPU options (XLA_FLAGS) make the CNN (LeNet) and GPT training steps faster? (issue 17.1)

XLA reads XLA_FLAGS once, when the CPU backend is created, so every setting runs in a fresh
interpreter (`--child NAME`) that times, interleaved in blocks (harness.time_alternating):

  * the hand-written JAX reference steps (jax_reference.Trainer) and the flowlite steps
    (flowlite_workloads.Trainer) of the cnn and gpt workloads;
  * isolated ops, each forward + both gradients in one jit: the benchmark's two LeNet
    convolutions (3x3, conv1 64x1x28x28 -> 16, conv2 64x16x13x13 -> 32) in NCHW/OIHW layout
    (what flowlite and the reference emit), in NHWC/HWIO layout, and as im2col + dot; and the
    GPT's matmuls (the 1024x128 @ 128x512 MLP fc, the 1024x512 @ 512x128 proj, the batched
    attention score/value products 64x64x32);

and saves the first three losses of every step and every op's outputs, which the parent
compares with the default setting's (float32 tolerance). A `torch` child times PyTorch eager
on the same cnn/gpt steps and ops in the same sitting. Settings and torch run in the order
A B C … then … C B A (two rounds) so drift of the shared machine hits every arm alike.

    python bench/xla_cpu_flags.py --probe            # which flags the backend accepts
    python bench/xla_cpu_flags.py --rounds 2 --json /tmp/xla_flags.json
    python bench/xla_cpu_flags.py --settings default ynn_off --rounds 1 --quick
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

import harness  # noqa: E402

NO_YNN = "--xla_cpu_experimental_ynn_fusion_type="

# name -> XLA_FLAGS. jaxlib 0.10.2's XLA:CPU already sends dots and convolutions to YNNPACK
# ("__ynn_fusion") by default; the XNNPACK flags are accepted but create no fusion in this build.
SETTINGS = {
    "default": "",
    "ynn_off": NO_YNN,                                            # Eigen dot + Eigen conv
    "ynn_conv_only": "--xla_cpu_experimental_ynn_fusion_type=individual_convolution",
    "ynn_dot_only": "--xla_cpu_experimental_ynn_fusion_type=dot",  # Eigen conv
    # the default list minus YNNPACK convolutions: convolutions go to Eigen, everything else as
    # the default (the GPT step compiles to byte-identical HLO)
    "ynn_no_conv": "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution",
    "ynn_plus_eltwise_reduce": "--xla_cpu_experimental_ynn_fusion_type=+eltwise,+reduce",
    "onednn_dot": ("--xla_cpu_experimental_ynn_fusion_type=individual_convolution "
                   "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot"),
    "onednn_dot_eltwise_reduce": (
        "--xla_cpu_experimental_ynn_fusion_type=individual_convolution "
        "--xla_cpu_use_onednn=true "
        "--xla_cpu_experimental_onednn_fusion_type=dot,eltwise,reduce"),
    "fast_math": "--xla_cpu_enable_fast_math=true",
    "eigen_single_thread": "--xla_cpu_multi_thread_eigen=false",
    "opt_fast_runtime": "--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_RUNTIME",
    "vector_width_512": "--xla_cpu_prefer_vector_width=512",
}

# Candidates that are only probed (accepted? same compiled HLO as the default?), not timed.
PROBE_ONLY = {
    "use_onednn": "--xla_cpu_use_onednn=true",
    "onednn_custom_call": "--xla_cpu_experimental_onednn_custom_call=true",
    "use_onednn+custom_call": "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_custom_call=true",
    "onednn_fusion_dot(ynn on)": "--xla_cpu_experimental_onednn_fusion_type=dot",
    "xnn_fusion_dot": "--xla_cpu_experimental_xnn_fusion_type=dot",
    "xnn_fusion_dot(ynn off)": NO_YNN + " --xla_cpu_experimental_xnn_fusion_type=dot,eltwise,reduce",
    "use_xnnpack": "--xla_cpu_use_xnnpack=true",
    "xnn_graph_greedy": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
    "xnn_graph_greedy(ynn off)": (NO_YNN + " --xla_cpu_experimental_xnn_graph_fusion_mode="
                                  "XNN_GRAPH_FUSION_MODE_GREEDY"),
    "use_thunk_runtime=false": "--xla_cpu_use_thunk_runtime=false",
    "use_acl": "--xla_cpu_use_acl=true",
    "enable_fast_min_max": "--xla_cpu_enable_fast_min_max=true",
    "unknown (control)": "--xla_cpu_no_such_flag=true",
}

TRAIN = ("cnn", "gpt")
STEPS = {"cnn": 60, "gpt": 30, "ops": 60}
QUICK = {"cnn": 10, "gpt": 5, "ops": 10}
N_LOSSES = 3


# ---------------------------------------------------------------------------------------------
# isolated ops (JAX)
# ---------------------------------------------------------------------------------------------

CONVS = {"conv1": ((64, 1, 28, 28), (16, 1, 3, 3)), "conv2": ((64, 16, 13, 13), (32, 16, 3, 3))}


def _jax_ops():
    """name -> (jitted fn, args): forward + input and weight gradient (vjp of a fixed
    cotangent), all outputs returned in NCHW/OIHW so every form is compared alike."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    rng = np.random.default_rng(0)
    ops = {}

    def conv_nchw(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def conv_nhwc(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def conv_im2col(x, w):  # NCHW in and out; patches by slicing, one dot
        B, C, H, W = x.shape
        O, _, kh, kw = w.shape
        Ho, Wo = H - kh + 1, W - kw + 1
        cols = jnp.stack([x[:, :, i:i + Ho, j:j + Wo] for i in range(kh) for j in range(kw)],
                         axis=2)                                   # (B, C, kh*kw, Ho, Wo)
        cols = cols.reshape(B, C * kh * kw, Ho * Wo)
        y = jnp.einsum("ok,bkp->bop", w.reshape(O, C * kh * kw), cols)
        return y.reshape(B, O, Ho, Wo)

    def fwd_bwd(f):
        def run(x, w, gy):
            y, vjp = jax.vjp(f, x, w)
            gx, gw = vjp(gy)
            return y, gx, gw
        return jax.jit(run)

    for cname, (xs, ws) in CONVS.items():
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
        ys = (xs[0], ws[0], xs[2] - ws[2] + 1, xs[3] - ws[3] + 1)
        gy = rng.standard_normal(ys).astype(np.float32)
        ops[f"{cname}_nchw"] = (fwd_bwd(conv_nchw), tuple(map(jnp.asarray, (x, w, gy))))
        # NHWC: data converted once, outside the timed call; outputs converted back for the check
        ops[f"{cname}_nhwc"] = (fwd_bwd(conv_nhwc), tuple(map(jnp.asarray, (
            x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), gy.transpose(0, 2, 3, 1)))))
        ops[f"{cname}_im2col"] = (fwd_bwd(conv_im2col), tuple(map(jnp.asarray, (x, w, gy))))

    def linear(x, w):  # PyTorch layout: x @ w.T
        return x @ w.T

    for mname, (m, k, n) in {"mm_fc": (1024, 128, 512), "mm_proj": (1024, 512, 128),
                             "mm_qkv": (1024, 128, 384)}.items():
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        gy = rng.standard_normal((m, n)).astype(np.float32)
        ops[mname] = (fwd_bwd(linear), tuple(map(jnp.asarray, (x, w, gy))))

    def attn(q, k):  # scores then (scores @ v with v = k): two batched matmuls
        s = q @ jnp.swapaxes(k, -1, -2)
        return s @ k

    q = rng.standard_normal((16, 4, 64, 32)).astype(np.float32)
    k = rng.standard_normal((16, 4, 64, 32)).astype(np.float32)
    gy = rng.standard_normal((16, 4, 64, 32)).astype(np.float32)
    ops["attn_bmm"] = (fwd_bwd(attn), tuple(map(jnp.asarray, (q, k, gy))))
    return ops


def _nchw_outputs(name, outs):
    import numpy as np
    y, gx, gw = (np.asarray(o) for o in outs)
    if name.endswith("_nhwc"):
        return y.transpose(0, 3, 1, 2), gx.transpose(0, 3, 1, 2), gw.transpose(3, 2, 0, 1)
    return y, gx, gw


def _hlo_summary(txt: str) -> dict:
    ent = txt[txt.index("ENTRY"):] if "ENTRY" in txt else txt
    kinds = re.findall(r'"kind":"(__\w+)"', txt)
    return {"ynn": kinds.count("__ynn_fusion"), "onednn": kinds.count("__onednn_fusion"),
            "xnn": sum(k.startswith("__xnn") for k in kinds),
            "eigen_conv": len(re.findall(r"\bconvolution\(", ent)),
            "eigen_dot": len(re.findall(r"\bdot\(", ent)),
            "sha": hashlib.sha256(re.sub(r", metadata=\{[^}]*\}", "", txt).encode()).hexdigest()[:12]}


# ---------------------------------------------------------------------------------------------
# children
# ---------------------------------------------------------------------------------------------

def child_jax(name: str, out_npz: str, quick: bool) -> dict:
    import jax
    import numpy as np
    import jax_reference as jr
    import flowlite_workloads as fw

    t0 = time.perf_counter()
    jax.numpy.ones(1).block_until_ready()   # backend init: XLA_FLAGS parsed here
    init_s = time.perf_counter() - t0
    steps = QUICK if quick else STEPS
    res = {"setting": name, "xla_flags": os.environ.get("XLA_FLAGS", ""), "init_s": init_s,
           "median_ms": {}, "first_step_s": {}, "hlo": {}}
    saved = {}

    for w in TRAIN:
        jt = jr.Trainer(w)
        x, y = jt.batches[0]
        res["hlo"][f"jax_{w}"] = _hlo_summary(
            jt._step.lower(jt.params, jt.opt_state, x, y).compile().as_text())
        ft = fw.Trainer(w)
        arms = {f"jax_{w}": (jt.step, jr.wait), f"flowlite_{w}": (ft.step, fw.wait)}
        for arm, (step, wait) in arms.items():
            t1 = time.perf_counter()
            losses = [float(np.asarray(wait(step()) if arm.startswith("jax") else step().item()))
                      for _ in range(N_LOSSES)]
            res["first_step_s"][arm] = time.perf_counter() - t1
            saved[f"loss_{arm}"] = np.asarray(losses, np.float64)
        t = harness.time_alternating({a: s for a, (s, _) in arms.items()}, steps[w], warmup=3,
                                     wait={a: wt for a, (_, wt) in arms.items()}, block=10)
        res["median_ms"].update(t)
        del jt, ft

    ops = _jax_ops()
    fns = {}
    for oname, (f, args) in ops.items():
        outs = f(*args)
        for i, o in enumerate(_nchw_outputs(oname, outs)):
            saved[f"op_{oname}_{i}"] = o
        fns[f"op_{oname}"] = (lambda f=f, args=args: f(*args))
    res["median_ms"].update(harness.time_alternating(fns, steps["ops"], warmup=3,
                                                     wait=jax.block_until_ready, block=10))
    np.savez(out_npz, **saved)
    return res


def child_torch(out_npz: str, quick: bool) -> dict:
    import numpy as np
    import torch
    import torch_reference as tr

    steps = QUICK if quick else STEPS
    res = {"setting": "torch", "xla_flags": "", "median_ms": {}, "first_step_s": {},
           "torch_threads": torch.get_num_threads()}
    saved = {}
    for w in TRAIN:
        t = tr.Trainer(w)
        saved[f"loss_torch_{w}"] = np.asarray([float(t.step()) for _ in range(N_LOSSES)])
        res["median_ms"].update(harness.time_alternating({f"torch_{w}": t.step}, steps[w],
                                                         warmup=3, block=10))
    rng = np.random.default_rng(0)
    fns = {}
    F = torch.nn.functional
    for cname, (xs, ws) in CONVS.items():
        x = torch.from_numpy(rng.standard_normal(xs).astype(np.float32)).requires_grad_()
        w = torch.from_numpy((rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:])))
                             .astype(np.float32)).requires_grad_()
        ys = (xs[0], ws[0], xs[2] - ws[2] + 1, xs[3] - ws[3] + 1)
        gy = torch.from_numpy(rng.standard_normal(ys).astype(np.float32))

        def conv(x=x, w=w, gy=gy):
            y = F.conv2d(x, w)
            return (y, *torch.autograd.grad(y, (x, w), gy))
        fns[f"op_{cname}_nchw"] = conv
    for mname, (m, k, n) in {"mm_fc": (1024, 128, 512), "mm_proj": (1024, 512, 128),
                             "mm_qkv": (1024, 128, 384)}.items():
        x = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).requires_grad_()
        w = torch.from_numpy((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
                             ).requires_grad_()
        gy = torch.from_numpy(rng.standard_normal((m, n)).astype(np.float32))

        def mm(x=x, w=w, gy=gy):
            y = x @ w.T
            return (y, *torch.autograd.grad(y, (x, w), gy))
        fns[f"op_{mname}"] = mm
    q = torch.from_numpy(rng.standard_normal((16, 4, 64, 32)).astype(np.float32)).requires_grad_()
    k = torch.from_numpy(rng.standard_normal((16, 4, 64, 32)).astype(np.float32)).requires_grad_()
    gy = torch.from_numpy(rng.standard_normal((16, 4, 64, 32)).astype(np.float32))

    def attn():
        y = (q @ k.transpose(-1, -2)) @ k
        return (y, *torch.autograd.grad(y, (q, k), gy))
    fns["op_attn_bmm"] = attn
    res["median_ms"].update(harness.time_alternating(fns, steps["ops"], warmup=3, block=10))
    np.savez(out_npz, **saved)
    return res


def child_hlo_only() -> dict:
    """Compile the JAX cnn/gpt steps only (no timing): accepted? what fusions?"""
    import jax
    import jax_reference as jr
    jax.numpy.ones(1).block_until_ready()
    out = {}
    for w in TRAIN:
        jt = jr.Trainer(w)
        x, y = jt.batches[0]
        out[f"jax_{w}"] = _hlo_summary(
            jt._step.lower(jt.params, jt.opt_state, x, y).compile().as_text())
    return out


# ---------------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------------

def _run_child(args: list, flags: str, timeout: float = 900) -> tuple:
    env = dict(os.environ)
    env["XLA_FLAGS"] = flags
    env.setdefault("PYTHONPATH", ROOT)
    busy0, t0 = harness._cpu_busy_s(), time.monotonic()
    import resource
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=timeout)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - t0
    child_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    other = (harness._cpu_busy_s() - busy0 - child_cpu) / (wall * (os.cpu_count() or 1))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    row = json.loads(lines[-1]) if (p.returncode == 0 and lines) else None
    if row is not None:
        row["other_cpu_frac"] = round(max(0.0, other), 3)
        row["wall_s"] = round(wall, 1)
    return p.returncode, row, p.stderr


def probe(names=None) -> dict:
    """Every candidate (timed settings and probe-only flags): accepted by the backend? the JAX
    cnn/gpt steps' fusions and whether the compiled HLO equals the default's."""
    cands = {**SETTINGS, **PROBE_ONLY}
    if names:
        cands = {k: v for k, v in cands.items() if k in names or k == "default"}
    out = {}
    for name, flags in cands.items():
        rc, row, err = _run_child(["--hlo-only"], flags, timeout=300)
        row = {k: v for k, v in row.items() if k.startswith("jax_")} if row else None
        msg = next((ln for ln in err.splitlines() if "Unknown flag" in ln or "no longer" in ln), "")
        out[name] = {"flags": flags, "accepted": rc == 0, "hlo": row, "stderr": msg[-200:]}
    base = out["default"]["hlo"]
    for name, r in out.items():
        if r["hlo"] and base:
            r["same_hlo_as_default"] = all(r["hlo"][k]["sha"] == base[k]["sha"] for k in base
                                           if k in r["hlo"])
    return out


def _compare(base: dict, other: dict) -> dict:
    """Worst error of `other` against `base` per group: losses (abs) and ops (max |Δ| relative
    to max |base|)."""
    import numpy as np
    worst = {"loss_abs": 0.0, "op_rel": 0.0, "worst_op": ""}
    for k in base.files:
        if k not in other.files:
            continue
        a, b = base[k], other[k]
        if k.startswith("loss"):
            worst["loss_abs"] = max(worst["loss_abs"], float(np.abs(a - b).max()))
        else:
            rel = float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30))
            if rel > worst["op_rel"]:
                worst["op_rel"], worst["worst_op"] = rel, k
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child")
    ap.add_argument("--out")
    ap.add_argument("--hlo-only", action="store_true")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--settings", nargs="*", help=f"subset of {', '.join(SETTINGS)} (+ torch)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write all rows here")
    ap.add_argument("--npz-dir", help="keep the children's outputs here")
    ap.add_argument("--quiet-timeout", type=float, default=60.0,
                    help="seconds to wait for other work to leave the CPUs before each child")
    a = ap.parse_args(argv)

    if a.hlo_only:
        print(json.dumps(child_hlo_only()))
        return 0
    if a.child:
        row = child_torch(a.out, a.quick) if a.child == "torch" else child_jax(a.child, a.out,
                                                                               a.quick)
        print(json.dumps(row))
        return 0
    if a.probe:
        r = probe(a.settings)
        print(json.dumps(r, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(r, f, indent=1)
        return 0

    names = [n for n in (a.settings or SETTINGS) if n in SETTINGS]
    if "default" not in names:
        names.insert(0, "default")
    arms = names + ([] if a.no_torch else ["torch"])
    npz_dir = a.npz_dir or tempfile.mkdtemp(prefix="xla_flags_")
    os.makedirs(npz_dir, exist_ok=True)
    rows = []
    for rnd in range(a.rounds):
        order = arms if rnd % 2 == 0 else arms[::-1]
        for name in order:
            if a.quiet_timeout > 0:
                harness.wait_for_quiet(0.15, timeout=a.quiet_timeout)
            out = os.path.join(npz_dir, f"{name}_r{rnd}.npz")
            args = ["--child", name, "--out", out] + (["--quick"] if a.quick else [])
            rc, row, err = _run_child(args, SETTINGS.get(name, ""))
            if row is None:
                print(f"[round {rnd}] {name}: FAILED rc={rc}\n{err[-2000:]}", file=sys.stderr)
                rows.append({"setting": name, "round": rnd, "failed": err[-500:]})
                continue
            row["round"], row["npz"] = rnd, out
            rows.append(row)
            if a.json:  # written after every child, so an interrupted sitting keeps its rows
                with open(a.json, "w") as f:
                    json.dump(rows, f, indent=1)
            m = row["median_ms"]
            print(f"[round {rnd}] {name:28s} " + " ".join(
                f"{k}={v:.3f}" for k, v in m.items() if not k.startswith("op_")
            ) + f"  other_cpu={row['other_cpu_frac']}", file=sys.stderr, flush=True)

    # correctness against the default of the same round
    import numpy as np
    for row in rows:
        if "npz" not in row or row["setting"] == "torch":
            continue
        base = next(r for r in rows if r["setting"] == "default" and r["round"] == row["round"])
        row["vs_default"] = _compare(np.load(base["npz"]), np.load(row["npz"]))
    # torch losses against the default JAX losses
    for row in rows:
        if row.get("setting") == "torch" and "npz" in row:
            base = np.load(next(r for r in rows if r["setting"] == "default"
                                and r["round"] == row["round"])["npz"])
            t = np.load(row["npz"])
            row["vs_default"] = {"loss_abs": max(
                float(np.abs(t[f"loss_torch_{w}"] - base[f"loss_jax_{w}"]).max()) for w in TRAIN)}

    print(summary_table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


COLS = ("jax_cnn", "flowlite_cnn", "jax_gpt", "flowlite_gpt", "op_conv1_nchw", "op_conv1_nhwc",
        "op_conv1_im2col", "op_conv2_nchw", "op_conv2_nhwc", "op_conv2_im2col", "op_mm_fc",
        "op_mm_proj", "op_mm_qkv", "op_attn_bmm")


def summary_table(rows) -> str:
    """Markdown: one line per setting and round, median ms and (ratio to default, same round)."""
    ok = [r for r in rows if "median_ms" in r]
    lines = ["| setting | round | " + " | ".join(COLS) + " | loss Δ | op rel Δ |",
             "|---|---|" + "---|" * len(COLS) + "---|---|"]
    for r in sorted(ok, key=lambda r: (list(SETTINGS).index(r["setting"])
                                       if r["setting"] in SETTINGS else 99, r["round"])):
        base = next((b for b in ok if b["setting"] == "default" and b["round"] == r["round"]), r)
        cells = []
        for c in COLS:
            tc = c.replace("jax_", "torch_") if c.startswith("jax_") else c
            v = r["median_ms"].get(c if r["setting"] != "torch" else tc)
            if v is None:
                cells.append("-")
                continue
            bv = base["median_ms"].get(c)
            cells.append(f"{v:.3g} ({v / bv:.2f})" if bv else f"{v:.3g}")
        vd = r.get("vs_default", {})
        lines.append(f"| {r['setting']} | {r['round'] + 1} | " + " | ".join(cells)
                     + f" | {vd.get('loss_abs', 0):.1e} | {vd.get('op_rel', 0):.1e} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
