"""torch.Generator and RNG state (flowlite.frontend.generator, random, random_methods), checked
against PyTorch 2.13's semantics: reproducibility, independence of the streams, state
save/restore, shapes and dtypes, error classes and the distributions, for both ways of making a
CPU generator (`Generator()`, `Generator(device="cpu")`: PyTorch's own numbers, compared bit for
bit in tests/test_torch_streams.py); and that a generator's draws inside training steps never
recompile (one compile over many steps)."""
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import torch

import flowlite as fl
import flowlite.engine.metrics as M
import flowlite.compat.utils.data as fud

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = [pytest.param(None, id="host"), pytest.param("cpu", id="device")]


def gen(lib, kind, seed):
    g = lib.Generator() if kind is None else lib.Generator(device=kind)
    return g.manual_seed(seed)


def draws(lib, g, sparse=False, between=lambda: None):
    """One draw of every op taking generator= (in a fixed order), `between()` called after
    each.  PyTorch 2.13's nn.init.sparse_ draws its zeros' positions from the global stream
    despite generator= (flowlite's too, to match): `sparse=True` adds it."""
    x = lib.zeros(4, 3)
    calls = [lambda: lib.rand(3, 4, generator=g), lambda: lib.randn(5, generator=g),
             lambda: lib.randint(2, 9, (6,), generator=g),
             lambda: lib.randperm(7, generator=g),
             lambda: lib.normal(0.0, 2.0, (3,), generator=g),
             lambda: lib.normal(lib.zeros(3), lib.ones(3), generator=g),
             lambda: lib.multinomial(lib.tensor([0.1, 0.5, 0.4]), 4, True, generator=g),
             lambda: lib.multinomial(lib.ones(2, 6), 3, generator=g),
             lambda: lib.bernoulli(lib.full((5,), 0.5), generator=g),
             lambda: lib.rand_like(x, generator=g), lambda: lib.randn_like(x, generator=g),
             lambda: lib.randint_like(x, 3, 8, generator=g),
             lambda: lib.zeros(4).uniform_(-2, 2, generator=g),
             lambda: lib.zeros(4).normal_(1, 2, generator=g),
             lambda: lib.zeros(4).bernoulli_(0.3, generator=g),
             lambda: lib.zeros(4).exponential_(2, generator=g),
             lambda: lib.zeros(4).geometric_(0.4, generator=g),
             lambda: lib.zeros(4).cauchy_(generator=g),
             lambda: lib.zeros(4).log_normal_(generator=g),
             lambda: lib.zeros(4).random_(0, 10, generator=g),
             lambda: lib.zeros(4, dtype=lib.int32).random_(generator=g),
             lambda: x.bernoulli(generator=g)]
    for init in ("uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_",
                 "kaiming_uniform_", "kaiming_normal_", "orthogonal_"):
        calls.append(lambda init=init: getattr(lib.nn.init, init)(lib.empty(3, 4),
                                                                  generator=g))
    if sparse:
        calls.append(lambda: lib.nn.init.sparse_(lib.empty(4, 3), 0.5, generator=g))
    out = []
    for c in calls:
        out.append(c())
        between()
    return out


def values(ts):
    return [t.numpy() if hasattr(t, "numpy") else np.asarray(t) for t in ts]


def test_every_draw_matches_pytorch_in_shape_and_dtype():
    ours = draws(fl, gen(fl, "cpu", 0), sparse=True)
    theirs = draws(torch, torch.Generator().manual_seed(0), sparse=True)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert tuple(a.shape) == tuple(b.shape), i
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1].replace(
            "int64", "int32"), (i, a.dtype, b.dtype)        # x64 off: int64 stored as int32


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_draws_other_seed_other_draws(kind):
    a, b, c = (values(draws(fl, gen(fl, kind, s))) for s in (42, 42, 7))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert sum(not np.array_equal(x, z) for x, z in zip(a, c)) >= len(a) - 6


