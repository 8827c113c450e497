"""The run summary (flowlite/engine/metrics.py summary(), flowlite/engine/phases.py):
`python -m flowlite.run --summary` and `FLOWLITE_SUMMARY=1`, each in a fresh interpreter (the
clock times the whole process), and `note_cut` / `summary()` in this one (clock off)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import flowlite as fl
from flowlite.engine import metrics, phases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN = textwrap.dedent('''\
    import json
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    import flowlite

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(48, 8), torch.randint(0, 2, (48,)))
    for x, y in DataLoader(data, batch_size=8):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    total = model(data.tensors[0]).sum().item()
    flowlite.engine.metrics.note_cut("train.py:77", "a cut for the test")
    flowlite.engine.metrics.note_cut("train.py:77", "a cut for the test")
    print(json.dumps({"counters": flowlite.metrics.counters(),
                      "summary": flowlite.metrics.summary()}))
''')
READ_LINE = 16      # the `.item()` line above


def _run(tmp_path, args, source, name, env=None):
    (tmp_path / name).write_text(source)
    env = {**{k: v for k, v in os.environ.items() if k != "FLOWLITE_SUMMARY"},
           "PYTHONPATH": ROOT, **(env or {})}
    r = subprocess.run([sys.executable, *args, name], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_run_summary_training_loop(tmp_path):
    r = _run(tmp_path, ["-m", "flowlite.run", "--summary"], TRAIN, "train.py")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    s, c = out["summary"], out["counters"]
    text = r.stderr[r.stderr.index("flowlite summary: train.py"):]
    # compiles: the summary's count is metrics'
    assert s["compiles"]["count"] == c["compiles"] > 0
    assert s["compiles"]["compiled"] + s["compiles"]["loaded"] == c["compiles"]
    assert re.search(rf"compiles: {c['compiles']} in [0-9.]+ s \(\d+ compiled, \d+ loaded", text)
    # one executable per iteration of a plain training loop (6 batches: iterations 2..6)
    assert s["iterations"] == 6
    per = s["per_iteration"]
    assert per["iterations"] == 5
    assert per["executions"] == 1.0 and per["syncs"] == 1.0
    assert "1.00 executions, 1.00 syncs" in text
    assert per["host_s"] == per["wall_s"] - per["blocked_s"] and per["wall_s"] > 0
    # the phases: non-negative, adding up to (at most) the wall time
    ph = s["phases_s"]
    assert set(ph) == set(phases.PHASES)
    assert all(v >= 0 for v in ph.values()), ph
    assert sum(ph.values()) <= s["wall_s"] * (1 + 1e-9)
    assert sum(ph.values()) >= 0.99 * s["wall_s"]
    assert ph["startup"] > 0 and ph["compile"] > 0 and ph["forward"] > 0
    assert ph["backward"] > 0 and ph["optimizer"] > 0 and ph["sync"] > 0
    assert ph["data"] > 0 and ph["reads"] >= 0
    for name in ("startup", "recording ops", "backward()", "optimizer.step() recording",
                 "data (DataLoader", "host reads", "syncs (graph walk", "compile (or load",
                 "blocked waiting on the device", "other python"):
        assert name in text
    # the sync sites name the script's lines
    sites = dict(s["sync_sites"])
    assert sites[f".item() at train.py:{READ_LINE}"] == 1
    assert sites["optimizer.step() at train.py:15"] == 6
    assert f"      1  .item() at train.py:{READ_LINE}" in text
    # graph cuts reported by note_cut
    assert s["graph_cuts"] == [["train.py:77", "a cut for the test", 2]]
    assert "graph cuts (2):" in text and "2  train.py:77: a cut for the test" in text
    assert s["transfers"]["d2h"] >= 1 and s["executions"] == c["executions"]


def test_env_summary_without_optimizer(tmp_path):
    src = textwrap.dedent('''\
        import flowlite as fl
        x = fl.randn(4, 4)
        for _ in range(3):
            x = (x @ x).tanh()
            print(float(x.sum()))
    ''')
    r = _run(tmp_path, [], src, "plain.py", env={"FLOWLITE_SUMMARY": "1"})
    text = r.stderr
    assert "flowlite summary: plain.py:" in text
    assert "iterations: none (no Optimizer.step() call)" in text
    assert "float() at plain.py:5" in text
    assert "graph cuts: none" in text
    # off: nothing printed
    r = _run(tmp_path, [], src, "plain.py", env={"FLOWLITE_SUMMARY": "0"})
    assert "flowlite summary" not in r.stderr


def test_note_cut_and_summary_in_process():
    """summary() works with the clock off (counts only) and note_cut shows up in it."""
    assert not phases.clock.on      # the test process never pays for the clock
    metrics.reset()
    metrics.note_cut("model.py:12", "a repeat boundary")
    metrics.note_cut("model.py:12", "a repeat boundary")
    metrics.note_cut("gen.py:3", "graph size")
    (fl.ones(3) * 2).sum().item()
    s = metrics.summary()
    assert s["graph_cuts"] == [("model.py:12", "a repeat boundary", 2),
                               ("gen.py:3", "graph size", 1)]
    assert s["graph_cuts_total"] == 3
    assert s["phases_s"] is None and s["per_iteration"] is None
    assert s["executions"] == metrics.counters()["executions"] >= 1
    assert any(cause.startswith(".item() at test_summary.py:") for cause, _ in s["sync_sites"])
    text = metrics.format_summary(s)
    assert "graph cuts (3):" in text and "2  model.py:12: a repeat boundary" in text
    assert "host time by phase" not in text
    metrics.reset()
    assert metrics.summary()["graph_cuts"] == []


def test_summary_splits_a_compile_into_lowering_and_xla(tmp_path):
    """Where a first step's compile goes: JAX tracing + lowering and XLA's compiler, per
    program (the costliest three) and in all, in summary() and its text; the executable's
    statistics carry the same split.  A program loaded from the store of executables has
    neither (nothing was lowered or compiled)."""
    from flowlite.engine import exec_store
    metrics.reset()
    old = exec_store._state["dir"]
    exec_store.configure(str(tmp_path / "store"))
    try:
        x = fl.randn(16, 16)
        w = fl.randn(16, 16, requires_grad=True)
        ((x @ w).tanh() * 3.5).sum().backward()
        w.grad.sum().item()
        s = metrics.summary()["compiles"]
        assert s["compiled"] >= 1
        top = s["costliest"]
        assert 1 <= len(top) <= 3
        assert [p["seconds"] for p in top] == sorted((p["seconds"] for p in top), reverse=True)
        for p in top:
            assert p["lowering_s"] > 0 and p["xla_s"] > 0
            assert p["lowering_s"] + p["xla_s"] <= p["seconds"] * (1 + 1e-9)
            assert p["nodes"] >= 1 and p["cause"]
        assert s["lowering_s"] >= sum(p["lowering_s"] for p in top) * (1 - 1e-9)
        assert s["xla_s"] >= sum(p["xla_s"] for p in top) * (1 - 1e-9)
        assert any(".item() at test_summary.py:" in p["cause"] for p in top)
        text = metrics.format_summary()
        assert re.search(r"of the programs compiled: tracing and lowering [0-9.]+ s, XLA's "
                         r"compiler [0-9.]+ s; the costliest:", text)
        assert re.search(r"s  \.item\(\) at test_summary\.py:\d+: \d+ nodes \(lowering "
                         r"[0-9.]+ s, XLA [0-9.]+ s\)", text)
        stats = fl.debug.executables()[-1]
        assert stats["lower_s"] > 0 and stats["xla_compile_s"] > 0
    finally:
        exec_store._state["dir"] = old
        metrics.reset()
    # nothing compiled since the reset: no split, no costliest lines
    s = metrics.summary()["compiles"]
    assert s["costliest"] == [] and s["lowering_s"] == 0 == s["xla_s"]
    assert "tracing and lowering" not in metrics.format_summary()
