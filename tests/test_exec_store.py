"""flowlite's own store of executables (flowlite/engine/exec_store.py): a second process loads
its programs without tracing or lowering them; bad entries are compiled again, never fatal."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import flowlite as fl
from flowlite.engine import exec_store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a small training step (forward, backward, AdamW: three programs) run twice, and a read
PROGRAM = textwrap.dedent("""
    import json
    import flowlite as fl
    import flowlite.nn as nn
    from flowlite.engine import exec_store, lowering, metrics
    calls = [0]
    real = lowering.lower_program
    def counted(*a, **k):           # every trace and lowering of a flowlite program
        calls[0] += 1
        return real(*a, **k)
    lowering.lower_program = counted
    fl.manual_seed(0)
    with fl.random.device_draws():      # (an initialisation program: with the evaluation's
                                        # and the step's, the store holds three or more)
        m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        x = fl.randn(5, 6)
    opt = fl.optim.AdamW(m.parameters(), lr=1e-2)
    y = fl.tensor([0, 1, 2, 1, 0])
    losses = []
    for _ in range(3):
        loss = nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with fl.no_grad():                  # an evaluation program
        losses.append(m(x).square().sum().item())
    c = metrics.counters()
    print(json.dumps({"losses": losses, "weight": m[0].weight.tolist(),
                      "lowerings": calls[0], "compiles": c["compiles"],
                      "loads": c["executable_loads"], "saves": c["executable_saves"],
                      "rejects": c["executable_store_rejects"],
                      "store": exec_store.directory(),
                      "summary": fl.metrics.summary()["compiles"]}))
""")


def _run(tmp_path, cache="cache", **env):
    env = {**os.environ, "PYTHONPATH": ROOT, "FLOWLITE_CACHE_DIR": str(tmp_path / cache),
           **env}
    env.pop("FLOWLITE_SUMMARY", None)
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                       env=env, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _entries(tmp_path):
    d = tmp_path / "cache" / "flowlite-executables"
    return sorted(p for p in d.iterdir() if p.suffix == ".exe")


def test_second_process_loads_without_tracing_and_computes_the_same(tmp_path):
    cold = _run(tmp_path)
    assert cold["lowerings"] >= 1 and cold["loads"] == 0
    assert cold["saves"] == cold["compiles"] == len(_entries(tmp_path))
    warm = _run(tmp_path)
    assert warm["lowerings"] == 0                    # no trace, no lowering through JAX
    assert warm["loads"] == warm["compiles"] == cold["compiles"]
    assert warm["saves"] == 0 and warm["rejects"] == 0
    assert warm["losses"] == cold["losses"]          # bit for bit
    assert warm["weight"] == cold["weight"]
    # the run summary counts them as loaded, and says how many skipped tracing
    assert warm["summary"]["loaded"] == warm["compiles"]
    assert warm["summary"]["loaded_without_tracing"] == warm["compiles"]
    assert cold["summary"]["loaded_without_tracing"] == 0


def _rewrite(path, change):
    blob = path.read_bytes()
    head = len(exec_store._MAGIC)
    entry = pickle.loads(blob[head + 32:])
    change(entry)
    body = pickle.dumps(entry)
    import hashlib
    path.write_bytes(blob[:head] + hashlib.sha256(body).digest() + body)


_DAMAGES = ("truncated", "garbage", "flipped", "other_versions", "other_key")


def _damage(p, damage):
    if damage == "truncated":
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    elif damage == "garbage":
        p.write_bytes(b"\x00not an entry" * 10)
    elif damage == "flipped":       # one bit of the executable's code
        b = bytearray(p.read_bytes())
        b[len(b) // 2] ^= 0x10
        p.write_bytes(bytes(b))
    elif damage == "other_versions":    # made by another jax (or flowlite, or CPU)
        _rewrite(p, lambda e: e.update(environment=e["environment"].replace(
            "|", "|0.0.1-other|", 1)))
    else:
        _rewrite(p, lambda e: e.update(key="0" * 64))


@pytest.mark.parametrize("first", [0, 3])
def test_bad_entries_are_compiled_again_without_error(tmp_path, first):
    # every entry damaged, each its own way (the kinds rotate over the entries from `first`:
    # the two cases cover all five kinds on the step's three or more programs): all
    # recompiled, none fatal
    cold = _run(tmp_path)
    entries = _entries(tmp_path)
    assert len(entries) >= 3
    for k, p in enumerate(entries):
        _damage(p, _DAMAGES[(first + k) % len(_DAMAGES)])
    again = _run(tmp_path)
    assert again["rejects"] == len(entries)
    assert again["loads"] == 0 and again["lowerings"] >= 1
    assert again["losses"] == cold["losses"] and again["weight"] == cold["weight"]
    # rewritten whole: the next process loads them
    third = _run(tmp_path)
    assert third["lowerings"] == 0 and third["loads"] == cold["compiles"]
    assert third["rejects"] == 0


def test_cache_dir_off_and_store_off(tmp_path):
    off = _run(tmp_path, cache="off", FLOWLITE_CACHE_DIR="off")
    assert off["store"] is None and off["loads"] == 0 and off["saves"] == 0
    alone = _run(tmp_path, FLOWLITE_EXECUTABLE_CACHE="0")
    assert alone["store"] is None and alone["saves"] == 0
    assert not (tmp_path / "cache" / "flowlite-executables").exists()
    assert os.listdir(tmp_path / "cache")           # JAX's persistent cache still writes
    assert off["losses"] == alone["losses"]


def test_concurrent_writers_leave_whole_entries(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "FLOWLITE_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert not [p for p in (tmp_path / "cache" / "flowlite-executables").iterdir()
                if p.name.startswith(".tmp")]
    warm = _run(tmp_path)
    assert warm["lowerings"] == 0 and warm["rejects"] == 0


def test_a_key_that_names_a_user_function_is_left_to_jax():
    assert exec_store._canon((1, 2.5, "a", None, (True, slice(0, 3, None)))) == \
        exec_store._canon((1, 2.5, "a", None, (True, slice(0, 3, None))))
    assert exec_store._canon((1,)) != exec_store._canon((1.0,))
    assert exec_store._canon(fl.float32) != exec_store._canon(fl.float64)
    with pytest.raises(exec_store.Unportable):
        exec_store._canon(lambda a: a)              # a function of the user's: by identity
    with pytest.raises(exec_store.Unportable):
        exec_store._canon(object())


def test_a_pickled_aval_keeps_jaxs_own_auto_layout():
    """jax 0.12 compares avals' layouts by identity, and a stored executable's result avals
    are pickled: `Layout.AUTO` came back as a second object, and a lax.cond over a loaded
    program's output beside a fresh value failed to trace ("cond branches must have equal
    output types ... the layouts do not match"; the checked update on every warm start)."""
    import jax
    import jax.numpy as jnp
    aval = jax.typeof(jnp.ones(3, jnp.float32))
    back = pickle.loads(pickle.dumps(aval))
    assert getattr(back, "layout", None) is getattr(aval, "layout", None)
    assert back == aval