def test_same_seed_same_draws_in_another_process():
    script = textwrap.dedent("""
        import sys, numpy as np, flowlite as fl
        out = []
        for kind in (None, "cpu"):
            g = (fl.Generator() if kind is None else fl.Generator(device=kind)).manual_seed(11)
            out += [fl.rand(6, generator=g).numpy(), fl.randperm(9, generator=g).numpy(),
                    fl.multinomial(fl.ones(8), 3, generator=g).numpy().astype(np.float32)]
        np.save(sys.argv[1], np.concatenate([o.astype(np.float32) for o in out]))
    """)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fl_gen_{os.getpid()}.npy")
    subprocess.run([sys.executable, "-c", script, path], check=True, timeout=240,
                   env=dict(os.environ, PYTHONPATH=ROOT))
    theirs = np.load(path)
    os.unlink(path)
    out = []
    for kind in (None, "cpu"):
        g = gen(fl, kind, 11)
        out += [fl.rand(6, generator=g).numpy(), fl.randperm(9, generator=g).numpy(),
                fl.multinomial(fl.ones(8), 3, generator=g).numpy().astype(np.float32)]
    np.testing.assert_array_equal(np.concatenate([o.astype(np.float32) for o in out]), theirs)


@pytest.mark.parametrize("lib", [fl, torch], ids=["flowlite", "torch"])
@pytest.mark.parametrize("kind", KINDS)
def test_generator_and_global_stream_never_touch_each_other(lib, kind):
    if lib is torch and kind is not None:
        kind = "cpu"
    sparse = False      # (sparse_ draws from the global stream in both)
    lib.manual_seed(3)
    expected = lib.rand(8).numpy()
    g_expected = values(draws(lib, gen(lib, kind, 5), sparse))
    # draws from a generator leave the global stream where it was
    lib.manual_seed(3)
    g = gen(lib, kind, 5)
    draws(lib, g, sparse)
    np.testing.assert_array_equal(lib.rand(8).numpy(), expected)
    # global draws (and reseeding) in between leave the generator where it was
    def global_draws():
        lib.rand(3)
        lib.manual_seed(99)
        lib.randn(2)

    got = draws(lib, gen(lib, kind, 5), sparse, global_draws)
    for x, y in zip(values(got), g_expected):
        np.testing.assert_array_equal(x, y)


def test_device_generator_seeded_s_draws_what_manual_seed_s_draws():
    # PyTorch's rule for a generator of the same device as the global stream
    g = torch.Generator().manual_seed(5)
    torch.manual_seed(5)
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4))
    g = fl.Generator(device="cpu").manual_seed(5)
    fl.manual_seed(5)
    np.testing.assert_array_equal(fl.rand(4, generator=g).numpy(), fl.rand(4).numpy())
    np.testing.assert_array_equal(fl.multinomial(fl.ones(9), 9, generator=g).numpy(),
                                  fl.multinomial(fl.ones(9), 9).numpy())


