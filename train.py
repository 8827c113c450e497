#!/usr/bin/env python
"""Train flowlite's tutorial models (models/) from the command line.

    python train.py                                   # MLP on the bundled 8x8 digits (~97-98%)
    python train.py --model lenet                     # a CNN on the digits
    python train.py --model resnet --data cifar10 --data-dir ~/data/cifar10
    python train.py --model lenet --data mnist --data-dir ~/data/mnist
    python train.py --model gpt --sample 400          # char-level GPT on Python's own sources
    python train.py --model lstm --text-file my.txt --steps 3000 --sample 300
    python train.py --checkpoint-dir ckpt --checkpoint-every 200   # ...later: --resume

Every training step — forward, backward and the optimizer update — is recorded lazily and runs
as ONE compiled XLA executable; the closing summary shows flowlite's compile and execution
counts, so you can check that steady-state training is one execution per step.

Checkpoints hold the model, the optimizer and scheduler state, the step, the device RNG state
and the data position, so `--resume` continues a run exactly: its losses equal those of an
uninterrupted run with the same seed. Ctrl-C saves a checkpoint at the next step boundary.
"""
from __future__ import annotations

import time

_PROCESS_START = time.perf_counter()    # the summary's wall time includes imports and compiles

import argparse
import glob
import json
import math
import os
import re
import signal
import sys

import numpy as np

MODELS = ("mlp", "lenet", "resnet", "lstm", "gpt", "cartpole")
DATASETS = ("digits", "mnist", "fashion-mnist", "cifar10", "text")
LANGUAGE_MODELS = ("lstm", "gpt")

# Per-model defaults, chosen (and measured, see README) to train well in little time on a
# 2-core CPU. Any flag given on the command line overrides them.
DEFAULTS = {
    "mlp": dict(data="digits", epochs=20, batch_size=64, lr=2e-3, optimizer="adam",
                schedule="cosine"),
    "lenet": dict(data="digits", epochs=30, batch_size=64, lr=2e-3, optimizer="adam",
                  schedule="cosine"),
    "resnet": dict(data="digits", epochs=15, batch_size=64, lr=3e-3, optimizer="adam",
                   schedule="cosine"),
    "lstm": dict(data="text", steps=600, batch_size=32, lr=3e-3, optimizer="adam",
                 schedule="cosine"),
    "gpt": dict(data="text", steps=1500, batch_size=32, lr=2e-3, optimizer="adamw",
                schedule="cosine"),
    "cartpole": dict(),      # reinforcement learning: models/cartpole.py has its own defaults
}
LM_CONTEXT = {"lstm": 64, "gpt": 64}   # characters per training window
EVAL_BATCH = 256                        # classifier evaluation batch (fixed: one executable)
LM_EVAL_BATCHES = 32                    # validation windows: at most this many batches
KEEP_CHECKPOINTS = 3


