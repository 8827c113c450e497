"""Reductions forward and backward against jax.numpy (float64): whole-tensor and per-dim with
keepdim, (values, indices) results of per-dim max/min, var/std corrections, logsumexp, cumsum,
norm, all/any, on several shapes including 0-d and size-1 dims."""

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import flowlite as fl
from conftest import check_fd, check_grad, check_grad2, check_values, positive, randn

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")


def _reductions(mod):
    """The same reductions over a (3, 4, 2) tensor, flowlite or jnp."""
    if mod is fl:
        def run(x, p):
            return (
                x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), fl.sum(x, dim=-1),
                x.mean(), x.mean(0), x.mean((1, -1), keepdim=True),
                p.prod(), p.prod(1), p.prod(2, keepdim=True),
                x.amax(), x.amax(1), x.amin((0, 1)), x.amin(-1, keepdim=True),
                x.max(), x.min(), x.max(1).values, x.min(2, keepdim=True).values,
                x.max(dim=0)[0],
                x.var(), x.var(1), x.var(1, unbiased=False), x.var((0, 2), correction=2),
                x.std(), x.std(0, keepdim=True), x.std(2, correction=0),
                x.logsumexp(1), fl.logsumexp(x, (0, 2), keepdim=True),
                x.cumsum(0), x.cumsum(1), x.cumsum(-1),
                x.norm(), x.norm(dim=1), x.norm(1, dim=2), x.norm(3, dim=(0, 1)),
                x.norm(float("inf"), dim=1), x.norm(p="fro", dim=(1, 2), keepdim=True),
            )
    else:
        def run(x, p):
            return (
                x.sum(), x.sum(1), x.sum((0, 2), keepdims=True), jnp.sum(x, -1),
                x.mean(), x.mean(0), x.mean((1, -1), keepdims=True),
                p.prod(), p.prod(1), p.prod(2, keepdims=True),
                x.max(), x.max(1), x.min((0, 1)), x.min(-1, keepdims=True),
                x.max(), x.min(), x.max(1), x.min(2, keepdims=True),
                x.max(0),
                x.var(ddof=1), x.var(1, ddof=1), x.var(1), x.var((0, 2), ddof=2),
                x.std(ddof=1), x.std(0, keepdims=True, ddof=1), x.std(2),
                jsp.logsumexp(x, 1), jsp.logsumexp(x, (0, 2), keepdims=True),
                jnp.cumsum(x, 0), jnp.cumsum(x, 1), jnp.cumsum(x, -1),
                jnp.sqrt(jnp.sum(x * x)), jnp.sqrt(jnp.sum(x * x, 1)), jnp.sum(jnp.abs(x), 2),
                jnp.sum(jnp.abs(x) ** 3, (0, 1)) ** (1 / 3), jnp.max(jnp.abs(x), 1),
                jnp.sqrt(jnp.sum(x * x, (1, 2), keepdims=True)),
            )
    return run


def test_reductions_values_and_grads(x64):
    check_grad(_reductions(fl), _reductions(jnp), randn(3, 4, 2, seed=1),
               positive(3, 4, 2, seed=2))


def test_reductions_0d_and_size1_dims(x64):
    def make(mod):
        def run(s, u):   # s: 0-d, u: (1, 3, 1)
            if mod is fl:
                return (s.sum(), s.sum(0), s.mean(-1), s.prod(), s.amax(0), s.max(0).values,
                        s.logsumexp(0), s.cumsum(0), s.norm(),
                        u.sum(0), u.sum(2, keepdim=True), u.mean((0, 2)), u.prod(1),
                        u.amax(0), u.max(1).values, u.var(1), u.std(1, keepdim=True),
                        u.logsumexp(2), u.cumsum(0), u.cumsum(1), u.norm(dim=1))
            return (s.sum(), s, s, s.prod(), s, s, s, s, jnp.abs(s),
                    u.sum(0), u.sum(2, keepdims=True), u.mean((0, 2)), u.prod(1),
                    u.max(0), u.max(1), u.var(1, ddof=1), u.std(1, keepdims=True, ddof=1),
                    jsp.logsumexp(u, 2), jnp.cumsum(u, 0), jnp.cumsum(u, 1),
                    jnp.sqrt(jnp.sum(u * u, 1)))
        return run
    check_grad(make(fl), make(jnp), np.array(1.7), randn(1, 3, 1, seed=3))


