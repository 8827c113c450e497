"""One table of user mistakes across flowlite — each must raise a clear Python exception at
the call that caused it, and the message must name the culprit (op, key, argument, file)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import flowlite as fl
from flowlite import nn, optim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def _bad_state_dict_shape():
    m = _model()
    sd = m.state_dict()
    sd["0.weight"] = np.zeros((5, 3), np.float32)
    m.load_state_dict(sd)


def _missing_key():
    m = _model()
    sd = m.state_dict()
    del sd["2.bias"]
    m.load_state_dict(sd)


def _unexpected_key():
    m = _model()
    sd = dict(m.state_dict(), extra=np.zeros(1, np.float32))
    m.load_state_dict(sd)


def _corrupt_checkpoint(tmp):
    p = os.path.join(tmp, "ck.fl")
    fl.save({"w": fl.ones(1000)}, p)
    data = bytearray(open(p, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(p, "wb").write(bytes(data))
    fl.load(p)


def _truncated_checkpoint(tmp):
    p = os.path.join(tmp, "ck.fl")
    fl.save({"w": fl.ones(1000)}, p)
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) // 3])
    fl.load(p)


def _missing_mnist(tmp):
    fl.data.load_mnist(tmp)


CASES = [
    # (name, callable(tmp), exception, regex naming the culprit)
    ("broadcast", lambda t: fl.ones(3, 4) + fl.ones(5), ValueError, r"add: shapes \(3, 4\)"),
    ("matmul", lambda t: fl.ones(3, 4) @ fl.ones(5, 6), ValueError,
     r"matmul: shapes \(3, 4\) and \(5, 6\) are not aligned"),
    ("reshape", lambda t: fl.ones(6).reshape(4, 2), ValueError, r"reshape: shape \[4, 2\]"),
    ("cat", lambda t: fl.cat([fl.ones(2, 3), fl.ones(2, 4)], 0), ValueError, r"cat: sizes"),
    ("dim", lambda t: fl.ones(2, 3).sum(5), IndexError, r"sum: dimension out of range"),
    ("index dtype", lambda t: fl.ones(3)[fl.tensor([0.5])], IndexError, r"long, int or bool"),
    ("index bounds", lambda t: fl.ones(3)[7], IndexError, r"index 7 is out of bounds"),
    ("state_dict shape", lambda t: _bad_state_dict_shape(), RuntimeError,
     r"0\.weight.*\(5, 3\).*\(4, 3\)"),
    ("state_dict missing", lambda t: _missing_key(), RuntimeError, r"2\.bias"),
    ("state_dict unexpected", lambda t: _unexpected_key(), RuntimeError, r"extra"),
    ("optimizer lr", lambda t: optim.Adam(_model().parameters(), lr=-1.0), ValueError,
     r"Invalid learning rate: -1\.0"),
    ("optimizer betas", lambda t: optim.Adam(_model().parameters(), betas=(1.0, 0.9)),
     ValueError, r"beta parameter at index 0"),
    ("optimizer momentum", lambda t: optim.SGD(_model().parameters(), lr=0.1, nesterov=True),
     ValueError, r"[Nn]esterov"),
    ("corrupt checkpoint", _corrupt_checkpoint, (ValueError, RuntimeError), r"ck\.fl"),
    ("truncated checkpoint", _truncated_checkpoint, (ValueError, RuntimeError), r"ck\.fl"),
    ("missing checkpoint", lambda t: fl.load(os.path.join(t, "nope.fl")), FileNotFoundError,
     r"nope\.fl"),
    ("missing data", _missing_mnist, FileNotFoundError, r"train-images-idx3-ubyte"),
    ("scan body read", lambda t: fl.scan(lambda c, x: (c * float(c.sum()), x), fl.ones(2),
                                         fl.ones(3, 2)), RuntimeError, r"inside a scan body"),
]


@pytest.mark.parametrize("name,fn,exc,pattern", CASES, ids=[c[0] for c in CASES])
def test_user_error_is_clear_and_names_the_culprit(tmp_path, name, fn, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fn(str(tmp_path))


@pytest.mark.parametrize("argv,pattern", [
    (["--model", "nope"], r"invalid choice: 'nope'"),
    (["--lr", "-1"], r"--lr"),
    (["--data", "mnist"], r"--data mnist needs --data-dir"),
    (["--data", "mnist", "--data-dir", "/nonexistent-dir"], r"/nonexistent-dir"),
])
def test_train_py_bad_flags_give_one_line_and_exit_2(argv, pattern):
    import re
    r = subprocess.run([sys.executable, "train.py", *argv], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in r.stderr
