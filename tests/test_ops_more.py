"""More tensor ops against PyTorch: asin/acos/atan/sinh/cosh/asinh/acosh/atanh/exp2/log2 (and
their aliases and in-place forms), lerp, roll, repeat_interleave, meshgrid, logcumsumexp,
var_mean/std_mean, << and >>, scatter(reduce=...), type_as, matmul's 0-d error, linspace's
exact values, and multinomial (statistics, reproducibility, laziness, no recompiles)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import flowlite as fl
from conftest import check_fd, check_grad
from _torch_oracle import compare

pytestmark = [pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning"),
              pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")]

UNIT = np.linspace(-0.9, 0.9, 12).reshape(3, 4)          # asin/acos/atanh domain
ABOVE1 = np.linspace(1.1, 4.0, 12).reshape(3, 4)         # acosh domain
WIDE = np.linspace(-3.0, 3.0, 12).reshape(3, 4)
POS = np.linspace(0.2, 9.0, 12).reshape(3, 4)

MATH = [("asin", UNIT), ("acos", UNIT), ("atan", WIDE), ("sinh", WIDE), ("cosh", WIDE),
        ("asinh", WIDE), ("acosh", ABOVE1), ("atanh", UNIT), ("exp2", WIDE), ("log2", POS)]


def _math(m):
    return lambda *xs: tuple(getattr(m, name)(x) for (name, _), x in zip(MATH, xs))


def test_math_values_and_grads_vs_pytorch(x64):
    compare(_math(fl), _math(torch), *[a for _, a in MATH], rtol=1e-12, atol=1e-12)


def test_math_float32_methods_aliases_and_inplace():
    arrays = [a.astype(np.float32) for _, a in MATH]
    compare(lambda *xs: tuple(getattr(x, n)() for (n, _), x in zip(MATH, xs)),
            lambda *xs: tuple(getattr(x, n)() for (n, _), x in zip(MATH, xs)), *arrays,
            rtol=2e-6, atol=2e-6)
    for alias in ("arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh"):
        x = ABOVE1 if alias == "arccosh" else UNIT
        compare(lambda t: (getattr(fl, alias)(t), getattr(t, alias)()),
                lambda t: (getattr(torch, alias)(t), getattr(t, alias)()),
                x.astype(np.float32), grad=False, rtol=2e-6, atol=2e-6)
    t = fl.from_numpy(UNIT.astype(np.float32))
    t.asin_()
    np.testing.assert_allclose(t.numpy(), np.arcsin(UNIT).astype(np.float32), rtol=2e-6)
    # integers become the default float, as in PyTorch
    compare(lambda t: (fl.exp2(t), fl.log2(t), t.atan()),
            lambda t: (torch.exp2(t), torch.log2(t), t.atan()),
            np.array([1, 2, 8], np.int64), grad=False)


def test_math_grads_against_jax_and_second_order(x64):
    check_grad(lambda a, b, c: (fl.asin(a) * fl.acosh(b), fl.atanh(a) + fl.exp2(c),
                                fl.log2(b) * fl.cosh(c)),
               lambda a, b, c: (jnp.arcsin(a) * jnp.arccosh(b), jnp.arctanh(a) + jnp.exp2(c),
                                jnp.log2(b) * jnp.cosh(c)), UNIT, ABOVE1, WIDE)
    check_fd(lambda a: fl.sinh(a).asinh().atan().acos(), UNIT[:1] * 0.5)


def test_lerp_scalar_and_tensor_weight(x64):
    g = np.random.default_rng(0)
    a, b = g.standard_normal((3, 4)), g.standard_normal((3, 4))
    w = g.uniform(-0.5, 1.5, (3, 4))

    def f(m):
        return lambda x, y, z: (m.lerp(x, y, 0.3), m.lerp(x, y, 0.75), x.lerp(y, z),
                                m.lerp(x, y, z[:1]), m.lerp(x, y, 1.0))
    compare(f(fl), f(torch), a, b, w, rtol=1e-12, atol=1e-12)
    # float32: PyTorch's kernel evaluates from `end` for |w| >= 0.5 (lerp(a, b, 1) == b)
    compare(f(fl), f(torch), *(v.astype(np.float32) for v in (a, b, w)), rtol=2e-6, atol=1e-6)
    t = fl.from_numpy(a)
    t.lerp_(fl.from_numpy(b), 0.25)
    np.testing.assert_allclose(t.numpy(), torch.lerp(torch.from_numpy(a),
                                                     torch.from_numpy(b), 0.25).numpy())


def test_roll_repeat_interleave_meshgrid(x64):
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 5

    def f(m):
        return lambda t: (m.roll(t, 1), m.roll(t, -2, 1), m.roll(t, (1, -1), (0, 2)),
                          t.roll(5, -1), m.repeat_interleave(t, 2), t.repeat_interleave(3, 1),
                          m.repeat_interleave(t, m.tensor([1, 0, 2]), dim=1),
                          m.repeat_interleave(t, m.tensor([2, 1]), dim=0, output_size=3),
                          m.repeat_interleave(t, m.tensor([3]), dim=2))
    compare(f(fl), f(torch), x)
    compare(lambda r: fl.repeat_interleave(r), lambda r: torch.repeat_interleave(r),
            np.array([2, 0, 3]), grad=False)
    a, b, c = np.arange(3.0), np.arange(2.0) + 10, np.array(7.0)
    for ind in ("ij", "xy"):
        compare(lambda p, q, r: fl.meshgrid(p, q, r, indexing=ind),
                lambda p, q, r: torch.meshgrid(p, q, r, indexing=ind), a, b, c)
        compare(lambda p, q: fl.meshgrid([p, q], indexing=ind),
                lambda p, q: torch.meshgrid([p, q], indexing=ind), a, b)


def test_repeat_interleave_tensor_repeats_sync_unless_output_size():
    x = fl.arange(6).reshape(3, 2)
    # pending, and not a few exact steps from data (those are read on the host: host_eval)
    reps = fl.tensor([1, 3, 3]) - fl.tensor([0, 1, 3]).cumsum(0) + fl.tensor([0, 0, 1])
    before = fl.metrics.counters()["syncs"]
    lazy = fl.repeat_interleave(x, reps, dim=0, output_size=3)
    assert lazy.is_pending and fl.metrics.counters()["syncs"] == before
    eager = fl.repeat_interleave(x, reps, dim=0)    # reads the repeats: one sync
    assert fl.metrics.counters()["syncs"] == before + 1
    assert lazy.tolist() == eager.tolist() == [[0, 1], [2, 3], [2, 3]]
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        fl.repeat_interleave(x, fl.tensor([1, -1, 0]), dim=0)
    with pytest.raises(RuntimeError, match="same size as input"):
        fl.repeat_interleave(x, fl.tensor([1, 1]), dim=0)


def test_logcumsumexp_values_and_grads(x64):
    g = np.random.default_rng(1)
    x = g.standard_normal((3, 5)) * 4
    x[0, :2] = [-800.0, 800.0]       # exp over/underflows; the scan must not
    compare(lambda t: (fl.logcumsumexp(t, 1), t.logcumsumexp(0)),
            lambda t: (torch.logcumsumexp(t, 1), t.logcumsumexp(0)), x, rtol=1e-10, atol=1e-10)
    check_grad(lambda t: fl.logcumsumexp(t, -1),
               lambda t: jax.lax.cumlogsumexp(t, axis=1), x[1:])
    check_fd(lambda t: fl.logcumsumexp(t, 0), x[1:, :3])
    compare(lambda t: fl.logcumsumexp(t, 0), lambda t: torch.logcumsumexp(t, 0),
            x.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_var_mean_std_mean(x64):
    x = np.random.default_rng(2).standard_normal((3, 4, 5))

    def f(m):
        return lambda t: (m.var_mean(t), m.std_mean(t, 1), m.var_mean(t, (0, 2), correction=0),
                          m.std_mean(t, dim=-1, keepdim=True, correction=2),
                          m.var_mean(t, 1, unbiased=False))
    compare(f(fl), f(torch), x, rtol=1e-12, atol=1e-12)


def test_shifts_follow_pytorch():
    g = np.random.default_rng(3)
    for dt in (np.int32, np.int8, np.uint8, np.int16):
        info = np.iinfo(dt)
        x = g.integers(info.min, info.max, (4, 6), endpoint=True).astype(dt)
        bits = np.iinfo(dt).bits
        s = g.integers(-2, bits + 3, (4, 6)).astype(dt if info.min < 0 else np.uint8)
        if info.min == 0:
            s = np.clip(s, 0, None).astype(dt)

        def f(m):
            return lambda a, b: (a << b, a >> b, m.bitwise_left_shift(a, 3), a >> 1,
                                 a.bitwise_right_shift(b), 1 << (b % 4))
        compare(f(fl), f(torch), x, s, grad=False)
    t = fl.tensor([1, 2, 3])
    t <<= 2
    t >>= 1
    assert t.tolist() == [2, 4, 6]
    assert (fl.tensor([True]) << 1).tolist() == [2]
    for bad in (lambda: fl.tensor([1.0]) << 1, lambda: fl.tensor([1, 2]) << 2.5,
                lambda: fl.tensor([4]) >> fl.tensor([1.0])):
        with pytest.raises(TypeError, match="shift.*floating"):
            bad()


def test_scatter_reduce_multiply_and_add():
    idx = np.array([[0, 1, 0], [2, 2, 1]])
    src = np.arange(1.0, 7.0).reshape(2, 3).astype(np.float32)
    base = np.full((3, 3), 2.0, np.float32)

    def f(m):
        return lambda b, i, s: (b.scatter(0, i, s, reduce="multiply"),
                                m.scatter(b, 1, i, s, reduce="add"),
                                b.scatter(0, i, 3.0, reduce="multiply"),
                                b.scatter(1, i, 0.5, reduce="add"))
    compare(f(fl), f(torch), base, idx, src, grad=False)
    t = fl.from_numpy(base)
    t.scatter_(0, fl.from_numpy(idx), fl.from_numpy(src), reduce="multiply")
    np.testing.assert_array_equal(t.numpy(), torch.from_numpy(base).scatter(
        0, torch.from_numpy(idx), torch.from_numpy(src), reduce="multiply").numpy())
    s = fl.from_numpy(src).requires_grad_()
    y = fl.from_numpy(base).scatter(0, fl.from_numpy(idx), s, reduce="multiply")
    with pytest.raises(RuntimeError, match="scatter\\(reduce='multiply'\\).*not implemented"):
        y.sum().backward()
    with pytest.raises(ValueError, match="reduce must be 'add' or 'multiply'"):
        fl.from_numpy(base).scatter(0, fl.from_numpy(idx), 1.0, reduce="mean")


def test_type_as_and_matmul_0d_error():
    a, b = fl.tensor([1.5, -2.5]), fl.tensor([1, 2], dtype=fl.int32)
    assert a.type_as(b).dtype is fl.int32 and a.type_as(b).tolist() == [1, -2]
    assert b.type_as(a).dtype is fl.float32
    for x, y, msg in ((fl.tensor(2.0), fl.ones(3), "0D and 1D"),
                      (fl.ones(3), fl.tensor(2.0), "1D and 0D"),
                      (fl.tensor(1.0), fl.tensor(2.0), "0D and 0D")):
        with pytest.raises(RuntimeError, match="both arguments to matmul need to be at least "
                                               "1D, but they are " + msg):
            x @ y
        with pytest.raises(RuntimeError) as torch_err:
            torch.matmul(torch.ones(x.shape), torch.ones(y.shape))
        assert msg in str(torch_err.value)


LINSPACE = [(0, 1, 20), (-1, 1, 20), (-3.7, 2.2, 33), (1e-3, 1e3, 100), (-10, 10, 101),
            (5, -5, 21), (0.1, 0.9, 11), (2, 2, 5), (0, 1, 1), (0, 1, 0), (-7.3, 11.9, 1000)]


def test_linspace_values_are_pytorchs_exactly():
    before = fl.linspace(-1, 1, 20).numpy()       # the case: used to differ in 9
    assert (before == torch.linspace(-1, 1, 20).numpy()).all()
    outs = [fl.linspace(a, b, n) for a, b, n in LINSPACE]
    outs += [fl.linspace(a, b, n, dtype=fl.int32) for a, b, n in LINSPACE]
    fl.sync()
    refs = [torch.linspace(a, b, n) for a, b, n in LINSPACE]
    refs += [torch.linspace(a, b, n, dtype=torch.int32) for a, b, n in LINSPACE]
    for o, r, case in zip(outs, refs, LINSPACE * 2):
        np.testing.assert_array_equal(o.numpy(), r.numpy(), err_msg=str(case))
    # float16/bfloat16: within one unit in the last place of PyTorch's
    for dt, tdt in ((fl.float16, torch.float16), (fl.bfloat16, torch.bfloat16)):
        got = fl.linspace(-3.7, 2.2, 33, dtype=dt).to(fl.float32).numpy()
        ref = torch.linspace(-3.7, 2.2, 33, dtype=tdt).float().numpy()
        np.testing.assert_allclose(got, ref, rtol=2 ** -7 if dt is fl.bfloat16 else 2 ** -10,
                                   atol=1e-2)


def test_linspace_float64_and_int64_exact(x64):
    g = np.random.default_rng(4)
    for _ in range(5):
        a, b = g.uniform(-50, 50, 2)
        n = int(g.integers(2, 400))
        for dt, tdt in ((fl.float64, torch.float64), (fl.int64, torch.int64),
                        (fl.float32, torch.float32)):
            np.testing.assert_array_equal(fl.linspace(a, b, n, dtype=dt).numpy(),
                                          torch.linspace(a, b, n, dtype=tdt).numpy())


# ---- multinomial -------------------------------------------------------------------------------
def _freq(samples, k):
    return np.bincount(samples.reshape(-1), minlength=k) / samples.size


def test_multinomial_with_replacement_matches_the_probabilities():
    fl.manual_seed(0)
    w = np.array([[1.0, 0.0, 3.0, 6.0, 0.0], [0.0, 0.0, 0.0, 2.0, 2.0]], np.float32)
    s = fl.multinomial(fl.from_numpy(w), 20000, replacement=True).numpy()
    assert s.shape == (2, 20000) and s.dtype.kind == "i"
    for row, wr in zip(s, w):
        p = wr / wr.sum()
        f = _freq(row, 5)
        assert (f[p == 0] == 0).all()                       # never a zero-weight category
        np.testing.assert_allclose(f, p, atol=4 * np.sqrt(0.25 / 20000))
    one = fl.tensor([0.2, 0.8]).multinomial(1000, True)
    assert one.shape == (1000,)


def test_multinomial_without_replacement():
    fl.manual_seed(1)
    w = fl.tensor([0.5, 0.3, 0.2, 0.0])
    draws = fl.multinomial(w.expand(4000, 4), 3).numpy()
    assert all(len(set(r)) == 3 for r in draws)               # distinct within a row
    assert not (draws == 3).any()                             # zero weight never drawn
    # the first draw follows p; the second, p renormalised without the first
    np.testing.assert_allclose(_freq(draws[:, 0], 4), [0.5, 0.3, 0.2, 0], atol=0.03)
    p2 = sum(0.5 * np.array([0, .3, .2, 0]) / .5 if i == 0 else
             0.3 * np.array([.5, 0, .2, 0]) / .7 if i == 1 else
             0.2 * np.array([.5, .3, 0, 0]) / .8 for i in range(3))
    np.testing.assert_allclose(_freq(draws[:, 1], 4), p2, atol=0.03)
    perm = fl.multinomial(fl.ones(6), 6).numpy()
    assert sorted(perm.tolist()) == list(range(6))


def test_multinomial_is_lazy_reproducible_and_never_recompiles():
    # drawn in a program (device_draws; on the CPU multinomial reads the probabilities and
    # draws PyTorch's numbers on the host: tests/test_torch_streams.py)
    with fl.random.device_draws():
        _lazy_multinomial()


def _lazy_multinomial():
    probs = fl.softmax(fl.randn(3, 50), -1)
    fl.sync()

    def step():
        with fl.no_grad():
            s = fl.multinomial(probs, 1)
        assert s.is_pending
        fl.sync()
        return s.numpy()
    fl.manual_seed(7)
    first = [step() for _ in range(2)]
    before = fl.metrics.counters()
    more = [step() for _ in range(5)]
    after = fl.metrics.counters()
    assert after["compiles"] == before["compiles"]
    assert after["executions"] - before["executions"] == 5
    fl.manual_seed(7)
    again = [step() for _ in range(2)]
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    assert len({a.tobytes() for a in first + more}) > 1         # fresh draws every step


def test_multinomial_errors():
    with pytest.raises(RuntimeError, match="without replacement"):
        fl.multinomial(fl.ones(3), 4)
    with pytest.raises(RuntimeError, match="1 or 2 dim"):
        fl.multinomial(fl.ones(2, 2, 2), 1)
    with pytest.raises(RuntimeError, match="floating"):
        fl.multinomial(fl.ones(3, dtype=fl.int32), 1)
    with pytest.raises(RuntimeError, match="n_sample <= 0"):
        fl.multinomial(fl.ones(3), 0)
