"""Data-parallel and multi-process training on forced CPU devices (each case in a subprocess:
XLA's device count is fixed when JAX starts)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DP_SCRIPT = textwrap.dedent("""
    import os, sys, json
    sys.path.insert(0, {root!r})
    import numpy as np
    import flowlite as fl
    from flowlite import nn, optim
    from models.lenet import LeNet
    from models.gpt import GPT, GPTConfig

    def train(make, batches, loss_fn, dp):
        fl.manual_seed(0)
        model = make()
        dev = None
        if dp:
            mesh = fl.distributed.data_parallel(model)
            dev = mesh.device
        opt = optim.AdamW(model.parameters(), lr=1e-3)
        fl.metrics.reset()
        for x, y in batches:
            x = fl.from_numpy(x, device=dev)
            y = fl.from_numpy(y, device=dev)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        c = fl.metrics.counters()
        params = {{k: v.numpy() for k, v in model.state_dict().items()}}
        hlo = fl.debug.executable_text() if dp else ""
        return params, c, hlo, loss.item()

    rng = np.random.default_rng(0)
    ce = lambda logits, y: nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                       y.reshape(-1))
    lenet_batches = [(rng.normal(size=(16, 1, 28, 28)).astype(np.float32),
                      rng.integers(0, 10, size=(16,)).astype(np.int32)) for _ in range(20)]
    gpt_batches = [(rng.integers(0, 64, size=(8, 16)).astype(np.int32),
                    rng.integers(0, 64, size=(8, 16)).astype(np.int32)) for _ in range(20)]
    cfg = GPTConfig(vocab_size=64, context=16, n_layer=1, n_head=2, d_model=32)
    out = {{}}
    for name, make, batches in (("lenet", LeNet, lenet_batches),
                                ("gpt", lambda: GPT(cfg), gpt_batches)):
        p1, c1, _, l1 = train(make, batches, ce, False)
        p4, c4, hlo, l4 = train(make, batches, ce, True)
        diff = max(float(np.abs(p1[k] - p4[k]).max()) for k in p1)
        out[name] = dict(diff=diff, exec1=c1["executions"], exec4=c4["executions"],
                         compiles4=c4["compiles"], allreduce=("all-reduce" in hlo),
                         loss1=l1, loss4=l4)
    print("RESULT", json.dumps(out))
""")


def _run(code, env_extra, timeout=600):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def test_data_parallel_matches_single_device_with_one_executable_per_step():
    import json
    r = _run(DP_SCRIPT.format(root=ROOT), {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.split("RESULT")[1])
    for name, v in res.items():
        assert v["diff"] < 5e-4, (name, v)      # float32 reduction order differs
        assert v["exec4"] == 20, (name, v)          # one executable per step
        assert v["compiles4"] <= 2, (name, v)
        assert v["allreduce"], (name, v)            # XLA inserted the gradient all-reduce


MP_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    rank, port = int(sys.argv[1]), sys.argv[2]
    import numpy as np
    import flowlite as fl
    from flowlite import nn, optim
    fl.distributed.initialize(f"127.0.0.1:{{port}}", 2, rank)
    mesh = fl.distributed.Mesh(("data",))
    fl.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    fl.distributed.data_parallel(model, mesh)
    opt = optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(32, 8)).astype(np.float32)
    Y = rng.normal(size=(32, 1)).astype(np.float32)
    for step in range(4):
        lo = slice(rank * 16, (rank + 1) * 16)          # each process loads its own shard
        x = fl.distributed.global_batch(X[lo], mesh)
        y = fl.distributed.global_batch(Y[lo], mesh)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    w = model[0].weight._node.value.addressable_data(0)
    print("W", np.asarray(w).round(6).ravel().tolist())
""")


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_two_processes_train_to_identical_parameters(tmp_path):
    port = str(_free_port())
    script = tmp_path / "mp.py"
    script.write_text(MP_SCRIPT.format(root=ROOT))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), port], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-3000:]
    w = [o.split("W")[-1].strip() for o, _ in outs]
    assert w[0] == w[1] and len(w[0]) > 10


def test_optimizer_state_on_a_one_device_mesh_lives_on_that_mesh():
    # from_jax of an array on a flowlite mesh of one device: the mesh, as for its parameters
    # (AdamW's state used to land on cpu:0 and the first step raised "two devices")
    import flowlite as fl
    from flowlite import nn, optim
    model = nn.Linear(16, 4)
    mesh = fl.distributed.Mesh(("data",), devices=jax.devices()[:1])
    fl.distributed.data_parallel(model, mesh)
    opt = optim.AdamW(model.parameters())
    assert all(s.device is model.weight.device for s in opt._opt_state[0])
    x = fl.from_numpy(np.ones((8, 16), np.float32), device=mesh.device)
    loss = model(x).sum()
    loss.backward()
    opt.step()
    assert np.isfinite(loss.item())