@pytest.mark.parametrize("kind", KINDS)
def test_generator_state_restores_the_continuation(kind):
    g = gen(fl, kind, 1)
    fl.rand(3, generator=g)
    state = g.get_state()
    assert state.dtype is fl.uint8 and state.ndim == 1          # PyTorch's ByteTensor
    first = values(draws(fl, g))
    g.set_state(state)
    for x, y in zip(values(draws(fl, g)), first):
        np.testing.assert_array_equal(x, y)
    h = (fl.Generator() if kind is None else fl.Generator(device=kind)).set_state(state)
    assert h.initial_seed() == g.initial_seed() == 1
    h2 = g.clone_state()
    np.testing.assert_array_equal(fl.rand(5, generator=h2).numpy(),
                                  fl.rand(5, generator=g).numpy())
    with pytest.raises(RuntimeError, match="state"):
        g.set_state(fl.zeros(3, dtype=fl.uint8))
    with pytest.raises(RuntimeError, match="state"):
        torch.Generator().set_state(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(TypeError):
        g.set_state(fl.zeros(64))
    with pytest.raises(TypeError):
        torch.Generator().set_state(torch.zeros(5056))


def test_global_state_is_a_byte_tensor_and_restores_the_continuation():
    fl.manual_seed(0)
    fl.rand(3)
    s = fl.get_rng_state()
    assert s.dtype is fl.uint8 and s.ndim == 1 and torch.get_rng_state().dtype == torch.uint8
    a = [fl.rand(4).numpy(), fl.randn(2, 2).numpy(), fl.randint(0, 5, (6,)).numpy()]
    fl.manual_seed(123)                     # a different seed in between
    fl.set_rng_state(s)
    b = [fl.rand(4).numpy(), fl.randn(2, 2).numpy(), fl.randint(0, 5, (6,)).numpy()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert fl.initial_seed() == 0
    # torch.default_generator / torch.manual_seed's return value: the global stream
    g = fl.manual_seed(4)
    assert g is fl.default_generator and g.initial_seed() == 4
    st = g.get_state()
    x = fl.rand(3, generator=g).numpy()
    g.set_state(st)
    np.testing.assert_array_equal(fl.rand(3).numpy(), x)
    with pytest.raises(RuntimeError, match="get_rng_state"):
        fl.set_rng_state(fl.zeros(3, dtype=fl.uint8))
    with pytest.raises(RuntimeError):
        torch.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_legacy_states_restore_the_device_stream():
    """flowlite <= 0.1's uint32[4] and the 24-byte device states still load: they restore the
    counter-based device stream (dropout's), as they always held only that."""
    drop = fl.nn.functional.dropout
    fl.manual_seed(2)
    drop(fl.ones(8), 0.5)
    raw = bytes(fl.get_rng_state().numpy())
    n = int.from_bytes(raw[5032:5040], "little")        # the device stream's draw counter
    assert int.from_bytes(raw[5016:5024], "little") == 2 and n == 1
    expected = drop(fl.ones(64), 0.5).numpy()
    key = fl.random.seed_key(2)
    fl.manual_seed(9)
    fl.set_rng_state(fl.from_numpy(np.array([key[0], key[1], n, 0], np.uint32)))
    np.testing.assert_array_equal(drop(fl.ones(64), 0.5).numpy(), expected)
    fl.manual_seed(9)
    state24 = (2).to_bytes(8, "little") + np.asarray(key, "<u4").tobytes() + \
        n.to_bytes(8, "little")
    fl.set_rng_state(fl.from_numpy(np.frombuffer(state24, np.uint8).copy()))
    np.testing.assert_array_equal(drop(fl.ones(64), 0.5).numpy(), expected)


@pytest.mark.parametrize("lib", [fl, torch], ids=["flowlite", "torch"])
def test_fork_rng_puts_the_global_stream_back(lib):
    lib.manual_seed(0)
    lib.rand(2)
    expected = lib.rand(5).numpy()
    lib.manual_seed(0)
    lib.rand(2)
    with lib.random.fork_rng():
        lib.rand(100)
        lib.manual_seed(77)
        inner = lib.randn(3)
    np.testing.assert_array_equal(lib.rand(5).numpy(), expected)
    assert inner.shape == (3,)
    with lib.random.fork_rng(enabled=False):
        lib.rand(1)
    assert not np.array_equal(lib.rand(5).numpy(), expected)


def test_cuda_rng_state_functions_without_a_gpu_answer_as_pytorch_cpu():
    assert fl.cuda.get_rng_state_all() == torch.cuda.get_rng_state_all() == []
    fl.cuda.set_rng_state_all([])
    torch.cuda.set_rng_state_all([])
    fl.manual_seed(1)
    a = fl.rand(3).numpy()
    fl.manual_seed(1)
    fl.cuda.manual_seed_all(5)               # no CUDA device: nothing happens (PyTorch too)
    np.testing.assert_array_equal(fl.rand(3).numpy(), a)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        fl.cuda.get_rng_state()


def test_resumed_run_draws_what_an_uninterrupted_run_draws(tmp_path):
    """A training loop with dropout, a device generator for sampling and a host generator
    for data order, checkpointed at step 3 and resumed in a fresh state."""
    def make():
        fl.manual_seed(0)
        model = fl.nn.Sequential(fl.nn.Linear(4, 8), fl.nn.Dropout(0.5), fl.nn.Linear(8, 3))
        opt = fl.optim.SGD(model.parameters(), lr=0.1)
        return model, opt, fl.Generator(device="cpu").manual_seed(9), \
            fl.Generator().manual_seed(8)

    def step(model, opt, g, h):
        x = fl.randn(5, 4, generator=h)
        logits = model(x)
        loss = logits.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        pick = fl.multinomial(fl.softmax(logits.detach(), -1), 1, generator=g)
        return float(loss), pick.numpy().ravel().tolist()

    model, opt, g, h = make()
    full = [step(model, opt, g, h) for _ in range(6)]

    model, opt, g, h = make()
    part = [step(model, opt, g, h) for _ in range(3)]
    fl.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": fl.get_rng_state(),
             "g": g.get_state(), "h": h.get_state()}, tmp_path / "ck.pt")
    model, opt, g, h = make()
    fl.manual_seed(1234)
    fl.rand(17)
    ck = fl.load(tmp_path / "ck.pt")
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    fl.set_rng_state(ck["rng"])
    g.set_state(ck["g"])
    h.set_state(ck["h"])
    part += [step(model, opt, g, h) for _ in range(3)]
    assert part == full