def test_prod_grad_with_zeros(x64):
    a = np.array([[2.0, 0.0, 3.0, 1.5], [0.0, 0.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    check_grad(lambda x: (x.prod(), x.prod(1), x.prod(0, keepdim=True), x.cumprod(1),
                          x.cumprod(0)),
               lambda x: (x.prod(), x.prod(1), x.prod(0, keepdims=True), jnp.cumprod(x, 1),
                          jnp.cumprod(x, 0)), a)


def test_prod_and_cumprod_second_order_with_zeros(x64):
    a = np.array([[2.0, 0.0, 3.0, 1.5], [0.0, 0.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    x = fl.from_numpy(a).requires_grad_()
    g, = fl.grad(x.prod(1).sum() + (x.cumprod(1) ** 2).sum(), x, create_graph=True)
    h, = fl.grad((g * g).sum(), x)

    def f(x):
        return jnp.sum(jnp.prod(x, 1)) + jnp.sum(jnp.cumprod(x, 1) ** 2)

    ref = jax.jit(lambda x: (jax.grad(f)(x), jax.grad(lambda x: jnp.sum(jax.grad(f)(x) ** 2))(x)))
    r1, r2 = ref(a)
    fl.sync()
    np.testing.assert_allclose(g.numpy(), r1, rtol=1e-10)
    np.testing.assert_allclose(h.numpy(), r2, rtol=1e-10)


def test_max_min_return_values_and_indices():
    a = np.array([[1.0, 5.0, 3.0], [7.0, -2.0, 7.0]], np.float32)
    x = fl.from_numpy(a)
    mx, mn = x.max(1), x.min(dim=0, keepdim=True)
    assert isinstance(mx, tuple) and mx.values is mx[0] and mx.indices is mx[1]
    v, i = x.max(1)
    assert i.dtype.kind == "i" and v.dtype is fl.float32
    check_values([v, i, mn.values, mn.indices, fl.max(x, 0).indices, fl.min(x, -1).values,
                  x.max(0, keepdim=True).indices],
                 [a.max(1), [1, 0], a.min(0, keepdims=True), [[0, 1, 0]], [1, 0, 1], a.min(-1),
                  [[1, 0, 1]]])
    # per-dim values carry gradients; the indices don't
    t = fl.tensor([[1.0, 5.0, 3.0], [7.0, -2.0, 6.0]], requires_grad=True)
    values, indices = t.max(1)
    assert values.requires_grad and not indices.requires_grad
    values.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [[0, 1, 0], [1, 0, 0]])


def test_argmax_argmin():
    a = np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0], [0.0, -1.0, -1.0]], np.float32)
    x = fl.from_numpy(a)
    outs = [x.argmax(), x.argmin(), x.argmax(1), x.argmin(0), x.argmax(1, keepdim=True),
            fl.argmax(x, dim=-1), fl.argmin(x, 1, True), x.argmax(keepdim=True),
            fl.tensor(3.0).argmax(), fl.tensor(3.0).argmax(0), fl.tensor([4, 9, 2]).argmax()]
    refs = [np.argmax(a), np.argmin(a), np.argmax(a, 1), np.argmin(a, 0),
            np.argmax(a, 1)[:, None], np.argmax(a, -1), np.argmin(a, 1)[:, None],
            np.argmax(a).reshape(1, 1), 0, 0, 1]
    for o in outs:
        assert o.dtype.kind == "i" and not o.requires_grad
    check_values(outs, refs)   # ties pick the first index, like PyTorch


def test_gradients_at_ties_follow_pytorch():
    # amax/amin and the whole-tensor max/min share the gradient evenly among ties ...
    x = fl.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], requires_grad=True)
    (x.amax(1) * fl.tensor([1.0, 3.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1, 1, 1]])
    y = fl.tensor([3.0, 3.0, 1.0, 1.0], requires_grad=True)
    (y.max() + 2 * y.min()).backward()
    np.testing.assert_allclose(y.grad.numpy(), [0.5, 0.5, 1.0, 1.0])
    # ... while per-dim max/min send it to the returned index only
    z = fl.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], requires_grad=True)
    v, i = z.max(1)
    w, j = z.min(0, keepdim=True)
    ((v * fl.tensor([1.0, 3.0])).sum() + w.sum()).backward()
    assert i.tolist() == [1, 0] and j.tolist() == [[0, 1, 1]]
    np.testing.assert_allclose(z.grad.numpy(), [[1, 1, 0], [3, 1, 1]])


