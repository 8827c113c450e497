"""`get_batch` of ng-video-lecture's bigram.py and of nanoGPT's train.py, PyTorch vs flowlite.

    python bench/get_batch.py [--reps 200]

Both idioms run unchanged (`import flowlite as torch`): a random draw iterated on the host,
rows sliced from host data at its offsets, stacked.  Each is timed alone (the call) and with
its batch consumed by a small cached forward pass whose loss is read (so lazy work deferred
into the step is counted too).  The two libraries' calls alternate in blocks in one loop, so
both see the same machine load; the table gives medians and their ratio.  flowlite's compiles
and executions per call are printed too (the draw is the only program a call may run).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flowlite  # noqa: E402

VOCAB = 65


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def bigram_form(torch, text_ids):
    """ng-video-lecture bigram.py, verbatim apart from the data source."""
    data = torch.tensor(text_ids, dtype=torch.long)
    n = int(0.9 * len(data))
    train_data = data[:n]
    val_data = data[n:]
    block_size, batch_size, device = 8, 32, "cpu"

    def get_batch(split):
        data = train_data if split == 'train' else val_data
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([data[i:i + block_size] for i in ix])
        y = torch.stack([data[i + 1:i + block_size + 1] for i in ix])
        x, y = x.to(device), y.to(device)
        return x, y
    return get_batch


def nanogpt_form(torch, path):
    """nanoGPT train.py's get_batch (the CPU branch), verbatim apart from the path."""
    block_size, batch_size, device = 64, 12, "cpu"

    def get_batch(split):
        data = np.memmap(path, dtype=np.uint16, mode='r')
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64))
                         for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64))
                         for i in ix])
        x, y = x.to(device), y.to(device)
        return x, y
    return get_batch


def forward(torch, seed):
    """A small model whose loss reads the batch (embedding, linear, cross-entropy)."""
    torch.manual_seed(seed)
    emb = torch.nn.Embedding(VOCAB, 32)
    head = torch.nn.Linear(32, VOCAB)

    def run(x, y):
        with torch.no_grad():
            logits = head(emb(x))
            loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        return loss.item()
    return run


def time_pair(fns, reps, block=10):
    """Median seconds of each callable, in alternating blocks of `block` calls (both see the
    same machine load; a block keeps one library's worker threads from contending with the
    other's on every call)."""
    times = [[] for _ in fns]
    for f in fns:                 # warm up: compile, caches
        for _ in range(5):
            f()
    for _ in range(max(1, reps // block)):
        for k, f in enumerate(fns):
            for _ in range(block):
                t = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="PyTorch's intra-op threads (default 1: on a busy 2-core machine its "
                         "workers, woken after get_batch's single-threaded ops, cost its small "
                         "forward pass ~18 ms a call; one thread is PyTorch at its best here)")
    args = ap.parse_args(argv)
    import torch
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    rng = np.random.default_rng(0)
    text_ids = rng.integers(0, VOCAB, size=1_000_000).tolist()
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "train.bin")
    rng.integers(0, VOCAB, size=1_000_000).astype(np.uint16).tofile(path)

    print(f"get_batch, PyTorch {torch.__version__} ({torch.get_num_threads()} threads) vs "
          f"flowlite, {_cpu_name()} ({os.cpu_count()} cores), medians of {args.reps} calls")
    print(f"{'form':56s} {'torch ms':>9s} {'flowlite ms':>12s} {'ratio':>6s}  "
          f"flowlite compiles/execs per call")
    for name, make in (("bigram.py (batch 32, block 8)", lambda m: bigram_form(m, text_ids)),
                       ("nanoGPT train.py (batch 12, block 64)",
                        lambda m: nanogpt_form(m, path))):
        torch.manual_seed(1337)
        flowlite.manual_seed(1337)
        gt, gf = make(torch), make(flowlite)
        ft, ff = forward(torch, 0), forward(flowlite, 0)
        for label, fns in (("call", (lambda: gt("train"), lambda: gf("train"))),
                           ("call + forward", (lambda: ft(*gt("train")),
                                               lambda: ff(*gf("train"))))):
            c0 = flowlite.metrics.counters()
            t_torch, t_fl = time_pair(fns, args.reps)
            c1 = flowlite.metrics.counters()
            calls = max(1, args.reps // 10) * 10 + 5
            per = (f"{(c1['compiles'] - c0['compiles']) / calls:.2f}/"
                   f"{(c1['executions'] - c0['executions']) / calls:.2f}")
            print(f"{name + ': ' + label:56s} {t_torch * 1e3:9.3f} {t_fl * 1e3:12.3f} "
                  f"{t_fl / t_torch:6.2f}  {per}")
    os.remove(path)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