def test_device_generator_draws_compile_once_over_many_steps():
    fl.manual_seed(0)
    model = fl.nn.Linear(6, 5)
    opt = fl.optim.SGD(model.parameters(), lr=0.01)
    g = fl.Generator(device="cpu").manual_seed(3)
    x = fl.ones(4, 6)
    picks = []

    def one():
        out = model(x)
        noise = fl.randn(4, 5, generator=g) * 0.1
        out.add(noise).pow(2).sum().backward()
        p = fl.multinomial(fl.softmax(out.detach(), -1), 2, generator=g)
        z = fl.zeros(4, 5).normal_(generator=g).bernoulli_(0.5, generator=g)
        opt.step()
        opt.zero_grad()
        picks.append((p, z))

    for _ in range(2):
        one()
    fl.sync()
    before = M.counters()["compiles"]
    for _ in range(6):
        one()
    fl.sync()
    assert M.counters()["compiles"] == before
    got = [p.numpy().tolist() for p, _ in picks]
    assert len({str(v) for v in got}) > 1          # a new draw every step


@pytest.mark.parametrize("kind", KINDS)
def test_data_order_reproducible_with_a_generator(kind):
    ds = fud.TensorDataset(fl.arange(40))

    def order(seed):
        g = gen(fl, kind, seed)
        dl = fud.DataLoader(ds, batch_size=8, shuffle=True, generator=g)
        epochs = [[int(v) for b in dl for v in b[0].tolist()] for _ in range(2)]
        split = [list(p.indices) for p in fud.random_split(range(10), [4, 6], generator=g)]
        sub = list(fud.SubsetRandomSampler([1, 5, 9, 11], generator=g))
        weighted = list(fud.WeightedRandomSampler([1.0, 0.0, 2.0], 6, generator=g))
        return epochs, split, sub, weighted

    a, b, c = order(1), order(1), order(2)
    assert a == b and a != c
    assert sorted(a[0][0]) == list(range(40)) and a[0][0] != a[0][1]   # epochs differ
    assert 1 not in a[3]
    # and the global stream is untouched by it
    fl.manual_seed(0)
    x = fl.rand(3).numpy()
    fl.manual_seed(0)
    order(1)
    np.testing.assert_array_equal(fl.rand(3).numpy(), x)


