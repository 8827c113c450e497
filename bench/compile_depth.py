"""Compile time and first step against depth and against unrolled length, with and without
re-rolling (flowlite/engine/reroll.py, issue 36).

    python bench/compile_depth.py [--depths 1,2,4,8,12,24] [--lengths 10,100,1000]

Each configuration runs in a fresh process with an empty persistent compile cache:
- a PyTorch-style GPT written with `import flowlite as torch` (d 128, 4 heads, block 64,
  batch 8, AdamW) with 1..24 layers: first step (trace + compile + run), the steady step while
  the program is a loop (steps 2-19) and after the unrolled form replaced it (steps 23-30;
  step 22, which compiles it, is reported alone);
- an LSTMCell (hidden 51) stepped over T time steps in Python, forward, backward and SGD,
  float32: first step and steady step.
Prints a markdown table (bench/RESULTS.md keeps the measured ones).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

GPT = r'''
import sys, time, json
import flowlite as torch
nn, F = torch.nn, torch.nn.functional
L = int(sys.argv[1]); D, H, T, B, V = 128, 4, 64, 8, 96
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.ln1 = nn.LayerNorm(D); s.attn = nn.Linear(D, 3 * D); s.proj = nn.Linear(D, D)
        s.ln2 = nn.LayerNorm(D); s.fc = nn.Linear(D, 4 * D); s.out = nn.Linear(4 * D, D)
    def forward(s, x):
        q, k, v = s.attn(s.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, D)
        x = x + s.proj(y)
        return x + s.out(F.gelu(s.fc(s.ln2(x))))
class GPT(nn.Module):
    def __init__(s):
        super().__init__(); s.wte = nn.Embedding(V, D); s.wpe = nn.Embedding(T, D)
        s.blocks = nn.ModuleList([Block() for _ in range(L)]); s.ln = nn.LayerNorm(D); s.head = nn.Linear(D, V)
    def forward(s, idx, y):
        x = s.wte(idx) + s.wpe(torch.arange(T))
        for b in s.blocks:
            x = b(x)
        return F.cross_entropy(s.head(s.ln(x)).view(-1, V), y.view(-1))
torch.manual_seed(0)
m = GPT(); opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
idx = torch.randint(0, V, (B, T)); y = torch.randint(0, V, (B, T))
torch.sync()
ts = []
for i in range(30):
    a = time.perf_counter(); loss = m(idx, y); opt.zero_grad(); loss.backward(); opt.step(); loss.item()
    ts.append(time.perf_counter() - a)
    if i == 0:      # the first step's program: where its compile went, and its kernels
        step = [p for p in torch.metrics.summary()["compiles"]["costliest"]
                if p["cause"].startswith("optimizer.step()")][0]
        hlo = torch.debug.executable_text()
c = torch.metrics.counters()
print("@@" + json.dumps({"first": ts[0], "loop": sorted(ts[1:19])[9], "unrolled": sorted(ts[22:])[4],
                         "switch": ts[21], "runs": c["rerolled_runs"], "upgrades": c["rerolled_upgrades"],
                         "loss": loss.item(), "step": step, "hlo": hlo}))
'''

LSTM = r'''
import sys, time, json
import flowlite as torch
T = int(sys.argv[1]); B, Hd = 16, 51
torch.manual_seed(0)
cell = torch.nn.LSTMCell(1, Hd); head = torch.nn.Linear(Hd, 1)
opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.1)
x = torch.randn(B, T); target = torch.randn(B, T)
torch.sync()
ts = []
for _ in range(6):
    a = time.perf_counter()
    h = c = torch.zeros(B, Hd); outs = []
    for x_t in x.split(1, dim=1):
        h, c = cell(x_t, (h, c)); outs.append(head(h))
    loss = ((torch.cat(outs, dim=1) - target) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step(); loss.item()
    ts.append(time.perf_counter() - a)
c = torch.metrics.counters()
print("@@" + json.dumps({"first": ts[0], "steady": sorted(ts[1:])[2], "runs": c["rerolled_runs"],
                         "loss": loss.item()}))
'''


_NOT_KERNELS = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while",
                "conditional", "call", "after-all", "partition-id", "replica-id"}


def kernels(hlo: str) -> dict:
    """Kernels of an optimised HLO module (what XLA:CPU emits and compiles one by one:
    fusions, copies, dots, ...), by where they sit: `update` in conditional branches of more
    than 4 kernels (the guarded optimizer update; fusion barriers are 1-kernel branches),
    `loops` in while bodies, `step` the rest."""
    blocks = re.split(r"\n(?=\S)", hlo)
    called = {}
    for b in blocks:
        for m in re.finditer(r"body=%?([\w.\-]+)", b):
            called[m.group(1)] = "loops"
        for m in re.finditer(r"branch_computations=\{([^}]*)\}", b):
            for name in m.group(1).split(","):
                called.setdefault(name.strip().lstrip("%"), "branch")
        for m in re.finditer(r"(?:true|false)_computation=%?([\w.\-]+)", b):
            called.setdefault(m.group(1), "branch")
    out = {"step": 0, "update": 0, "loops": 0}
    for b in blocks:
        head = b.split("\n", 1)[0]
        name = head.split(" ", 2)[1 if head.startswith("ENTRY") else 0].lstrip("%")
        if "fused_computation" in name or head.startswith("HloModule") or \
                (name not in called and not head.startswith("ENTRY")):
            continue
        n = 0
        for line in b.split("\n")[1:]:
            m = re.match(r"\s*(?:ROOT )?%?\S+ = .*?\s([a-z][\w-]*)\(", line)
            if m and m.group(1) not in _NOT_KERNELS:
                n += 1
        kind = called.get(name, "step")
        if kind == "branch":
            kind = "update" if n > 4 else "step"
        out[kind] += n
    return out


def child(src, arg, reroll, timeout):
    env = dict(os.environ, FLOWLITE_CACHE_DIR=tempfile.mkdtemp(prefix="flc_"),
               FLOWLITE_REROLL="1" if reroll else "0",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        r = subprocess.run([sys.executable, "-c", src, str(arg)], env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    line = [x for x in r.stdout.splitlines() if x.startswith("@@")]
    if not line:
        raise RuntimeError((r.stderr.strip().splitlines() or ["?"])[-1][:300])
    return json.loads(line[-1][2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depths", default="1,2,4,8,12,24")
    ap.add_argument("--lengths", default="10,100,1000")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per process")
    a = ap.parse_args()
    print("| GPT layers | re-roll | first step s | of it: lowering s / XLA s | kernels: all "
          "(update, loop bodies) | steady ms (first 20 steps) | steady ms (after) "
          "| step that switches s | loss |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in [int(v) for v in a.depths.split(",") if v]:
        for on in (True, False):
            r = child(GPT, d, on, a.timeout)
            if r is None:
                print(f"| {d} | {'on' if on else 'off'} | > {a.timeout} s | | | | | | |")
                continue
            rolled = r["runs"] > 0
            note = ("" if rolled else " (no run)") if on else ""
            if rolled and not r["upgrades"]:
                note += " (stays a loop)"
            k, st = kernels(r["hlo"]), r["step"]
            print(f"| {d} | {'on' if on else 'off'}{note} | "
                  f"{r['first']:.2f} | {st['lowering_s']:.2f} / {st['xla_s']:.2f} | "
                  f"{sum(k.values())} ({k['update']}, {k['loops']}) | "
                  f"{r['loop'] * 1e3:.1f} | {r['unrolled'] * 1e3:.1f} | "
                  f"{r['switch']:.2f} | {r['loss']:.4f} |", flush=True)
    print()
    print("| LSTMCell steps | re-roll | first step s | steady ms | loss |")
    print("|---|---|---|---|---|")
    for t in [int(v) for v in a.lengths.split(",") if v]:
        for on in (True, False):
            r = child(LSTM, t, on, a.timeout)
            if r is None:
                print(f"| {t} | {'on' if on else 'off'} | > {a.timeout} s (not finished) | | |")
                continue
            print(f"| {t} | {'on' if on else 'off'} | {r['first']:.2f} | "
                  f"{r['steady'] * 1e3:.1f} | {r['loss']:.5f} |", flush=True)


if __name__ == "__main__":
    main()
