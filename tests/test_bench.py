"""The benchmark's CI-sized smoke run executes end to end (its numbers are not checked)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_quick_run_writes_the_table(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "bench/run.py", "--quick", "--no-isolated", "--no-torch",
                        "--workloads", "mlp", "cartpole", "generate", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads(out.read_text())
    for key in ("flowlite_ms", "jax_ms", "ratio", "trace_us_per_op", "steal_frac"):
        assert key in table["mlp"]
    assert "N=1" in table["cartpole"] and "B=1" in table["generate"]
    assert "flowlite/JAX" in r.stdout
    assert 0.0 <= table["mlp"]["steal_frac"] <= 1.0


def test_steal_time_is_read_from_proc_stat_and_never_goes_back():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import harness
    a = harness.steal_s()
    b = harness.steal_s()
    assert 0.0 <= a <= b
    if os.path.exists("/proc/stat"):    # Linux: the 8th CPU field, in clock ticks
        with open("/proc/stat") as f:
            ticks = int(f.readline().split()[8])
        assert a <= ticks / os.sysconf("SC_CLK_TCK") <= harness.steal_s()


def test_trace_overhead_script_runs():
    r = subprocess.run([sys.executable, "bench/trace_overhead.py"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "µs per recorded op" in r.stdout and "cache-hit cost per sync" in r.stdout
