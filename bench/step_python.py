"""Per-step Python cost of the MLP training step, by phase, and function calls per step.

    python bench/step_python.py [--steps 200] [--rounds 10] [--clock thread|wall]
    python bench/step_python.py --ab /path/to/other/checkout     # A/B in one process

The step is bench/'s MLP step (models/mlp.py's network, Adam, cross-entropy), written out
here against one flowlite package so that two checkouts can run side by side.  Phases:
forward (zero_grad + model + loss), backward, optimizer recording (opt.step() without its
sync), and opt.step()'s sync on a cache hit split at the executable call: before it (the
pending roots, walk + graph key, donation analysis, argument list), after it (rebinding
the outputs, metrics), and the call itself (on CPU it may run the program inline: not
flowlite's Python).  Each step waits for the previous step's loss first, outside the timed
phases.  The default clock is this thread's CPU time, which other processes on a busy
machine disturb less than wall time (it excludes XLA's own threads).

--ab loads the other checkout's package as `flowlite_ab` and alternates blocks of steps
between the two (A B, B A, ...), so both see the same machine; medians over blocks.  The
`--ab` arm has read ~20 µs slower in "optimizer record" whichever checkout it was: run
both ways round and average when that phase matters.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib.util
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

PHASES = ("forward", "backward", "optimizer record", "sync: before exe", "sync: after exe",
          "sync: exe call")


def load_package(checkout, name="flowlite_ab"):
    path = os.path.join(checkout, "flowlite")
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(path, "__init__.py"), submodule_search_locations=[path])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Step:
    """The MLP training step on package `fl`, with its phases timed by `clock`."""

    def __init__(self, fl, clock, seed=0):
        import specs
        nn, optim = fl.nn, fl.optim
        self.fl, self.clock = fl, clock
        fl.manual_seed(seed)
        net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10))
        net.load_state_dict({k[len("net."):]: fl.from_numpy(v)
                             for k, v in specs.init_params("mlp", seed).items()})
        self.model = net
        self.opt = optim.Adam(net.parameters(), lr=specs.ADAM_LR, betas=specs.BETAS,
                              eps=specs.EPS)
        self.batches = [(fl.from_numpy(x), fl.from_numpy(y))
                        for x, y in specs.make_batches("mlp", 4, seed)]
        self.i = 0
        self.sync_time = 0.0
        self.split = [0.0, 0.0]
        self.marks = {}
        real_sync = fl.extend._sync

        def timed_sync(*args, **kw):
            t = clock()
            self.marks.clear()
            r = real_sync(*args, **kw)
            self.sync_time += clock() - t
            if "call0" in self.marks:
                self.split[0] = self.marks["call0"] - t
                self.split[1] = self.marks["call1"] - self.marks["call0"]
            return r
        fl.extend._sync = timed_sync

    def wrap_executables(self):
        marks, clock = self.marks, self.clock
        for st in self.fl.engine.cache._cache.values():
            for exe in st.exes.values():
                if getattr(exe.fn, "_timed", False):
                    continue

                def fn(*args, _real=exe.fn):
                    marks["call0"] = clock()
                    r = _real(*args)
                    marks["call1"] = clock()
                    return r
                fn._timed = True
                exe.fn = fn

    def __call__(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        clock, model, opt, F = self.clock, self.model, self.opt, self.fl.nn.functional
        t0 = clock()
        opt.zero_grad()
        if x.ndim > 2:
            x = x.flatten(1)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        t1 = clock()
        loss.backward()
        t2 = clock()
        self.sync_time = 0.0
        opt.step()
        t3 = clock()
        s = self.sync_time
        before, call = self.split
        return loss, (t1 - t0, t2 - t1, t3 - t2 - s, before, s - before - call, call)

    def warm(self, n=20):
        for _ in range(n):
            self()[0].numpy()
        self.compiles = self.fl.metrics.counters()["compiles"]
        self.wrap_executables()

    def block(self, n):
        per = [[] for _ in PHASES]
        for _ in range(n):
            loss, ts = self()
            loss.numpy()
            for lst, t in zip(per, ts):
                lst.append(t)
        return [statistics.median(p) * 1e6 for p in per]

    def calls_per_step(self, n=50):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            self()[0].numpy()
        prof.disable()
        st = pstats.Stats(prof)
        return st.total_calls / n, st


def report(label, blocks, calls):
    med = [statistics.median(b[k] for b in blocks) for k in range(len(PHASES))]
    print(label)
    for n, m in zip(PHASES, med):
        print(f"  {n:18s} {m:7.1f} µs")
    print(f"  {'Python total':18s} {sum(med[:5]):7.1f} µs   (all but the executable call)")
    print(f"  function calls per step: {calls:.0f}")
    return med


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200, help="steps per block")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--ab", metavar="CHECKOUT", help="another checkout to alternate with")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the steps")
    ap.add_argument("--clock", choices=("wall", "thread"), default="thread")
    a = ap.parse_args()
    clock = time.thread_time if a.clock == "thread" else time.perf_counter

    import flowlite as fl
    arms = [("this checkout (" + os.path.dirname(os.path.dirname(fl.__file__)) + ")",
             Step(fl, clock))]
    if a.ab:
        arms.append((f"--ab ({a.ab})", Step(load_package(a.ab), clock)))
    for _, s in arms:
        s.warm()
    blocks = {label: [] for label, _ in arms}
    for r in range(a.rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        for label, s in order:
            blocks[label].append(s.block(a.steps))
    meds = []
    for label, s in arms:
        assert s.fl.metrics.counters()["compiles"] == s.compiles, "steady steps recompiled"
        calls, st = s.calls_per_step()
        meds.append(report(label, blocks[label], calls))
        if a.profile:
            st.sort_stats("tottime").print_stats(40)
    print(f"(median of {a.rounds} blocks of {a.steps} steps, {a.clock} clock)")
    if len(meds) == 2:
        ra = sum(meds[0][:5]) / sum(meds[1][:5])
        print(f"Python total, this / --ab: {ra:.2f}")


if __name__ == "__main__":
    main()