class CLIError(Exception):
    """A problem with the user's flags, data or checkpoint: one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One clear line instead of argparse's usage block.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _checked_int(text, ok, what):
    try:
        v = int(text)
    except ValueError:
        v = None
    if v is None or not ok(v):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return v


def positive_int(text):
    return _checked_int(text, lambda v: v >= 1, "a positive integer")


def non_negative_int(text):
    return _checked_int(text, lambda v: v >= 0, "an integer >= 0")


def seed_int(text):
    # torch.manual_seed takes [-2**63, 2**64) and wraps negatives to 2**64 + seed; like the
    # DataLoader, train.py asks for the seed itself: an integer in [0, 2**64)
    return _checked_int(text, lambda v: 0 <= v < 2 ** 64, "an integer >= 0 and < 2**64")


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0 or not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def non_negative_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0 or not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


def build_parser():
    p = _Parser(prog="train.py", description="Train a flowlite tutorial model.",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", choices=MODELS, default="mlp", help="which model in models/")
    p.add_argument("--data", choices=DATASETS, default=None,
                   help="dataset (default: digits for classifiers, text for lstm/gpt)")
    p.add_argument("--data-dir", default=None,
                   help="folder with the MNIST/Fashion-MNIST IDX files or CIFAR-10 batches")
    p.add_argument("--text-file", default=None,
                   help="text corpus for lstm/gpt (default: the Python standard library sources)")
    p.add_argument("--epochs", type=positive_int, default=None, help="passes over the data")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="total optimizer steps (overrides --epochs)")
    p.add_argument("--batch-size", type=positive_int, default=None)
    p.add_argument("--lr", type=positive_float, default=None, help="(peak) learning rate")
    p.add_argument("--optimizer", choices=("sgd", "adam", "adamw", "rmsprop"), default=None)
    p.add_argument("--weight-decay", type=non_negative_float, default=None,
                   help="default: 0.01 for adamw, 0 otherwise")
    p.add_argument("--schedule", choices=("none", "cosine", "step", "onecycle"), default=None)
    p.add_argument("--device", choices=("cpu", "gpu", "tpu"), default=None,
                   help="default: JAX's default device")
    p.add_argument("--seed", type=seed_int, default=0, help="random seed, 0 <= seed < 2**64")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: parameters and activations in bfloat16 (losses in float32)")
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoints are written")
    p.add_argument("--checkpoint-every", type=non_negative_int, default=0,
                   help="also checkpoint every N steps (0: only at the end)")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="PATH",
                   help="continue from a checkpoint file, or the latest one in PATH or in "
                        "--checkpoint-dir")
    p.add_argument("--eval-every", type=non_negative_int, default=0,
                   help="evaluate every N steps (0: once per epoch for classifiers, "
                        "every 500 steps for language models)")
    p.add_argument("--sample", type=non_negative_int, default=0, metavar="N",
                   help="after training: print N generated characters (lstm/gpt) or N test "
                        "predictions (classifiers)")
    p.add_argument("--plot", default=None, metavar="PATH", help="PNG of the loss/metric curves")
    p.add_argument("--metrics-json", default=None, metavar="PATH")
    p.add_argument("--quiet", action="store_true", help="only the closing summary")
    p.add_argument("--devices", type=positive_int, default=None,
                   help="data-parallel over this many local devices (default: all of them)")
    rl = p.add_argument_group("--model cartpole")
    rl.add_argument("--n-envs", type=positive_int, default=None, help="environments per rollout")
    rl.add_argument("--k-steps", type=positive_int, default=None, help="steps per rollout")
    rl.add_argument("--seconds", type=positive_float, default=None, help="time budget")
    rl.add_argument("--target", type=positive_float, default=None,
                    help="average episode length that counts as solved (default 475)")
    return p


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model == "cartpole":
        if args.data is not None:
            parser.error("--model cartpole simulates its own environment; drop --data")
        return args
    for k, v in DEFAULTS[args.model].items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    if args.steps is None and args.epochs is None:
        args.epochs = 1
    lm = args.model in LANGUAGE_MODELS
    if lm and args.data != "text":
        parser.error(f"--model {args.model} is a language model: it trains on --data text, "
                     f"not {args.data}")
    if not lm and args.data == "text":
        parser.error(f"--model {args.model} is an image classifier; --data text needs "
                     "--model lstm or gpt")
    if args.text_file is not None and args.data != "text":
        parser.error("--text-file only applies to --data text")
    if args.data in ("mnist", "fashion-mnist", "cifar10") and args.data_dir is None:
        parser.error(f"--data {args.data} needs --data-dir DIR (the folder holding its files; "
                     "nothing is downloaded)")
    # What can be checked without the framework is checked here: fails in a moment, before
    # jax is imported or a dataset read.
    if args.data_dir is not None and args.data in ("mnist", "fashion-mnist", "cifar10"):
        d = os.path.expanduser(args.data_dir)
        if not os.path.isdir(d):
            parser.error(f"--data-dir {args.data_dir} "
                         + ("is not a directory" if os.path.exists(d) else "does not exist"))
    if args.text_file is not None:
        problem = text_file_problem(args.text_file)
        if problem:
            parser.error(f"--text-file {args.text_file} {problem}")
    if args.weight_decay is None:
        args.weight_decay = 0.01 if args.optimizer == "adamw" else 0.0
    for flag in ("metrics_json", "plot"):
        problem = _output_path_problem(getattr(args, flag))
        if problem:
            parser.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: {problem}")
    if args.checkpoint_dir is not None:
        problem = _output_path_problem(args.checkpoint_dir, folder=True)
        if problem:
            parser.error(f"--checkpoint-dir {args.checkpoint_dir}: {problem}")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--plot needs matplotlib, which is not installed "
                         "(pip install matplotlib)")
    return args


def _output_path_problem(path, folder=False):
    """Why `path` can never be written as a file (or made a folder): it is a folder (a
    file), or a parent is a file. None if it can; found before training, not after it."""
    if path is None:
        return None
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(path):
        if os.path.isdir(path) != folder:
            return "is not a directory" if folder else "is a directory"
        return None
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return None if os.path.isdir(parent) else f"{parent} is not a directory"


# ------------------------------------------------------------------------------------ data


class ImageData:
    def __init__(self, name, train_x, train_y, test_x, test_y):
        # Standardise each channel with the training set's statistics.
        axes = (0, 2, 3)
        mean = train_x.mean(axis=axes, keepdims=True)
        std = train_x.std(axis=axes, keepdims=True) + 1e-6
        self.name = name
        self.train_x = ((train_x - mean) / std).astype(np.float32)
        self.test_x = ((test_x - mean) / std).astype(np.float32)
        self.train_y, self.test_y = train_y.astype(np.int32), test_y.astype(np.int32)
        self.channels, self.size = train_x.shape[1], train_x.shape[2]
        self.num_classes = 10

    def describe(self):
        return (f"{self.name}: {len(self.train_y)} training and {len(self.test_y)} test images "
                f"of {self.channels}x{self.size}x{self.size}")


def load_data(args):
    from flowlite import data

    try:
        if args.data == "digits":
            return ImageData("digits", *data.digits_split(test_fraction=0.2, seed=0))
        if args.data in ("mnist", "fashion-mnist"):
            tr = data.load_mnist(args.data_dir, "train", kind=args.data)
            te = data.load_mnist(args.data_dir, "test", kind=args.data)
            return ImageData(args.data, *tr, *te)
        if args.data == "cifar10":
            tr = data.load_cifar10(args.data_dir, "train")
            te = data.load_cifar10(args.data_dir, "test")
            return ImageData("cifar10", *tr, *te)
        # The stdlib corpus is read as ASCII (128 fixed ids: the benchmark GPT's vocabulary);
        # a user's file keeps its own character set.
        return data.load_text(args.text_file, ascii_only=args.text_file is None)
    except data.DatasetError as e:
        raise CLIError(str(e)) from None


def text_file_problem(path):
    """load_text replaces undecodable bytes; a file that is mostly such bytes (an archive, a
    checkpoint, UTF-16) is a wrong --text-file, not a corpus. -> what is wrong, or None."""
    try:
        with open(os.path.expanduser(path), "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return None             # missing, a folder, unreadable: load_text says which
    if b"\0" in head:
        return "is not a text file (it holds NUL bytes)"
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if bad > len(text) // 4:
        return f"is not UTF-8 text ({bad} of its first {len(text)} characters do not decode)"
    return None


# ------------------------------------------------------------------------------- training


def build_model(args, ds):
    import models

    if args.model == "mlp":
        return models.MLP(in_features=ds.channels * ds.size * ds.size,
                          num_classes=ds.num_classes)
    if args.model == "lenet":
        return models.LeNet(in_channels=ds.channels, num_classes=ds.num_classes,
                            image_size=ds.size)
    if args.model == "resnet":
        return models.ResNet(in_channels=ds.channels, num_classes=ds.num_classes)
    if args.model == "lstm":
        return models.CharLSTM(vocab_size=ds.vocab_size)
    return models.GPT(vocab_size=ds.vocab_size, context=LM_CONTEXT["gpt"])


def build_optimizer(args, params):
    from flowlite import optim

    if args.optimizer == "sgd":
        return optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    if args.optimizer == "adam":
        return optim.Adam(params, lr=args.lr, weight_decay=args.weight_decay)
    if args.optimizer == "adamw":
        return optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    return optim.RMSprop(params, lr=args.lr, weight_decay=args.weight_decay)


def build_scheduler(args, opt, total_steps):
    from flowlite.optim import lr_scheduler as S

    if args.schedule == "cosine":
        return S.CosineAnnealingLR(opt, T_max=total_steps)
    if args.schedule == "step":   # ÷10 after each third of the run
        return S.StepLR(opt, step_size=max(1, total_steps // 3), gamma=0.1)
    if args.schedule == "onecycle":
        return S.OneCycleLR(opt, max_lr=args.lr, total_steps=total_steps)
    return None


def make_loader(args, ds, lm):
    from flowlite import data

    if lm:
        T = LM_CONTEXT[args.model]
        if len(ds.train) <= T:
            raise CLIError(f"the training split has {len(ds.train)} characters, fewer than one "
                           f"window of {T + 1}; use a longer --text-file")
        train = data.LMWindowDataset(ds.train, T)
    else:
        train = data.TensorDataset(ds.train_x, ds.train_y)
    # drop_last: every step sees the same batch shape, so one executable serves them all.
    loader = data.DataLoader(train, batch_size=args.batch_size, shuffle=True, seed=args.seed,
                             drop_last=True, device=args.fl_device)
    if len(loader) == 0:
        raise CLIError(f"--batch-size {args.batch_size} is larger than the training set "
                       f"({len(train)} items)")
    return loader


def batches_from(loader, step):
    """The training batches from global step `step` on: epoch e is the loader's e-th shuffle,
    so a resumed run replays exactly the batches the interrupted run would have seen."""
    epoch, skip = divmod(step, len(loader))
    loader.set_epoch(epoch)
    while True:
        # `with`: closing this generator also stops (and joins) the loader's prefetch thread
        with iter(loader) as epoch_batches:
            for batch in epoch_batches:
                if skip:
                    skip -= 1
                    continue
                yield batch


def loss_and_metric(args, model, x, y, lm):
    """The training objective; also the number of correct predictions for classifiers (a
    by-product of the same executable, read only when the progress bar needs it)."""
    import flowlite as fl
    from flowlite.nn import functional as F

    if lm:
        logits = model(x)
        if isinstance(logits, tuple):      # CharLSTM returns (logits, state)
            logits = logits[0]
        logits = logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), None
    if args.precision == "bf16":
        x = x.to(fl.bfloat16)
    logits = model(x).float()
    return F.cross_entropy(logits, y), (logits.argmax(1) == y).sum()


class Evaluator:
    """Fixed-shape evaluation batches: one executable for the whole test set, every time."""

    def __init__(self, args, ds, lm):
        import flowlite as fl

        self.lm = lm
        self.batches = []
        if lm:
            T = LM_CONTEXT[args.model]
            n_windows = (len(ds.val) - 1) // T
            if n_windows < 1:
                raise CLIError(f"the validation split has {len(ds.val)} characters, fewer than "
                               f"one window of {T + 1}; use a longer --text-file")
            B = min(args.batch_size, n_windows)
            n_batches = min(LM_EVAL_BATCHES, n_windows // B)
            # Evenly spread, non-overlapping windows over the whole validation split.
            starts = np.linspace(0, len(ds.val) - T - 1, n_batches * B).astype(np.int64)
            win = ds.val[starts[:, None] + np.arange(T + 1)]
            for i in range(n_batches):
                w = win[i * B:(i + 1) * B]
                self.batches.append((fl.from_numpy(w[:, :-1].copy(), device=args.fl_device),
                                     fl.from_numpy(w[:, 1:].copy(), device=args.fl_device),
                                     None, B * T))
            self.count = n_batches * B * T
        else:
            n = len(ds.test_y)
            B = min(EVAL_BATCH, n)
            for i in range(0, n, B):
                x, y = ds.test_x[i:i + B], ds.test_y[i:i + B]
                k = len(y)
                mask = np.zeros(B, bool)
                mask[:k] = True
                if k < B:        # pad the last batch to the fixed shape; the mask drops it
                    x = np.concatenate([x, np.zeros((B - k,) + x.shape[1:], x.dtype)])
                    y = np.concatenate([y, np.zeros(B - k, y.dtype)])
                self.batches.append((fl.from_numpy(x, device=args.fl_device),
                                     fl.from_numpy(y, device=args.fl_device),
                                     fl.from_numpy(mask, device=args.fl_device), k))
            self.count = n

    def __call__(self, args, model):
        import flowlite as fl
        from flowlite.nn import functional as F

        model.eval()
        outs = []
        with fl.no_grad():
            for x, y, mask, _ in self.batches:
                if self.lm:
                    logits = model(x)
                    logits = (logits[0] if isinstance(logits, tuple) else logits).float()
                    V = logits.shape[-1]
                    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1),
                                           reduction="sum")
                    outs.append((loss, None, None))
                else:
                    if args.precision == "bf16":
                        x = x.to(fl.bfloat16)
                    logits = model(x).float()
                    losses = F.cross_entropy(logits, y, reduction="none")
                    pred = logits.argmax(1)
                    correct = ((pred == y) & mask).sum()
                    outs.append(((losses * mask).sum(), correct, pred))
                fl.sync()    # one execution per batch; values are read after the loop
        model.train()
        loss = sum(o[0].item() for o in outs) / self.count
        if self.lm:
            return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}
        correct = sum(int(o[1].item()) for o in outs)
        preds = np.concatenate([o[2].numpy()[:k] for o, (_, _, _, k) in zip(outs, self.batches)])
        return {"test_accuracy": correct / self.count, "test_loss": loss,
                "correct": correct, "total": self.count, "predictions": preds}


# ------------------------------------------------------------------------------ checkpoints


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


# ---------------------------------------------------------------------------------- progress


def _interactive() -> bool:
    """Both output streams are terminals (tqdm's bar goes to stderr, the lines to stdout)."""
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):        # replaced or closed streams
        return False


