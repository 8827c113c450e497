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


def test_real_programs_script_edits_whole_table_and_arguments(tmp_path, monkeypatch, capsys):
    """bench/real_programs.py's parts that need no real program: the hyper-parameter edit of
    a working copy's script, the whole-run ratios (also for a program without iterations),
    both tables and the command line."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import real_programs
    script = tmp_path / "gpt.py"
    script.write_text("batch_size = 64 # sequences\nmax_iters = 5000\nn_layer = 6\n"
                      "print(m.generate(context, max_new_tokens=500))\n"
                      "#print(m.generate(context, max_new_tokens=10000))\n")
    real_programs.edit_script(str(script), {"batch_size": 16, "max_iters": 200,
                                            "max_new_tokens": 20})
    assert script.read_text() == ("batch_size = 16 # sequences\nmax_iters = 200\nn_layer = 6\n"
                                  "print(m.generate(context, max_new_tokens=20))\n"
                                  "#print(m.generate(context, max_new_tokens=10000))\n")
    try:
        real_programs.edit_script(str(script), {"n_embd": 64})
        raise AssertionError("a missing hyper-parameter line must fail")
    except ValueError as e:
        assert "n_embd" in str(e)

    def run(whole, steady=None, rss=300.0, error=None, stopped=False):
        r = {"error": error, "whole_run_s": whole, "peak_rss_mb": rss, "stopped": stopped,
             "iterations": 10 if steady else 0}
        if steady:
            r.update(steady_ms=steady, first_iter_s=1.0)
        return r
    trained = real_programs.finish({"torch": run(12.0, 20.0, stopped=True),
                                    "torch_2": run(10.0, 25.0, stopped=True),
                                    "flowlite_cold": run(30.0, 19.0, rss=400.0),
                                    "flowlite_warm": run(15.0, 18.0)})
    assert trained["whole_run_s"] == {"torch": 10.0, "flowlite_cold": 30.0,
                                      "flowlite_warm": 15.0}
    assert (trained["whole_run_cold_ratio"], trained["whole_run_warm_ratio"]) == (3.0, 1.5)
    assert trained["steady_ratio"] == 18.0 / 20.0 and trained["rss_ratio"] == 400.0 / 300.0
    sample = real_programs.finish({"torch": run(5.0), "torch_2": run(4.0),
                                   "flowlite_cold": run(20.0, error="RuntimeError: x"),
                                   "flowlite_warm": run(8.0, rss=330.0)})
    assert sample["steady_ratio"] is None and sample["whole_run_cold_ratio"] is None
    assert sample["whole_run_warm_ratio"] == 2.0 and sample["rss_ratio"] == 1.1
    table = {"nanogpt-small": trained, "nanogpt-sample": sample, "gpt": {"error": "E: y"}}
    whole = real_programs.format_whole_table(table).splitlines()
    assert whole[1].split() == ["nanogpt-small", "10", "its", "10.00", "30.00", "15.00",
                                "3.00", "1.50", "0.90"]
    assert whole[2].split()[:8] == ["nanogpt-sample", "to", "end", "4.00", "-", "8.00", "-",
                                    "2.00"] and "failed: flowlite_cold" in whole[2]
    assert whole[3] == "gpt              ERROR E: y"
    meta = {"date": "d", "cpus": 2, "python": "3", "torch": "t", "jax": "j", "quick": True}
    assert "nanogpt-sample" in real_programs.format_table(table, meta)

    monkeypatch.setattr(real_programs, "_version", lambda python, module: "v")
    out = tmp_path / "t.json"
    real_programs.main(["--programs", "bigram", "gpt", "nanogpt-sample", "--quick",
                        "--json", str(out)])
    printed = capsys.readouterr()
    assert "[bigram: skipped, no --ngvideo checkout given]" in printed.err
    assert "--quick smoke run" in printed.out and "whole run s" in printed.out
    assert json.loads(out.read_text())["_meta"]["quick"] is True


def test_real_program_runner_without_iterations(tmp_path):
    """MARKER "none": a program that never steps an optimizer gets its whole run and RSS."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import real_programs
    script = tmp_path / "sample.py"
    script.write_text("import torch\nimport tiktoken\nprint(torch.ones(3).sum().item())\n")
    r = real_programs.run_once("torch", "tiny", str(tmp_path), str(script), [], 0, "none", {},
                               sys.executable, str(tmp_path / "cache"))
    assert r["error"] is None and r["iterations"] == 0 and "steady_ms" not in r
    assert r["whole_run_s"] > 0 and r["peak_rss_mb"] > 50


def test_compile_depth_counts_kernels_by_where_they_run():
    """bench/compile_depth.py's kernel count of an optimised HLO module: a scan's body is
    `loops`, a conditional branch of more than 4 kernels is `update` (the guarded optimizer
    update), a 1-kernel branch (a fusion barrier) and the entry are `step`."""
    import jax
    import jax.numpy as jnp
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import compile_depth

    def f(x, ws, p):
        def body(h, w):
            h = jnp.tanh(h @ w)
            return h, h.sum(axis=0)
        h, ys = jax.lax.scan(body, x, ws)
        ok = h.sum() > 0
        barrier = jax.lax.cond(h[0, 0] > 0, lambda v: v, lambda v: v + 1.0, h)

        def update(p):      # several kernels: reductions and dots don't fuse together
            a = jnp.sort(p, axis=0)
            b = (p @ p.T).sum(axis=1)
            c = jnp.cumsum(p, axis=1)
            return jnp.tanh(a) + b[:, None] + c.max() + (a @ c).sum()
        return jax.lax.cond(ok, update, lambda p: p, p), ys, barrier

    x = jnp.ones((4, 8))
    text = jax.jit(f).lower(x, jnp.ones((5, 8, 8)) * 0.1, jnp.ones((8, 8))).compile().as_text()
    k = compile_depth.kernels(text)
    assert set(k) == {"step", "update", "loops"}
    assert k["loops"] >= 1 and k["update"] > 4 and k["step"] >= 1, k
    # the same count with no loop and no branch: everything is `step`
    flat = jax.jit(lambda a: jnp.tanh(a @ a).sum(axis=0)).lower(x.T @ x).compile().as_text()
    assert compile_depth.kernels(flat)["update"] == 0 == compile_depth.kernels(flat)["loops"]
    assert compile_depth.kernels(flat)["step"] >= 1


def test_count_matrix_bench_runs_flowlite_cold_and_checks_its_results(tmp_path):
    out = tmp_path / "cm.json"
    r = subprocess.run([sys.executable, "bench/count_matrix.py", "--words", "400", "--reps", "1",
                        "--frameworks", "flowlite", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(out.read_text())
    row = rec["rows"]["flowlite"][0]
    assert row["check"]["writes"] == rec["writes"] and rec["results_agree"]
    assert row["peak_rss_mb"] > 0 and row["wall_s"] > row["loop_s"] > 0
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import count_matrix
    assert count_matrix.names_like(50) == count_matrix.names_like(50)
