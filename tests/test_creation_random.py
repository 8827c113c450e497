"""Creation ops (tensor, from_numpy, zeros/ones/full and *_like, arange, linspace, eye) and
randomness (rand, randn, randint, in-place uniform_/normal_/fill_/zero_): values, dtypes,
statistics, reproducibility per manual_seed, fresh values on every call, no recompiles."""

import numpy as np
import pytest

import flowlite as fl
from conftest import check_values

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")



def _int():
    return fl.tensor([1]).dtype


def test_tensor_and_from_numpy_infer_dtypes():
    assert _int() is fl.int32                            # int64 narrowed without x64
    cases = [
        (fl.tensor([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]]), fl.int32),
        (fl.tensor([1.5, 2]), np.array([1.5, 2.0], np.float32), fl.float32),
        (fl.tensor([True, False]), np.array([True, False]), fl.bool),
        (fl.tensor(3), np.array(3), fl.int32),
        (fl.tensor(2.5), np.array(2.5, np.float32), fl.float32),
        (fl.tensor([1, 2], dtype=fl.float16), np.array([1, 2], np.float16), fl.float16),
        (fl.tensor([1.7, -1.7], dtype=fl.int32), np.array([1, -1]), fl.int32),
        (fl.tensor(np.array([1, 2], np.int32)), np.array([1, 2]), fl.int32),
        (fl.from_numpy(np.array([1.0, 2.0], np.float32)), np.array([1.0, 2.0]), fl.float32),
        (fl.from_numpy(np.array([1, 2], np.uint8)), np.array([1, 2]), fl.uint8),
        (fl.from_numpy(np.zeros((2, 0))), np.zeros((2, 0)), fl.float32),
        (fl.tensor([[]]), np.zeros((1, 0), np.float32), fl.float32),
        (fl.tensor(fl.tensor([1.0, 2.0])), np.array([1.0, 2.0]), fl.float32),
    ]
    for t, ref, dt in cases:
        assert t.dtype is dt, (t.dtype, dt)
        assert not t.requires_grad
    check_values([c[0] for c in cases], [c[1] for c in cases])
    t = fl.tensor([1.0, 2.0], requires_grad=True)
    assert t.requires_grad and t.is_leaf
    with pytest.raises((TypeError, ValueError)):
        fl.tensor([[1, 2], [3]])        # ragged nested lists


def test_x64_keeps_64_bit_types(x64):
    assert fl.tensor([1, 2]).dtype is fl.int64
    assert fl.from_numpy(np.array([1.0])).dtype is fl.float64
    assert fl.tensor([1.0], dtype=fl.float64).dtype is fl.float64
    assert fl.arange(3).dtype is fl.int64
    assert fl.zeros(2, dtype=fl.float64).numpy().dtype == np.float64


def test_filled_creation_ops():
    base = fl.ones(2, 3, dtype=fl.int32)
    outs = [fl.zeros(2, 3), fl.zeros((2, 3), dtype=fl.int32), fl.zeros(()), fl.zeros([]),
            fl.ones(3, dtype=fl.bool), fl.ones((1, 2)), fl.full((2,), 3.5), fl.full((2, 1), 3),
            fl.full((2,), True), fl.full((), -1.0), fl.full((2,), 7, dtype=fl.float16),
            fl.zeros_like(base), fl.ones_like(base, dtype=fl.float32), fl.full_like(base, 7),
            fl.full_like(base, 2.5, dtype=fl.float32), fl.empty(2, 2), fl.zeros(0, 3),
            base.new_zeros(3), base.new_ones((2,)), base.new_full((2,), 4),
            fl.full((2, 2), fl.tensor(3.0))]
    refs = [np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int32), np.float32(0),
            np.float32(0), np.ones(3, bool), np.ones((1, 2), np.float32),
            np.full(2, 3.5, np.float32), np.full((2, 1), 3), np.full(2, True),
            np.float32(-1), np.full(2, 7, np.float16), np.zeros((2, 3), np.int32),
            np.ones((2, 3), np.float32), np.full((2, 3), 7, np.int32),
            np.full((2, 3), 2.5, np.float32), np.zeros((2, 2), np.float32),
            np.zeros((0, 3), np.float32), np.zeros(3, np.int32), np.ones(2, np.int32),
            np.full(2, 4, np.int32), np.full((2, 2), 3.0, np.float32)]
    assert fl.full((2,), 3).dtype is _int()
    assert fl.full((2,), True).dtype is fl.bool
    assert fl.zeros_like(base).dtype is fl.int32 and fl.full_like(base, 7).dtype is fl.int32
    check_values(outs, refs)
    z = fl.zeros(2, requires_grad=True)
    assert z.requires_grad and z.is_leaf
    with pytest.raises(ValueError, match="full"):
        fl.full((2, -1), 1.0)


