"""PyTorch's CPU random streams, bit for bit (flowlite.frontend.cpu_stream, random,
random_methods, nn.init): with the same seed, the global generator and CPU Generators draw
exactly PyTorch 2.13's numbers — factories, in-place draws, multinomial, nn.init, the layers'
default initialisation — in PyTorch's order, so mixed sequences of draws stay in step, and the
generator states are PyTorch's bytes. Dropout inside a training step keeps flowlite's device
stream (no sync, no recompile) and leaves the CPU stream alone."""
import math

import numpy as np
import pytest
import torch

import flowlite as fl
import flowlite.engine.metrics as M
from flowlite.engine.host_data import HostNode

SEEDS = [0, 1, 42, 1337, 2147483647, 2 ** 40 + 3]
SIZES = [(), (1,), (3,), (15,), (16,), (17,), (31,), (4, 8), (33,), (5, 7, 3), (1001,)]


def same(ours, theirs, what=""):
    a = ours.numpy() if hasattr(ours, "numpy") else np.asarray(ours)
    b = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    np.testing.assert_array_equal(a, b.astype(a.dtype) if b.dtype != a.dtype else b,
                                  err_msg=str(what))


def seed_both(s):
    fl.manual_seed(s)
    torch.manual_seed(s)


def dt(lib, name):
    return getattr(lib, name)


# ---- the engine and its state ----------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS + [-1, 2 ** 64 - 1])
def test_state_bytes_are_pytorchs_and_interoperate(seed):
    seed_both(seed)
    assert fl.initial_seed() == torch.initial_seed()
    ours, theirs = bytes(fl.get_rng_state().numpy()), bytes(torch.get_rng_state().numpy())
    aux = slice(5016, 5024), slice(5032, 5040)          # flowlite's device stream rides here
    def strip(b):
        b = bytearray(b)
        for s in aux:
            b[s] = bytes(8)
        return bytes(b)
    assert len(ours) == 5056 and strip(ours) == theirs
    fl.randn(3)                                          # leaves a cached scalar normal
    torch.randn(3)
    fl.rand(700)                                         # past a twist
    torch.rand(700)
    assert strip(bytes(fl.get_rng_state().numpy())) == bytes(torch.get_rng_state().numpy())
    # PyTorch's state loads into flowlite and flowlite's into PyTorch
    state = torch.get_rng_state()
    expected = torch.randn(5)
    fl.manual_seed(99)
    fl.set_rng_state(fl.from_numpy(state.numpy()))
    same(fl.randn(5), expected)                          # the cached normal came along
    torch.manual_seed(99)
    torch.set_rng_state(torch.from_numpy(fl.get_rng_state().numpy().copy()))
    same(fl.rand(9), torch.rand(9))


def test_generator_states_are_pytorchs():
    g, h = fl.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert bytes(g.get_state().numpy()) == bytes(h.get_state().numpy())
    assert g.initial_seed() == h.initial_seed() == 7
    assert fl.Generator().initial_seed() == torch.Generator().initial_seed()
    same(fl.randn(3, generator=g), torch.randn(3, generator=h))
    st = h.get_state()
    g2 = fl.Generator(device="cpu").set_state(fl.from_numpy(st.numpy()))
    same(fl.rand(20, generator=g2), torch.rand(20, generator=h))
    same(fl.randn(1, generator=g2), torch.randn(1, generator=torch.Generator().set_state(st)))


# ---- factories -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_factories(dtype, x64):
    fd, td = dt(fl, dtype), dt(torch, dtype)
    for seed in SEEDS[:4]:
        seed_both(seed)
        for size in SIZES:
            same(fl.rand(size, dtype=fd), torch.rand(size, dtype=td), ("rand", size))
            same(fl.randn(size, dtype=fd), torch.randn(size, dtype=td), ("randn", size))
            same(fl.normal(0.3, 0.02, size, dtype=fd), torch.normal(0.3, 0.02, size, dtype=td),
                 ("normal", size))
            like_f, like_t = fl.zeros(size, dtype=fd), torch.zeros(size, dtype=td)
            same(fl.rand_like(like_f), torch.rand_like(like_t), ("rand_like", size))
            same(fl.randn_like(like_f), torch.randn_like(like_t), ("randn_like", size))
            same(fl.randint_like(like_f, 3, 11), torch.randint_like(like_t, 3, 11), size)
        for n in (0, 1, 2, 5, 27, 1000):
            same(fl.randperm(n), torch.randperm(n), ("randperm", n))
        # tensor means and stds: the draw, then * std and + mean as PyTorch rounds them
        m, s = np.linspace(-2, 3, 40), np.linspace(0.1, 2, 40)
        mf, sf = fl.tensor(m, dtype=fd), fl.tensor(s, dtype=fd)
        mt, st = torch.tensor(m, dtype=td), torch.tensor(s, dtype=td)
        same(fl.normal(mf, sf), torch.normal(mt, st), "normal(T, T)")
        same(fl.normal(mf, 0.37), torch.normal(mt, 0.37), "normal(T, f)")
        same(fl.normal(0.3, sf), torch.normal(0.3, st), "normal(f, T)")
    assert type(fl.rand(3)._node) is HostNode            # host data: no program


