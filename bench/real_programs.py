"""Unchanged public PyTorch programs, PyTorch eager against `python -m flowlite.run`.

    python bench/real_programs.py --nanogpt ~/src/nanoGPT --mingpt ~/src/minGPT \\
        --examples ~/src/pytorch-examples --ngvideo ~/src/ng-video-lecture \\
        [--programs nanogpt-small bigram ...] [--json out.json] [--quick]

Each program runs from a copy of the checkout whose path you give (nothing here is vendored
or downloaded), on small synthetic data written to a temporary folder (char-level text made
from Python's own sources; for torchvision's datasets the stand-in in bench/standins), in
fresh processes: PyTorch, flowlite with an empty persistent compile cache, flowlite again with
that cache warm, and a second PyTorch run; the PyTorch and flowlite processes alternate.
An iteration ends when the program's (first) optimizer's `step()` returns — or, for
word_language_model, which updates its parameters by hand, when `clip_grad_norm_` does
(bench/real_runner.py records the time).  Printed per program:

  steady ms/iteration   mean over the later two thirds of the iterations, from when the
                        first of them had finished on the device (real_runner waits there)
                        to when the last one had
  first iteration       process start to the end of the first iteration (imports, data,
                        compile included), flowlite with a cold and with a warm cache
  whole run             process start to exit, every iteration included
  peak RSS              the process's maximum resident set
  executions, syncs     flowlite's per steady iteration (median)

and the ratios flowlite / PyTorch (lower is better).  PyTorch's numbers are the better of
its two runs, flowlite's steady time and RSS the warm run's.

Most programs are stopped after a fixed number of iterations.  The whole-script programs run
to their own end, and a second table gives every program's whole run (PyTorch / flowlite
cold / flowlite warm, seconds, and the two ratios) beside its steady ratio:

  bigram          ng-video-lecture's bigram.py unchanged: 3000 iterations, an evaluation of
                  200 batches every 300 (inside the steady window, alike for both), 500
                  generated characters; input.txt is ~1.1 MB of Python's sources
  gpt             ng-video-lecture's gpt.py with only its hyper-parameter lines shrunk to
                  CPU size (GPT_HYPER, set in the temporary copy), its 500 generated tokens
  nanogpt-sample  nanoGPT's sample.py on the ckpt.pt that nanogpt-small's training writes
                  (trained once with PyTorch into the working copy, not timed); no
                  iterations, so only the whole run and the peak RSS

--quick shrinks every program (iterations, evaluations, generated tokens) for a smoke run of
the code paths; its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import pickle
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNNER = os.path.join(HERE, "real_runner.py")

NANOGPT_COMMON = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
                  "--log_interval=1", "--lr_decay_iters=2000", "--dropout=0.0",
                  "--always_save_checkpoint=False", "--eval_interval=100000"]

# name -> (checkout, folder inside it, script, args, iterations, marker, env)
PROGRAMS = {
    "nanogpt-small": ("nanogpt", ".", "train.py", NANOGPT_COMMON + [
        "--eval_iters=20", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
        "--n_embd=128", "--max_iters=100"], 100, "optimizer", {}),
    "nanogpt-mid": ("nanogpt", ".", "train.py", NANOGPT_COMMON + [
        "--eval_iters=2", "--block_size=128", "--batch_size=16", "--n_layer=6", "--n_head=6",
        "--n_embd=192", "--max_iters=40"], 40, "optimizer", {}),
    "mingpt-chargpt": ("mingpt", "projects/chargpt", "chargpt.py", [
        "--trainer.max_iters=60", "--trainer.num_workers=0", "--trainer.batch_size=16",
        "--model.model_type=gpt-micro"], 60, "optimizer", {}),
    "mnist": ("examples", "mnist", "main.py", ["--epochs=1", "--batch-size=64",
                                               "--test-batch-size=512"], 45, "optimizer",
              {"REAL_PROGRAMS_DATASET_SIZE": "3200", "REAL_PROGRAMS_TEST_SIZE": "512"}),
    "vae": ("examples", "vae", "main.py", ["--epochs=1", "--batch-size=128"], 45, "optimizer",
            {"REAL_PROGRAMS_DATASET_SIZE": "6400", "REAL_PROGRAMS_TEST_SIZE": "512"}),
    "wlm-lstm": ("examples", "word_language_model", "main.py", [
        "--data=DATA", "--epochs=1", "--model=LSTM", "--save=model.pt"], 60,
        "nn.utils.clip_grad_norm_", {}),
    "wlm-transformer": ("examples", "word_language_model", "main.py", [
        "--data=DATA", "--epochs=1", "--model=Transformer", "--lr=5", "--save=model.pt"], 60,
        "nn.utils.clip_grad_norm_", {}),
    "dcgan": ("examples", "dcgan", "main.py", [
        "--dataset=fake", "--niter=1", "--batchSize=32", "--imageSize=64", "--workers=0",
        "--outf=out"], 18, "optimizer", {"REAL_PROGRAMS_DATASET_SIZE": "640"}),
    # whole scripts (0 iterations: no limit, they run to their end)
    "bigram": ("ngvideo", ".", "bigram.py", [], 0, "optimizer", {}),
    "gpt": ("ngvideo", ".", "gpt.py", [], 0, "optimizer", {}),
    "nanogpt-sample": ("nanogpt", ".", "sample.py", [
        "--init_from=resume", "--out_dir=out-sample", "--device=cpu", "--compile=False",
        "--num_samples=2", "--max_new_tokens=200"], 0, "none", {}),
}
CHECKOUTS = {"nanogpt": "karpathy/nanoGPT", "mingpt": "karpathy/minGPT",
             "examples": "pytorch/examples", "ngvideo": "karpathy/ng-video-lecture"}

# gpt.py's hyper-parameter lines, set in the working copy (PyTorch: ~10-20 s on 2 cores)
GPT_HYPER = {"batch_size": 16, "block_size": 32, "max_iters": 200, "eval_interval": 100,
             "eval_iters": 20, "n_embd": 64, "n_head": 4, "n_layer": 4}
SCRIPT_EDITS = {"gpt": GPT_HYPER}
# nanogpt-sample's checkpoint: nanogpt-small's training, evaluated (and saved) at its end
SAMPLE_TRAIN = PROGRAMS["nanogpt-small"][3] + ["--eval_interval=100",
                                               "--always_save_checkpoint=True",
                                               "--out_dir=out-sample"]

# --quick: a smoke run of the code paths (iterations capped, scripts and arguments shrunk)
QUICK_ITERS = 6
QUICK_EDITS = {"bigram": {"max_iters": 40, "eval_interval": 20, "eval_iters": 3,
                          "max_new_tokens": 20},
               "gpt": dict(GPT_HYPER, max_iters=20, eval_interval=10, eval_iters=2,
                           max_new_tokens=20)}
QUICK_ARGS = {"nanogpt-sample": ["--num_samples=1", "--max_new_tokens=20"]}
QUICK_TRAIN = ["--max_iters=10", "--eval_interval=10", "--eval_iters=2"]


# ---- data -----------------------------------------------------------------------------------

def _stdlib_text(n_chars):
    txt = []
    total = 0
    for f in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"),
                              recursive=True)):
        try:
            t = open(f, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        txt.append(t)
        total += len(t)
        if total > n_chars:
            break
    return "".join(txt)[:n_chars]


def edit_script(path, values):
    """Set `name = value` lines of the script at `path` (its hyper-parameters; the comment
    after a value stays); "max_new_tokens" sets the keyword in its uncommented calls."""
    with open(path) as f:
        src = f.read()
    for k, v in values.items():
        if k == "max_new_tokens":
            pat, repl = rf"^(?!\s*#)(.*\b{k}=)\d+", lambda m: f"{m.group(1)}{v}"
        else:
            pat, repl = rf"^({k}\s*=\s*)[^#\n]*?(\s*(#.*)?)$", \
                lambda m: f"{m.group(1)}{v!r}{m.group(2)}"
        src, n = re.subn(pat, repl, src, flags=re.M)
        if n == 0:
            raise ValueError(f"{os.path.basename(path)} has no {k} line to set")
    with open(path, "w") as f:
        f.write(src)


def prepare(name, work, python=sys.executable, quick=False):
    """Synthesize `name`'s data inside its working copy `work` (for nanogpt-sample, train its
    checkpoint there); -> args substitutions."""
    if name in ("bigram", "gpt"):
        with open(os.path.join(work, "input.txt"), "w") as f:
            f.write(_stdlib_text(1_100_000))
    if name.startswith("nanogpt"):
        d = os.path.join(work, "data", "shakespeare_char")
        os.makedirs(d, exist_ok=True)
        txt = _stdlib_text(1_000_000)
        chars = sorted(set(txt))
        stoi = {c: i for i, c in enumerate(chars)}
        ids = np.array([stoi[c] for c in txt], dtype=np.uint16)
        n = int(0.9 * len(ids))
        ids[:n].tofile(os.path.join(d, "train.bin"))
        ids[n:].tofile(os.path.join(d, "val.bin"))
        with open(os.path.join(d, "meta.pkl"), "wb") as f:
            pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                         "stoi": stoi}, f)
        if name == "nanogpt-sample":
            train_checkpoint(work, python, quick)
    elif name == "mingpt-chargpt":
        with open(os.path.join(work, "input.txt"), "w") as f:
            f.write(_stdlib_text(200_000))
    elif name.startswith("wlm"):
        d = os.path.join(work, "synthetic-text")
        os.makedirs(d, exist_ok=True)
        words = _stdlib_text(600_000).split()
        lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
        k = len(lines)
        for part, rows in (("train", lines[:int(0.8 * k)]), ("valid", lines[int(0.8 * k):
                                                                          int(0.9 * k)]),
                           ("test", lines[int(0.9 * k):])):
            with open(os.path.join(d, f"{part}.txt"), "w") as f:
                f.write("\n".join(rows) + "\n")
        return {"DATA": d}
    return {}


def train_checkpoint(work, python, quick):
    """nanogpt-small's training, once with PyTorch, writing out-sample/ckpt.pt (not timed)."""
    e = dict(os.environ, PYTHONPATH=work)
    e.pop("OMP_NUM_THREADS", None)
    r = subprocess.run([python, "train.py"] + SAMPLE_TRAIN + (QUICK_TRAIN if quick else []),
                       cwd=work, env=e, capture_output=True, text=True, timeout=3600)
    if not os.path.isfile(os.path.join(work, "out-sample", "ckpt.pt")):
        raise RuntimeError("nanoGPT's training wrote no out-sample/ckpt.pt: "
                           + (r.stderr or r.stdout).strip()[-500:])