def test_distributions():
    g = fl.Generator(device="cpu").manual_seed(0)
    n = 40000
    e = fl.zeros(n).exponential_(2.0, generator=g).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.02 and abs(e.std() - 0.5) < 0.03
    geo = fl.zeros(n).geometric_(0.25, generator=g).numpy()
    assert geo.min() == 1 and (geo == np.round(geo)).all() and abs(geo.mean() - 4) < 0.12
    assert abs((geo == 1).mean() - 0.25) < 0.015
    c = fl.zeros(n).cauchy_(1.0, 2.0, generator=g).numpy()
    assert abs(np.median(c) - 1.0) < 0.08
    assert abs(np.quantile(c, 0.75) - 3.0) < 0.15          # median + sigma
    ln = fl.zeros(n).log_normal_(0.5, 0.25, generator=g).numpy()
    assert ln.min() > 0 and abs(np.log(ln).mean() - 0.5) < 0.01
    assert abs(np.log(ln).std() - 0.25) < 0.01
    b = fl.zeros(n).bernoulli_(0.3, generator=g).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.015
    p = fl.tensor([0.0, 0.2, 0.8, 1.0]).expand(n // 4, 4)
    bb = fl.bernoulli(p, generator=g).numpy()
    assert bb[:, 0].sum() == 0 and bb[:, 3].all() and abs(bb[:, 2].mean() - 0.8) < 0.03
    r = fl.zeros(n, dtype=fl.int32).random_(-3, 4, generator=g).numpy()
    assert r.min() == -3 and r.max() == 3 and abs(np.bincount(r + 3).min() / n - 1 / 7) < 0.01
    rf = fl.zeros(n).random_(generator=g).numpy()
    assert rf.min() >= 0 and rf.max() <= 2 ** 24 and (rf == np.round(rf)).all()
    assert rf.max() > 2 ** 23
    u8 = fl.zeros(n, dtype=fl.uint8).random_(generator=g).numpy()
    assert u8.min() == 0 and u8.max() == 255
    bo = fl.zeros(n, dtype=fl.bool).random_(generator=g).numpy()
    assert 0.45 < bo.mean() < 0.55
    m = fl.multinomial(fl.tensor([1.0, 0.0, 3.0]), n, True, generator=g).numpy()
    assert 1 not in m and abs((m == 2).mean() - 0.75) < 0.015
    h = fl.Generator().manual_seed(0)
    mh = fl.multinomial(fl.tensor([1.0, 0.0, 3.0]), n, True, generator=h).numpy()
    assert 1 not in mh and abs((mh == 2).mean() - 0.75) < 0.015


@pytest.mark.parametrize("lib", [fl, torch], ids=["flowlite", "torch"])
@pytest.mark.parametrize("case,exc", [
    ("bad_generator", TypeError),
    ("uniform_reversed", RuntimeError),
    ("normal_negative_std", RuntimeError),
    ("bernoulli_p", RuntimeError),
    ("exponential_lambda", RuntimeError),
    ("exponential_int", RuntimeError),
    ("geometric_p", RuntimeError),
    ("cauchy_sigma", RuntimeError),
    ("cauchy_int", RuntimeError),
    ("log_normal_std", RuntimeError),
    ("log_normal_int", NotImplementedError),
    ("normal_int", NotImplementedError),
    ("uniform_int", NotImplementedError),
    ("random_reversed", RuntimeError),
    ("random_int32_beyond", RuntimeError),
    ("randint_int32_beyond", RuntimeError),
    ("seed_str", RuntimeError),
])
def test_errors_have_pytorchs_classes(lib, case, exc):
    calls = {
        "bad_generator": lambda: lib.multinomial(lib.ones(3), 1, generator=3),
        "uniform_reversed": lambda: lib.zeros(3).uniform_(2, 1),
        "normal_negative_std": lambda: lib.zeros(3).normal_(0, -1),
        "bernoulli_p": lambda: lib.zeros(3).bernoulli_(1.5),
        "exponential_lambda": lambda: lib.zeros(3).exponential_(-1.0),
        "exponential_int": lambda: lib.zeros(3, dtype=lib.int32).exponential_(),
        "geometric_p": lambda: lib.zeros(3).geometric_(0.0),
        "cauchy_sigma": lambda: lib.zeros(3).cauchy_(0, -1),
        "cauchy_int": lambda: lib.zeros(3, dtype=lib.int32).cauchy_(),
        "log_normal_std": lambda: lib.zeros(3).log_normal_(0, -1),
        "log_normal_int": lambda: lib.zeros(3, dtype=lib.int32).log_normal_(),
        "normal_int": lambda: lib.zeros(3, dtype=lib.int32).normal_(),
        "uniform_int": lambda: lib.zeros(3, dtype=lib.int32).uniform_(),
        "random_reversed": lambda: lib.zeros(3).random_(5, 2),
        "random_int32_beyond": lambda: lib.zeros(3, dtype=lib.int32).random_(0, 2 ** 40),
        "randint_int32_beyond": lambda: lib.randint(0, 2 ** 40, (3,), dtype=lib.int32),
        "seed_str": lambda: lib.Generator().manual_seed("a"),
    }
    with pytest.raises(exc):
        calls[case]()


def test_device_generator_refuses_another_device_type():
    with pytest.raises(RuntimeError):           # no GPU here (PyTorch's CPU build: too)
        fl.Generator(device="cuda")
    g = fl.Generator(device="cpu")
    g.device = types.SimpleNamespace(type="cuda")       # as a CUDA generator would be
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but "
                                           "found 'cuda'"):
        fl.rand(3, generator=g)