def test_randint_ranges(x64):
    for seed in SEEDS[:3]:
        seed_both(seed)
        for lo, hi in [(0, 10), (-5, 1000003), (0, (1 << 28) - 1), (0, 1 << 28), (0, 2 ** 31),
                       (-2 ** 31, 2 ** 31 - 1), (0, 2 ** 33), (-2 ** 40, 2 ** 40),
                       (-2 ** 63, 2 ** 63 - 1)]:
            for size in [(), (7,), (3, 5)]:
                same(fl.randint(lo, hi, size), torch.randint(lo, hi, size), (lo, hi, size))
        same(fl.randint(9, (4,), dtype=fl.int32), torch.randint(9, (4,), dtype=torch.int32))
        same(fl.randint(0, 100, (6,), dtype=fl.float32),
             torch.randint(0, 100, (6,), dtype=torch.float32))


# ---- in-place draws --------------------------------------------------------------------------
def _inplace(lib, fd, size, g):
    k = {"generator": g} if g is not None else {}
    z = lambda: lib.zeros(size, dtype=fd)          # noqa: E731
    p = lib.tensor(np.linspace(0, 1, 12).reshape(3, 4), dtype=fd)
    return [z().uniform_(-0.7, 0.11, **k), z().uniform_(**k), z().normal_(0.3, 0.02, **k),
            z().normal_(**k), z().exponential_(1.7, **k), z().bernoulli_(0.37, **k),
            lib.zeros(3, 4, dtype=fd).bernoulli_(p, **k), lib.bernoulli(p, **k),
            z().cauchy_(0.3, 1.7, **k), z().log_normal_(0.3, 0.7, **k), z().geometric_(0.3, **k),
            z().random_(0, 10, **k), z().random_(5, **k), z().random_(**k),
            lib.zeros(size, dtype=lib.int32).random_(**k), lib.zeros(size, dtype=lib.uint8)
            .random_(**k), lib.zeros(size, dtype=lib.bool).random_(**k),
            lib.zeros(size, dtype=lib.int32).random_(-3, 4, **k)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("gen", ["global", "generator"])
def test_in_place_draws(dtype, gen, x64):
    fd, td = dt(fl, dtype), dt(torch, dtype)
    for seed in SEEDS[:3]:
        seed_both(seed)
        g = fl.Generator().manual_seed(seed + 1) if gen == "generator" else None
        h = torch.Generator().manual_seed(seed + 1) if gen == "generator" else None
        for size in [(), (5,), (16,), (3, 7), (40,)]:
            for i, (a, b) in enumerate(zip(_inplace(fl, fd, size, g),
                                           _inplace(torch, td, size, h))):
                same(a, b, (i, size))
    same(fl.rand(4), torch.rand(4))                      # the global streams still in step


def test_in_place_draws_on_views_follow_memory_order():
    seed_both(5)
    base_f, base_t = fl.zeros(6, 40), torch.zeros(6, 40)
    base_f.t().uniform_(-1, 1)                          # a transposed view: storage order
    base_t.t().uniform_(-1, 1)
    same(base_f, base_t)
    wf, wt = fl.zeros(20, 3), torch.zeros(20, 3)
    wf.t().normal_(0.0, 2.0)                            # not contiguous: the scalar kernel
    wt.t().normal_(0.0, 2.0)
    same(wf, wt)
    same(fl.randn(17), torch.randn(17))


def test_a_mixed_sequence_of_draws_stays_in_step(x64):
    def run(lib):
        g = lib.Generator().manual_seed(2024)
        out = []
        for step in range(6):
            out += [lib.randn(3), lib.rand(17, generator=g), lib.randint(0, 50, (5,)),
                    lib.randn(33, dtype=lib.float64), lib.zeros(9).normal_(generator=g),
                    lib.randperm(11, generator=g), lib.multinomial(lib.ones(7), 3),
                    lib.multinomial(lib.tensor([0.2, 0.5, 0.3]), 4, True, generator=g),
                    lib.zeros(2, 3).exponential_(), lib.randn(1), lib.bernoulli(
                        lib.full((6,), 0.5), generator=g), lib.normal(1.0, 2.0, (step + 1,))]
        return out
    seed_both(31)
    for i, (a, b) in enumerate(zip(run(fl), run(torch))):
        same(a, b, i)


# ---- multinomial -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_multinomial(dtype, x64):
    rng = np.random.default_rng(0)
    for seed in SEEDS[:3]:
        for shape, num, repl in [((27,), 1, True), ((27,), 5, True), ((3, 10), 7, True),
                                 ((27,), 5, False), ((4, 9), 3, False), ((4, 9), 1, False),
                                 ((50,), 50, False), ((2, 6), 1, True)]:
            p = rng.random(shape) ** 3
            p[..., 2] = 0
            seed_both(seed)
            same(fl.multinomial(fl.tensor(p, dtype=dt(fl, dtype)), num, repl),
                 torch.multinomial(torch.tensor(p, dtype=dt(torch, dtype)), num, repl),
                 (shape, num, repl))


def test_multinomial_of_pending_probabilities_reads_them_once():
    logits = np.random.default_rng(1).standard_normal((2, 27)).astype(np.float32)
    w = fl.tensor(logits)
    seed_both(3)
    fl.sync()
    r0 = M.counters()["executions"]
    probs = fl.softmax(w * 1.5, dim=-1)                 # pending
    pick = fl.multinomial(probs, num_samples=1)
    assert M.counters()["executions"] - r0 == 1         # one read of the probabilities
    want = torch.multinomial(torch.softmax(torch.tensor(logits) * 1.5, -1), num_samples=1)
    # (softmax itself may round differently from PyTorch's: equal picks, not equal probs)
    same(pick, want)


def test_makemore_bigram_sampling():
    """Karpathy's makemore lecture: a generator seeded 2147483647 draws W, samples names
    with multinomial, and draws minibatch indices with randint."""
    def run(lib):
        g = lib.Generator().manual_seed(2147483647)
        W = lib.randn((27, 27), generator=g)
        counts = (W * 0.5).exp().numpy()
        P = counts / counts.sum(1, keepdims=True)
        names = []
        for _ in range(5):
            ix, out = 0, []
            while True:
                p = lib.tensor(P[ix])
                ix = lib.multinomial(p, num_samples=1, replacement=True, generator=g).item()
                out.append(ix)
                if ix == 0 or len(out) > 30:
                    break
            names.append(out)
        batches = [lib.randint(0, 228146, (32,), generator=g) for _ in range(3)]
        return W, names, batches
    (W1, n1, b1), (W2, n2, b2) = run(fl), run(torch)
    same(W1, W2)
    assert n1 == n2
    for a, b in zip(b1, b2):
        same(a, b)


# ---- nn.init and the layers' default initialisation ------------------------------------------
def _layers(lib):
    nn = lib.nn
    return [nn.Linear(10, 20), nn.Linear(7, 3, bias=False), nn.Embedding(30, 17, padding_idx=2),
            nn.Conv1d(3, 5, 3), nn.Conv2d(4, 6, (3, 2)), nn.Conv3d(2, 3, 2),
            nn.ConvTranspose2d(4, 3, 3), nn.ConvTranspose1d(2, 4, 5),
            nn.LayerNorm(8), nn.BatchNorm1d(5), nn.GroupNorm(2, 4), nn.Bilinear(3, 4, 5),
            nn.RNN(4, 6, num_layers=2), nn.LSTM(3, 5, bidirectional=True), nn.GRU(4, 3),
            nn.RNNCell(3, 4), nn.LSTMCell(3, 4), nn.GRUCell(3, 4),
            nn.MultiheadAttention(16, 4), nn.MultiheadAttention(8, 2, kdim=5, vdim=6),
            nn.TransformerEncoderLayer(16, 4, dim_feedforward=32), nn.PReLU(),
            nn.Embedding(40, 33), nn.Linear(50, 64)]


def test_default_initialisation_of_layers():
    for seed in SEEDS[:3]:
        seed_both(seed)
        for a, b in zip(_layers(fl), _layers(torch)):
            sa, sb = a.state_dict(), b.state_dict()
            assert list(sa) == list(sb), type(a).__name__
            for k in sa:
                same(sa[k], sb[k], (type(a).__name__, k))
        same(fl.rand(3), torch.rand(3))


def _inits(lib):
    init = lib.nn.init
    e = lambda *s: lib.empty(*s)                   # noqa: E731
    return [init.uniform_(e(5, 7), -0.3, 0.4), init.normal_(e(33, 2), 0.1, 0.02),
            init.normal_(e(3), std=0.5), init.xavier_uniform_(e(6, 9), gain=1.3),
            init.xavier_normal_(e(4, 5, 3)), init.kaiming_uniform_(e(8, 3, 3)),
            init.kaiming_uniform_(e(12, 5), a=math.sqrt(5)),
            init.kaiming_uniform_(e(7, 4), mode="fan_out", nonlinearity="relu"),
            init.kaiming_normal_(e(6, 20), a=0.1), init.kaiming_normal_(e(4, 4), mode="fan_out"),
            init.trunc_normal_(e(40, 3), std=0.02), init.trunc_normal_(e(9), 1.0, 2.0, -1.0, 2.0),
            init.trunc_normal_(e(300), 0.0, 1.0, 0.5, 0.9),   # narrow: the uniform sampler
            init.sparse_(e(10, 4), 0.3), init.uniform_(e(2))]


def test_init_functions(x64):
    for seed in SEEDS[:3]:
        for d in ("float32", "float64"):
            seed_both(seed)
            fl.set_default_dtype(dt(fl, d))
            torch.set_default_dtype(dt(torch, d))
            try:
                for i, (a, b) in enumerate(zip(_inits(fl), _inits(torch))):
                    same(a, b, (i, d))
            finally:
                torch.set_default_dtype(torch.float32)
                fl.set_default_dtype(fl.float32)
        g, h = fl.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        same(fl.nn.init.kaiming_normal_(fl.empty(5, 6), generator=g),
             torch.nn.init.kaiming_normal_(torch.empty(5, 6), generator=h))
        # orthogonal_: PyTorch's normals, numpy's QR (equal up to rounding)
        seed_both(seed)
        a = fl.nn.init.orthogonal_(fl.empty(6, 10), gain=2.0).numpy()
        b = torch.nn.init.orthogonal_(torch.empty(6, 10), gain=2.0).numpy()
        np.testing.assert_allclose(a, b, atol=2e-6)
        same(fl.rand(5), torch.rand(5))


# ---- a GPT's initialisation and get_batch (nanoGPT's train.py) -------------------------------
def _gpt(lib, n_layer=2, n_embd=32, vocab=65, block=16):
    """nanoGPT's model.py __init__, in miniature: the same modules in the same order, tied
    embeddings, _init_weights through apply, the scaled init of the residual projections."""
    nn = lib.nn

    class LayerNorm(nn.Module):
        def __init__(self, ndim):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(ndim))
            self.bias = nn.Parameter(lib.zeros(ndim))

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.attn_dropout = nn.Dropout(0.0)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(n_embd), Attn(), \
                LayerNorm(n_embd), MLP()

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block, n_embd),
                drop=nn.Dropout(0.0), h=nn.ModuleList([Block() for _ in range(n_layer)]),
                ln_f=LayerNorm(n_embd)))
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    lib.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    lib.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    return GPT()


