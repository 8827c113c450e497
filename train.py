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

This file is the training loop; its pieces — the flags, the data, building the model and
optimizer, evaluation, checkpoints, progress and the closing report — are in trainer/, one
concern per module (trainer/__init__.py lists them).
"""
from __future__ import annotations

import time

_PROCESS_START = time.perf_counter()    # the summary's wall time includes imports and compiles

import os
import signal
import sys

import numpy as np

# trainer/ and models/ sit beside this file: importable however train.py is started
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from trainer.build import (build_model, build_optimizer, build_scheduler,  # noqa: E402
                           select_device, setup_devices)
from trainer.checkpoints import (RUN_KEYS, read_checkpoint, restore,  # noqa: E402
                                 resume_argv, save_checkpoint)
from trainer.cli import LANGUAGE_MODELS, CLIError, parse_args  # noqa: E402
from trainer.data import batches_from, load_data, make_loader  # noqa: E402
from trainer.evaluate import Evaluator, show_samples  # noqa: E402
from trainer.progress import Progress  # noqa: E402
from trainer.report import plot, print_summary, write_json  # noqa: E402


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
              f"resume with: python train.py {' '.join(resume_argv(args, path))}",
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


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cpu" and "JAX_PLATFORMS" not in os.environ:
        os.environ["JAX_PLATFORMS"] = "cpu"     # do not probe for accelerators
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
