"""Training loops whose shapes change from step to step (issue 35), written as a PyTorch user
writes them; run with PyTorch or with flowlite (`import flowlite as torch`).

    python bench/varlen_loops.py {lstm,encoder,mlp} {torch,flowlite,jax} [--steps N]
                                 [--seed S] [--fixed T]
    python bench/varlen_loops.py table [--steps 40] [--long 400]

- lstm: an LSTM language model (vocab 64, embedding 32, hidden 64, batch 8), every batch of a
  length drawn uniformly in [16, 128], cross-entropy over every position, Adam;
- encoder: a 2-layer nn.TransformerEncoder classifier (d 32, 4 heads, batch 8), padded batches
  whose longest sequence is drawn in [8, 96], `src_key_padding_mask`, masked mean pooling, Adam;
- mlp: an MLP over 3 epochs of 100 samples in batches of 32 (a smaller last batch), SGD.

`jax` (lstm only): the same model hand-written in JAX + optax, one jitted step (lax.scan,
Adam, donated parameters) that JAX compiles once per length, as a JAX user would write it.

The data comes from numpy with the seed, so both backends see the same batches; the initial
weights are copied from one state_dict (numpy) so both start equal.  Prints one JSON line
prefixed `@@`: losses, total seconds, per-step seconds, compiles (flowlite).

`table` runs each loop in fresh processes (flowlite with an empty persistent compile cache):
PyTorch, flowlite with length buckets and flowlite with them off (FLOWLITE_BUCKETS=0) for
--steps steps (total wall time including compiles, compiles, largest loss difference), then
PyTorch and bucketed flowlite for --long steps: the median step once the buckets exist
(steps after the last compile) and the padded compute (sum of bucket lengths / sum of
lengths).  Prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial

import numpy as np


def batches(kind, steps, seed, fixed=None):
    """The loop's batches; `fixed`: every batch of that length (the lstm and encoder)."""
    rng = np.random.default_rng(seed)
    out = []
    if kind == "lstm":
        for _ in range(steps):
            T = int(rng.integers(16, 129)) if fixed is None else fixed
            x = rng.integers(0, 64, (8, T + 1))
            out.append((x[:, :-1], x[:, 1:]))
    elif kind == "encoder":
        for _ in range(steps):
            T = int(rng.integers(8, 97)) if fixed is None else fixed
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


def run(torch, kind, steps, seed=0, fixed=None):
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
    for b in batches(kind, steps, seed, fixed):
        t0 = time.perf_counter()
        loss = model(*[torch.tensor(v) for v in b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return losses, times, time.perf_counter() - t_all


def run_jax(kind, steps, seed=0, fixed=None):
    """The lstm loop in hand-written JAX + optax (same weights, batches and losses)."""
    if kind != "lstm":
        raise SystemExit("the jax backend has the lstm loop only")
    import jax
    import jax.numpy as jnp
    import optax

    shapes = {"emb.weight": (64, 32), "rnn.weight_ih_l0": (256, 32),
              "rnn.weight_hh_l0": (256, 64), "rnn.bias_ih_l0": (256,),
              "rnn.bias_hh_l0": (256,), "head.weight": (64, 64), "head.bias": (64,)}

    class _Shapes:      # init_state reads the names and shapes of a state_dict
        def state_dict(self):
            return {k: np.empty(v) for k, v in shapes.items()}
    p = {k: jnp.asarray(v) for k, v in init_state(_Shapes(), seed).items()}

    def loss_fn(p, x, y):
        xw = jnp.swapaxes(p["emb.weight"][x], 0, 1) @ p["rnn.weight_ih_l0"].T \
            + p["rnn.bias_ih_l0"] + p["rnn.bias_hh_l0"]

        def cell(c, xt):
            h, cc = c
            i, f, g, o = jnp.split(xt + h @ p["rnn.weight_hh_l0"].T, 4, -1)
            cc = jax.nn.sigmoid(f) * cc + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(cc)
            return (h, cc), h
        z = jnp.zeros((x.shape[0], 64), jnp.float32)
        _, hs = jax.lax.scan(cell, (z, z), xw)
        logits = jnp.swapaxes(hs, 0, 1).reshape(-1, 64) @ p["head.weight"].T + p["head.bias"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y.reshape(-1)).mean()

    opt = optax.adam(1e-3)

    @partial(jax.jit, donate_argnums=(0, 1))
    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    s = opt.init(p)
    losses, times = [], []
    t_all = time.perf_counter()
    for x, y in batches(kind, steps, seed, fixed):
        t0 = time.perf_counter()
        p, s, loss = step(p, s, x, y)
        losses.append(float(loss))
        times.append(time.perf_counter() - t0)
    return losses, times, time.perf_counter() - t_all, step._cache_size()


def _one(kind, backend, steps, buckets=True):
    import os
    import subprocess
    import tempfile
    env = dict(os.environ, FLOWLITE_BUCKETS="1" if buckets else "0")
    with tempfile.TemporaryDirectory() as cache:
        env["FLOWLITE_CACHE_DIR"] = cache
        out = subprocess.run([sys.executable, __file__, kind, backend, "--steps", str(steps)],
                             env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.split("@@", 1)[1])


def _padding(kind, steps):
    """sum of padded lengths / sum of lengths over the loop's batches (buckets.bucket_for)."""
    if kind == "mlp":
        return 1.0
    sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])
    from flowlite.engine.buckets import bucket_for
    lens = [b[0].shape[1] for b in batches(kind, steps, 0)]
    return sum(bucket_for(n) for n in lens[2:]) / sum(lens[2:])