def test_full_value_is_data_not_a_recompile():
    fl.full((3,), 0.25).numpy()
    before = fl.metrics.counters()["compiles"]
    for v in (0.75, 1.25, 3.0):
        np.testing.assert_allclose(fl.full((3,), v).numpy(), [v] * 3)
    assert fl.metrics.counters()["compiles"] == before


def test_arange_linspace_eye():
    outs = [fl.arange(5), fl.arange(1, 10, 3), fl.arange(0, 1, 0.25), fl.arange(5, 0, -2),
            fl.arange(0, 3, dtype=fl.float32), fl.arange(0, 1, 0.1), fl.arange(-1.5, 1.5),
            fl.arange(3, 3), fl.linspace(0, 1, 5), fl.linspace(2, 3, 1), fl.linspace(-1, 1, 4),
            fl.linspace(0, 10, 3, dtype=fl.int32), fl.eye(3), fl.eye(2, 3, dtype=fl.int32),
            fl.eye(1), fl.eye(3, 2, dtype=fl.bool)]
    refs = [np.arange(5), np.arange(1, 10, 3), np.arange(0, 1, 0.25, dtype=np.float32),
            np.arange(5, 0, -2), np.arange(3, dtype=np.float32),
            (np.arange(10) * 0.1).astype(np.float32), np.arange(-1.5, 1.5, dtype=np.float32),
            np.arange(3, 3), np.linspace(0, 1, 5, dtype=np.float32), np.array([2.0], np.float32),
            np.linspace(-1, 1, 4, dtype=np.float32), np.array([0, 5, 10]),
            np.eye(3, dtype=np.float32),
            np.eye(2, 3, dtype=int), np.eye(1, dtype=np.float32), np.eye(3, 2, dtype=bool)]
    assert fl.arange(5).dtype is _int() and fl.arange(0, 1, 0.25).dtype is fl.float32
    assert fl.linspace(0, 1, 5).dtype is fl.float32 and fl.eye(3).dtype is fl.float32
    check_values(outs, refs, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="arange"):
        fl.arange(0, 5, 0)


def test_rand_randn_randint_statistics():
    fl.manual_seed(1234)
    u = fl.rand(20000)
    n = fl.randn(200, 100)
    i = fl.randint(-3, 4, (20000,))
    h = fl.rand(1000, dtype=fl.float16)
    b = fl.randn(1000, dtype=fl.bfloat16)
    fl.sync()
    u, n, i, h, b = u.numpy(), n.numpy(), i.numpy(), h.numpy(), b.numpy()
    assert u.dtype == np.float32 and n.shape == (200, 100) and i.dtype.kind == "i"
    assert h.dtype == np.float16 and str(b.dtype) == "bfloat16"
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1.0) < 0.03
    assert abs(np.mean(n ** 3)) < 0.1                      # symmetric
    assert i.min() == -3 and i.max() == 3                 # high is exclusive
    counts = np.bincount(i + 3, minlength=7) / i.size
    assert np.all(np.abs(counts - 1 / 7) < 0.015)
    assert 0.0 <= h.astype(np.float32).min() and h.astype(np.float32).max() <= 1.0
    assert abs(b.astype(np.float32).mean()) < 0.15
    r = fl.randperm(50).numpy()
    assert sorted(r.tolist()) == list(range(50))
    with pytest.raises(ValueError, match="randint"):
        fl.randint(3, 3, (2,))
    with pytest.raises(TypeError):
        fl.rand(3, dtype=fl.int32)


