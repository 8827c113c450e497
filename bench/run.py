"""flowlite against the same models written directly in JAX+optax (and PyTorch eager when it is
installed), in one run, frameworks alternating; prints medians and ratios.

    python bench/run.py                     # the full table (a few minutes on 2 cores)
    python bench/run.py --quick             # CI-sized smoke run (numbers not meaningful)
    python bench/run.py --json results.json --workloads mlp gpt

Per training workload: steady-state median step (each step's result waited on) and
dispatch-ahead step (n steps, one wait), flowlite/JAX ratio, first step (trace + compile + run,
each framework in a fresh process) and its ratio, a second flowlite process with a warm
persistent cache against JAX's cold first step, flowlite's Python tracing time per step and per
recorded op, the cache-hit cost per sync, the peak RSS of each framework's own process, and
the share of CPU time a contended host stole from this VM during the steady timing (on a
VM, the one sign of a busy machine the guest can see).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time

# run as a script, so bench/ (this folder) is on sys.path and its modules import each other by
# name; flowlite and models/ come from this checkout
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# flowlite first: it sets its measured XLA:CPU options (flowlite/engine/xla_flags.py) before any
# JAX backend exists, and the JAX reference in this process runs with the same ones
import flowlite  # noqa: E402,F401
import harness  # noqa: E402
import specs  # noqa: E402
import workloads  # noqa: E402

STEPS = {"mlp": (400, 30), "cnn": (120, 8), "gpt": (60, 6)}
QUICK = (6, 2)


def _trace_cost(wl, n):
    """Python tracing time per step and per recorded op, and the cache-hit cost per sync."""
    import flowlite as fl
    per_step, nodes, sync_cost = [], [], []
    for _ in range(n):
        wl.wait(wl.step())                      # let the device drain first
        ops0 = fl.metrics.counters()["ops"]
        t = time.perf_counter()
        r = wl.step()
        t0, t1, t2, k = fl.metrics.last_sync
        per_step.append(t0 - t)
        sync_cost.append(t1 - t0)
        nodes.append(fl.metrics.counters()["ops"] - ops0)   # ops recorded by this step
        wl.wait(r)
    per_step.sort()
    sync_cost.sort()
    med = per_step[len(per_step) // 2]
    k = sorted(nodes)[len(nodes) // 2]
    return {"trace_ms_per_step": med * 1e3, "ops_per_step": k,
            "trace_us_per_op": med / max(k, 1) * 1e6,
            "sync_hit_us": sync_cost[len(sync_cost) // 2] * 1e6}


def train_row(name, quick, with_torch, isolated):
    n, warm = QUICK if quick else STEPS[name]
    opts = specs.Options(quick=quick)
    fns, waits, built = {}, {}, {}
    frameworks = ["jax", "flowlite", "flowlite-replay", "flowlite-nochecks"] + \
        (["torch"] if with_torch else [])
    for fw in frameworks:
        try:
            wl = workloads.build(fw, name, opts)
        except specs.Unsupported:
            continue
        built[fw], fns[fw], waits[fw] = wl, wl.step, wl.wait
    steal0, t0 = harness.steal_s(), time.monotonic()
    steady = harness.time_alternating(fns, n, warmup=warm, wait=waits, stats=True)
    ahead = harness.time_dispatch_ahead(fns, max(n // 4, 2), warmup=1, wait=waits,
                                        rounds=3 if quick else 5)
    # the share of the machine's CPU time a contended host took from this VM meanwhile
    steal = (harness.steal_s() - steal0) / ((time.monotonic() - t0) * (os.cpu_count() or 1))
    row = {"steps": n, "steal_frac": round(steal, 3)}
    for fw in fns:
        row[f"{fw}_ms"] = steady[fw]["median_ms"]
        row[f"{fw}_ahead_ms"] = ahead[fw]
    row.update(_trace_cost(built["flowlite"], 3 if quick else 20))
    row["ratio"] = row["flowlite_ms"] / row["jax_ms"]
    row["ahead_ratio"] = row["flowlite_ahead_ms"] / row["jax_ahead_ms"]
    if "flowlite-replay_ms" in row:
        row["replay_ratio"] = row["flowlite-replay_ms"] / row["jax_ms"]
    if "torch_ms" in row:
        row["torch_ratio"] = row["flowlite_ms"] / row["torch_ms"]
    if "flowlite-nochecks_ms" in row:     # what checked execution costs (on / off)
        row["checks_ratio"] = row["flowlite_ms"] / row["flowlite-nochecks_ms"]
        row["checks_ahead_ratio"] = row["flowlite_ahead_ms"] / row["flowlite-nochecks_ahead_ms"]
    if isolated:
        # cold first steps: flowlite with an empty persistent cache (which this run fills)
        cache = tempfile.mkdtemp(prefix="flowlite-bench-cache-")
        env = {"FLOWLITE_CACHE_DIR": cache}
        iso = {"jax": harness.run_isolated("jax", name, quick=quick),
               "flowlite": harness.run_isolated("flowlite", name, quick=quick, env=env)}
        warm_run = harness.run_isolated("flowlite", name, quick=quick, env=env)
        cold_jax = harness.run_isolated("jax", name, quick=quick,
                                        env={"JAX_COMPILATION_CACHE_DIR": ""})
        row.update(
            jax_first_step_s=iso["jax"]["first_step_s"],
            flowlite_first_step_s=iso["flowlite"]["first_step_s"],
            first_step_ratio=iso["flowlite"]["first_step_s"] / iso["jax"]["first_step_s"],
            warm_cache_first_step_s=warm_run["first_step_s"],
            warm_cache_ratio=warm_run["first_step_s"] / cold_jax["first_step_s"],
            jax_rss_mb=iso["jax"]["peak_rss_mb"], flowlite_rss_mb=iso["flowlite"]["peak_rss_mb"],
            rss_ratio=iso["flowlite"]["peak_rss_mb"] / iso["jax"]["peak_rss_mb"],
            other_cpu_frac=max(v.get("other_cpu_frac", 0.0) for v in iso.values()))
    return row


def unit_rows(name, quick, with_torch):
    """cartpole (env steps/s at N=1 and N=1024) and generate (tokens/s at batch 1 and 16)."""
    rows = {}
    variants = [{"n_envs": 1}, {"n_envs": 1024}] if name == "cartpole" else \
        [{"batch": 1}, {"batch": 16}]
    for v in variants:
        opts = specs.Options(quick=quick, **v)
        fns, waits, units = {}, {}, {}
        fws = ["flowlite", "jax", "numpy"] + (["torch"] if with_torch else [])
        if name == "generate":
            fws.append("flowlite-lazy")
        for fw in fws:
            try:
                if fw == "flowlite-lazy":
                    from flowlite_workloads import build_flowlite_generate
                    wl = build_flowlite_generate(opts, fused=False)
                else:
                    wl = workloads.build(fw, name, opts)
            except specs.Unsupported:
                continue
            fns[fw], waits[fw], units[fw] = wl.step, wl.wait, wl.units_per_step
        if "flowlite" not in fns:
            continue
        n = 3 if quick else (30 if name == "cartpole" else 5)
        t = harness.time_alternating(fns, n, warmup=1, wait=waits, block=max(1, n // 3))
        key = "N=%d" % v["n_envs"] if name == "cartpole" else "B=%d" % v["batch"]
        row = {f"{fw}_units_per_s": units[fw] / (t[fw] / 1e3) for fw in fns}
        for fw in fns:
            if fw != "flowlite":
                row[f"vs_{fw}"] = row["flowlite_units_per_s"] / row[f"{fw}_units_per_s"]
        rows[key] = row
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CI-sized smoke run")
    p.add_argument("--json", metavar="PATH", help="write the table as JSON")
    p.add_argument("--workloads", nargs="+", default=["mlp", "cnn", "gpt", "cartpole",
                                                       "generate"],
                   choices=specs.ALL_WORKLOADS)
    p.add_argument("--no-isolated", action="store_true",
                   help="skip the fresh-process first-step / RSS measurements")
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args(argv)
    with_torch = workloads.torch_installed() and not args.no_torch
    if not args.quick and not harness.wait_for_quiet(0.15, timeout=60):
        print("warning: the machine is busy; timings will be noisy", file=sys.stderr)
    table = {}
    for name in args.workloads:
        t0 = time.time()
        if name in specs.TRAIN_WORKLOADS:
            table[name] = train_row(name, args.quick, with_torch, not args.no_isolated)
        else:
            table[name] = unit_rows(name, args.quick, with_torch)
        print(f"[{name}: {time.time() - t0:.0f}s]", file=sys.stderr)
    import flowlite
    import jax
    meta = {"date": datetime.date.today().isoformat(), "command": " ".join(["python",
                                                                            "bench/run.py"] +
                                                                           (argv or sys.argv[1:])),
            "python": platform.python_version(), "jax": jax.__version__,
            "flowlite": flowlite.__version__, "backend": jax.default_backend(),
            "devices": str(jax.devices()), "cpus": os.cpu_count(), "quick": args.quick}
    print(format_table(table, meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(table, _meta=meta), f, indent=2)


def _f(v, fmt="{:.3g}"):
    return "-" if v is None else fmt.format(v)


def format_table(table, meta):
    lines = [f"flowlite bench — {meta['date']}, {meta['backend']} ({meta['cpus']} cpus), "
             f"jax {meta['jax']}, python {meta['python']}", ""]
    tr = [k for k in ("mlp", "cnn", "gpt") if k in table]
    if tr:
        lines.append("training step     flowlite/JAX  ahead/JAX  replay/JAX  first-step/JAX  "
                     "warm-cache/JAX-cold  RSS/JAX  trace µs/op  hit µs/sync  checks on/off  "
                     "flowlite/torch  steal  (JAX ms, flowlite ms, torch ms)")
        for k in tr:
            r = table[k]
            lines.append(
                f"{k:16s}  {_f(r['ratio']):>12s}  {_f(r['ahead_ratio']):>9s}  "
                f"{_f(r.get('replay_ratio')):>10s}  {_f(r.get('first_step_ratio')):>14s}  "
                f"{_f(r.get('warm_cache_ratio')):>19s}  {_f(r.get('rss_ratio')):>7s}  "
                f"{_f(r['trace_us_per_op']):>11s}  {_f(r['sync_hit_us']):>11s}  "
                f"{_f(r.get('checks_ratio')):>5s} {_f(r.get('checks_ahead_ratio')):>5s} "
                f"{_f(r.get('torch_ratio')):>14s}  "
                f"{_f(r.get('steal_frac'), '{:.0%}'):>5s}  "
                f"({_f(r['jax_ms'])}, {_f(r['flowlite_ms'])}, {_f(r.get('torch_ms'))})")
    for k in ("cartpole", "generate"):
        if k not in table:
            continue
        lines.append("")
        unit = "env steps/s" if k == "cartpole" else "tokens/s"
        for variant, r in table[k].items():
            others = "  ".join(f"{name[3:]}: {_f(v)}x" for name, v in r.items()
                               if name.startswith("vs_"))
            lines.append(f"{k} {variant:7s} flowlite {r['flowlite_units_per_s']:.4g} {unit}; "
                         f"flowlite vs  {others}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