def test_gpt_initialisation_and_batches_match_nanogpt():
    data = np.arange(5000) % 65
    batches = {}
    for lib in (fl, torch):
        lib.manual_seed(1337)
        model = _gpt(lib)
        params = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        got = []
        for _ in range(25):                                 # get_batch, as train.py draws it
            ix = lib.randint(len(data) - 16, (12,))
            got.append([int(i) for i in ix])
        batches[lib.__name__] = params, got
    (pa, ba), (pb, bb) = batches["flowlite"], batches["torch"]
    assert list(pa) == list(pb)
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)
    assert ba == bb


# ---- dropout stays in the program ------------------------------------------------------------
def test_dropout_in_a_training_step_keeps_the_device_stream():
    fl.manual_seed(0)
    model = fl.nn.Sequential(fl.nn.Linear(8, 16), fl.nn.Dropout(0.3), fl.nn.Linear(16, 4))
    opt = fl.optim.SGD(model.parameters(), lr=0.1)
    x = fl.ones(5, 8)

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    losses = [step() for _ in range(2)]
    fl.sync()
    cpu = bytes(fl.get_rng_state().numpy())[:5016]
    c0, s0 = M.counters()["compiles"], M.counters()["syncs"]
    losses += [step() for _ in range(5)]
    assert M.counters()["compiles"] == c0                 # no recompiles
    assert M.counters()["syncs"] - s0 == 5                # one per step (opt.step)
    assert bytes(fl.get_rng_state().numpy())[:5016] == cpu    # the CPU stream untouched
    assert len({float(v) for v in losses}) > 3            # a new mask every step