def test_randint_beyond_32_bits(x64):
    r = fl.randint(0, 2 ** 40, (20000,))
    v = r.numpy()
    assert r.dtype is fl.int64 and v.min() >= 0 and v.max() < 2 ** 40
    assert v.max() > 2 ** 39 and abs(v.mean() / 2 ** 40 - 0.5) < 0.02
    assert torch.randint(0, 2 ** 40, (3,)).dtype == torch.int64
    w = fl.randint(-2 ** 63, 2 ** 63 - 1, (20000,)).numpy()
    assert (w < 0).mean() > 0.45 and (w > 2 ** 62).any()
    s = fl.randint(2 ** 31, 2 ** 31 + 3, (300,)).numpy()
    assert set(s.tolist()) == {2 ** 31, 2 ** 31 + 1, 2 ** 31 + 2}
    g = fl.Generator(device="cpu").manual_seed(1)
    a = fl.randint(-2 ** 40, 2 ** 40, (50,), generator=g).numpy()
    g.manual_seed(1)
    np.testing.assert_array_equal(fl.randint(-2 ** 40, 2 ** 40, (50,), generator=g).numpy(), a)
    h = fl.Generator().manual_seed(1)
    assert fl.randint(0, 2 ** 40, (50,), generator=h).numpy().max() > 2 ** 32
    i64 = fl.zeros(10000, dtype=fl.int64).random_().numpy()
    assert i64.min() >= 0 and i64.max() > 2 ** 62


def test_randint_beyond_32_bits_without_x64_says_so():
    with pytest.raises(RuntimeError, match="x64"):
        fl.randint(0, 2 ** 40, (3,))
    r = fl.randint(-2 ** 31, 2 ** 31 - 1, (5000,), dtype=fl.int32).numpy()   # 32 bits: fine
    assert (r < 0).any() and (r > 2 ** 30).any()
    i = fl.zeros(5000, dtype=fl.int32).random_().numpy()
    assert i.min() >= 0 and i.max() > 2 ** 30


def test_torch_names_through_the_shim(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        g = torch.Generator(device=device)
        g.manual_seed(42)
        probs = torch.softmax(torch.randn(2, 10), -1)
        a = torch.multinomial(probs, 1, generator=g)
        g.manual_seed(42)
        assert torch.equal(a, torch.multinomial(probs, 1, generator=g))
        state = torch.get_rng_state()
        cuda_states = torch.cuda.get_rng_state_all()
        with torch.random.fork_rng():
            torch.rand(5)
        x = torch.rand(3)
        torch.set_rng_state(state)
        torch.cuda.set_rng_state_all(cuda_states)
        torch.cuda.manual_seed_all(0)
        assert torch.equal(x, torch.rand(3))
        assert torch.manual_seed(1) is torch.default_generator
        w = torch.empty(3, 4)
        torch.nn.init.kaiming_uniform_(w, generator=torch.Generator().manual_seed(0))
        print("ok", torch.randint(0, 2 ** 40, (2,)).dtype, torch.bernoulli(probs).shape)
    """))
    r = subprocess.run([sys.executable, "-m", "flowlite.run", str(script)], cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ok torch.int64 torch.Size([2, 10])" in r.stdout     # PyTorch's names under the hook