class Progress:
    """On a terminal: tqdm when installed, else a plain line every few seconds.  When the
    output is not a terminal (a log file, a pipe): no bar and no timed lines, whose carriage
    returns and redraws would interleave with the evaluation lines; one log line per
    evaluation (the step, the training loss and rate, and the evaluation's result) and one
    at the last step."""

    def __init__(self, args, start, total, lm):
        self.quiet, self.total, self.lm = args.quiet, total, lm
        self.bar = None
        self.last_print = time.perf_counter()
        self.t0, self.s0 = time.perf_counter(), start
        self.log = not _interactive()
        self.fields, self.step = {}, start
        if not self.quiet and not self.log:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True,
                                desc=f"{args.model}", leave=True)
            except ImportError:
                pass

    def update(self, step, loss, acc, force=False):
        if self.quiet:
            return
        fields = {"loss": f"{loss:.4f}"}
        if acc is not None:
            fields["acc"] = f"{100 * acc:.1f}%"
        self.fields, self.step = fields, step
        if self.log:
            if force:
                print(self._line(step), flush=True)
            return
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(fields, refresh=False)
            self.bar.refresh()
            return
        now = time.perf_counter()
        if force or now - self.last_print >= 5.0:
            print(self._line(step), flush=True)
            self.last_print = now

    def _line(self, step):
        rate = (step - self.s0) / max(time.perf_counter() - self.t0, 1e-9)
        extra = "".join(f"  {k} {v}" for k, v in self.fields.items())
        return f"step {step}/{self.total}{extra}  {rate:.1f} steps/s"

    def evaluation(self, step, text):
        """An evaluation's result: below the bar, or (not a terminal) one log line with the
        training progress in front."""
        if self.quiet:
            return
        if self.log:
            self.fields = self.fields if self.step == step else {}
            print(f"{self._line(step)}  |  {text}", flush=True)
        else:
            self.write(f"step {step}: {text}")

    def write(self, text):
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------------------- main run


