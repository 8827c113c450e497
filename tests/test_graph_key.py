"""The graph key recorded with the ops (flowlite/engine/graph_key.py): a steady step is keyed
without walking its graph, and every case the recorded key can't name falls back to the
walk with the same values."""
from __future__ import annotations

import threading
import weakref

import numpy as np
import pytest

import flowlite as fl
from flowlite import nn, optim
from flowlite.engine import cache, executor
from flowlite.nn import functional as F


@pytest.fixture
def walks(monkeypatch):
    """How many graph walks the executor made (a list, counted from now)."""
    count = [0]
    real = executor._walk_marked

    def counting(roots):
        count[0] += 1
        return real(roots)
    monkeypatch.setattr(executor, "_walk_marked", counting)
    return count


def _model(seed=0):
    fl.manual_seed(seed)
    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    return m, optim.Adam(m.parameters(), lr=1e-2)


def _step(m, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    return loss


def _data(i):
    rng = np.random.default_rng(i)
    return fl.tensor(rng.normal(size=(8, 6)).astype(np.float32)), \
        fl.tensor(rng.integers(0, 4, size=(8,)))


def test_a_steady_training_step_is_keyed_without_walking_its_graph(walks):
    m, opt = _model()
    for i in range(3):
        _step(m, opt, *_data(i)).item()
    c0 = fl.metrics.counters()
    walks[0] = 0
    losses = [_step(m, opt, *_data(i)) for i in range(3, 8)]
    assert [x.item() for x in losses]      # (the reads sync nothing new)
    assert walks[0] == 0
    c1 = fl.metrics.counters()
    assert c1["compiles"] == c0["compiles"]
    assert c1["executions"] - c0["executions"] == 5
    # the same run, every sync walked: the same executable, so bit-identical
    m2, opt2 = _model()
    ref = []
    for i in range(8):
        cache._by_stream.clear()
        ref.append(_step(m2, opt2, *_data(i)).item())
    assert [x.item() for x in losses] == ref[3:]
    for a, b in zip(m.parameters(), m2.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_recorded_but_unused_ops_do_not_recompile():
    m, opt = _model()
    x, y = _data(0)
    c0 = None
    for i in range(8):
        if i == 2:
            c0 = fl.metrics.counters()
        opt.zero_grad()
        out = m(x)
        if i > 2 and i % 2:
            (out * 3).sum()            # recorded, never used: a dead node in the key
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        loss.item()
    assert fl.metrics.counters()["compiles"] == c0["compiles"]
    assert len(cache._by_stream) >= 2   # two recorded keys, one executable


def test_leaves_are_wired_by_position_on_a_keyed_sync(walks):
    a = fl.tensor([1.0, 2.0, 3.0])
    b = fl.tensor([10.0, 20.0, 30.0])
    for _ in range(3):          # learned once, then keyed without a walk
        np.testing.assert_array_equal((a - b).numpy(), [-9.0, -18.0, -27.0])
        np.testing.assert_array_equal((b - a).numpy(), [9.0, 18.0, 27.0])
        np.testing.assert_array_equal((a * a).numpy(), [1.0, 4.0, 9.0])
        np.testing.assert_array_equal((a * b).numpy(), [10.0, 40.0, 90.0])
    walks[0] = 0
    np.testing.assert_array_equal((b * b).numpy(), [100.0, 400.0, 900.0])
    np.testing.assert_array_equal((b - a).numpy(), [9.0, 18.0, 27.0])
    assert walks[0] == 0


def test_pending_work_of_another_thread_falls_back_to_the_walk(walks):
    a = fl.tensor([1.0, 2.0])
    for _ in range(2):
        (a * 2 + 1).numpy()
    box = []
    t = threading.Thread(target=lambda: box.append(a * 2))   # recorded in that thread
    t.start()
    t.join()
    walks[0] = 0
    np.testing.assert_array_equal((box[0] + 1).numpy(), [3.0, 5.0])
    assert walks[0] == 1


def test_a_leaf_renumbered_mid_step_by_another_thread_keeps_values_right():
    a = fl.tensor([1.0, 2.0])
    b = fl.tensor([5.0, 7.0])
    for _ in range(2):          # learn the key of "u = a * 2; v = b * 3" (two leaves)
        u, v = a * 2, b * 3
        fl.sync()
        np.testing.assert_array_equal(u.numpy(), [2.0, 4.0])
    u = a * 2
    t = threading.Thread(target=lambda: (a + 1).numpy())    # its sync renumbers `a`
    t.start()
    t.join()
    v = a * 3                   # `a` read again: a second entry, as `b` was before
    fl.sync()
    np.testing.assert_array_equal(u.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(v.numpy(), [3.0, 6.0])


def test_a_graph_inspected_mid_step_keeps_values_right():
    a = fl.tensor([1.0, 2.0])
    for _ in range(3):
        x = a * 2
        if _ == 2:
            fl.debug.graph(x)       # walks (renumbers) x and a mid-step
        y = x + a
        np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])


def test_work_rolled_back_mid_step_raises_instead_of_running_a_known_key(monkeypatch):
    # a failed deferred step rolls back the work recorded since: that work must raise, even
    # though the same ops were keyed (and run) before
    monkeypatch.setattr(executor, "_finished", lambda flags: flags.block_until_ready() is not None)
    fl.manual_seed(0)
    m = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
    opt = optim.SGD(m.parameters(), lr=0.1)
    w = m[1].weight

    def step(idx):
        with fl.enable_grad():
            opt.zero_grad()
            F.cross_entropy(m(fl.tensor(idx)), fl.tensor([1, 2])).backward()
            opt.step()

    with fl.no_grad():      # (no tape: z alone is the syncs' output)
        for _ in range(3):  # learn the key of "y = w * 2; z = y + 1; z.item()"
            step([1, 2])
            z = (w * 2) + 1
            z.numpy()
        step([1, 12])       # fails; its checks are read at the next host read
        y = w * 2
        with pytest.raises(IndexError, match="index 12"):
            y.numpy()       # raises, and rolls y back
        z = y + 1
        with pytest.raises(IndexError, match="index 12"):
            z.numpy()       # y's failure, not w * 2 + 1
    step([1, 2])
    np.testing.assert_allclose(((w * 2) + 1).numpy(), w.numpy() * 2 + 1, rtol=1e-6)


def test_scan_bodies_do_not_end_the_keying(walks):
    w = fl.tensor(np.eye(3, dtype=np.float32) * 0.5)

    def body(h, x):
        h = (h @ w + x).tanh()
        return h, h

    xs = fl.tensor(np.ones((4, 3), np.float32))
    h0 = fl.zeros(3)
    ref = None
    for i in range(4):
        if i == 2:
            walks[0] = 0
        h, ys = fl.scan(body, h0, xs)
        got = ys.numpy()
        ref = got if ref is None else ref
        np.testing.assert_array_equal(got, ref)
    assert walks[0] == 0


def test_the_recorded_key_keeps_no_leaf_alive():
    b = fl.tensor([3.0, 4.0])
    b * 2                      # read by the recorded key, the result dropped
    node = weakref.ref(b._node)
    del b
    assert node() is None      # freed before any sync, as without the key
    np.testing.assert_array_equal((fl.tensor([1.0]) + 1).numpy(), [2.0])


def test_a_node_two_pending_tensors_share_is_one_output_of_a_keyed_sync():
    x = fl.tensor([1.0, 2.0, 3.0])
    y = x * 2
    alias = y.detach()                 # another pending handle on y's node
    z = y + 1
    stream = executor.rt.local.stream
    roots = executor.live_pending_roots(None, stream)
    assert len(roots) == len({id(n) for n in roots}) == 2     # y's node once, z's
    for t in (y, alias, z):            # (the pending list was taken: register them again)
        executor.register_pending(weakref.ref(t))
    np.testing.assert_array_equal(alias.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(z.numpy(), [3.0, 5.0, 7.0])
    assert y._node is alias._node
