"""Run one framework × workload in this process and report it (the child of harness.run_isolated).

    python bench/run_one.py --framework jax --workload mlp --json
    python bench/run_one.py --framework torch --workload cartpole --n-envs 1 --json

Prints (with --json, one JSON line) first_step_s (the first call: trace + compile + run, result
waited on), setup_s (imports, parameter init, data transfer), median_ms (steady state, each
step waited on), dispatch_ahead_ms (per step, n steps then one wait), units_per_s and
peak_rss_mb of this process. An unsupported combination (e.g. torch not installed) prints
{"skipped": reason} and exits 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

_T0 = time.perf_counter()

# run as a script (harness.run_isolated): bench/ is on sys.path, its modules import by name
import harness  # noqa: E402
import specs  # noqa: E402
import workloads  # noqa: E402

# (timed steps, warmup, dispatch-ahead steps per round) per workload; --quick uses QUICK_STEPS.
STEPS = {"mlp": (200, 10, 50), "cnn": (100, 5, 20), "gpt": (60, 3, 10),
         "cartpole": (200, 10, 50), "generate": (10, 2, 3)}
QUICK_STEPS = (5, 1, 3)


def _versions(framework: str) -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "jax", "jaxlib", "optax", "torch", "flowlite"):
        m = sys.modules.get(mod)
        if m is not None and hasattr(m, "__version__"):
            out[mod] = m.__version__
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--framework", required=True, choices=sorted(workloads.BUILDERS))
    p.add_argument("--workload", required=True, choices=specs.ALL_WORKLOADS)
    p.add_argument("--quick", action="store_true", help="CI-sized smoke run")
    p.add_argument("--json", action="store_true", help="print one JSON line only")
    p.add_argument("--steps", type=int, help="timed steps (default per workload)")
    p.add_argument("--warmup", type=int)
    p.add_argument("--ahead-steps", type=int, help="steps per dispatch-ahead round")
    p.add_argument("--ahead-rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-envs", type=int, default=1024)
    p.add_argument("--k-steps", type=int, default=200)
    p.add_argument("--policy", choices=("random", "linear"), default="random")
    p.add_argument("--rng-impl", default="threefry2x32", help="cartpole: jax.random impl")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--n-new", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=20, help="0 disables top-k")
    p.add_argument("--cache-dir", help="JAX persistent compilation cache (JAX-based frameworks);"
                                       " programs are cached whatever their compile time")
    a = p.parse_args(argv)

    if a.cache_dir and a.framework not in ("torch", "numpy"):
        import jax
        jax.config.update("jax_compilation_cache_dir", a.cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    opts = specs.Options(quick=a.quick, seed=a.seed, n_envs=a.n_envs, k_steps=a.k_steps,
                             policy=a.policy, rng_impl=a.rng_impl, batch=a.batch, prompt_len=a.prompt_len,
                             n_new=a.n_new, temperature=a.temperature, top_k=a.top_k or None)
    row = {"framework": a.framework, "workload": a.workload}
    t_build = time.perf_counter()
    try:
        w = workloads.build(a.framework, a.workload, opts)
    except specs.Unsupported as e:
        row["skipped"] = str(e)
        print(json.dumps(row) if a.json else f"skipped: {e}")
        return 0
    setup_s = time.perf_counter() - t_build

    n, warmup, ahead = QUICK_STEPS if a.quick else STEPS[a.workload]
    n = a.steps or n
    warmup = a.warmup if a.warmup is not None else warmup
    ahead = a.ahead_steps or ahead
    rounds = 2 if a.quick else a.ahead_rounds

    first = harness.time_first_step(w.step, w.wait)
    steady = harness.time_alternating({a.framework: w.step}, n, warmup, w.wait,
                                      stats=True)[a.framework]
    ahead_ms = harness.time_dispatch_ahead({a.framework: w.step}, ahead, 0, w.wait,
                                           rounds=rounds)[a.framework]
    row.update({
        "variant": w.variant,
        "first_step_s": first,
        "setup_s": setup_s,
        "startup_s": t_build - _T0,
        "median_ms": steady["median_ms"],
        "p10_ms": steady["p10_ms"],
        "p90_ms": steady["p90_ms"],
        "n_steps": steady["n"],
        "dispatch_ahead_ms": ahead_ms,
        "units_per_step": w.units_per_step,
        "unit": w.unit,
        "units_per_s": w.units_per_step / (steady["median_ms"] / 1e3),
        "peak_rss_mb": harness.peak_rss_mb(),
        "options": opts.asdict() if a.workload in ("cartpole", "generate") else {"quick": a.quick},
        "versions": _versions(a.framework),
        "info": w.info,
    })
    if a.json:
        print(json.dumps(row))
    else:
        print(harness.format_table([row], baseline=a.framework))
        print(f"first step {first:.3f} s, setup {setup_s:.2f} s, {row['units_per_s']:.4g} "
              f"{w.unit}/s, p10–p90 {harness.fmt_ms(steady['p10_ms'])}–"
              f"{harness.fmt_ms(steady['p90_ms'])} per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
