"""makemore's bigram count matrix, whole process, PyTorch eager vs flowlite (cold compile cache).

    python bench/count_matrix.py [--names PATH] [--reps 3]

The lecture's code, unchanged but for the import (`import flowlite as torch`): read a word list,
`N = torch.zeros((27, 27), dtype=torch.int32)`, `N[stoi[ch1], stoi[ch2]] += 1` for every pair of
every word (228k writes for makemore's names.txt), then the reads the lecture makes — `N[0, :]`,
`N.float()`, `p = N[0].float(); p = p / p.sum()`, `plt.imshow(N)` (which reads `N.numpy()`), the
smoothed `P = (N + 1).float(); P /= P.sum(1, keepdims=True)`.  Without --names a names-like list
(32,033 words, ~228k pairs) is written deterministically here; nothing is downloaded.

Each run is its own process, timed from its start to its exit by this parent, which takes the
child's peak RSS from its own rusage (os.wait4); flowlite's runs each get a fresh, empty
compile cache (FLOWLITE_CACHE_DIR: JAX's persistent cache and flowlite's executable store),
so every program they need is compiled in the run.  The two frameworks alternate, so both see
the same machine load; medians and the flowlite / PyTorch ratios are printed, with each
child's own split of its time (import, loop, reads) and a checksum of the results (they must
agree).  Acceptance (flowlite issue 61): whole run <= 2x PyTorch, peak RSS <= 1.5x PyTorch.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def names_like(n=32033, seed=2147483647):
    """A deterministic list of `n` lower-case, name-like words (makemore's names.txt: 32,033
    names of 2-15 letters, ~6.1 on average: ~228k character pairs with the '.' ends)."""
    rng = random.Random(seed)
    vowels, consonants = "aeiouy", "bcdfghjklmnprstvwxzq"
    letter_w = {c: w for c, w in zip("abcdefghijklmnopqrstuvwxyz",
                                     [33, 3, 5, 5, 20, 1, 2, 9, 17, 3, 3, 14, 7, 18, 8, 1, 1,
                                      13, 8, 6, 3, 3, 1, 1, 10, 3])}
    out = []
    for _ in range(n):
        length = min(15, max(2, int(rng.gauss(6.1, 1.5) + 0.5)))
        w = []
        for k in range(length):
            pool = vowels if (k % 2 == 1) ^ (rng.random() < 0.25) else consonants
            pool = [c for c in pool if c in letter_w]
            w.append(rng.choices(pool, [letter_w[c] for c in pool])[0])
        out.append("".join(w))
    return out


def child(framework, names):
    """One run, as the lecture writes it; prints a JSON line with its own time split."""
    t0 = time.perf_counter()
    if framework == "torch":
        import torch
    else:
        sys.path.insert(0, REPO)
        import flowlite as torch
    t1 = time.perf_counter()
    words = open(names, "r").read().splitlines()
    N = torch.zeros((27, 27), dtype=torch.int32)
    chars = sorted(list(set("".join(words))))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    for w in words:
        chs = ["."] + list(w) + ["."]
        for ch1, ch2 in zip(chs, chs[1:]):
            ix1 = stoi[ch1]
            ix2 = stoi[ch2]
            N[ix1, ix2] += 1
    t2 = time.perf_counter()
    row0 = N[0, :]
    Nf = N.float()
    p = N[0].float()
    p = p / p.sum()
    img = N.numpy()                    # what plt.imshow(N) reads
    P = (N + 1).float()
    P /= P.sum(1, keepdims=True)
    check = {"writes": int(img.sum()), "row0": row0.tolist(), "Nf": float(Nf.sum().item()),
             "p_sum": round(float(p.sum().item()), 5), "P00": round(float(P[0, 1].item()), 6),
             "P_sum": round(float(P.sum().item()), 3)}
    t3 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "loop_s": t2 - t1, "reads_s": t3 - t2,
                      "check": check}), flush=True)


def _spawn_and_wait(cmd, env):
    """Popen + os.wait4 on that pid (its own rusage) while its pipes are drained."""
    import threading
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=REPO)
    bufs = {}

    def drain(name, f):
        bufs[name] = f.read()
    ts = [threading.Thread(target=drain, args=(k, f)) for k, f in
          (("out", proc.stdout), ("err", proc.stderr))]
    for t in ts:
        t.start()
    _, status, ru = os.wait4(proc.pid, 0)
    for t in ts:
        t.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, bufs["out"].decode(), bufs["err"].decode(), ru


def measure(framework, names, python, cache_root):
    env = dict(os.environ)
    if framework == "flowlite":
        env["FLOWLITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cold-", dir=cache_root)
        env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [python, os.path.abspath(__file__), "--child", framework, "--names", names]
    t0 = time.monotonic()
    rc, out, err, ru = _spawn_and_wait(cmd, env)
    wall = time.monotonic() - t0
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        raise RuntimeError(f"{framework} run exited {rc}:\n{err[-3000:]}")
    return {"wall_s": wall, "peak_rss_mb": ru.ru_maxrss / 1024.0, **json.loads(lines[-1])}


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--names", help="a names.txt (one word a line); default: written here")
    ap.add_argument("--reps", type=int, default=3, help="runs of each framework (alternating)")
    ap.add_argument("--words", type=int, default=32033, help="words of the list written here")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--frameworks", default="torch,flowlite")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--child", choices=("torch", "flowlite"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.names)
        return 0
    work = tempfile.mkdtemp(prefix="count-matrix-")
    try:
        names = a.names
        if names is None:
            names = os.path.join(work, "names.txt")
            with open(names, "w") as f:
                f.write("\n".join(names_like(a.words)) + "\n")
        with open(names) as f:
            words = f.read().splitlines()
        pairs = sum(len(w) + 1 for w in words)
        fws = a.frameworks.split(",")
        print(f"count matrix: {len(words)} words, {pairs} writes; {_cpu_name()}, "
              f"{os.cpu_count()} CPUs; {a.reps} runs each, alternating; flowlite with a cold "
              f"compile cache every run")
        rows = {fw: [] for fw in fws}
        for r in range(a.reps):
            for fw in (fws if r % 2 == 0 else fws[::-1]):
                row = measure(fw, names, a.python, work)
                rows[fw].append(row)
                print(f"  {fw:9s} run {r + 1}: {row['wall_s']:6.2f} s wall, "
                      f"{row['peak_rss_mb']:6.0f} MiB peak  (import {row['import_s']:.2f} s, "
                      f"loop {row['loop_s']:.2f} s, reads {row['reads_s']:.2f} s)", flush=True)
        checks = {fw: rows[fw][0]["check"] for fw in fws}
        agree = all(c == checks[fws[0]] for c in checks.values())
        med = {fw: {k: statistics.median(x[k] for x in rows[fw])
                    for k in ("wall_s", "peak_rss_mb", "import_s", "loop_s", "reads_s")}
               for fw in fws}
        print("median:")
        for fw in fws:
            m = med[fw]
            print(f"  {fw:9s} {m['wall_s']:6.2f} s wall, {m['peak_rss_mb']:6.0f} MiB peak  "
                  f"(import {m['import_s']:.2f} s, loop {m['loop_s']:.2f} s, reads "
                  f"{m['reads_s']:.2f} s)")
        out = {"words": len(words), "writes": pairs, "cpu": _cpu_name(), "rows": rows,
               "median": med, "results_agree": agree}
        if "torch" in med and "flowlite" in med:
            wr = med["flowlite"]["wall_s"] / med["torch"]["wall_s"]
            mr = med["flowlite"]["peak_rss_mb"] / med["torch"]["peak_rss_mb"]
            out.update(wall_ratio=wr, rss_ratio=mr)
            print(f"flowlite / PyTorch: wall {wr:.2f}x (<= 2.0: "
                  f"{'yes' if wr <= 2.0 else 'NO'}), peak RSS {mr:.2f}x (<= 1.5: "
                  f"{'yes' if mr <= 1.5 else 'NO'}); results agree: {agree}")
        else:
            print(f"results agree: {agree}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        return 0 if agree else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