def select_device(args):
    import flowlite as fl

    if args.device is None:
        return fl.default_device()
    try:
        dev = fl.device(args.device)
    except (RuntimeError, ValueError) as e:
        raise CLIError(f"--device {args.device}: {e}") from None
    fl.set_default_device(dev)
    return dev


def setup_devices(args, model):
    """Data parallelism over local devices: parameters replicated, every batch split along
    its first dimension, the gradient all-reduce inside the step's one executable."""
    import jax
    import flowlite as fl

    platform = args.fl_device.jax_device.platform
    devs = [d for d in jax.local_devices() if d.platform == platform]
    n = len(devs) if args.devices is None else args.devices
    if n > len(devs):
        raise CLIError(f"--devices {n}: only {len(devs)} {platform} device(s) available "
                       "(on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    if n <= 1:
        return None
    if args.batch_size % n:
        raise CLIError(f"--batch-size {args.batch_size} must be divisible by --devices {n}")
    mesh = fl.distributed.Mesh(("data",), devices=devs[:n])
    fl.distributed.data_parallel(model, mesh)
    args.fl_device = mesh.device
    return mesh


def run_cartpole(args):
    from models import cartpole

    result = cartpole.run(args)
    return 0 if result.get("solved", True) else 1


class Training:
    """One run's state: model, optimizer, schedule, data, the loss history and the timings.
    `run` drives it: announce, train, evaluate, summarise."""

    def __init__(self, args):
        import flowlite as fl
        self.fl, self.args = fl, args
        args.fl_device = select_device(args)
        self.lm = lm = args.model in LANGUAGE_MODELS
        resumed = read_checkpoint(args) if args.resume is not None else None
        self.ds = load_data(args)
        fl.manual_seed(args.seed)
        self.model = build_model(args, self.ds)
        if args.precision == "bf16":
            self.model.to(fl.bfloat16)
        setup_devices(args, self.model)
        self.opt = build_optimizer(args, self.model.parameters())
        self.loader = make_loader(args, self.ds, lm)
        self.total = args.steps if args.steps is not None else args.epochs * len(self.loader)
        self.sched = build_scheduler(args, self.opt, self.total)
        self.evaluator = Evaluator(args, self.ds, lm)
        self.eval_every = args.eval_every or (len(self.loader) if not lm else 500)
        self.history = {"loss": [], "acc": [], "evals": []}
        self.step = 0
        if resumed is not None:
            self.step, self.history = restore(args, *resumed, self.model, self.opt, self.sched)
        self.start_step = self.step
        self.ckpt_dir = args.checkpoint_dir or os.path.join("checkpoints", args.model)
        self.pending = []           # (loss, correct) tensors of steps not yet read on the host
        self.eval_batches, self.eval_time = 0, 0.0
        self.steady_time = 0.0

    def announce(self):
        what = self.ds.describe() if not self.lm else repr(self.ds)
        n_params = sum(p.numel() for p in self.model.parameters())
        print(f"{self.args.model} ({n_params:,} parameters) on {what}; device "
              f"{self.args.fl_device}; {self.total} steps of batch {self.args.batch_size}"
              + (f"; resuming at step {self.step}" if self.step else ""), flush=True)

    def state_dict(self):
        h, n = self.history, len(self.loader)
        return {
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict() if self.sched is not None else None,
            "step": self.step,
            "epoch": self.step // n,
            "batch_in_epoch": self.step % n,
            "rng": self.fl.get_rng_state(self.args.fl_device),
            "history": {"loss": np.asarray(h["loss"], np.float32),
                        "acc": np.asarray(h["acc"], np.float32), "evals": h["evals"]},
            "run": {k: getattr(self.args, k) for k in RUN_KEYS},
        }

    def save(self):
        return save_checkpoint(self.args, self.ckpt_dir, self.state_dict())

    def flush(self):
        """Read the recorded losses: they were materialised by their step's own execution."""
        for loss_t, correct_t in self.pending:
            self.history["loss"].append(float(loss_t.item()))
            self.history["acc"].append(float(correct_t.item()) / self.args.batch_size
                                       if correct_t is not None else float("nan"))
        self.pending.clear()

    def evaluate(self):
        t = time.perf_counter()
        result = self.evaluator(self.args, self.model)
        self.eval_time += time.perf_counter() - t
        self.eval_batches += len(self.evaluator.batches)
        self.history["evals"].append({"step": self.step, **{
            k: v for k, v in result.items() if isinstance(v, float)}})
        return result

    def describe(self, result):
        if self.lm:
            return (f"val loss {result['val_loss']:.4f} nats/char "
                    f"(perplexity {result['val_perplexity']:.2f})")
        return f"test accuracy {100 * result['test_accuracy']:.2f}%"

    def train(self) -> bool:
        """The training loop, to the last step or a Ctrl-C; True when interrupted."""
        args, stop = self.args, {"requested": False}
        progress = Progress(args, self.step, self.total, self.lm)

        def on_sigint(signum, frame):
            # Ctrl-C only raises a flag: the loop stops at the next step boundary, where every
            # tensor is consistent, and saves a checkpoint. A second Ctrl-C stops at once.
            if stop["requested"]:
                raise KeyboardInterrupt
            stop["requested"] = True
            progress.write("Ctrl-C: stopping after this step and saving a checkpoint "
                           "(Ctrl-C again to quit without saving)")

        try:
            previous_handler = signal.signal(signal.SIGINT, on_sigint)
        except ValueError:          # not the main thread: no Ctrl-C handling
            previous_handler = None
        t_steady, last_ui, interrupted = None, 0.0, False
        data_iter = batches_from(self.loader, self.step)
        try:
            self.model.train()
            while self.step < self.total:
                x, y = next(data_iter)
                loss, correct = loss_and_metric(args, self.model, x, y, self.lm)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()             # ONE executable: forward + backward + update
                if self.sched is not None:
                    self.sched.step()       # new lr: data for the next step, no recompile
                self.step += 1
                step = self.step
                self.pending.append((loss, correct))
                if t_steady is None:        # the first step of a process includes its compile
                    t_steady = time.perf_counter()
                now = time.perf_counter()
                evaluating = step % self.eval_every == 0 and step < self.total
                if now - last_ui > 0.25 or step == self.total or evaluating:
                    self.flush()            # reading values waits for the device: not every step
                    recent = self.history["acc"][-len(self.loader):]
                    progress.update(step, self.history["loss"][-1],
                                    None if self.lm else float(np.mean(recent)),
                                    force=step == self.total)
                    last_ui = now
                if evaluating:
                    progress.evaluation(step, self.describe(self.evaluate()))
                if args.checkpoint_every and step % args.checkpoint_every == 0 \
                        and step < self.total:
                    self.flush()
                    self.save()
                if stop["requested"]:
                    interrupted = True
                    break
        finally:
            if previous_handler is not None:
                signal.signal(signal.SIGINT, previous_handler)
            progress.close()
            data_iter.close()       # stops the loader's prefetch thread
        self.flush()
        self.fl.sync()
        if t_steady is not None:
            self.steady_time = time.perf_counter() - t_steady - self.eval_time
        return interrupted

    def summary(self, result, counters0, counters, t_start):
        args, lm, loss = self.args, self.lm, self.history["loss"]
        steps_run = self.step - self.start_step
        # Steady-state rate: every step after the first (which compiles), evaluation excluded.
        steps_per_s = ((steps_run - 1) / self.steady_time
                       if steps_run > 1 and self.steady_time > 0 else 0.0)
        tail = loss[-min(len(loss), max(1, len(self.loader) if not lm else 50)):]
        summary = {
            "model": args.model, "data": args.data, "steps": self.step, "steps_run": steps_run,
            "epochs": self.step / len(self.loader), "batch_size": args.batch_size, "lr": args.lr,
            "optimizer": args.optimizer, "schedule": args.schedule,
            "precision": args.precision, "device": str(args.fl_device), "seed": args.seed,
            "train_loss": float(np.mean(tail)) if tail else float("nan"),
            "seconds": time.perf_counter() - t_start, "steps_per_s": steps_per_s,
            "compiles": counters["compiles"] - counters0["compiles"],
            "executions": counters["executions"] - counters0["executions"],
            "eval_batches": self.eval_batches, "losses": loss, "evals": self.history["evals"],
        }
        if lm:
            summary.update(val_loss=result["val_loss"], val_perplexity=result["val_perplexity"],
                           unigram_entropy=self.ds.unigram_entropy(),
                           vocab_size=self.ds.vocab_size)
        else:
            summary.update(test_accuracy=result["test_accuracy"], test_loss=result["test_loss"])
        return summary


def run(args):
    import flowlite as fl

    counters0 = fl.metrics.counters()
    t = Training(args)
    if not args.quiet:
        t.announce()
    if t.train():
        path = t.save()
        print(f"interrupted at step {t.step}/{t.total}: checkpoint saved to {path}\n"
              f"resume with: python train.py {' '.join(_resume_argv(args, path))}",
              file=sys.stderr, flush=True)
        return 130
    result = t.evaluate()
    saved = t.save() if args.checkpoint_dir is not None else None
    counters = fl.metrics.counters()        # sampling below is not the run's work
    if args.sample:
        show_samples(args, t.model, t.ds, t.lm, result)
    summary = t.summary(result, counters0, counters, _PROCESS_START)
    if saved:
        summary["checkpoint"] = saved
    print_summary(args, summary, t.lm)
    if args.metrics_json:
        write_json(args.metrics_json, summary)
    if args.plot:
        plot(args.plot, summary, t.lm)
    return 0


def _resume_argv(args, path):
    out = []
    for flag in ("model", "data", "data_dir", "text_file", "epochs", "steps", "batch_size",
                 "lr", "optimizer", "weight_decay", "schedule", "device", "seed", "precision"):
        v = getattr(args, flag)
        if v is not None and (flag not in ("epochs",) or args.steps is None):
            out += [f"--{flag.replace('_', '-')}", str(v)]
    return out + ["--resume", path]


def show_samples(args, model, ds, lm, result):
    import flowlite as fl

    if not lm:
        preds = result["predictions"][:args.sample]
        truth = ds.test_y[:args.sample]
        pairs = " ".join(f"{p}{'' if p == t else f'(≠{t})'}" for p, t in zip(preds, truth))
        print(f"test predictions (first {len(preds)}; (≠y) marks a mistake): {pairs}")
        return
    prompt_text = "def "
    try:
        ids = ds.encode(prompt_text)
    except ValueError:
        ids = ds.val[:4]
        prompt_text = ds.decode(ids)
    prompt = fl.from_numpy(np.asarray(ids, np.int32)[None], device=args.fl_device)
    out = model.generate(prompt, args.sample, temperature=0.8, top_k=None)
    text = ds.decode(out.numpy()[0])
    print(f"--- sample ({args.sample} characters after {prompt_text!r}, temperature 0.8) ---")
    print(text)
    print("---")


def print_summary(args, s, lm):
    if lm:
        metric = (f"val loss {s['val_loss']:.4f} nats/char (perplexity {s['val_perplexity']:.2f}; "
                  f"unigram entropy {s['unigram_entropy']:.4f})")
    else:
        metric = f"test accuracy {100 * s['test_accuracy']:.2f}% (test loss {s['test_loss']:.4f})"
    other = s["executions"] - s["steps_run"] - s["eval_batches"]
    lines = [
        f"{args.model} on {args.data}: {metric}; train loss {s['train_loss']:.4f}",
        f"{s['steps']} steps ({s['steps_run']} this run) in {s['seconds']:.1f} s wall, "
        f"{s['steps_per_s']:.1f} steps/s; flowlite: {s['compiles']} compiles, "
        f"{s['executions']} executions = {s['steps_run']} steps + {s['eval_batches']} eval "
        f"batches + {other} other",
    ]
    if args.quiet:
        lines = lines[:1]
    print("\n".join(lines), flush=True)


def write_json(path, summary):
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(tmp, path)
    except OSError as e:
        print(f"train.py: error: cannot write --metrics-json {path}: {e}", file=sys.stderr)


def plot(path, summary, lm):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    losses = np.asarray(summary["losses"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(np.arange(1, len(losses) + 1), losses, lw=0.5, alpha=0.4, label="per step")
    w = max(1, len(losses) // 50)
    if w > 1:
        smooth = np.convolve(losses, np.ones(w) / w, mode="valid")
        ax1.plot(np.arange(w, len(losses) + 1), smooth, label=f"mean of {w}")
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss")
    ax1.legend()
    key = "val_loss" if lm else "test_accuracy"
    evals = [e for e in summary["evals"] if key in e]
    ax2.plot([e["step"] for e in evals], [e[key] for e in evals], marker="o")
    ax2.set_xlabel("step")
    ax2.set_ylabel(key.replace("_", " "))
    fig.suptitle(f"{summary['model']} on {summary['data']}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except (OSError, ValueError) as e:      # ValueError: a format matplotlib cannot write
        print(f"train.py: error: cannot write --plot {path}: {e}", file=sys.stderr)


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cpu" and "JAX_PLATFORMS" not in os.environ:
        os.environ["JAX_PLATFORMS"] = "cpu"     # do not probe for accelerators
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        return run_cartpole(args) if args.model == "cartpole" else run(args)
    except CLIError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("train.py: interrupted (no checkpoint written)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
