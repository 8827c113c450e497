"""train.py end to end, in subprocesses, on tiny settings: metrics, one execution per step,
checkpoints and exact resume (also after Ctrl-C), a language model with --sample, and one
clear line (exit code 2) for bad flags and missing data."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "train.py")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def run_train(cwd, *args, timeout=180):
    return subprocess.run([sys.executable, TRAIN, *map(str, args)], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def _one_error_line(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and lines[0].startswith("train.py: error: ")
    return lines[0]


@pytest.mark.parametrize("flags, says", [
    (["--model", "transformer"], "--model"),
    (["--steps", "0"], "positive integer"),
    (["--lr", "fast"], "--lr"),
    (["--model", "gpt", "--data", "digits"], "language model"),
    (["--model", "mlp", "--data", "text"], "classifier"),
    (["--data", "mnist"], "--data-dir"),
    (["--optimizer", "lbfgs"], "--optimizer"),
])
def test_bad_flags_give_one_line_and_exit_code_2(tmp_path, flags, says):
    line = _one_error_line(run_train(tmp_path, *flags))
    assert says in line


def test_missing_data_gives_one_line_and_exit_code_2(tmp_path):
    missing = tmp_path / "no-such-dir"
    line = _one_error_line(run_train(tmp_path, "--model", "lenet", "--data", "mnist",
                                     "--data-dir", missing))
    assert str(missing) in line and "does not exist" in line
    line = _one_error_line(run_train(tmp_path, "--model", "mlp", "--resume",
                                     tmp_path / "nothing.ckpt"))
    assert "not found" in line


def _metrics(path):
    with open(path) as f:
        return json.load(f)


def test_end_to_end_metrics_and_exact_resume(tmp_path):
    common = ["--model", "mlp", "--steps", 6, "--batch-size", 32, "--quiet", "--seed", 3]
    straight = run_train(tmp_path, *common, "--checkpoint-dir", tmp_path / "a",
                         "--checkpoint-every", 3, "--eval-every", 3,
                         "--metrics-json", tmp_path / "a.json")
    assert straight.returncode == 0, straight.stderr
    assert "test accuracy" in straight.stdout
    m = _metrics(tmp_path / "a.json")
    for key in ("model", "data", "steps", "train_loss", "test_accuracy", "seconds",
                "steps_per_s", "compiles", "executions"):
        assert key in m, key
    assert (m["model"], m["data"], m["steps"]) == ("mlp", "digits", 6)
    assert 0.0 <= m["test_accuracy"] <= 1.0 and len(m["losses"]) == 6
    # One executable per training step: executions = steps + evaluation batches + set-up.
    assert m["eval_batches"] == 2 * 2       # evaluations at step 3 and at the end, 2 batches
    assert 0 <= m["executions"] - m["steps"] - m["eval_batches"] <= 2, m
    assert m["compiles"] <= 4, m
    ckpts = sorted(os.listdir(tmp_path / "a"))
    assert ckpts == ["step_00000003.ckpt", "step_00000006.ckpt"], ckpts

    # Resume from the step-3 checkpoint: steps 4..6 must repeat the straight run's losses.
    resumed = run_train(tmp_path, *common, "--resume", tmp_path / "a" / "step_00000003.ckpt",
                        "--checkpoint-dir", tmp_path / "b", "--metrics-json", tmp_path / "b.json")
    assert resumed.returncode == 0, resumed.stderr
    r = _metrics(tmp_path / "b.json")
    assert r["steps"] == 6 and r["steps_run"] == 3
    assert r["losses"] == m["losses"]
    assert r["test_accuracy"] == m["test_accuracy"]

    # A checkpoint from another configuration is refused with one line.
    line = _one_error_line(run_train(tmp_path, "--model", "mlp", "--steps", 6, "--batch-size",
                                     16, "--resume", tmp_path / "a"))
    assert "--batch-size" in line


def test_ctrl_c_saves_a_checkpoint_that_resumes(tmp_path):
    ck = tmp_path / "ck"
    proc = subprocess.Popen([sys.executable, TRAIN, "--model", "mlp", "--steps", "100000",
                             "--batch-size", "32", "--checkpoint-dir", str(ck),
                             "--checkpoint-every", "10", "--quiet", "--schedule", "none"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (ck.is_dir() and any(ck.iterdir())):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "checkpoint saved" in err and "--resume" in err
    saved = sorted(p.name for p in ck.iterdir() if p.suffix == ".ckpt")
    step = int(saved[-1][len("step_"):-len(".ckpt")])
    assert step >= 10
    resumed = run_train(tmp_path, "--model", "mlp", "--steps", step + 2, "--batch-size", 32,
                        "--schedule", "none", "--resume", ck, "--quiet",
                        "--metrics-json", tmp_path / "r.json")
    assert resumed.returncode == 0, resumed.stderr
    r = _metrics(tmp_path / "r.json")
    assert r["steps"] == step + 2 and r["steps_run"] == 2 and len(r["losses"]) == step + 2


def test_language_model_end_to_end_with_sample(tmp_path):
    text = tmp_path / "corpus.py"
    text.write_text("".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(150)))
    proc = run_train(tmp_path, "--model", "gpt", "--text-file", text, "--steps", 3,
                     "--batch-size", 4, "--sample", 30, "--metrics-json", tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    m = _metrics(tmp_path / "g.json")
    assert (m["model"], m["data"], m["steps"]) == ("gpt", "text", 3)
    assert m["val_loss"] > 0 and m["unigram_entropy"] > 0 and "val_perplexity" in m
    assert 0 <= m["executions"] - m["steps"] - m["eval_batches"] <= 4, m
    assert "--- sample" in proc.stdout
    sample = proc.stdout.split("---\n", 1)[1] if "---\n" in proc.stdout else ""
    assert sample.startswith("def ")
