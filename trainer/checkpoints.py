"""Checkpoints: where they are written (the last few kept), which one --resume means, and
reading one back — a file that is unreadable, corrupt, not a train.py checkpoint or from another
run is one clear line (a CLIError), found before the data and the model are built."""
from __future__ import annotations

import glob
import os
import re

from trainer.cli import CLIError

KEEP_CHECKPOINTS = 3


def checkpoint_path(directory, step):
    return os.path.join(directory, f"step_{step:08d}.ckpt")


def list_checkpoints(directory):
    found = []
    for path in glob.glob(os.path.join(directory, "step_*.ckpt")):
        m = re.fullmatch(r"step_(\d+)\.ckpt", os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    return [p for _, p in sorted(found)]


def resolve_resume(args):
    target = args.resume
    if target == "latest":
        if args.checkpoint_dir is None:
            raise CLIError("--resume without a path needs --checkpoint-dir (or pass the "
                           "checkpoint file or its folder: --resume PATH)")
        target = args.checkpoint_dir
    if os.path.isdir(target):
        found = list_checkpoints(target)
        if not found:
            raise CLIError(f"--resume: no checkpoint (step_*.ckpt) in {target}")
        return found[-1]
    if not os.path.isfile(target):
        raise CLIError(f"--resume: checkpoint {target} not found")
    return target


# Settings a resumed run must share with the run that wrote the checkpoint.
RUN_KEYS = ("model", "data", "batch_size", "optimizer", "schedule", "precision", "seed")
CHECKPOINT_KEYS = ("model", "optimizer", "step", "rng", "history", "run")


def read_checkpoint(args):
    """The --resume checkpoint -> (path, checkpoint), read before the data and the model: a
    file that is unreadable, corrupt, not a train.py checkpoint or from another run is a
    CLIError (one line) at once."""
    import flowlite as fl

    path = resolve_resume(args)
    try:
        ck = fl.load(path)
    except (OSError, ValueError) as e:
        raise CLIError(f"--resume: {e}") from None
    if not isinstance(ck, dict):
        raise CLIError(f"--resume: {path} is not a train.py checkpoint (it holds a "
                       f"{type(ck).__name__}, not a dict)")
    missing = [k for k in CHECKPOINT_KEYS if k not in ck]
    if missing or not isinstance(ck["run"], dict):
        raise CLIError(f"--resume: {path} is not a train.py checkpoint (no "
                       f"{', '.join(missing) or 'run settings'})")
    run_cfg = ck["run"]
    for k in RUN_KEYS:
        if run_cfg.get(k) != getattr(args, k):
            raise CLIError(f"--resume: {path} was written with --{k.replace('_', '-')} "
                           f"{run_cfg.get(k)}, this run has {getattr(args, k)}")
    return path, ck


def restore(args, path, ck, model, opt, sched):
    """Model, optimizer, scheduler and RNG state from checkpoint `ck` -> (step, history);
    one that does not fit this model (other shapes, missing entries) is a CLIError."""
    import flowlite as fl

    try:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        if sched is not None and ck.get("scheduler") is not None:
            sched.load_state_dict(ck["scheduler"])
        fl.set_rng_state(ck["rng"].to(args.fl_device))
        step = ck["step"]
        if type(step) is not int or step < 0:
            raise ValueError(f"its step {step!r} is not an integer >= 0")
        h = ck["history"]
        history = {"loss": [float(v) for v in h["loss"]],
                   "acc": [float(v) for v in h["acc"]],
                   "evals": list(h["evals"])}
        fl.sync()
    except (RuntimeError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        what = f"missing entry {e}" if isinstance(e, KeyError) else " ".join(str(e).split())
        raise CLIError(f"--resume: {path} does not fit this model and run: {what}") from None
    return step, history


def save_checkpoint(args, directory, state):
    import flowlite as fl

    path = checkpoint_path(directory, state["step"])
    try:
        os.makedirs(directory, exist_ok=True)
        fl.save(state, path)      # atomic: a temporary file renamed over the target
    except OSError as e:          # a full disk, a folder we may not write...
        raise CLIError(f"cannot write checkpoint {path}: {e}") from None
    for old in list_checkpoints(directory)[:-KEEP_CHECKPOINTS]:
        try:
            os.remove(old)
        except OSError:
            pass
    return path


def resume_argv(args, path):
    """The flags that continue this run from checkpoint `path` (printed after a Ctrl-C)."""
    out = []
    for flag in ("model", "data", "data_dir", "text_file", "epochs", "steps", "batch_size",
                 "lr", "optimizer", "weight_decay", "schedule", "device", "seed", "precision"):
        v = getattr(args, flag)
        if v is not None and (flag not in ("epochs",) or args.steps is None):
            out += [f"--{flag.replace('_', '-')}", str(v)]
    return out + ["--resume", path]
