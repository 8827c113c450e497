"""Timing harness shared by every benchmark: interleaved timing, peak RSS, isolated child runs,
and the table of medians and ratios.

Conventions: a "step" is one call of a zero-argument callable that returns something to block
on; a `wait` function blocks on it (jax.block_until_ready for JAX and flowlite, a no-op for
eager PyTorch/NumPy). Frameworks are interleaved (A B B A A B …) so drift of the machine (turbo,
other load) hits every framework alike; results are medians, and the table's headline is the
ratio to a baseline measured in the same run, never a bare absolute time.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

BENCH_DIR = Path(__file__).resolve().parent
RUN_ONE = BENCH_DIR / "run_one.py"


def no_wait(_x: Any) -> None:
    """The wait function of eager frameworks: the step's result is already computed."""


def _waits(fns: Mapping[str, Callable], wait) -> dict:
    if wait is None:
        return {k: no_wait for k in fns}
    if callable(wait):
        return {k: wait for k in fns}
    return {k: wait.get(k, no_wait) for k in fns}


def _stats(samples_s: list) -> dict:
    ms = sorted(s * 1e3 for s in samples_s)
    q = lambda f: ms[min(len(ms) - 1, int(f * len(ms)))]  # noqa: E731
    return {"median_ms": statistics.median(ms), "p10_ms": q(0.10), "p90_ms": q(0.90),
            "min_ms": ms[0], "n": len(ms)}


def time_alternating(fns: Mapping[str, Callable[[], Any]], n_steps: int, warmup: int = 3,
                     wait: Callable | Mapping[str, Callable] | None = None, block: int = 10,
                     rewarm: int = 1, stats: bool = False) -> dict:
    """Median wall time of one step per framework, in ms, each step's result waited on.

    fns: name -> step callable; wait: one function for all, or name -> function (missing names
    and None mean no wait). Every framework first runs `warmup` steps, then the frameworks take
    turns running `block` timed steps each, the order reversed every round (A B, B A, …), until
    each ran `n_steps` timed steps. Each turn starts with `rewarm` untimed steps, so no framework
    is charged for the caches the other one evicted. The garbage collector is left as the user
    has it: its pauses are part of a framework's cost.
    Returns {name: median_ms}, or {name: {median_ms, p10_ms, p90_ms, min_ms, n}} with stats=True.
    """
    waits = _waits(fns, wait)
    for name, f in fns.items():
        for _ in range(warmup):
            waits[name](f())
    samples = {k: [] for k in fns}
    order = list(fns)
    single = len(order) == 1
    done = 0
    while done < n_steps:
        b = min(block, n_steps - done)
        for name in order:
            f, w, out = fns[name], waits[name], samples[name]
            for _ in range(0 if single else rewarm):
                w(f())
            for _ in range(b):
                t0 = time.perf_counter()
                w(f())
                out.append(time.perf_counter() - t0)
        order.reverse()
        done += b
    return {k: (_stats(v) if stats else _stats(v)["median_ms"]) for k, v in samples.items()}


def time_dispatch_ahead(fns: Mapping[str, Callable[[], Any]], n_steps: int, warmup: int = 3,
                        wait: Callable | Mapping[str, Callable] | None = None,
                        rounds: int = 5) -> dict:
    """Per-step time in ms when `n_steps` steps are dispatched back to back and only the last
    result is waited on (the host may run ahead of the device). Frameworks alternate by round,
    each round preceded by one untimed, waited step; returns {name: median over `rounds` of
    (round time / n_steps)}."""
    waits = _waits(fns, wait)
    for name, f in fns.items():
        for _ in range(warmup):
            waits[name](f())
    per_step = {k: [] for k in fns}
    order = list(fns)
    for _ in range(rounds):
        for name in order:
            f, w = fns[name], waits[name]
            w(f())
            t0 = time.perf_counter()
            r = None
            for _ in range(n_steps):
                r = f()
            w(r)
            per_step[name].append((time.perf_counter() - t0) / n_steps)
        order.reverse()
    return {k: statistics.median(v) * 1e3 for k, v in per_step.items()}


def time_first_step(step: Callable[[], Any], wait: Callable = no_wait) -> float:
    """Seconds for one step including whatever tracing/compiling it triggers, result waited on."""
    t0 = time.perf_counter()
    wait(step())
    return time.perf_counter() - t0


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB.  Linux's VmHWM belongs to this program
    alone; ru_maxrss survives execve, so a child started by a big parent would report the
    parent's peak (ru_maxrss is the fallback where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_ticks() -> list:
    """The all-CPU line of Linux /proc/stat in seconds since boot (user, nice, system, idle,
    iowait, irq, softirq, steal, ...); [] where unreadable."""
    try:
        with open("/proc/stat") as f:
            v = f.readline().split()[1:]
    except OSError:
        return []
    hz = os.sysconf("SC_CLK_TCK")
    return [int(x) / hz for x in v]


def _cpu_busy_s() -> float:
    """CPU-seconds all CPUs spent busy since boot (Linux /proc/stat); 0.0 where unreadable."""
    v = _cpu_ticks()
    return sum(v) - v[3] - v[4] if len(v) > 4 else 0.0    # all but idle and iowait


def steal_s() -> float:
    """CPU-seconds the hypervisor gave to others while this VM's CPUs wanted to run, since boot
    (Linux /proc/stat "steal"; 0.0 on bare metal or where unreadable).  A share of it over a
    timing says how contended the host was: the guest can't see that load any other way."""
    v = _cpu_ticks()
    return v[7] if len(v) > 7 else 0.0


