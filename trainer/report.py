"""What a finished run reports: the closing summary lines, --metrics-json and --plot."""
from __future__ import annotations

import json
import os
import sys

import numpy as np


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