def _median(xs):
    return sorted(xs)[len(xs) // 2]


def table(steps, long):
    print(f"| loop | PyTorch {steps} steps | flowlite buckets | compiles | flowlite exact "
          f"| compiles | buckets/exact | JAX+optax | compiles | max loss diff (rel) | median "
          f"step PyTorch / flowlite / JAX ({long} steps) | flowlite/PyTorch | padded compute |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kind in ("lstm", "encoder", "mlp"):
        t = _one(kind, "torch", steps)
        b = _one(kind, "flowlite", steps)
        e = _one(kind, "flowlite", steps, buckets=False)
        diff = max(abs(x - y) / abs(y) for x, y in zip(b["losses"], t["losses"]))
        lt, lb = _one(kind, "torch", long), _one(kind, "flowlite", long)
        # the steps after the last one that compiled (a step > 0.25 s)
        slow = [i for i, v in enumerate(lb["step_s"]) if v > 0.25]
        tail = lb["step_s"][slow[-1] + 1 if slow else 0:] or lb["step_s"][-1:]
        mt, mb = _median(lt["step_s"]), _median(tail)
        jx, mj = "-", "-"
        if kind == "lstm":      # JAX compiles per length: its steps at a length seen before
            j, lj = _one(kind, "jax", steps), _one(kind, "jax", long)
            lens = [x.shape[1] for x, _ in batches(kind, long, 0)]
            seen = [lj["step_s"][i] for i, n in enumerate(lens) if n in lens[:i]]
            jx = f"{j['total_s']:.2f} s | {j['compiles']}"
            mj = f"{_median(seen) * 1e3:.2f}"
            diff = max([diff] + [abs(x - y) / abs(y) for x, y in zip(j["losses"], t["losses"])])
        else:
            jx = "- | -"
        print(f"| {kind} | {t['total_s']:.2f} s | {b['total_s']:.2f} s | {b['compiles']} | "
              f"{e['total_s']:.2f} s | {e['compiles']} | {b['total_s'] / e['total_s']:.2f} | "
              f"{jx} | {diff:.1e} | {mt * 1e3:.2f} / {mb * 1e3:.2f} / {mj} ms | "
              f"{mb / mt:.2f} | {_padding(kind, long):.2f}x |")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "table":
        ap = argparse.ArgumentParser()
        ap.add_argument("--steps", type=int, default=40)
        ap.add_argument("--long", type=int, default=400)
        a = ap.parse_args(argv[1:])
        return table(a.steps, a.long)
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("lstm", "encoder", "mlp"))
    ap.add_argument("backend", choices=("torch", "flowlite", "jax"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", type=int, default=None, help="every batch of this length")
    a = ap.parse_args(argv)
    compiles = None
    if a.backend == "jax":
        losses, times, total, compiles = run_jax(a.kind, a.steps, a.seed, a.fixed)
    else:
        if a.backend == "torch":
            import torch
        else:
            import flowlite as torch
        losses, times, total = run(torch, a.kind, a.steps, a.seed, a.fixed)
    res = {"kind": a.kind, "backend": a.backend, "steps": len(times), "total_s": total,
           "losses": losses, "step_s": times, "compiles": compiles}
    if a.backend == "flowlite":
        c = torch.metrics.counters()
        res["compiles"] = c["compiles"]
        res["persistent_cache_hits"] = c["persistent_cache_hits"]
    print("@@" + json.dumps(res))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