def cpu_busy_fraction(interval: float = 0.5) -> float:
    """Fraction of all CPUs busy over the next `interval` seconds (this process included)."""
    b0 = _cpu_busy_s()
    time.sleep(interval)
    return (_cpu_busy_s() - b0) / (interval * (os.cpu_count() or 1))


def wait_for_quiet(max_busy: float = 0.10, timeout: float = 300.0) -> bool:
    """Wait until other work leaves the CPUs (at most `max_busy` of them busy) so timings are
    not taken beside a test suite or a build; returns False if `timeout` s passed first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cpu_busy_fraction() <= max_busy:
            return True
    return False


def run_isolated(framework: str, workload: str, quick: bool = False, args=(), timeout: float = 900,
                 env: Mapping[str, str] | None = None, python: str = sys.executable) -> dict:
    """Run one framework × workload in a fresh interpreter (`bench/run_one.py … --json`) so
    that its peak RSS and first step (trace + compile + run) are its own, and return the JSON
    object the child printed, plus `other_cpu_frac`: the share of the machine's CPUs that
    processes other than the child kept busy meanwhile (above ~0.1 the timings are suspect:
    something else was running). Raises RuntimeError with the child's stderr on failure."""
    cmd = [python, str(RUN_ONE), "--framework", framework, "--workload", workload, "--json",
           *([] if not quick else ["--quick"]), *map(str, args)]
    child_env = dict(os.environ)
    if env:
        child_env.update(env)
    ru0, busy0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), _cpu_busy_s(), time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env,
                          cwd=str(BENCH_DIR.parent))
    ru1, busy1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), _cpu_busy_s(), time.monotonic() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    row = json.loads(lines[-1])
    child_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    other = (busy1 - busy0 - child_cpu) / (max(wall, 1e-9) * (os.cpu_count() or 1))
    row["other_cpu_frac"] = round(max(0.0, other), 3)
    return row


# --------------------------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------------------------

# (row key, column title, value -> text, True when a larger value is better)
def fmt_ms(v: float) -> str:
    """A time given in ms, printed in the unit that suits it (s, ms, µs, ns)."""
    for scale, unit in ((1e-3, "s"), (1.0, "ms"), (1e3, "µs"), (1e6, "ns")):
        if v * scale >= 1.0 or unit == "ns":
            return f"{v * scale:.3g} {unit}"
    return f"{v} ms"


DEFAULT_COLUMNS = (
    ("ms_per_unit", "median", fmt_ms, False),
    ("ahead_ms_per_unit", "ahead", fmt_ms, False),
    ("first_step_s", "first step", lambda v: fmt_ms(v * 1e3), False),
    ("peak_rss_mb", "peak RSS MB", "{:.0f}".format, False),
)


def per_unit(row: Mapping) -> dict:
    """Add `ms_per_unit` / `ahead_ms_per_unit` (a call's time divided by the work it does,
    `units_per_step`, e.g. the environment steps or tokens of one call) so frameworks doing
    different amounts of work per call are compared per unit of work."""
    r = dict(row)
    units = r.get("units_per_step", 1) or 1
    if r.get("median_ms") is not None:
        r.setdefault("ms_per_unit", r["median_ms"] / units)
    if r.get("dispatch_ahead_ms") is not None:
        r.setdefault("ahead_ms_per_unit", r["dispatch_ahead_ms"] / units)
    return r


def format_table(rows: list, baseline: str = "jax", columns=DEFAULT_COLUMNS) -> str:
    """Text table grouped by workload (time columns are per unit of work, see `per_unit`). Each row is a dict with at least `workload` and
    `framework` plus any of the column keys (run_one's JSON is such a row; `variant` is shown
    beside the workload when present). Each value is followed by its ratio to the `baseline`
    framework's row of the same workload/variant (value / baseline: above 1 means slower or
    bigger); when the baseline is absent, the group's first row is the reference.
    A `units_per_s` column (throughput, e.g. env steps/s or tokens/s) is appended when any row
    has it, with its ratio framework / baseline (above 1 means faster)."""
    rows = [per_unit(r) for r in rows]
    cols = list(columns)
    if any("units_per_s" in r for r in rows):
        cols.append(("units_per_s", "units/s", "{:.4g}".format, True))
    groups: dict = {}
    for r in rows:
        key = (r["workload"], r.get("variant", ""))
        groups.setdefault(key, []).append(r)
    header = ["workload", "framework"]
    for _, title, _, bigger in cols:
        header += [title, "×base" if not bigger else "speedup"]
    table = [header]
    for (workload, variant), grp in groups.items():
        base = next((r for r in grp if r["framework"] == baseline), grp[0])
        for r in grp:
            line = [f"{workload}{' ' + variant if variant else ''}", r["framework"]]
            for key, _, fmt, bigger in cols:
                v, b = r.get(key), base.get(key)
                if v is None:
                    line += ["-", "-"]
                    continue
                line.append(fmt(v))
                if b in (None, 0) or v == 0:
                    line.append("-")
                else:
                    line.append(f"{v / b:.2f}")
            table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    out = []
    for i, row in enumerate(table):
        out.append("  ".join(c.rjust(w) if j > 1 else c.ljust(w)
                             for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