def test_integer_and_bool_reductions():
    i = fl.tensor([[1, 2, 3], [4, 5, 6]])
    b = fl.tensor([[True, False, True], [True, True, True]])
    int_ = "i"
    outs = [i.sum(), i.sum(0), i.prod(1), i.amax(), i.min(1).values, i.cumsum(1), b.sum(),
            b.sum(1), i.max(), b.cumsum(1)]
    for o in outs:
        assert o.dtype.kind == int_, o.dtype
    outs += [i.sum(dtype=fl.float32), i.mean(dtype=fl.float32), i.norm(), i.logsumexp(1),
             b.all(), b.all(1), b.any(0), b.all(0, keepdim=True), i.all(), (i - 1).all(),
             fl.any(i > 5), fl.all(fl.tensor([1.0, 0.5])), fl.tensor([0.0, 0.0]).any()]
    ai = np.array([[1, 2, 3], [4, 5, 6]])
    ab = np.array([[True, False, True], [True, True, True]])
    refs = [21, [5, 7, 9], [6, 120], 6, [1, 4], np.cumsum(ai, 1), 5, [2, 3], 6,
            np.cumsum(ab, 1),
            np.float32(21), np.float32(3.5), np.float32(np.sqrt(91.0)),
            np.log(np.exp(ai).sum(1)).astype(np.float32),
            False, [False, True], [True, True, True], [[True, False, True]], True, False, True,
            True, False]
    check_values(outs, refs, rtol=1e-6)
    assert fl.tensor([True, False]).sum().dtype is fl.int64 or \
        fl.tensor([True, False]).sum().dtype is fl.int32     # int64, narrowed without x64
    with pytest.raises(TypeError, match="mean"):
        i.mean()


def test_var_std_corrections():
    a = np.array([[1.0, 2.0, 4.0, 7.0], [0.5, 0.5, 1.5, -2.0]], np.float32)
    x = fl.from_numpy(a)
    outs = [x.var(), x.var(unbiased=False), x.var(1), x.var(1, unbiased=False),
            x.var(1, correction=0), x.var(1, correction=3), x.std(1, True), x.std(1, False),
            x.std(0, keepdim=True), x.std(correction=2), fl.var(x, 1, keepdim=True),
            fl.std(x, dim=0)]
    refs = [a.var(ddof=1), a.var(), a.var(1, ddof=1), a.var(1), a.var(1), a.var(1, ddof=3),
            a.std(1, ddof=1), a.std(1), a.std(0, ddof=1, keepdims=True), a.std(ddof=2),
            a.var(1, ddof=1, keepdims=True), a.std(0, ddof=1)]
    check_values(outs, refs, rtol=1e-5)


def test_logsumexp_is_stable_and_handles_infinities():
    a = np.array([[1000.0, 1000.0, -1000.0], [-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 1.0]],
                 np.float32)
    x = fl.from_numpy(a)
    check_values([x.logsumexp(1), fl.softmax(x[:1], 1), fl.log_softmax(x[:1], 1)],
                 [np.array([1000 + np.log(2), -np.inf, np.log(1 + np.e)], np.float32),
                  np.array([[0.5, 0.5, 0.0]], np.float32),
                  np.array([[-np.log(2), -np.log(2), -2000 - np.log(2)]], np.float32)],
                 rtol=1e-6)


