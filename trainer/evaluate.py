"""Evaluation on the held-out split in fixed-shape batches (one executable for the whole test
set, every time), and what --sample prints after training."""
from __future__ import annotations

import math

import numpy as np

from trainer.cli import LM_CONTEXT, CLIError

EVAL_BATCH = 256                        # classifier evaluation batch (fixed: one executable)
LM_EVAL_BATCHES = 32                    # validation windows: at most this many batches


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