# ---- one run --------------------------------------------------------------------------------

def run_once(framework, name, work, script, args, iters, marker, env, python, cache):
    out = os.path.join(work, f"_result_{framework}.json")
    cmd = [python] + (["-m", "flowlite.run"] if framework == "flowlite" else []) + \
        [RUNNER, out, marker, str(iters), script] + args
    e = dict(os.environ, **env)
    # flowlite, the program's own folder and its checkout's root (minGPT's projects import
    # the `mingpt` package from there)
    paths = [ROOT, work, checkout_root(work)]
    e["PYTHONPATH"] = os.pathsep.join(paths + ([os.environ["PYTHONPATH"]]
                                               if os.environ.get("PYTHONPATH") else []))
    e["FLOWLITE_CACHE_DIR"] = cache
    e.pop("OMP_NUM_THREADS", None)
    t0 = time.time()
    r = subprocess.run(cmd, cwd=work, env=e, capture_output=True, text=True, timeout=3600)
    wall = time.time() - t0
    try:
        with open(out) as f:
            rec = json.load(f)
        os.remove(out)
    except (OSError, ValueError):
        rec = {"steps": [], "counters": [], "error": (r.stderr or r.stdout).strip()[-500:]}
    rec["wall_s"] = wall
    rec["start"] = t0
    if r.returncode != 0 and not rec.get("error"):
        rec["error"] = (r.stderr or "").strip()[-500:]
    return summarize(rec)