# ---- the data pipeline -----------------------------------------------------------------------
def test_data_loader_orders_samplers_and_splits_are_pytorchs():
    import flowlite.compat.utils.data as fud
    import torch.utils.data as tud

    def run(lib, D):
        out = []
        lib.manual_seed(7)
        ds = D.TensorDataset(lib.arange(50))
        dl = D.DataLoader(ds, batch_size=8, shuffle=True)
        for _ in range(2):                      # a seed drawn per epoch, then randperm
            out.append([int(v) for b in dl for v in b[0].tolist()])
        g = lib.Generator().manual_seed(3)
        dl = D.DataLoader(ds, batch_size=8, shuffle=True, generator=g, drop_last=True)
        for _ in range(2):
            out.append([int(v) for b in dl for v in b[0].tolist()])
        out.append([list(map(int, p.indices)) for p in D.random_split(
            range(10), [4, 6], generator=lib.Generator().manual_seed(1))])
        out.append([list(map(int, p.indices)) for p in D.random_split(range(10), [0.3, 0.7])])
        out.append(list(D.SubsetRandomSampler([1, 5, 9, 11])))
        out.append(list(D.WeightedRandomSampler([1.0, 0.0, 2.0, 0.5], 9)))
        out.append(list(D.WeightedRandomSampler([1.0, 0.0, 2.0, 0.5], 3, replacement=False)))
        out.append(list(D.RandomSampler(range(10), replacement=True, num_samples=40)))
        out.append(list(D.RandomSampler(range(10), num_samples=25,
                                        generator=lib.Generator().manual_seed(5))))
        sampler = D.DistributedSampler(range(11), num_replicas=2, rank=1, seed=4)
        sampler.set_epoch(3)
        out.append(list(sampler))
        dl = D.DataLoader(ds, batch_size=5, sampler=D.RandomSampler(ds))
        out.append([int(v) for b in dl for v in b[0].tolist()])
        out.append(lib.rand(3).tolist())        # the global stream still in step
        return out

    for i, (a, b) in enumerate(zip(run(fl, fud), run(torch, tud))):
        assert a == b, i


