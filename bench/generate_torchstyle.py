"""nanoGPT's generate loop, unchanged, on flowlite vs the tutorial GPT's compiled generate.

    python bench/generate_torchstyle.py [--tokens N] [--prompt P] [--block B] [--nanogpt DIR]

Runs the PyTorch-style GPT of bench/torchstyle_gpt.py (or, with --nanogpt, karpathy/nanoGPT's
own model.py from a local checkout, imported with `torch` resolved to flowlite) with the
classic generate loop — the model re-run on the growing context every token — and, on the
same-sized model, models/gpt.py's KV-cached `generate` in its "compile" mode (one replayed
executable per token) and "scan" mode (the whole generation one executable).  Reports
compiles and executions per token and tokens/s for a first (cold) and a second (warm) call,
and the same loop in PyTorch eager for reference.  Ratios, never bare times, are the result.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
sys.path.insert(0, ROOT)

import flowlite as fl  # noqa: E402
from torchstyle_gpt import GPTConfig, build  # noqa: E402


def _nanogpt_model(path, cfg):
    """nanoGPT's model.py with `torch` imported as flowlite (no file of it is copied)."""
    sys.modules["torch"] = fl
    sys.modules["torch.nn"] = fl.nn
    sys.modules["torch.nn.functional"] = fl.nn.functional
    spec = importlib.util.spec_from_file_location("nanogpt_model", os.path.join(path,
                                                                                 "model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    conf = mod.GPTConfig(block_size=cfg.block_size, vocab_size=cfg.vocab_size,
                         n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd,
                         dropout=0.0, bias=True)
    return mod.GPT(conf)


def _measure(fn, n_tokens):
    c0 = fl.metrics.counters()
    t0 = time.perf_counter()
    out = fn()
    np.asarray(out.numpy())
    dt = time.perf_counter() - t0
    c1 = fl.metrics.counters()
    return {"s": dt, "tok/s": n_tokens / dt,
            "compiles/token": (c1["compiles"] - c0["compiles"]) / n_tokens,
            "executions/token": (c1["executions"] - c0["executions"]) / n_tokens}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--nanogpt", default=None, help="a karpathy/nanoGPT checkout (model.py)")
    args = ap.parse_args(argv)
    cfg = GPTConfig(block_size=args.block, vocab_size=65, n_layer=2, n_head=4, n_embd=64)
    fl.manual_seed(0)
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, args.prompt))
    n = args.tokens
    rows = {}

    model = _nanogpt_model(args.nanogpt, cfg) if args.nanogpt else build(fl)(cfg)
    model.eval()
    x = fl.from_numpy(prompt.astype(np.int64))
    fl.sync()

    def torchstyle():
        out = model.generate(x, n, temperature=0.8, top_k=10)
        return out[0] if isinstance(out, tuple) else out
    rows["torch-style loop, cold"] = _measure(torchstyle, n)
    rows["torch-style loop, warm"] = _measure(torchstyle, n)

    from models.gpt import GPT, GPTConfig as TutConfig
    tut = GPT(TutConfig(vocab_size=cfg.vocab_size, context=cfg.block_size,
                        n_layer=cfg.n_layer, n_head=cfg.n_head, d_model=cfg.n_embd))
    tut.eval()
    xt = fl.from_numpy(prompt.astype(np.int32))
    fl.sync()
    for mode in ("compile", "scan"):
        def tutorial(mode=mode):
            return tut.generate(xt, n, temperature=0.8, top_k=10, mode=mode)
        rows[f"tutorial KV-cache ({mode}), cold"] = _measure(tutorial, n)
        rows[f"tutorial KV-cache ({mode}), warm"] = _measure(tutorial, n)

    import torch
    tmodel = build(torch)(cfg)
    tmodel.eval()
    tx = torch.from_numpy(prompt.astype(np.int64))
    t0 = time.perf_counter()
    tmodel.generate(tx, n, temperature=0.8, top_k=10)
    rows["PyTorch eager, same loop"] = {"s": time.perf_counter() - t0}
    rows["PyTorch eager, same loop"]["tok/s"] = n / rows["PyTorch eager, same loop"]["s"]

    base = rows["tutorial KV-cache (compile), warm"]["tok/s"]
    print(f"{n} tokens after a {args.prompt}-token prompt, block_size {args.block}, "
          f"{'nanoGPT model.py' if args.nanogpt else 'bench/torchstyle_gpt.py'}")
    print(f"{'variant':38s} {'tok/s':>9s} {'vs tutorial compile':>20s} {'compiles/tok':>13s} "
          f"{'execs/tok':>10s}")
    for name, r in rows.items():
        print(f"{name:38s} {r['tok/s']:9.1f} {r['tok/s'] / base:19.2f}x "
              f"{r.get('compiles/token', float('nan')):13.2f} "
              f"{r.get('executions/token', float('nan')):10.2f}")


if __name__ == "__main__":
    main()