def test_rng_reproducible_per_seed_and_fresh_per_call():
    fl.manual_seed(7)
    a1, b1, c1 = fl.rand(64), fl.randn(8, 8), fl.randint(0, 100, (64,))
    fl.manual_seed(7)
    a2, b2, c2 = fl.rand(64), fl.randn(8, 8), fl.randint(0, 100, (64,))
    a3 = fl.rand(64)
    fl.manual_seed(8)
    a4 = fl.rand(64)
    fl.sync()
    np.testing.assert_array_equal(a1.numpy(), a2.numpy())
    np.testing.assert_array_equal(b1.numpy(), b2.numpy())
    np.testing.assert_array_equal(c1.numpy(), c2.numpy())
    assert not np.array_equal(a1.numpy(), a3.numpy())      # the next call differs
    assert not np.array_equal(a1.numpy(), a4.numpy())      # another seed differs
    assert fl.initial_seed() == 8


@pytest.mark.parametrize("where", ["host", "program"])
def test_rng_calls_in_separate_syncs_differ_without_recompiling(where):
    if where == "program":
        with fl.random.device_draws():
            return test_rng_calls_in_separate_syncs_differ_without_recompiling("host")
    fl.manual_seed(3)
    first = fl.rand(16).numpy()
    seen = [first]
    before = fl.metrics.counters()["compiles"]
    for _ in range(4):
        seen.append(fl.rand(16).numpy())
    assert fl.metrics.counters()["compiles"] == before, "the RNG state must not be baked in"
    for k in range(1, len(seen)):
        assert not np.array_equal(seen[k], seen[k - 1])
    # and a reseed replays the same stream
    fl.manual_seed(3)
    np.testing.assert_array_equal(fl.rand(16).numpy(), first)


def test_in_place_initialisers():
    fl.manual_seed(11)
    x = fl.zeros(4000)
    same = x
    x.uniform_(2.0, 5.0)
    y = fl.empty(4000).normal_(5.0, 0.5)
    z = fl.ones(3, 2).fill_(2.5)
    zi = fl.zeros(3, dtype=fl.int32).fill_(7)
    w = fl.ones(2, 2).zero_()
    std = fl.zeros(2000).normal_()
    uni = fl.zeros(2000).uniform_()
    fl.sync()
    assert same is x
    xv, yv = x.numpy(), y.numpy()
    assert 2.0 <= xv.min() and xv.max() < 5.0 and abs(xv.mean() - 3.5) < 0.06
    assert abs(yv.mean() - 5.0) < 0.04 and abs(yv.std() - 0.5) < 0.03
    assert z.tolist() == [[2.5, 2.5]] * 3 and zi.tolist() == [7, 7, 7] and zi.dtype is fl.int32
    assert w.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert abs(std.numpy().std() - 1) < 0.06 and 0 <= uni.numpy().min() < uni.numpy().max() < 1
    # on a parameter: allowed under no_grad, refused otherwise (in-place on a leaf)
    p = fl.zeros(3, requires_grad=True)
    with fl.no_grad():
        p.uniform_(-1, 1).fill_(0.5)
    assert p.requires_grad and p.tolist() == [0.5, 0.5, 0.5]
    with pytest.raises(RuntimeError, match="in-place"):
        p.zero_()