def test_cumsum_cumprod(x64):
    check_grad(lambda x: (x.cumsum(1), fl.cumprod(x, 0), x.cumprod(1), x.cumsum(-2)),
               lambda x: (jnp.cumsum(x, 1), jnp.cumprod(x, 0), jnp.cumprod(x, 1),
                          jnp.cumsum(x, -2)),
               positive(3, 4, seed=4))


def test_empty_and_zero_size_reductions():
    z = fl.zeros(0, 3)
    check_values([z.sum(0), z.sum(), z.prod(0), z.any(), z.all()],
                 [np.zeros(3, np.float32), np.float32(0), np.ones(3, np.float32), False, True])
    with pytest.raises(RuntimeError, match="amax"):
        fl.zeros(0).amax()


def test_second_order_of_reductions(x64):
    def make(mod):
        def fn(x):
            if mod is fl:
                parts = [x.sum(1) ** 2, x.mean(0) ** 3, x.amax(1) * x.amin(1), x.var(1),
                         x.std(0), x.logsumexp(1), x.norm(dim=0), x.cumsum(1).reshape(-1) ** 2,
                         x.max(0).values ** 2, x.norm(3, dim=1)]
                return fl.cat([q.reshape(-1) for q in parts])
            parts = [x.sum(1) ** 2, x.mean(0) ** 3, x.max(1) * x.min(1), x.var(1, ddof=1),
                     x.std(0, ddof=1), jsp.logsumexp(x, 1), jnp.sqrt(jnp.sum(x * x, 0)),
                     jnp.cumsum(x, 1).reshape(-1) ** 2, x.max(0) ** 2,
                     jnp.sum(jnp.abs(x) ** 3, 1) ** (1 / 3)]
            return jnp.concatenate([q.reshape(-1) for q in parts])
        return fn
    check_grad2(make(fl), make(jnp), randn(3, 4, seed=20), rtol=1e-7)


def test_finite_differences_reductions(x64):
    cases = [
        (lambda x: x.prod(1), randn(2, 3, seed=5)),
        (lambda x: x.std(0), randn(3, 2, seed=6)),
        (lambda x: x.logsumexp(1), randn(2, 3, seed=7)),
        (lambda x: x.norm(3, dim=1), randn(2, 3, seed=8)),
        (lambda x: x.amax(0) * x.mean(), randn(3, 2, seed=9)),
    ]
    for fn, a in cases:
        check_fd(fn, a)


def test_norm_gradient_at_zero_is_zero_like_pytorch():
    x = fl.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]], requires_grad=True)
    (x.norm(dim=1).sum() + x[0].norm() + x[:1].norm(3) + x[0].norm(p="fro")).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0, 0], [1 / 3, 2 / 3, 2 / 3]], rtol=1e-6)


