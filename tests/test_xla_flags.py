"""flowlite.xla_flags: the XLA:CPU option picked by measurement is set before JAX's backend
exists, only when it can take effect, never over the user's own setting — and results with
it equal results without it."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAG = "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"


def _run(code, **env):
    e = dict(os.environ)
    e.pop("XLA_FLAGS", None)
    e.pop("FLOWLITE_XLA_TUNING", None)
    e.update(env)
    e["PYTHONPATH"] = ROOT
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


SHOW = "import os, flowlite; print(repr(os.environ.get('XLA_FLAGS')))"


def test_flag_is_set_in_a_fresh_process():
    import jaxlib
    want = repr(FLAG) if jaxlib.__version__.startswith("0.10.") else "None"
    assert _run(SHOW) == want


def test_opt_out_and_the_users_own_flags_win():
    assert _run(SHOW, FLOWLITE_XLA_TUNING="0") == "None"
    own = "--xla_cpu_experimental_ynn_fusion_type=  --xla_cpu_enable_fast_math=false"
    assert _run(SHOW, XLA_FLAGS=own) == repr(own)


def test_jax_imported_first_is_reported():
    code = ("import jax, os; jax.numpy.ones(1).block_until_ready(); import flowlite; "
            "print(flowlite.engine.xla_flags.chosen['reason'])")
    import jaxlib
    if jaxlib.__version__.startswith("0.10."):
        assert "jax was imported first" in _run(code)


_LENET = """
import json, numpy as np, flowlite as fl
from flowlite import nn
import flowlite.nn.functional as F
fl.manual_seed(0)
m = nn.Sequential(nn.Conv2d(1, 4, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3),
                  nn.ReLU(), nn.Flatten(), nn.Linear(8 * 10 * 10, 10))
opt = fl.optim.SGD(m.parameters(), lr=0.1)
rng = np.random.default_rng(0)
x = fl.tensor(rng.standard_normal((8, 1, 28, 28)).astype(np.float32))
y = fl.tensor(rng.integers(0, 10, 8))
out = []
for _ in range(3):
    opt.zero_grad()
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    out.append(loss.item())
print(json.dumps(out + m[0].weight.grad.numpy().ravel()[:20].tolist()))
"""


def test_convolutions_give_the_same_results_with_and_without_the_flag():
    tuned = np.array(json.loads(_run(_LENET)))
    plain = np.array(json.loads(_run(_LENET, FLOWLITE_XLA_TUNING="0")))
    np.testing.assert_allclose(tuned, plain, rtol=2e-5, atol=1e-6)
