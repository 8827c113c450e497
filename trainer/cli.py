"""train.py's command line: the models and datasets it knows, each model's default settings,
the flags and their checks.

Everything that can be checked without the framework is checked here, so a wrong flag fails in a
moment with one line (exit code 2), before jax is imported or a dataset read.
"""
from __future__ import annotations

import argparse
import math
import os

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
