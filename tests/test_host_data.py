"""Host data stays on the host (flowlite/engine/host_data.py): tensors made from lists / numpy /
memmap slices, and what is sliced, indexed, stacked or concatenated from them at host-known
offsets, are assembled with numpy — no program, no per-row transfer, no graph node — and enter
the next program as one argument.  PyTorch is the oracle for values, views and errors."""
import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite.engine.host_data import HostNode, uploaded


def _c():
    c = fl.metrics.counters()
    return {k: c[k] for k in ("compiles", "executions", "ops", "host_uploads")}


def _delta(c0):
    c1 = _c()
    return {k: c1[k] - c0[k] for k in c0}


def _bigram(m, ids, block=8, batch=32):
    data = m.tensor(ids, dtype=m.long)
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]

    def get_batch(split):
        data = train_data if split == 'train' else val_data
        ix = m.randint(len(data) - block, (batch,))
        x = m.stack([data[i:i + block] for i in ix])
        y = m.stack([data[i + 1:i + block + 1] for i in ix])
        return x.to('cpu'), y.to('cpu'), ix
    return get_batch, train_data, val_data


def test_bigram_get_batch_runs_no_program_and_matches_torch():
    ids = np.random.default_rng(0).integers(0, 65, 5000).tolist()
    get_batch, train_data, val_data = _bigram(fl, ids)
    tdata = torch.tensor(ids)
    tn = int(0.9 * len(tdata))
    for split in ("train", "val", "train"):
        get_batch(split)
    c0 = _c()
    for split in ("train", "val", "train", "val"):
        x, y, ix = get_batch(split)
        d = _delta(c0)
        # the draw is computed on the host (the program's numbers); the slices, sums and
        # stacks are host data: nothing recorded, run or uploaded
        assert d["compiles"] == 0 and d["executions"] == 0 and d["host_uploads"] == 0
        assert d["ops"] == 0
        assert type(x._node) is HostNode and type(y._node) is HostNode
        src = tdata[:tn] if split == "train" else tdata[tn:]
        tix = torch.tensor(ix.tolist())
        np.testing.assert_array_equal(x.numpy(), torch.stack([src[i:i + 8] for i in tix]))
        np.testing.assert_array_equal(y.numpy(), torch.stack([src[i + 1:i + 9] for i in tix]))
        c0 = _c()


def test_the_host_batch_is_the_one_the_recorded_path_gives():
    ids = np.arange(3000) % 97
    data = fl.tensor(ids.tolist())
    fl.manual_seed(7)
    ix = fl.randint(len(data) - 8, (16,))
    assert type(ix._node) is HostNode                   # drawn on the host (PyTorch's draw)
    x = fl.stack([data[i:i + 8] for i in ix])
    lazy = (data + 0)[ix[:, None] + fl.arange(8)]       # gathered inside a program
    np.testing.assert_array_equal(x.numpy(), lazy.numpy())
    with fl.random.device_draws():
        ix2 = fl.randint(len(data) - 8, (16,))          # drawn by a program
    assert type(ix2._node) is not HostNode
    x2 = fl.stack([data[i:i + 8] for i in ix2])
    np.testing.assert_array_equal(x2.numpy(), (data + 0)[ix2[:, None] + fl.arange(8)].numpy())


def test_nanogpt_get_batch_from_a_memmap_runs_no_program(tmp_path):
    path = tmp_path / "train.bin"
    np.random.default_rng(1).integers(0, 50000, 4000).astype(np.uint16).tofile(path)
    block, batch = 64, 12

    def get_batch():
        data = np.memmap(path, dtype=np.uint16, mode='r')
        ix = fl.randint(len(data) - block, (batch,))
        x = fl.stack([fl.from_numpy((data[i:i + block]).astype(np.int64)) for i in ix])
        y = fl.stack([fl.from_numpy((data[i + 1:i + 1 + block]).astype(np.int64)) for i in ix])
        return x.to('cpu'), y.to('cpu'), ix

    get_batch()
    c0 = _c()
    x, y, ix = get_batch()
    assert _delta(c0) == {"compiles": 0, "executions": 0, "ops": 0, "host_uploads": 0}
    raw = np.fromfile(path, dtype=np.uint16).astype(np.int64)
    want = np.stack([raw[i:i + block] for i in ix.tolist()])
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(y.numpy(), np.stack([raw[i + 1:i + 1 + block]
                                                       for i in ix.tolist()]))


