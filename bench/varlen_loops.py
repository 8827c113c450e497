"""Training loops whose shapes change from step to step (issue 35), written as a PyTorch user
writes them; run with PyTorch or with flowlite (`import flowlite as torch`).

    python bench/varlen_loops.py {lstm,encoder,mlp} {torch,flowlite} [--steps N] [--seed S]

- lstm: an LSTM language model (vocab 64, embedding 32, hidden 64, batch 8), every batch of a
  length drawn uniformly in [16, 128], cross-entropy over every position, Adam;
- encoder: a 2-layer nn.TransformerEncoder classifier (d 32, 4 heads, batch 8), padded batches
  whose longest sequence is drawn in [8, 96], `src_key_padding_mask`, masked mean pooling, Adam;
- mlp: an MLP over 3 epochs of 100 samples in batches of 32 (a smaller last batch), SGD.

The data comes from numpy with the seed, so both backends see the same batches; the initial
weights are copied from one state_dict (numpy) so both start equal.  Prints one JSON line
prefixed `@@`: losses, total seconds, per-step seconds, compiles (flowlite).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def batches(kind, steps, seed):
    rng = np.random.default_rng(seed)
    out = []
    if kind == "lstm":
        for _ in range(steps):
            T = int(rng.integers(16, 129))
            x = rng.integers(0, 64, (8, T + 1))
            out.append((x[:, :-1], x[:, 1:]))
    elif kind == "encoder":
        for _ in range(steps):
            T = int(rng.integers(8, 97))
            lens = rng.integers(1, T + 1, 8)
            lens[0] = T
            x = rng.integers(1, 50, (8, T))
            pad = np.arange(T)[None, :] >= lens[:, None]
            x[pad] = 0
            out.append((x, pad, rng.integers(0, 4, 8)))
    else:
        X = rng.standard_normal((100, 20)).astype(np.float32)
        Y = rng.integers(0, 5, 100)
        for _ in range(3):
            for i in range(0, 100, 32):
                out.append((X[i:i + 32], Y[i:i + 32]))
    return out


def build(torch, kind):
    nn = torch.nn
    F = nn.functional

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(64, 32)
            self.rnn = nn.LSTM(32, 64, batch_first=True)
            self.head = nn.Linear(64, 64)

        def forward(self, x, y):
            h, _ = self.rnn(self.emb(x))
            return F.cross_entropy(self.head(h).reshape(-1, 64), y.reshape(-1))

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 4)

        def forward(self, x, pad, y):
            h = self.enc(self.emb(x), src_key_padding_mask=pad)
            keep = (~pad).unsqueeze(-1).to(h.dtype)
            pooled = (h * keep).sum(1) / keep.sum(1)
            return F.cross_entropy(self.head(pooled), y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    return {"lstm": LM, "encoder": Classifier, "mlp": MLP}[kind]()


def init_state(model, seed):
    """Deterministic initial weights from numpy (the same on both backends)."""
    rng = np.random.default_rng(seed + 1)
    return {k: (rng.standard_normal(tuple(v.shape)) * 0.1).astype(np.float32)
            for k, v in model.state_dict().items()}


def run(torch, kind, steps, seed=0):
    """Train `kind` for `steps` batches with the module `torch` (PyTorch or flowlite):
    (losses, seconds per step, total seconds)."""
    torch.manual_seed(0)
    model = build(torch, kind)
    model.load_state_dict({k: torch.tensor(v) for k, v in init_state(model, seed).items()})
    if kind == "mlp":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, times = [], []
    t_all = time.perf_counter()
    for b in batches(kind, steps, seed):
        t0 = time.perf_counter()
        loss = model(*[torch.tensor(v) for v in b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return losses, times, time.perf_counter() - t_all


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("lstm", "encoder", "mlp"))
    ap.add_argument("backend", choices=("torch", "flowlite"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.backend == "torch":
        import torch
    else:
        import flowlite as torch
    losses, times, total = run(torch, a.kind, a.steps, a.seed)
    res = {"kind": a.kind, "backend": a.backend, "steps": len(times), "total_s": total,
           "losses": losses, "step_s": times}
    if a.backend == "flowlite":
        c = torch.metrics.counters()
        res["compiles"] = c["compiles"]
        res["persistent_cache_hits"] = c["persistent_cache_hits"]
    print("@@" + json.dumps(res))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
