"""train.py end to end, in subprocesses, on tiny settings: metrics, one execution per step,
checkpoints and exact resume (also after Ctrl-C), a language model with --sample, and one
clear line (exit code 2, no traceback) for every user error: bad flags and numbers, missing
or wrong data and text files, unwritable outputs, unreadable, corrupt or unfitting
checkpoints."""
from __future__ import annotations

import io
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


@pytest.mark.parametrize("flags, says", [
    (["--seed", "-1"], "--seed: expected an integer >= 0 and < 2**64, got '-1'"),
    (["--seed", str(2 ** 64)], "--seed"),
    (["--seed", "1.5"], "--seed"),
    (["--seed", "abc"], "--seed"),
    (["--epochs", "-3"], "--epochs: expected a positive integer"),
    (["--steps", "-1"], "--steps: expected a positive integer"),
    (["--batch-size", "-1"], "--batch-size: expected a positive integer"),
    (["--batch-size", "0"], "--batch-size"),
    (["--lr", "nan"], "--lr: expected a positive number"),
    (["--lr", "-0.1"], "--lr: expected a positive number"),
    (["--lr", "inf"], "--lr"),
    (["--lr", "0"], "--lr"),
    (["--weight-decay", "nan"], "--weight-decay"),
    (["--weight-decay", "-1"], "--weight-decay"),
    (["--checkpoint-every", "-5"], "--checkpoint-every"),
    (["--eval-every", "-1"], "--eval-every"),
    (["--sample", "-1"], "--sample"),
    (["--devices", "0"], "--devices"),
])
def test_bad_numbers_give_one_line_and_exit_code_2(tmp_path, flags, says):
    line = _one_error_line(run_train(tmp_path, *flags))
    assert says in line


@pytest.mark.parametrize("flag, where, says", [
    ("--metrics-json", ".", "is a directory"),
    ("--metrics-json", "a-file/m.json", "a-file is not a directory"),
    ("--checkpoint-dir", "a-file", "a-file: is not a directory"),
    ("--checkpoint-dir", "a-file/deeper/ck", "a-file is not a directory"),
])
def test_unwritable_outputs_are_refused_before_training(tmp_path, flag, where, says):
    (tmp_path / "a-file").write_text("not a folder")
    line = _one_error_line(run_train(tmp_path, "--steps", 1, "--batch-size", 32, flag,
                                     tmp_path / where))
    assert flag in line and says in line


def _write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is None:
        path.mkdir()
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("content, says", [
    (bytes(range(256)) * 40, "is not a text file (it holds NUL bytes)"),
    (bytes(range(128, 256)) * 80, "is not UTF-8 text"),
    ("def f(x): return x\n".encode("utf-16"), "is not a text file"),
], ids=["binary", "latin-1 noise", "utf-16"])
def test_a_text_file_that_is_not_text_gives_one_line_and_exit_code_2(tmp_path, content, says):
    path = _write(tmp_path / "corpus.txt", content)
    line = _one_error_line(run_train(tmp_path, "--model", "lstm", "--text-file", path))
    assert f"--text-file {path} {says}" in line


def test_a_text_shorter_than_one_window_gives_one_line_and_exit_code_2(tmp_path):
    path = _write(tmp_path / "corpus.txt", "x = 1\n" * 8)
    line = _one_error_line(run_train(tmp_path, "--model", "lstm", "--text-file", path,
                                     "--steps", 1, "--batch-size", 4))
    assert "the training split has 43 characters, fewer than one window of 65" in line


def test_a_data_dir_that_is_no_directory_gives_one_line_and_exit_code_2(tmp_path):
    line = _one_error_line(run_train(tmp_path, "--model", "lenet", "--data", "cifar10",
                                     "--data-dir", _write(tmp_path / "a-file", "x")))
    assert "--data-dir" in line and "a-file is not a directory" in line
    empty = _write(tmp_path / "empty", None)        # a folder without the dataset's files
    line = _one_error_line(run_train(tmp_path, "--model", "lenet", "--data", "fashion-mnist",
                                     "--data-dir", empty))
    assert str(empty) in line and "expected train-images-idx3-ubyte" in line


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """One real checkpoint of `--model mlp --batch-size 32` (every other setting default)."""
    d = tmp_path_factory.mktemp("ck")
    proc = run_train(d, "--model", "mlp", "--steps", 1, "--batch-size", 32, "--quiet",
                     "--checkpoint-dir", d / "ck")
    assert proc.returncode == 0, proc.stderr
    return d / "ck" / "step_00000001.ckpt"


