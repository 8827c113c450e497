"""flowlite.debug: recompile explanations, sync hygiene, strict/eager/anomaly modes, graph and
HLO inspection, executable statistics, the graph-size guard."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import flowlite as fl


@pytest.fixture(autouse=True)
def _fresh_metrics():
    fl.metrics.reset()
    yield
    fl.debug.track_sites(False)


def _step(x, w, scale=1.0, branch=False):
    y = x @ w
    if branch:
        y = fl.tanh(y)
    return (y * scale).sum()


def _explanations():
    return "\n".join(fl.debug.recompile_explanations())


def _data(*shape, dtype=np.float32):
    return fl.from_numpy(np.ones(shape, dtype))


def test_explains_changed_batch_size():
    w = _data(4, 3)
    for b in (8, 8, 5):
        _step(_data(b, 4), w).item()
    e = _explanations()
    assert "recompile #1" in e and "shape (8, 4) -> (5, 4)" in e
    assert "test_debug.py" in e           # the site of the sync


def test_explains_changed_dtype():
    for dt in (np.float32, np.float16):
        _step(_data(2, 4, dtype=dt), _data(4, 3, dtype=dt)).item()
    assert "float32 -> float16" in _explanations()


def test_explains_a_python_float_that_changes_the_program():
    x = _data(3)
    for s in (0.5, 0.75, 0.8):         # 0.5 is a baked constant; other floats travel as data
        (x * s).sum().item()
    e = _explanations()
    assert fl.metrics.counters()["compiles"] == 2      # 0.75 and 0.8 share one program
    assert "op" in e and ("'full' -> " in e or "-> 'full'" in e or "constant" in e
                          or "host scalars" in e)


def test_explains_a_changed_model_branch_with_its_source_line():
    w = _data(4, 3)
    x = _data(2, 4)
    for branch in (False, True, False, True):   # the first recompile switches line tracking on
        _step(x, w, branch=branch).item()
    e = _explanations()
    assert "'tanh'" in e
    assert "test_debug.py:" in e.split("recompile #1")[1]


def test_line_tracking_after_a_recompile_stops_after_a_budget_of_ops(monkeypatch):
    # switched on by a recompile (so the next explanation names lines), off again after 50
    # executions or AUTO_TRACK_OPS recorded ops: a closure over a 999-step LSTM records
    # 126,000 ops a call, and tracking them cost ~1 s a call
    monkeypatch.setattr(fl.debug, "AUTO_TRACK_OPS", 200)
    w = _data(5, 7)                     # shapes no other test compiles
    for b in (11, 13):
        _step(_data(b, 5), w).item()
    assert fl.debug.flags["track_sites"]
    x = _data(13, 5)
    for _ in range(3):                  # 3 executions, ~100 ops each
        y = x
        for _ in range(100):
            y = y + 1
        _step(y, w).item()
    assert not fl.debug.flags["track_sites"]


def test_explains_a_changed_check_with_its_source_line():
    # a check node carries its line (Node.site) even before line tracking is switched on
    i = fl.from_numpy(np.array([0, 1, 1], np.int64)) * 1     # pending: its range is checked
    for rows in (3, 4):
        (_data(rows, 3)[i] * 2).sum().item()
    e = _explanations()
    assert "'check_range'" in e
    assert re.search(r"'check_range': [^;]*\(created at test_debug\.py:\d+\)", e), e


def test_a_huge_program_s_recompile_is_explained_in_linear_time():
    """Explaining a recompile of a 20,000-op program (an LSTM cell stepped over a long
    sequence) aligned its op lists with difflib in quadratic time: minutes per compile."""
    import time

    from flowlite import debug

    def summary(names, shape):
        return {"inputs": [("input", shape, "float32", None)],
                "nodes": [(n, "()", shape, "float32", None) for n in names],
                "scalars": [], "outputs": [(shape, "float32")]}
    ops = ["mul", "add", "tanh", "sigmoid"] * 5000
    new = ops[:10000] + ["exp"] + ops[10001:]
    t = time.perf_counter()
    out = debug._diff(summary(ops, (4,)), summary(new, (4,)))
    out2 = debug._diff(summary(ops, (4,)), summary(ops + ["add"] * 3, (4,)))
    assert time.perf_counter() - t < 2.0
    assert out == ["op 10000: 'mul' -> 'exp'"], out
    assert out2 == ["ops added: 'add', 'add', 'add'", "graph size 20000 -> 20003 ops"], out2
    t = time.perf_counter()
    out = debug._diff(summary(ops, (4,)), summary(ops[::-1], (5,)))   # nothing in common
    assert time.perf_counter() - t < 2.0 and out


def test_warns_after_n_recompiles_at_one_site():
    fl.debug.set_recompile_warning_threshold(2)
    try:
        with pytest.warns(UserWarning, match="has recompiled 3 times"):
            for n in range(1, 5):
                # (cumsum: it has no padding rule, so the growing length can't share one
                # bucketed executable, see buckets.py, and every length compiles)
                fl.ones(n).cumsum(0).sum().item()
    finally:
        fl.debug.set_recompile_warning_threshold(3)
    assert "recompiles (what changed)" in fl.metrics.report()


def _train_once(model, opt, x):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()                              # the one opt.step() line every model goes through


def test_models_sharing_one_opt_step_line_are_not_recompiles():
    fl.debug.set_recompile_warning_threshold(1)
    try:
        runs = []
        for width in (3, 5, 7):             # three different programs, each compiled once
            m = fl.nn.Linear(4, width)
            runs.append((m, fl.optim.SGD(m.parameters(), lr=0.1)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "has recompiled" warning
            for _ in range(3):
                for m, opt in runs:
                    _train_once(m, opt, _data(2, 4))
    finally:
        fl.debug.set_recompile_warning_threshold(3)
    assert "recompile #" not in _explanations(), _explanations()
    # each model's step (its initialisation is host data, PyTorch's draws: no program)
    assert fl.metrics.counters()["compiles"] == 3
    assert re.search(r"optimizer\.step\(\) at test_debug\.py:\d+ \(optimizer #\d+ at this "
                     r"line\)", fl.metrics.report())


def test_remembered_sites_are_bounded_as_optimizers_come_and_go(monkeypatch):
    # a sweep making an optimizer per run makes a site per run: the oldest are forgotten
    monkeypatch.setattr(fl.debug, "_MAX_SITES", 2)
    fl.debug._site_graphs.clear()
    for width in (3, 5, 7):
        m = fl.nn.Linear(4, width)
        _train_once(m, fl.optim.SGD(m.parameters(), lr=0.1), _data(2, 4))
    assert len(fl.debug._site_graphs) == 2
    assert all("optimizer #" in site for site in fl.debug._site_graphs)   # the newest two


def test_one_optimizer_fed_changing_shapes_warns_at_its_step_line():
    fl.debug.set_recompile_warning_threshold(1)
    try:
        m = fl.nn.Linear(4, 3)
        opt = fl.optim.SGD(m.parameters(), lr=0.1)
        with pytest.warns(UserWarning, match=r"optimizer\.step\(\) at test_debug\.py:\d+.* has "
                                             r"recompiled 2 times") as caught:
            for b in (2, 3, 5):
                _train_once(m, opt, _data(b, 4))
    finally:
        fl.debug.set_recompile_warning_threshold(3)
    # the warning points at the user's line, not into flowlite
    assert [w.filename for w in caught] == [__file__]


def test_strict_raises_on_implicit_sync_naming_the_line():
    x = fl.randn(3)
    y = x * 2
    with fl.strict():
        fl.sync()                          # explicit: allowed
        z = y + 1
        with pytest.raises(RuntimeError, match=r"implicit sync by \.item\(\) at test_debug\.py"):
            z.sum().item()
    assert np.isfinite(z.sum().item())


def test_mid_step_sync_warns_once_per_line():
    w = fl.randn(3, requires_grad=True)
    for i in range(3):
        loss = (w * w).sum()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            loss.item()
            loss.backward()
        msgs = [str(r.message) for r in rec if "between the forward pass" in str(r.message)]
        assert len(msgs) == (1 if i == 0 else 0)
        w.grad = None


def test_eager_mode_matches_lazy_results():
    fl.manual_seed(3)
    a = fl.randn(4, 4)
    b = fl.randn(4)
    fl.sync()
    lazy = (fl.tanh(a @ b) * 2 + a.sum(0)).numpy()
    before = fl.metrics.counters()["executions"]
    with fl.eager():
        y = fl.tanh(a @ b)
        assert not y.is_pending           # executed as recorded
        eager = (y * 2 + a.sum(0)).numpy()
    assert fl.metrics.counters()["executions"] - before >= 4
    np.testing.assert_allclose(eager, lazy, rtol=1e-6)


def test_eager_environment_variable_runs_a_training_loop(tmp_path):
    code = (
        "import flowlite as fl\n"
        "w = fl.zeros(3, requires_grad=True)\n"
        "x = fl.tensor([1.0, 2.0, 3.0])\n"
        "for _ in range(3):\n"
        "    loss = ((x * w).sum() - 1.0) ** 2\n"
        "    assert not loss.is_pending\n"
        "    loss.backward()\n"
        "    with fl.no_grad():\n"
        "        w -= 0.05 * w.grad\n"
        "    w.grad = None\n"
        "print('LOSS', loss.item())\n")
    env = dict(os.environ, FLOWLITE_EAGER="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.split("LOSS")[1]) < 1.0


def test_detect_anomaly_names_the_first_nonfinite_op_forward_and_backward():
    x = fl.tensor([1.0, 0.0, 2.0], requires_grad=True)
    with fl.detect_anomaly():
        with pytest.raises(FloatingPointError, match=r"'log' \(forward\).*test_debug\.py"):
            fl.log(x - 1.0).sum()
    with fl.detect_anomaly():
        y = fl.sqrt(x).sum()             # finite forward; d/dx sqrt at 0 is inf
        with pytest.raises(FloatingPointError, match=r"\(backward\)"):
            y.backward()


def test_graph_text_dot_and_hlo():
    x = fl.randn(2, 3)
    y = fl.relu(x @ x.T).sum()
    text = fl.debug.graph(y)
    assert "matmul" in text and "relu" in text and "-> output" in text
    dot = fl.debug.graph(y, format="dot")
    assert dot.startswith("digraph") and "->" in dot
    assert "stablehlo" in fl.debug.hlo(y) or "func.func" in fl.debug.hlo(y)
    assert "HloModule" in fl.debug.hlo(y, dialect="hlo")
    y.item()
    with pytest.raises(ValueError, match="nothing pending"):
        fl.debug.hlo(y)


def test_executable_statistics():
    x = fl.randn(64, 64)
    (x @ x).sum().item()
    stats = fl.debug.executables()[-1]
    for k in ("inputs", "outputs", "donated_bytes", "hits"):
        assert k in stats
    assert stats.get("flops", 1) > 0


def test_graph_size_guard_warns_with_the_start_line():
    # (with graph cuts on, this loop runs in pieces at its period and never grows: cuts.bound)
    fl.debug.set_graph_size_threshold(1000)
    fl.set_graph_cuts(False)
    try:
        x = fl.zeros(2)
        with pytest.warns(UserWarning, match=r"recorded without a sync; the graph started at "
                                             r"test_debug\.py"):
            for _ in range(20000):
                x = x + 1.0
    finally:
        fl.debug.set_graph_size_threshold(200_000)
        fl.set_graph_cuts(True)
    fl.engine.executor._pending.clear()


def test_a_loop_cut_into_pieces_does_not_warn():
    fl.debug.set_graph_size_threshold(20_000)
    try:
        x = fl.zeros(2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(20000):
                x = x + 1.0
            assert x.tolist() == [20000.0, 20000.0]
    finally:
        fl.debug.set_graph_size_threshold(200_000)


def test_a_test_file_passes_in_eager_mode():
    env = dict(os.environ, FLOWLITE_EAGER="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_ops_shape.py"], cwd=root, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "[100%]" in r.stdout and "F" not in r.stdout.split("[100%]")[0]


def test_user_site_names_each_call_line_of_one_function():
    from flowlite.engine.metrics import user_site

    def two_sites():
        a = user_site(1)
        b = user_site(1)
        return a, b
    a, b = two_sites()
    line = two_sites.__code__.co_firstlineno
    assert (a, b) == (f"test_debug.py:{line + 1}", f"test_debug.py:{line + 2}")
    assert two_sites() == (a, b)       # (served from the cache, still right)
    # fresh code objects (exec'd code can reuse a freed one's id) name their own lines
    for k in range(3):
        ns = {"user_site": user_site}
        exec(compile("\n" * k + "def f():\n    return user_site(1)\n", "gen.py", "exec"), ns)
        assert ns["f"]() == f"gen.py:{k + 2}"


def test_each_recompile_says_whether_it_compiled_or_loaded_from_the_persistent_cache(tmp_path):
    # an in-memory cache miss costs the user even when XLA's program comes from the disk
    # cache: the second process explains the same recompile, and says it loaded it
    import os
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import flowlite as fl
        from flowlite import nn, optim
        fl.manual_seed(0)
        model = nn.Linear(4, 2)
        opt = optim.SGD(model.parameters(), lr=0.1)
        for b in (8, 5):
            loss = model(fl.randn(b, 4)).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        print("EXPLAIN", fl.debug.recompile_explanations()[-1])
        print(fl.metrics.report())
    """)
    env = dict(os.environ, FLOWLITE_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = (r.stdout.split("EXPLAIN")[1].split("\n")[0] for r in runs)
    assert "recompile #1" in first and "(compiled in" in first, first
    assert "recompile #1" in second and "(loaded from the persistent cache in" in second, second
    assert "loaded" in runs[1].stdout.split("in-memory cache misses")[1]