def test_rand_like_and_grad_flags():
    t = fl.zeros(2, 3, dtype=fl.float16)
    r = fl.rand_like(t)
    assert r.shape == (2, 3) and r.dtype is fl.float16
    assert fl.randn_like(t).shape == (2, 3)
    assert fl.rand(2, requires_grad=True).requires_grad
    assert fl.randn(2, requires_grad=True).is_leaf


def test_randint_high_only_form():
    """torch.randint(high, size): the two-positional-argument form."""
    r = fl.randint(5, (100,))
    v = r.numpy()
    assert v.shape == (100,) and v.min() >= 0 and v.max() < 5


def test_generator_argument_draws_reproducibly_from_that_generator():
    # torch.randperm(n, generator=g) (minGPT's adder dataset): the same seed, the same draw
    def draws(seed):
        g = fl.Generator().manual_seed(seed)
        return (fl.randperm(50, generator=g).numpy(), fl.rand(3, 4, generator=g).numpy(),
                fl.randn(5, generator=g).numpy(), fl.randint(2, 9, (6,), generator=g).numpy())
    a, b, c = draws(1337), draws(1337), draws(7)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    assert sorted(a[0].tolist()) == list(range(50))
    assert a[1].shape == (3, 4) and ((a[1] >= 0) & (a[1] < 1)).all()
    assert a[3].min() >= 2 and a[3].max() < 9 and a[3].dtype == fl.randint(0, 2, (1,)).numpy().dtype
    with pytest.raises(TypeError, match="randperm: generator must be a flowlite.Generator"):
        fl.randperm(3, generator=np.random.default_rng(0))


@pytest.fixture
def in_programs():
    with fl.random.device_draws():
        yield


def test_randint_bounds_are_data_one_program_for_every_range(in_programs):
    # drawn in a program (device_draws; on the CPU a randint is host data): the bounds
    # travel as data, so a train and a validation split's draws run one program
    import flowlite.engine.metrics as M
    x = fl.zeros(3)
    fl.manual_seed(0)
    fl.sync()
    draws = []
    before = M.counters()["compiles"]
    for lo, hi in ((0, 100), (0, 905), (-7, 3), (10, 11)):
        r = fl.randint(lo, hi, (64,)) + x.sum().long()      # a real program, not a host read
        v = r.numpy()
        assert v.min() >= lo and v.max() < hi
        draws.append(v)
    assert M.counters()["compiles"] - before == 1
    assert (draws[3] == 10).all()


@pytest.mark.parametrize("low,high,shape,dtype", [
    (0, 90000, (32,), None), (-7, 3, (4, 5), fl.int32), (0, 2 ** 31 - 1, (1000,), None),
    (-2 ** 31, 2 ** 31 - 1, (64,), None), (5, 6, (100,), fl.float32),
    (0, (1 << 23) + 1, (300,), None), (0, 1 << 23, (257,), fl.int64), (3, 4, (), None)])
def test_integer_draws_on_cpu_are_host_data_and_in_programs_stay_in_range(low, high, shape,
                                                                          dtype):
    # on the CPU a randint is PyTorch's draw, computed on the host (get_batch iterates it
    # next: no program); inside device_draws() it is a program's draw, in range all the same
    from flowlite.engine.host_data import HostNode
    fl.manual_seed(11)
    host = fl.randint(low, high, shape, dtype=dtype)
    assert type(host._node) is HostNode
    with fl.random.device_draws():
        prog = fl.randint(low, high, shape, dtype=dtype)
    assert type(prog._node) is not HostNode
    for t in (host, prog):
        v = t.numpy()
        assert t.dtype == host.dtype and tuple(t.shape) == tuple(shape)
        assert v.min() >= low and v.max() < high


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_randperm_on_cpu_and_in_a_program_is_a_permutation(n):
    fl.manual_seed(5)
    host = fl.randperm(n).numpy()
    with fl.random.device_draws():
        prog = fl.randperm(n).numpy()
    for v in (host, prog):
        assert sorted(v.tolist()) == list(range(n))