def test_std_of_a_constant_row_has_pytorch_zero_gradient_not_nan():
    import torch
    data = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 4.0, 8.0]], np.float32)
    a = fl.tensor(data, requires_grad=True)
    ((a - a.mean(1, keepdim=True)) / (a.std(1, keepdim=True) + 1e-5)).sum().backward()
    t = torch.tensor(data, requires_grad=True)
    ((t - t.mean(1, keepdim=True)) / (t.std(1, keepdim=True) + 1e-5)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert np.isfinite(a.grad.numpy()).all()
    c = fl.ones(4, requires_grad=True)
    c.std().backward()
    assert c.std().item() == 0.0 and c.grad.tolist() == [0.0] * 4


# ---- nansum / nanmean (declared whole in ops/reduction.py) ------------------------------------
def _with_nans(seed):
    a = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
    a[0, 1] = a[2, 0] = a[2, 3] = np.nan
    a[1, :] = np.nan                       # a row with nothing but NaN
    return a


def test_nansum_and_nanmean_match_pytorch_values_and_gradients():
    import torch
    a = _with_nans(0)
    for dim, keepdim in ((None, False), (1, False), (0, True), ((0, 1), False), (-1, True)):
        for name in ("nansum", "nanmean"):
            x = fl.tensor(a, requires_grad=True)
            t = torch.tensor(a, requires_grad=True)
            kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
            out = getattr(fl, name)(x, **kw)
            ref = getattr(torch, name)(t, **kw)
            w = np.random.default_rng(1).standard_normal(tuple(ref.shape)).astype(np.float32)
            (out * fl.tensor(w)).sum().backward()
            (ref * torch.tensor(w)).sum().backward()
            assert tuple(out.shape) == tuple(ref.shape), (name, dim)
            np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-6,
                                       equal_nan=True, err_msg=f"{name} dim={dim}")
            g, tg = x.grad.numpy(), t.grad.numpy()
            if name == "nanmean" and dim in (1, -1):
                # the all-NaN row: PyTorch's gradient is NaN there (inf * 0), flowlite's zero
                assert np.isnan(tg[1]).all() and (g[1] == 0).all()
                g, tg = np.delete(g, 1, 0), np.delete(tg, 1, 0)
            np.testing.assert_allclose(g, tg, rtol=1e-6, equal_nan=True,
                                       err_msg=f"{name} grad dim={dim}")
    x = fl.tensor(a)
    np.testing.assert_allclose(x.nansum(1).numpy(), np.nansum(a, 1), rtol=1e-6)
    with np.errstate(all="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_allclose(x.nanmean(0).numpy(), np.nanmean(a, 0), rtol=1e-6)


def test_nansum_dtypes_follow_pytorch():
    import torch
    assert fl.nansum(fl.tensor([1, 2])).dtype is fl.tensor([1, 2]).sum().dtype   # like sum
    assert int(fl.nansum(fl.tensor([1, 2]))) == 3
    assert fl.nansum(fl.tensor([True, True])).item() == 2
    h = fl.tensor([1.0, float("nan")], dtype=fl.float16)
    assert fl.nansum(h).dtype is fl.float16
    assert fl.nansum(h, dtype=fl.float32).dtype is fl.float32
    np.testing.assert_allclose(
        fl.nanmean(fl.tensor([1.0, float("nan"), 4.0], dtype=fl.bfloat16)).float().item(),
        torch.nanmean(torch.tensor([1.0, float("nan"), 4.0], dtype=torch.bfloat16)).float().item())


def test_nanmean_of_an_integer_tensor_raises_runtime_error_as_in_pytorch():
    with pytest.raises(RuntimeError, match=r"nanmean\(\).*int.*\(2,\)"):
        fl.nanmean(fl.tensor([1, 2]))
    assert fl.nanmean(fl.tensor([1, 3]), dtype=fl.float32).item() == 2.0


def test_nansum_gradient_against_jax(x64):
    a = _with_nans(2).astype(np.float64)
    a[1, :] = 0.5                                    # finite sums for the jax reference
    check_grad(lambda t: (fl.nansum(t, 1), fl.nanmean(t, 0)),
               lambda t: (jnp.nansum(t, 1), jnp.nanmean(t, 0)), a)


@pytest.mark.parametrize("dims,keepdim", [(0, False), ((0, 1), False), (0, True), (-3, False)])
def test_float32_sum_over_leading_dims_is_a_dot_on_cpu(dims, keepdim):
    # XLA:CPU's YNNPACK reduce over a short leading dim of a wide array was 20-80x slower than
    # a dot with ones (a broadcast operand's gradient summed over the batch); values as jnp's
    x = np.random.default_rng(3).standard_normal((5, 6, 7)).astype(np.float32)
    got = fl.tensor(x).sum(dims, keepdim=keepdim)
    want = np.asarray(jnp.sum(x, axis=dims, keepdims=keepdim))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    text = fl.debug.executable_text(-1)
    assert " dot(" in text and " reduce(" not in text


def test_other_sums_stay_reductions():
    x = np.random.default_rng(4).standard_normal((5, 6, 7)).astype(np.float32)
    got = fl.tensor(x).sum(1)           # not a leading dim
    np.testing.assert_allclose(np.asarray(got), x.sum(1), rtol=1e-5, atol=1e-5)
    assert " reduce(" in fl.debug.executable_text(-1)
