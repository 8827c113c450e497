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


def test_gpu_check_runs_on_cpu_and_says_no_gpu(tmp_path):
    # the prepared GPU check must run here too: every GPU part says "no GPU" and the script
    # exits 0 with its summary written
    env = dict(os.environ, PYTHON=sys.executable, JAX_PLATFORMS="cpu",
               PARTS="train bench gpt2 cartpole profile")
    r = subprocess.run(["bash", "bench/gpu_check.sh", str(tmp_path), "--no-suite"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = (tmp_path / "summary.txt").read_text()
    assert "GPU test files: no GPU — skipped" in summary
    parts = ("train", "bench", "gpt2", "cartpole", "profile")
    for part in parts:
        assert f"== {part}" in summary and "no GPU — skipped" in summary
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert {p: record[p].get("skipped") for p in parts} == {p: "no GPU" for p in parts}


def test_gpu_check_model_flops_follow_palm_count():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import gpu_check
    import specs
    cfg = specs.GPTConfig(vocab_size=50304, context=1024, n_layer=12, n_head=12, d_model=768)
    # GPT-2 small: 123.5M matmul parameters -> 6 N per token, plus 12 L d T per token
    n = 12 * 12 * 768 ** 2 + 50304 * 768
    assert gpu_check.model_flops_per_step(cfg, 8) == 6 * n * 8192 + 12 * 12 * 768 * 1024 * 8192


_TINY_PROGRAM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision import datasets, transforms

data = datasets.MNIST("unused", train=True, download=True,
                      transform=transforms.Compose([transforms.ToTensor(),
                                                    transforms.Normalize((0.1,), (0.3,))]))
loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    sched.step()
'''


def test_real_program_runner_times_iterations_under_both_frameworks(tmp_path):
    """bench/real_runner.py on a small PyTorch program written here (the real ones are read
    from user checkouts): iterations end at the first optimizer's step (as a bound method,
    so PyTorch's LR scheduler can wrap it), the torchvision stand-in feeds it, flowlite runs
    one execution per iteration."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import real_programs
    script = tmp_path / "tiny.py"
    script.write_text(_TINY_PROGRAM)
    env = {"REAL_PROGRAMS_DATASET_SIZE": "320"}
    rows = {}
    for fw in ("torch", "flowlite"):
        rows[fw] = real_programs.run_once(fw, "tiny", str(tmp_path), str(script), [], 0,
                                          "optimizer", env, sys.executable,
                                          str(tmp_path / "cache"))
    for fw, r in rows.items():
        assert r["error"] is None, (fw, r["error"])
        assert r["iterations"] == 20, (fw, r)
        assert r["steady_ms"] > 0 and r["peak_rss_mb"] > 50 and r["first_iter_s"] > 0
    assert rows["flowlite"]["executions_per_iter"] == 1
    assert rows["flowlite"]["compiles_after_first_third"] == 0
    r = real_programs.finish({"torch": rows["torch"], "flowlite_cold": rows["flowlite"],
                              "flowlite_warm": rows["flowlite"]})
    assert r["steady_ratio"] == rows["flowlite"]["steady_ms"] / rows["torch"]["steady_ms"]