def test_a_host_batch_is_one_argument_of_the_cached_step_never_a_constant():
    ids = np.random.default_rng(2).integers(0, 11, 2000).tolist()
    get_batch, _, _ = _bigram(fl, ids, batch=4)
    fl.manual_seed(0)
    model = fl.nn.Sequential(fl.nn.Embedding(11, 8), fl.nn.Linear(8, 11))
    opt = fl.optim.AdamW(model.parameters(), lr=1e-2)
    compiles, execs, losses = [], [], []
    for it in range(6):
        c0 = _c()
        xb, yb, _ = get_batch("train")
        logits = model(xb)
        loss = fl.nn.functional.cross_entropy(logits.view(-1, 11), yb.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        d = _delta(c0)
        compiles.append(d["compiles"])
        execs.append(d["executions"])
        # the batch went into the step as the call's argument
        assert not uploaded(xb._node) and not uploaded(yb._node)
        assert d["host_uploads"] == 0 or it < 2
    assert compiles[2:] == [0] * 4              # a new batch never recompiles
    assert execs[2:] == [1] * 4                 # the step (the draw is numpy on the host)
    assert len(set(losses)) == len(losses)      # each step saw its own batch


def test_a_constant_used_every_step_is_uploaded_once():
    w = fl.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    x = fl.randn(2, 3) * 1.0        # (a program's value: the draw itself is host data)
    fl.sync()
    c0 = _c()
    for _ in range(4):
        (x @ w).sum().item()
    assert _delta(c0)["host_uploads"] == 1      # the second use on; never again


def test_eval_loop_writes_read_values_on_the_host():
    with fl.no_grad():
        for _ in range(2):
            losses = fl.zeros(7)
            c0 = _c()
            for k in range(7):
                losses[k] = k * 0.1 + 1 / 3
            d = _delta(c0)
            assert d["ops"] == 0 and d["executions"] == 0 and d["compiles"] == 0
            assert type(losses._node) is HostNode
            c0 = _c()
            out = losses.mean()
            got = f"{out:.6f}"
        assert _delta(c0)["compiles"] == 0 and _delta(c0)["executions"] == 1
    t = torch.zeros(7)
    for k in range(7):
        t[k] = k * 0.1 + 1 / 3
    np.testing.assert_array_equal(losses.numpy(), t.numpy())
    assert got == f"{t.mean():.6f}"


@pytest.mark.parametrize("n", [10, 1 << 15])        # a host write, and a recorded one
def test_a_slice_written_in_place_writes_its_base_as_in_pytorch(n):
    outs = []
    for m in (torch, fl):
        data = m.tensor(list(range(n)))
        a = data[2:5]
        a[0] = 7                              # through the view into data
        b = data[3:6]
        data[4] = -1                          # into data: a and b see it
        a += 100
        outs.append((data[:8].tolist(), a.tolist(), b.tolist(), data._version > 0))
    assert outs[0] == outs[1]


def test_rows_of_an_iterated_tensor_are_views_as_in_pytorch():
    outs = []
    for m in (torch, fl):
        t = m.tensor([[1, 2], [3, 4], [5, 6]])
        rows = list(t)
        t[0, 1] = 20                          # the root written: rows see it
        i = m.tensor([4, 5, 6])[1]            # a 0-d element indexes as an int (a view)
        s = t[i - 4]
        s[1] = -9                             # through s into t (and rows[1])
        if m is fl:
            assert type(t._node) is HostNode and type(s._node) is HostNode
        rows[1][0] += 10                      # (recorded: the root's value becomes pending)
        rows[2] += 1
        outs.append((t.tolist(), [r.tolist() for r in rows], s.tolist()))
    assert outs[0] == outs[1]


_INDICES = {
    "neg-start": lambda i: (slice(i - 8, None),), "step": lambda i: (slice(1, i + 6, i),),
    "neg-int": lambda i: (i - 4,), "col": lambda i: (slice(None), i - 1),
    "none-ellipsis": lambda i: (None, i - 2, Ellipsis), "bounds": lambda i: (slice(i, i + 2),),
    "ellipsis-step": lambda i: (Ellipsis, slice(None, None, i - 1)),
    "empty": lambda i: (slice(i + 97, i + 197),), "int-and-slice": lambda i: (i, slice(-2, None)),
    "numpy-int": lambda i: (np.int64(-2), slice(np.int32(1), None)),
}


@pytest.mark.parametrize("name", sorted(_INDICES))
def test_host_indexing_at_offsets_read_from_tensors_matches_torch(name):
    idx = _INDICES[name]
    base = np.arange(60).reshape(10, 6)
    x = fl.tensor(base)
    got = x[idx(fl.tensor([3])[0] + 0)]       # (a 0-d element of host data, as `for i in ix`)
    want = torch.tensor(base)[idx(torch.tensor(3))]
    assert type(got._node) is HostNode
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_python_int_indices_of_host_data_stay_a_recorded_view():
    # a program's static view (`mask[:t, :t]`: one length family, flowlite.buckets); its values
    # are still read on the host without a program
    mask = fl.from_numpy(np.tril(np.ones((6, 6), np.float32)))
    c0 = _c()
    m = mask[:3, :3]
    assert m.is_pending and _delta(c0)["ops"] >= 1
    np.testing.assert_array_equal(m.numpy(), np.tril(np.ones((3, 3))))
    assert _delta(c0)["executions"] == 0


@pytest.mark.parametrize("fn", [
    lambda m, t: t[10], lambda m, t: t[-11], lambda m, t: t[::-1], lambda m, t: t[::0],
    lambda m, t: t[1.5:3], lambda m, t: t[0, 0, 0],
    lambda m, t: m.stack([t[:2], t[:3]]), lambda m, t: m.cat([t[:2], t[:2].view(1, 2)]),
    lambda m, t: t[m.tensor(0.0):2],
], ids=["past-end", "before-start", "neg-step", "zero-step", "float-bound", "too-many",
        "stack-shapes", "cat-ranks", "float-tensor-bound"])
def test_host_indexing_errors_are_pytorchs(fn):
    with pytest.raises(Exception) as want:
        fn(torch, torch.arange(10))
    with pytest.raises(Exception) as got:
        fn(fl, fl.tensor(list(range(10))))
    assert isinstance(got.value, type(want.value)), (got.value, want.value)


def test_stack_and_cat_of_mixed_host_dtypes_promote_as_pytorch():
    for m in (torch, fl):
        a = m.tensor([1, 2], dtype=m.int32)
        b = m.tensor([0.5, 2.5])
        c = m.tensor([True, False])
        s, k = m.stack([a, b, c]), m.cat([c, a])
        if m is torch:
            want = (s.dtype, s.tolist(), k.dtype, k.tolist())
    assert (str(s.dtype).split(".")[-1], s.tolist(), str(k.dtype).split(".")[-1], k.tolist()) \
        == (str(want[0]).split(".")[-1], want[1], str(want[2]).split(".")[-1], want[3])
    assert type(s._node) is HostNode


def test_host_data_is_read_only_and_copied_from_numpy():
    arr = np.arange(4)
    t = fl.from_numpy(arr)
    arr[0] = 99                                   # flowlite copies (see README)
    assert t.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        t.numpy()[1] = 5                          # a node's value never changes under it
    assert t[1:3].tolist() == [1, 2]


def test_int_arithmetic_on_host_elements_wraps_as_xla():
    big = fl.tensor([2 ** 31 - 1], dtype=fl.int32)
    got = next(iter(big)) + 1
    assert type(got._node) is HostNode and int(got) == -2 ** 31
    xla = (big + fl.tensor([1], dtype=fl.int32)).sum()
    assert int(xla) == int(got)


def test_get_batch_in_x64_mode_keeps_int64_and_matches_torch(x64):
    ids = np.random.default_rng(3).integers(0, 1000, 3000).tolist()
    get_batch, _, _ = _bigram(fl, ids, block=5, batch=6)
    x, y, ix = get_batch("train")
    assert x.dtype is fl.int64 and type(x._node) is HostNode
    src = torch.tensor(ids)[:int(0.9 * len(ids))]
    np.testing.assert_array_equal(x.numpy(), torch.stack([src[i:i + 5] for i in ix.tolist()]))
    # host arithmetic wraps at int64 as XLA does
    big = fl.tensor([2 ** 63 - 1])
    assert int(next(iter(big)) + 1) == -2 ** 63


def _normalize(m, img, mean=(0.1307,), std=(0.3081,)):
    """torchvision's ToTensor + Normalize, as the pytorch/examples datasets apply them."""
    t = m.from_numpy(np.ascontiguousarray(img[None].astype(np.float32) / 255.0))
    mu = m.tensor(mean, dtype=t.dtype).reshape(-1, 1, 1)
    sd = m.tensor(std, dtype=t.dtype).reshape(-1, 1, 1)
    return (t - mu) / sd


class _Transformed:
    """A map-style dataset whose items are made by `fn(i)` (a per-sample transform)."""

    def __init__(self, fn, n):
        self.fn, self.n = fn, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.fn(i)


def _load(m, fn, n=1, batch_size=None):
    """What m's DataLoader yields for a dataset of `fn(i)` (one batch)."""
    return next(iter(m.utils.data.DataLoader(_Transformed(fn, n), batch_size=batch_size)))


def test_a_per_sample_transform_in_a_data_loader_is_done_on_the_host():
    """(t - mean) / std of host data inside a DataLoader runs in numpy as the batch is made:
    the batch is host data, equal to PyTorch's bit for bit, and reaches the step as one
    argument — no per-sample nodes or operands in the program (mnist's 512-sample evaluation
    batch made a 2,573-node program that compiled for 15 s)."""
    imgs = np.random.default_rng(0).integers(0, 256, (16, 28, 28)).astype(np.uint8)
    c0 = _c()
    batch = _load(fl, lambda i: _normalize(fl, imgs[i]), 16, 16)
    assert isinstance(batch._node, HostNode)
    d = _delta(c0)
    assert (d["compiles"], d["executions"], d["host_uploads"]) == (0, 0, 0), d
    want = _load(torch, lambda i: _normalize(torch, imgs[i]), 16, 16)
    np.testing.assert_array_equal(batch.numpy(), want.numpy())
    w = fl.ones(16, 1, 28, 28, requires_grad=True)
    loss = (batch * w).sum()
    loss.backward()
    loss.item()
    n = fl.debug.executables()[-1]["inputs"]
    assert n <= 2, n            # the batch and w, not 16 samples x 3 operands


@pytest.mark.parametrize("case", ["int", "int true division", "scalar on the left",
                                  "broadcast", "max/min", "torchvision ToTensor",
                                  "torchvision Normalize"])
def test_host_arithmetic_in_a_data_loader_matches_torch(case):
    rng = np.random.default_rng(1)
    a = rng.integers(-2 ** 20, 2 ** 20, (4, 3))
    f = rng.standard_normal((4, 3)).astype(np.float32)
    g = rng.standard_normal((1, 3)).astype(np.float32)
    img = rng.integers(0, 256, (5, 4, 3)).astype(np.uint8)
    ops = {"int": lambda m: m.tensor(a) * 4 + m.tensor(a) - 7,
           "int true division": lambda m: m.tensor(a) / 7,
           "scalar on the left": lambda m: 3.5 - m.from_numpy(f),
           "broadcast": lambda m: m.from_numpy(f) * m.from_numpy(g),
           "max/min": lambda m: m.maximum(m.from_numpy(f),
                                          m.minimum(m.from_numpy(f), m.from_numpy(g))),
           # torchvision's ToTensor of an HWC uint8 image: a view, a cast, a division
           "torchvision ToTensor": lambda m: m.from_numpy(img).permute(2, 0, 1).contiguous()
           .to(dtype=m.float32).div(255),
           # torchvision's Normalize: in place on a clone, mean/std as (C, 1, 1) views
           "torchvision Normalize": lambda m: m.from_numpy(f[:3, None, :]).clone()
           .sub_(m.as_tensor([0.5, 0.4, 0.3]).view(-1, 1, 1))
           .div_(m.as_tensor([0.2, 0.3, 0.25]).view(-1, 1, 1))}
    ours = _load(fl, lambda i: ops[case](fl))
    want = _load(torch, lambda i: ops[case](torch))
    assert isinstance(ours._node, HostNode)
    assert np.dtype(ours.numpy().dtype).kind == np.dtype(want.numpy().dtype).kind
    np.testing.assert_array_equal(ours.numpy(), want.numpy())


def test_host_arithmetic_stays_recorded_where_it_must():
    """Outside a DataLoader arithmetic is the program's (a step built from small tensors); in
    one, tensors tracked by autograd, reduced-precision floats, bulk data, float -> int casts
    and arithmetic with pending values are recorded as before."""
    x = fl.from_numpy(np.ones((2, 3), np.float32))
    assert not isinstance((x * 2)._node, HostNode)
    big = fl.from_numpy(np.ones((1 << 20) + 1, np.float32))
    w = fl.ones(2, 3, requires_grad=True)
    recorded = [lambda: x * w, lambda: x.to(fl.bfloat16) * 2, lambda: big * 2,
                lambda: x * x.exp(), lambda: (x * 2.7).to(fl.int32)]
    for make in recorded:
        assert not isinstance(_load(fl, lambda i: make())._node, HostNode)
    assert isinstance(_load(fl, lambda i: x * 2)._node, HostNode)