def checkout_root(work):
    """The copied checkout's root: measure() copies it to <tmp>/checkout."""
    d = os.path.abspath(work)
    while os.path.basename(d) != "checkout" and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    return d if os.path.basename(d) == "checkout" else os.path.abspath(work)


def summarize(rec):
    steps = rec.get("steps") or []
    s = {"error": rec.get("error"), "wall_s": rec.get("wall_s"),
         "peak_rss_mb": rec.get("peak_rss_mb"), "iterations": len(steps),
         "stopped": bool(rec.get("stopped"))}
    if rec.get("end") and rec.get("start"):     # a program without iterations: the end alone
        s["whole_run_s"] = rec["end"] - rec["start"]
    if steps:
        s["first_iter_s"] = steps[0] - rec["start"]
        s["whole_run_s"] = rec.get("end", steps[-1]) - rec["start"]
        # the later two thirds, up to when the last iteration really finished (flowlite's steps
        # return before their program runs: a median of the gaps would time the host alone)
        k = len(steps) // 3
        last = rec["end"] if rec.get("stopped") and rec.get("end") else steps[-1]
        n = len(steps) - 1 - k
        s["steady_ms"] = (last - steps[k]) / n * 1e3 if n > 0 else None
    c = rec.get("counters") or []
    if len(c) >= 3:
        c = np.asarray(c)
        dc = np.diff(c, axis=0)[len(c) // 3:]
        s["executions_per_iter"] = float(np.median(dc[:, 0]))
        s["syncs_per_iter"] = float(np.median(dc[:, 1]))
        s["compiles_after_first_third"] = int(dc[:, 2].sum())
        s["compiles"] = int(c[-1, 2])
    return s


def measure(name, checkouts, python, quick=False):
    key, folder, script, args, iters, marker, env = PROGRAMS[name]
    if quick:
        iters = min(iters, QUICK_ITERS) if iters else 0
        args = args + QUICK_ARGS.get(name, [])
    root = os.path.expanduser(checkouts[key])
    if not os.path.isfile(os.path.join(root, folder, script)):
        raise FileNotFoundError(f"{os.path.join(root, folder, script)} not found "
                                f"(--{key} must be a checkout of the program's repository)")
    tmp = tempfile.mkdtemp(prefix=f"real_{name}_")
    # a copy: the programs write checkpoints and outputs next to themselves
    shutil.copytree(root, os.path.join(tmp, "checkout"),
                    ignore=shutil.ignore_patterns(".git", "data", "*.bin", "*.pt"))
    work = os.path.join(tmp, "checkout", folder)
    edits = (QUICK_EDITS if quick else SCRIPT_EDITS).get(name)
    if edits:
        edit_script(os.path.join(work, script), edits)
    subs = prepare(name, work, python, quick)
    args = [a.replace("DATA", subs.get("DATA", "DATA")) for a in args]
    cache = os.path.join(tmp, "flowlite-cache")
    row = {}
    try:
        row["torch"] = run_once("torch", name, work, script, args, iters, marker, env, python,
                                cache)
        row["flowlite_cold"] = run_once("flowlite", name, work, script, args, iters, marker,
                                        env, python, cache)
        row["torch_2"] = run_once("torch", name, work, script, args, iters, marker, env,
                                  python, cache)
        row["flowlite_warm"] = run_once("flowlite", name, work, script, args, iters, marker,
                                        env, python, cache)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish(row)


def finish(row):
    t = [row[k] for k in ("torch", "torch_2") if row.get(k) and row[k].get("steady_ms")]
    best = min(t, key=lambda r: r["steady_ms"]) if t else row.get("torch", {})
    cold, warm = row.get("flowlite_cold", {}), row.get("flowlite_warm", {})
    torch_ok = [row[k] for k in ("torch", "torch_2") if row.get(k) and not row[k].get("error")]
    out = {"runs": row}

    def ratio(a, b):
        return a / b if a is not None and b else None

    def whole(r):                   # a failed run has no whole run to compare
        return None if r.get("error") else r.get("whole_run_s")
    out["steady_ratio"] = ratio(warm.get("steady_ms"), best.get("steady_ms"))
    out["first_iter_cold_ratio"] = ratio(cold.get("first_iter_s"), best.get("first_iter_s"))
    out["first_iter_warm_ratio"] = ratio(warm.get("first_iter_s"), best.get("first_iter_s"))
    # whole runs: PyTorch's shorter one
    out["whole_run_s"] = {
        "torch": min(filter(None, map(whole, torch_ok)), default=None),
        "flowlite_cold": whole(cold), "flowlite_warm": whole(warm)}
    out["whole_run_cold_ratio"] = ratio(out["whole_run_s"]["flowlite_cold"],
                                        out["whole_run_s"]["torch"])
    out["whole_run_warm_ratio"] = ratio(out["whole_run_s"]["flowlite_warm"],
                                        out["whole_run_s"]["torch"])
    out["rss_ratio"] = ratio(max(filter(None, [cold.get("peak_rss_mb"),
                                               warm.get("peak_rss_mb")]), default=None),
                             max(filter(None, [r.get("peak_rss_mb") for r in torch_ok]),
                                 default=None))
    return out


def _f(v, fmt="{:.3g}"):
    return "-" if v is None else fmt.format(v)


def format_table(table, meta):
    lines = [f"real programs — {meta['date']}, {meta['cpus']} cpus, python {meta['python']}, "
             f"torch {meta['torch']}, jax {meta['jax']}"
             + (" — --quick smoke run, numbers mean nothing" if meta.get("quick") else ""), "",
             f"{'program':16s} {'steady ms (torch, flowlite)':>28s} {'ratio':>6s}  "
             f"{'first iter s (torch, cold, warm)':>33s} {'cold':>5s} {'warm':>5s}  "
             f"{'whole run':>9s}  {'RSS MB (torch, flowlite)':>25s} {'ratio':>5s}  "
             f"{'exec/it':>7s} {'sync/it':>7s}"]
    for name, r in table.items():
        if "error" in r and "runs" not in r:
            lines.append(f"{name:16s} ERROR {r['error']}")
            continue
        runs = r["runs"]
        t = min((runs[k] for k in ("torch", "torch_2") if runs.get(k, {}).get("steady_ms")),
                key=lambda x: x["steady_ms"], default=runs.get("torch", {}))
        c, w = runs.get("flowlite_cold", {}), runs.get("flowlite_warm", {})
        errs = [f"{k}: {v['error']}" for k, v in runs.items() if v.get("error")]
        lines.append(
            f"{name:16s} {_f(t.get('steady_ms')):>13s}, {_f(w.get('steady_ms')):>12s} "
            f"{_f(r['steady_ratio'], '{:.2f}'):>6s}  {_f(t.get('first_iter_s')):>11s}, "
            f"{_f(c.get('first_iter_s')):>9s}, {_f(w.get('first_iter_s')):>9s} "
            f"{_f(r['first_iter_cold_ratio'], '{:.1f}'):>5s} "
            f"{_f(r['first_iter_warm_ratio'], '{:.1f}'):>5s}  "
            f"{_f(r['whole_run_warm_ratio'], '{:.2f}'):>9s}  "
            f"{_f(t.get('peak_rss_mb'), '{:.0f}'):>12s}, {_f(w.get('peak_rss_mb'), '{:.0f}'):>11s} "
            f"{_f(r['rss_ratio'], '{:.2f}'):>5s}  {_f(w.get('executions_per_iter'), '{:.0f}'):>7s} "
            f"{_f(w.get('syncs_per_iter'), '{:.0f}'):>7s}"
            + (f"   ERRORS: {'; '.join(errs)}" if errs else ""))
    return "\n".join(lines)


def format_whole_table(table):
    """Every program's whole run, process start to exit (or to the iteration it was stopped
    at), in seconds, beside its steady ratio."""
    lines = [f"{'whole run s':16s} {'ran':>9s} {'torch':>7s} {'cold':>7s} {'warm':>7s}  "
             f"{'cold/torch':>10s} {'warm/torch':>10s}  {'steady ratio':>12s}"]
    for name, r in table.items():
        if "runs" not in r:
            lines.append(f"{name:16s} ERROR {r.get('error')}")
            continue
        w = r.get("whole_run_s", {})
        t = r["runs"].get("torch", {})
        ran = (f"{t.get('iterations')} its" if t.get("stopped") else "to end") \
            if not t.get("error") else "-"
        errs = [k for k, v in r["runs"].items() if v.get("error")]
        lines.append(
            f"{name:16s} {ran:>9s} {_f(w.get('torch'), '{:.2f}'):>7s} "
            f"{_f(w.get('flowlite_cold'), '{:.2f}'):>7s} "
            f"{_f(w.get('flowlite_warm'), '{:.2f}'):>7s}  "
            f"{_f(r.get('whole_run_cold_ratio'), '{:.2f}'):>10s} "
            f"{_f(r.get('whole_run_warm_ratio'), '{:.2f}'):>10s}  "
            f"{_f(r.get('steady_ratio'), '{:.2f}'):>12s}"
            + (f"   failed: {', '.join(errs)}" if errs else ""))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nanogpt", help="a checkout of karpathy/nanoGPT")
    p.add_argument("--mingpt", help="a checkout of karpathy/minGPT")
    p.add_argument("--examples", help="a checkout of pytorch/examples")
    p.add_argument("--ngvideo", help="a checkout of karpathy/ng-video-lecture")
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    p.add_argument("--python", default=sys.executable,
                   help="the Python that has torch and flowlite's dependencies")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: every program shrunk (its numbers mean nothing)")
    args = p.parse_args(argv)
    checkouts = {k: getattr(args, k) for k in CHECKOUTS}
    table = {}
    for name in args.programs:
        key = PROGRAMS[name][0]
        if not checkouts[key]:
            print(f"[{name}: skipped, no --{key} checkout given]", file=sys.stderr)
            continue
        t0 = time.time()
        try:
            table[name] = measure(name, checkouts, args.python, args.quick)
        except Exception as e:      # noqa: BLE001 - one program's failure is a table row
            table[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"[{name}: {time.time() - t0:.0f}s]", file=sys.stderr, flush=True)
    meta = {"date": datetime.date.today().isoformat(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "torch": _version(args.python, "torch"),
            "jax": _version(args.python, "jax"), "quick": args.quick,
            "revisions": {CHECKOUTS[k]: _revision(v) for k, v in checkouts.items() if v}}
    print(format_table(table, meta))
    print()
    print(format_whole_table(table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(table, _meta=meta), f, indent=1)


def _revision(checkout):
    r = subprocess.run(["git", "-C", os.path.expanduser(checkout), "rev-parse", "--short",
                        "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def _version(python, module):
    r = subprocess.run([python, "-c", f"import {module}; print({module}.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "?"


if __name__ == "__main__":
    main()
