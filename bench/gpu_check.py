"""The GPU parts of bench/gpu_check.sh: each part runs in its own process under a time limit
and leaves one JSON record; `summary` merges them into one table.

    python bench/gpu_check.py --part gpt2 --out DIR     # one part (DIR/part_gpt2.json)
    python bench/gpu_check.py --summary --out DIR       # DIR/gpu_check.json + the table

Parts (on the platform JAX picks by default; without a GPU each says "no GPU" and skips, unless
--smoke, which runs every part at toy sizes on the CPU to check this script itself):
  train     train.py for every tutorial model, --device gpu, fp32 and --precision bf16:
            steps/s, accuracy or loss, compiles and executions
  bench     bench/run.py's training rows and generation against hand-written JAX on one device
  gpt2      a GPT-2-small-sized training step (12 layers, d 768, context 1024, vocab 50304,
            batch 8, bf16 weights, AdamW), flowlite and the same step in JAX+optax alternating:
            ms/step and model-FLOPs utilisation
  cartpole  the fused CartPole (flowlite: K steps in one executable) against PyTorch eager
            stepping the same equations on the same GPU, env-steps/s at 1k-64k environments
  profile   what a step costs the host on this device: a host read's round trip (with and
            without the copy started early), and cProfile of flowlite's MLP and GPT steps

Environment: TRAIN_MODELS (default every model), BENCH_WORKLOADS (default mlp cnn gpt generate).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

PARTS = ("train", "bench", "gpt2", "cartpole", "profile")
# dense bf16 peak of an H100/H200 SXM (datasheet); MFU is also given against the measured
# rate a plain matmul reaches on the machine (KINDS.md: ~790 TFLOP/s on random data)
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0}


def _gpu():
    import jax
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        return None
    return gpus[0] if gpus else None


def _versions():
    import importlib.metadata as md
    out = {"python": sys.version.split()[0]}
    for d in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "optax", "numpy",
              "torch"):
        try:
            out[d] = md.version(d)
        except md.PackageNotFoundError:
            pass
    return out


# ---- train: train.py on every model --------------------------------------------------------

def part_train(args):
    models = os.environ.get("TRAIN_MODELS", "mlp lenet resnet lstm gpt cartpole").split()
    steps = {"mlp": 200, "lenet": 200, "resnet": 200, "lstm": 200, "gpt": 200}
    if args.smoke:
        steps = {k: 3 for k in steps}
    rows, t_end = [], time.monotonic() + args.budget
    for m in models:
        for prec in (("fp32",) if m == "cartpole" else ("fp32", "bf16")):
            left = t_end - time.monotonic()
            if left < 10:
                rows.append({"model": m, "precision": prec, "error": "skipped: part budget"})
                continue
            js = os.path.join(args.tmp, f"train_{m}_{prec}.json")
            cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--model", m]
            if m == "cartpole":
                cmd += ["--seconds", "3" if args.smoke else "15", "--quiet"]
            else:
                cmd += ["--steps", str(steps[m]), "--precision", prec, "--metrics-json", js,
                        "--quiet"]
            cmd += ["--device", "cpu" if args.smoke else "gpu"]
            t0 = time.monotonic()
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, cwd=args.tmp,
                                   timeout=min(left, 90))
                rc, out = r.returncode, r.stdout + r.stderr
            except subprocess.TimeoutExpired as e:
                rc, out = "timeout", (e.stdout or b"").decode() if isinstance(e.stdout, bytes) \
                    else (e.stdout or "")
            row = {"model": m, "precision": prec, "rc": rc,
                   "wall_s": round(time.monotonic() - t0, 1)}
            if os.path.exists(js):
                with open(js) as f:
                    s = json.load(f)
                row.update({k: s.get(k) for k in ("steps_per_s", "test_accuracy", "val_loss",
                                                  "train_loss", "compiles", "executions",
                                                  "steps_run", "eval_batches", "device")})
            elif m == "cartpole":
                row["output"] = out.strip().splitlines()[-3:]
            if rc != 0:
                row["error"] = out.strip().splitlines()[-12:]
            print(f"train {m} {prec}: {json.dumps(row)[:400]}", flush=True)
            rows.append(row)
    return {"runs": rows}


# ---- bench: bench/run.py rows against hand-written JAX --------------------------------------

def part_bench(args):
    import run as bench_run
    workloads = os.environ.get("BENCH_WORKLOADS", "mlp cnn gpt generate").split()
    table = {}
    for name in workloads:
        t0 = time.monotonic()
        try:
            if name in ("mlp", "cnn", "gpt"):
                table[name] = bench_run.train_row(name, args.smoke, False, False)
            else:
                table[name] = bench_run.unit_rows(name, args.smoke, False)
        except Exception as e:      # one failing row must not hide the others
            table[name] = {"error": f"{type(e).__name__}: {e}",
                           "trace": traceback.format_exc().splitlines()[-8:]}
        print(f"bench {name} ({time.monotonic() - t0:.0f}s): "
              f"{json.dumps(table[name], default=str)[:600]}", flush=True)
    return table


# ---- gpt2: a GPT-2-small step, flowlite vs JAX, MFU ----------------------------------------

def _gpt2_cfg(smoke):
    import specs
    if smoke:
        return specs.GPTConfig(vocab_size=256, context=32, n_layer=2, n_head=2, d_model=32), 2
    return specs.GPTConfig(vocab_size=50304, context=1024, n_layer=12, n_head=12,
                           d_model=768), 8


def model_flops_per_step(cfg, batch):
    """PaLM's count (appendix B): 6 x (matmul parameters) per token for forward + backward,
    plus 12 x layers x d_model x context per token for the attention scores and values."""
    n_matmul = cfg.n_layer * 12 * cfg.d_model ** 2 + cfg.vocab_size * cfg.d_model
    tokens = batch * cfg.context
    return 6 * n_matmul * tokens + 12 * cfg.n_layer * cfg.d_model * cfg.context * tokens


def part_gpt2(args):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    import flowlite as fl
    import harness
    import jax_reference as jr
    import specs
    from flowlite import nn, optim
    from models.gpt import GPT, GPTConfig

    cfg, B = _gpt2_cfg(args.smoke)
    params = specs.init_gpt(0, cfg)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, cfg.vocab_size, (B, cfg.context)).astype(np.int32),
                rng.integers(0, cfg.vocab_size, (B, cfg.context)).astype(np.int32))
               for _ in range(2)]
    lr, wd = specs.ADAMW_LR, specs.ADAMW_WEIGHT_DECAY

    # flowlite: the tutorial model, cast to bf16 as train.py --precision bf16 does
    model = GPT(GPTConfig(vocab_size=cfg.vocab_size, context=cfg.context, n_layer=cfg.n_layer,
                          n_head=cfg.n_head, d_model=cfg.d_model))
    model.load_state_dict({k: fl.from_numpy(v) for k, v in params.items()})
    model.to(fl.bfloat16)
    opt = optim.AdamW(model.parameters(), lr=lr, betas=specs.BETAS, eps=specs.EPS,
                      weight_decay=wd)
    fb = [(fl.from_numpy(x), fl.from_numpy(y)) for x, y in batches]
    fl.sync()
    it = {"fl": 0, "jax": 0}

    def fl_step():
        x, y = fb[it["fl"] % 2]
        it["fl"] += 1
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    # JAX+optax: bench/jax_reference's GPT, same bf16 weights, same AdamW
    jp = {k: jnp.asarray(v, jnp.bfloat16) for k, v in params.items()}
    tx = optax.adamw(lr, b1=specs.BETAS[0], b2=specs.BETAS[1], eps=specs.EPS, weight_decay=wd)
    state = {"p": jp, "s": tx.init(jp)}

    def loss_fn(p, x, y):
        logits = jr.gpt_forward(p, x, cfg)
        return jr.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def _jstep(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    jstep = jax.jit(_jstep, donate_argnums=(0, 1))
    jb = [(jax.device_put(x), jax.device_put(y)) for x, y in batches]

    def jax_step():
        x, y = jb[it["jax"] % 2]
        it["jax"] += 1
        state["p"], state["s"], loss = jstep(state["p"], state["s"], x, y)
        return loss

    out = {"config": {"n_layer": cfg.n_layer, "d_model": cfg.d_model, "n_head": cfg.n_head,
                      "context": cfg.context, "vocab": cfg.vocab_size, "batch": B,
                      "dtype": "bfloat16 weights and activations, AdamW"}}
    t0 = time.perf_counter()
    l_fl = float(fl_step().item())
    out["flowlite_first_step_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    l_jax = float(jax_step())
    out["jax_first_step_s"] = time.perf_counter() - t0
    out["first_losses"] = {"flowlite": l_fl, "jax": l_jax, "ln_vocab": math.log(cfg.vocab_size)}
    n = 3 if args.smoke else 12
    t = harness.time_alternating({"flowlite": fl_step, "jax": jax_step}, n, warmup=2,
                                 wait={"flowlite": lambda l: l.numpy(),
                                       "jax": jax.block_until_ready}, block=5)
    flops = model_flops_per_step(cfg, B)
    out.update(flowlite_ms=t["flowlite"], jax_ms=t["jax"], ratio=t["flowlite"] / t["jax"],
               model_tflop_per_step=flops / 1e12)
    dev = _gpu()
    name = getattr(dev, "device_kind", "cpu") if dev is not None else "cpu"
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    for fw in ("flowlite", "jax"):
        tflops = flops / (t[fw] / 1e3) / 1e12
        out[f"{fw}_tflops"] = tflops
        if peak:
            out[f"{fw}_mfu"] = tflops / peak
            out[f"{fw}_mfu_vs_measured_790"] = tflops / 790.0
    out["device_kind"] = name
    out["compiles"] = fl.metrics.counters()["compiles"]
    return out


# ---- cartpole: fused flowlite vs PyTorch eager on the same GPU -----------------------------

def part_cartpole(args):
    import harness
    from flowlite_cartpole import FlowliteCartPoleRunner
    import flowlite as fl
    sizes = [1024, 4096, 16384, 65536] if not args.smoke else [64]
    K = 200 if not args.smoke else 10
    import workloads
    torch, tdev = None, None
    if workloads.torch_installed():
        import torch
        import torch_reference as tr
        tdev = "cuda" if (torch.cuda.is_available() and not args.smoke) else "cpu"
    rows = {}
    for n in sizes:
        row = {}
        runner = FlowliteCartPoleRunner(n, K)
        fns = {"flowlite": runner.step}
        waits = {"flowlite": lambda x: x.numpy()}
        if torch is not None:
            env = tr.TorchCartPole(n, device=tdev)
            fns["torch"] = env.step
            waits["torch"] = (lambda _x: torch.cuda.synchronize()) if tdev == "cuda" \
                else (lambda _x: None)
        reps = 3 if args.smoke else 10
        # per call: flowlite K steps; torch one step -> time K torch calls as one unit
        if "torch" in fns:
            one = fns["torch"]

            def torch_k(one=one):
                r = None
                for _ in range(K):
                    r = one()
                return r
            fns["torch"] = torch_k
        t = harness.time_alternating(fns, reps, warmup=1, wait=waits, block=max(1, reps // 2))
        for fw, ms in t.items():
            row[f"{fw}_env_steps_per_s"] = K * n / (ms / 1e3)
        if "torch" in t:
            row["flowlite_vs_torch"] = row["flowlite_env_steps_per_s"] / \
                row["torch_env_steps_per_s"]
            row["torch_device"] = tdev
        rows[f"N={n}"] = row
        print(f"cartpole N={n}: {json.dumps(row)}", flush=True)
    rows["compiles"] = fl.metrics.counters()["compiles"]
    return rows


# ---- profile: where a step's host time goes on this device ---------------------------------

def _median_us(fn, n=200):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def part_profile(args):
    import cProfile
    import io
    import pstats

    import jax
    import numpy as np

    import specs
    import workloads

    out = {}
    x = jax.device_put(np.ones((), np.float32))
    f = jax.jit(lambda a: a + 1)
    jax.block_until_ready(f(x))

    def read():                 # dispatch, then a plain host read
        np.asarray(f(x))

    def wait():                 # dispatch, then wait without reading
        jax.block_until_ready(f(x))

    def read_prefetched():      # dispatch, start the copy at once, then read
        y = f(x)
        y.copy_to_host_async()
        np.asarray(y)

    for k, fn in (("dispatch_wait_us", wait), ("dispatch_read_us", read),
                  ("dispatch_prefetch_read_us", read_prefetched)):
        out[k] = _median_us(fn, 30 if args.smoke else 300)
    for name in ("mlp", "gpt"):
        wl = workloads.build("flowlite", name, specs.Options(quick=args.smoke))
        for _ in range(5):
            wl.wait(wl.step())
        out[f"{name}_step_read_us"] = _median_us(lambda: wl.wait(wl.step()), 50)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(50):
            wl.wait(wl.step())
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(18)
        out[f"{name}_cprofile_50_steps"] = [ln for ln in buf.getvalue().splitlines()
                                            if ln.strip()][-22:]
        print(f"profile {name}: {out[f'{name}_step_read_us']:.0f} us/step", flush=True)
    print(f"profile: {json.dumps({k: v for k, v in out.items() if k.endswith('_us')})}",
          flush=True)
    return out


# ---- driver ---------------------------------------------------------------------------------

def run_part(args):
    rec = {"part": args.part, "versions": _versions()}
    t0 = time.monotonic()
    try:
        dev = _gpu()
        if dev is None and not args.smoke:
            print(f"no GPU: skipped {args.part} (JAX sees no GPU; the part needs one)",
                  flush=True)
            rec["skipped"] = "no GPU"
        else:
            rec["device"] = str(dev) if dev is not None else "cpu (smoke)"
            rec["result"] = globals()[f"part_{args.part}"](args)
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["trace"] = traceback.format_exc().splitlines()[-15:]
        print(f"{args.part} failed: {rec['error']}", flush=True)
        traceback.print_exc()
    rec["seconds"] = round(time.monotonic() - t0, 1)
    with open(os.path.join(args.tmp, f"part_{args.part}.json"), "w") as f:
        json.dump(rec, f, indent=1, default=str)
    return 0


def _last_line(err):
    return err if isinstance(err, str) else (err[-1] if err else "")


def _fmt(v, f="{:.3g}"):
    return "-" if v is None else f.format(v)


def summary(args):
    merged = {}
    for part in PARTS:
        p = os.path.join(args.tmp, f"part_{part}.json")
        if os.path.exists(p):
            with open(p) as f:
                merged[part] = json.load(f)
        else:
            merged[part] = {"error": "no record: not run, or timed out (parts.log)"}
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump(merged, f, indent=1, default=str)
    lines = []
    for part in PARTS:
        rec = merged[part]
        head = f"== {part} ({rec.get('seconds', '?')} s)"
        if "skipped" in rec:
            lines.append(f"{head}: no GPU — skipped")
            continue
        if "error" in rec:
            lines.append(f"{head}: FAILED {rec['error']}")
            continue
        lines.append(head)
        r = rec["result"]
        if part == "train":
            for row in r["runs"]:
                metric = (f"acc {_fmt(row.get('test_accuracy'))}" if row.get("test_accuracy")
                          is not None else f"val loss {_fmt(row.get('val_loss'))}")
                lines.append(f"  {row['model']:8s} {row['precision']:4s} rc={row.get('rc')} "
                             f"{_fmt(row.get('steps_per_s'), '{:.1f}')} steps/s  {metric}  "
                             f"compiles {row.get('compiles')}  executions "
                             f"{row.get('executions')}  ({row.get('wall_s')} s)"
                             + (f"  ERROR {_last_line(row['error'])}" if row.get("error")
                                else ""))
        elif part == "bench":
            for k, v in r.items():
                if "error" in v:
                    lines.append(f"  {k}: ERROR {v['error']}")
                elif k in ("mlp", "cnn", "gpt"):
                    lines.append(f"  {k:8s} flowlite/JAX {_fmt(v.get('ratio'))} (ahead "
                                 f"{_fmt(v.get('ahead_ratio'))}, replay "
                                 f"{_fmt(v.get('replay_ratio'))}); JAX {_fmt(v.get('jax_ms'))} "
                                 f"ms, flowlite {_fmt(v.get('flowlite_ms'))} ms")
                else:
                    for var, row in v.items():
                        lines.append(f"  {k} {var}: flowlite {_fmt(row.get('flowlite_units_per_s'))}"
                                     f" tokens/s; vs JAX {_fmt(row.get('vs_jax'))}x")
        elif part == "gpt2":
            lines.append(f"  {r['config']}")
            lines.append(f"  flowlite {_fmt(r['flowlite_ms'])} ms/step, JAX {_fmt(r['jax_ms'])} "
                         f"ms/step, ratio {_fmt(r['ratio'])}; model TFLOP/step "
                         f"{_fmt(r['model_tflop_per_step'])}")
            lines.append(f"  MFU (989 TFLOP/s peak): flowlite {_fmt(r.get('flowlite_mfu'), '{:.1%}')}, "
                         f"JAX {_fmt(r.get('jax_mfu'), '{:.1%}')}; first step flowlite "
                         f"{_fmt(r['flowlite_first_step_s'])} s, JAX {_fmt(r['jax_first_step_s'])} s; "
                         f"losses {r['first_losses']}")
        elif part == "profile":
            lines.append("  " + ", ".join(f"{k} {v:.0f}" for k, v in r.items()
                                          if k.endswith("_us")))
        elif part == "cartpole":
            for k, row in r.items():
                if k.startswith("N="):
                    lines.append(f"  {k:8s} flowlite {_fmt(row.get('flowlite_env_steps_per_s'))} "
                                 f"env-steps/s, torch ({row.get('torch_device')}) "
                                 f"{_fmt(row.get('torch_env_steps_per_s'))}; ratio "
                                 f"{_fmt(row.get('flowlite_vs_torch'))}x")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "summary.txt"), "a") as f:
        f.write(text + "\n")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=PARTS)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--tmp", default=None, help="scratch folder (default OUT/.parts)")
    p.add_argument("--budget", type=float, default=150.0, help="seconds for the train part")
    p.add_argument("--smoke", action="store_true",
                   help="run the parts at toy sizes on the CPU (checks this script)")
    args = p.parse_args(argv)
    args.tmp = args.tmp or os.path.join(args.out, "parts")
    os.makedirs(args.tmp, exist_ok=True)
    if args.summary:
        return summary(args)
    if args.part is None:
        p.error("give --part or --summary")
    return run_part(args)


if __name__ == "__main__":
    sys.exit(main())