def test_sampling_a_gpt_draws_pytorchs_tokens_with_one_read_per_token():
    """nanoGPT's generate (crop, temperature, top-k, softmax, multinomial, cat) with the same
    weights and seed samples PyTorch's tokens; the growing context compiles a few programs
    (a length family, then the crop taken on the host: one fixed shape)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
    from bench.torchstyle_gpt import GPTConfig, build, copy_weights
    cfg = GPTConfig(block_size=8, vocab_size=23, n_layer=1, n_head=2, n_embd=16)
    fl.manual_seed(0)
    ours = build(fl)(cfg)
    ours.eval()
    theirs = build(torch)(cfg)
    theirs.eval()
    copy_weights(ours, theirs, torch.from_numpy)
    prompt = np.array([[3, 1], [5, 9]], np.int64)
    fl.sync()
    for top_k in (None, 5):
        seed_both(5)
        c0 = M.counters()
        got = ours.generate(fl.from_numpy(prompt), 20, temperature=0.9, top_k=top_k).numpy()
        c1 = M.counters()
        want = theirs.generate(torch.from_numpy(prompt), 20, temperature=0.9, top_k=top_k)
        np.testing.assert_array_equal(got, want.numpy())
        assert c1["executions"] - c0["executions"] <= 20        # one read per token
        assert c1["compiles"] - c0["compiles"] <= 6


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sixteen_bit_floats(dtype):
    """rand/uniform_ (float32 draws rounded, a rounded-up bound given the lower one), normal_
    (float32 Box–Muller rounded; a partial last block completes the drawn uniforms instead of
    drawing 16 again) and exponential_ are PyTorch's."""
    fd, td = dt(fl, dtype), dt(torch, dtype)
    for seed in SEEDS[:3]:
        seed_both(seed)
        same(fl.rand(3000, dtype=fd).float(), torch.rand(3000, dtype=td).float())
        same(fl.zeros(500, dtype=fd).uniform_(-0.3, 0.7).float(),
             torch.zeros(500, dtype=td).uniform_(-0.3, 0.7).float())
        same(fl.randn(7, dtype=fd).float(), torch.randn(7, dtype=td).float())
        same(fl.zeros(50, dtype=fd).exponential_().float(),
             torch.zeros(50, dtype=td).exponential_().float())
        for n in (16, 17, 40, 100):
            same(fl.zeros(n, dtype=fd).normal_(0.3, 0.7).float(),
                 torch.zeros(n, dtype=td).normal_(0.3, 0.7).float(), n)
        same(fl.rand(5), torch.rand(5))