def _edited(edit):
    """-> a function of a checkpoint's path: the bytes of the checkpoint after `edit`."""
    def make(path):
        import flowlite as fl

        ck = edit(fl.load(path))
        out = io.BytesIO()
        fl.save(ck, out)
        return out.getvalue()
    return make


def _other_shapes(ck):
    import flowlite as fl

    ck["model"]["net.0.weight"] = fl.zeros(3, 3)
    return ck


def _no_param_groups(ck):
    del ck["optimizer"]["param_groups"]
    return ck


def _flip(raw):
    b = bytearray(raw)
    b[len(b) // 2] ^= 0x40
    return bytes(b)


RESUME_CASES = {      # how the checkpoint is spoilt, what the one line says
    "shapes": (_edited(_other_shapes), "does not fit this model and run: Error(s) in loading "
               "state_dict for MLP: size mismatch for net.0.weight: copying a param with shape "
               "(3, 3) from checkpoint, the shape in current model is (256, 64)."),
    "optimizer": (_edited(_no_param_groups), "does not fit this model and run: missing entry "
                  "'param_groups'"),
    "not-a-train-checkpoint": (_edited(lambda ck: [1, 2]),
                               "is not a train.py checkpoint (it holds a list, not a dict)"),
    "truncated": (lambda p: p.read_bytes()[:p.stat().st_size // 2], "file is truncated"),
    "bit-flip": (lambda p: _flip(p.read_bytes()), "checksum mismatch"),
    "foreign": (lambda p: b"PK\x03\x04 a torch.save zip, say", "not a flowlite checkpoint"),
    "unreadable": (lambda p: None, "Is a directory"),      # a folder where the file should be
}


@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_resume_of_a_bad_checkpoint_gives_one_line_and_exit_code_2(tmp_path, checkpoint, case):
    make, says = RESUME_CASES[case]
    folder = tmp_path / "ck"
    folder.mkdir()
    bad = _write(folder / "step_00000001.ckpt", make(checkpoint))
    line = _one_error_line(run_train(tmp_path, "--model", "mlp", "--steps", 2, "--batch-size",
                                     32, "--resume", folder))
    assert line.startswith("train.py: error: --resume: ") and str(bad) in line, line
    assert says in line, line


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


def test_output_that_is_not_a_terminal_gets_one_log_line_per_evaluation(tmp_path):
    """Piped or redirected (a log file): no progress bar, whose redraws would interleave with
    the evaluation lines; one line per evaluation and one at the last step."""
    proc = run_train(tmp_path, "--model", "mlp", "--steps", 12, "--batch-size", 32,
                     "--eval-every", 4, "--seed", 1)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stdout and "\r" not in proc.stderr and "\x1b" not in proc.stderr
    assert "it/s" not in proc.stderr and "step/s" not in proc.stderr     # no tqdm bar
    progress = [ln for ln in proc.stdout.splitlines() if ln.startswith("step ")]
    assert [ln.split()[1] for ln in progress] == ["4/12", "8/12", "12/12"], proc.stdout
    for ln in progress[:2]:
        assert "  loss " in ln and "steps/s  |  test accuracy " in ln, ln
    assert "|" not in progress[2]


def test_progress_draws_a_bar_only_on_a_terminal(monkeypatch, capsys):
    """The choice itself, in-process: a terminal on both streams gets tqdm."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_module", TRAIN)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    args = type("A", (), {"quiet": False, "model": "mlp"})()
    p = train.Progress(args, 0, 10, False)
    assert p.log and p.bar is None               # pytest captures: not a terminal
    p.update(3, 1.5, 0.25)
    p.evaluation(3, "test accuracy 50.00%")
    p.update(10, 1.0, 0.5, force=True)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("step 3/10  loss 1.5000  acc 25.0%")
    assert out[0].endswith("|  test accuracy 50.00%") and out[1].startswith("step 10/10")
    progress = sys.modules[train.Progress.__module__]    # trainer/progress.py
    monkeypatch.setattr(progress, "_interactive", lambda: True)
    p = train.Progress(args, 0, 10, False)
    assert not p.log
    try:
        import tqdm  # noqa: F401  (the examples extra; a bare test install has none)
    except ImportError:
        assert p.bar is None
    else:
        assert p.bar is not None
    p.close()
