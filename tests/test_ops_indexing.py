"""Indexing forward and backward against jax.numpy (float64): ints, slices (negative, stepped),
None, Ellipsis, integer tensors (advanced indexing, several index tensors), bool masks; the
functional __setitem__ with autograd through it; gather, scatter, scatter_add, index_select,
masked_fill, take_along_dim, one_hot."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import flowlite as fl
from conftest import check_fd, check_grad, check_grad2, check_values, randn

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

I0 = np.array([2, 0, 2])            # repeated index: gradients accumulate
I1 = np.array([[1, 2], [0, 0]])    # in range for every dim it indexes (PyTorch raises otherwise)
I2 = np.array([0, 1, 1])
MASK = np.array([[True, False, True, True], [False, False, True, False],
                 [True, True, False, False]])
MASK0 = np.array([True, False, True])


def _index_fns(x, i0, i1, i2, mod):
    """x: (3, 4, 5).  The same index expressions, flowlite (mod=fl) or jnp."""
    m = MASK if mod is jnp else fl.from_numpy(MASK)
    m0 = MASK0 if mod is jnp else fl.from_numpy(MASK0)
    lst = (lambda v: np.array(v)) if mod is jnp else (lambda v: v)   # jnp wants arrays
    return (
        x[1], x[-1], x[1, 2], x[1, -2, 4], x[0][1][2],
        x[1:], x[:-1], x[-2:], x[::2], x[1::2, :, 3], x[:, 1:3, ::3], x[:, -3:-1], x[:, 3:1],
        x[None], x[:, None, 1], x[..., None], x[None, ..., None, 2],
        x[..., 1], x[1, ...], x[..., 1:3, 0], x[...],
        x[i0], x[:, i0], x[..., i2], x[i1], x[i0, i2], x[i0, :, i2], x[i0, 1:3, i2],
        x[i1, 2], x[:, i1, i0[:2, None]], x[lst([0, 2])], x[1, lst([3, 1])],
        x[m], x[m0], x[:, :, 0][m], x[m0, 1:3], x[1:, 2][m0[:2]],
        # PyTorch applies ints before index tensors: x[1, :, i] is x[1][:, i] (numpy differs)
        x[1, :, i2] if mod is fl else x[1][:, i2],
        x[-1, 1:3, i0] if mod is fl else x[-1][1:3, i0],
        x[i1, :, 0] if mod is fl else x[:, :, 0][i1, :],
        x[None, 2, ..., i2] if mod is fl else x[2][None, ..., i2],
    )


def test_getitem_values_and_grads(x64):
    x = randn(3, 4, 5, seed=1)

    def fl_fn(x, i0, i1, i2):
        return _index_fns(x, i0, i1, i2, fl)

    def jnp_fn(x, i0, i1, i2):
        return _index_fns(x, i0, i1, i2, jnp)

    check_grad(fl_fn, jnp_fn, x, I0, I1, I2, wrt=[0])


def test_getitem_0d_and_size1(x64):
    def fl_fn(s, u):   # s: 0-d, u: (1, 3)
        return (s[None], s[...], s[None, None, ...], u[0], u[0, -1], u[:, 1:], u[..., ::2],
                u[fl.tensor([0, 0])], u[0, fl.tensor(2)], u[fl.tensor([True])])

    def jnp_fn(s, u):
        return (s[None], s, s[None, None], u[0], u[0, -1], u[:, 1:], u[..., ::2],
                u[jnp.array([0, 0])], u[0, 2], u)

    check_grad(fl_fn, jnp_fn, np.array(2.5), randn(1, 3, seed=2))


def test_index_tensor_dtypes_and_sources():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fl.from_numpy(a)
    outs = [x[fl.tensor([2, 0])], x[fl.tensor([2, 0], dtype=fl.int32)],
            x[np.array([1, 1])], x[[True, False, True]], x[np.array([True, False, True])],
            x[:, fl.tensor([[0], [3]])], x[fl.tensor([-1])], x[fl.tensor(1)]]
    refs = [a[[2, 0]], a[[2, 0]], a[[1, 1]], a[[0, 2]], a[[0, 2]], a[:, np.array([[0], [3]])],
            a[[-1]], a[1]]
    check_values(outs, refs)


def test_setitem_functional_and_autograd(x64):
    def fl_fn(x, v, w):
        y = x * 1.5
        y[0] = v                  # row assignment with a differentiable value
        y[:, 1:3] = w * 2         # broadcast value over a slice
        y[fl.tensor([2]), fl.tensor([0])] = 7.0
        y[y > 1.0] = 0.0          # bool mask (read on the host) with a scalar
        y[..., -1] += v[-1]       # read-modify-write through getitem/iadd/setitem
        y[1, fl.tensor([3, 0])] = w[:2, 0] * 0.5   # an int next to an index tensor
        return y

    def jnp_fn(x, v, w):
        y = x * 1.5
        y = y.at[0].set(v)
        y = y.at[:, 1:3].set(w * 2)
        y = y.at[jnp.array([2]), jnp.array([0])].set(7.0)
        y = jnp.where(y > 1.0, 0.0, y)
        y = y.at[..., -1].add(v[-1])
        y = y.at[1, jnp.array([3, 0])].set(w[:2, 0] * 0.5)
        return y

    check_grad(fl_fn, jnp_fn, randn(3, 4, seed=3), randn(4, seed=4), randn(3, 1, seed=5))


def test_setitem_rebinds_the_handle_and_keeps_old_values():
    x = fl.tensor([[1.0, 2.0], [3.0, 4.0]])
    alias = x
    old = fl.Tensor(x._node)     # what the tensor was before the update
    x[0, 1] = 9.0
    x[1] = fl.tensor([5, 6])     # integer values converted to the tensor's dtype
    assert alias is x and x.dtype is fl.float32
    assert x.tolist() == [[1.0, 9.0], [5.0, 6.0]]
    assert old.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    i = fl.tensor([1, 2, 3])
    i[i > 1] = 0
    assert i.tolist() == [1, 0, 0]
    leaf = fl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place"):
        leaf[0] = 3.0
    with pytest.raises(ValueError, match="setitem"):
        x[0] = fl.ones(3)


def _gather_family(mod):
    def fn(x, src, gi, si, ti, ii, mask):
        if mod is fl:
            return (x.gather(1, gi), fl.gather(x, 0, gi[:2, :3]),
                    x.scatter_add(0, si, src), x.scatter(1, ti, src[:, :2]),
                    fl.scatter_add(x, 1, ti[:3], src[:3, :2]),
                    x.scatter(0, si[:1], 2.5),
                    x.index_select(0, ii), fl.index_select(x, 1, ii),
                    x.masked_fill(mask, -1.0), x.masked_fill(mask[0], 3.0),
                    x[:3].take_along_dim(gi, 1), fl.take_along_dim(x[:, :2], ti[:1], 0),
                    x.index_add(0, ii, src[:3]))
        rows = jnp.arange(x.shape[0])[:, None]
        cols = jnp.arange(x.shape[1])[None, :]
        r2 = jnp.arange(2)[:, None]
        c3 = jnp.arange(3)[None, :]
        return (x[rows[:3], gi], x[gi[:2, :3], c3],
                x.at[si, cols[:, :si.shape[1]]].add(src[:si.shape[0], :si.shape[1]]),
                x.at[rows[:ti.shape[0]], ti].set(src[:ti.shape[0], :2]),
                x.at[rows[:3], ti[:3]].add(src[:3, :2]),
                x.at[si[:1], cols].set(2.5),
                x[ii], x[:, ii],
                jnp.where(mask, -1.0, x), jnp.where(mask[0], 3.0, x),
                jnp.take_along_axis(x[:3], gi, 1), jnp.take_along_axis(x[:, :2], ti[:1], 0),
                x.at[ii].add(src[:3]))
    return fn


def test_gather_scatter_family_values_and_grads(x64):
    x = randn(4, 4, seed=6)
    src = randn(5, 4, seed=7)          # larger than the index: only its leading block is used
    gi = np.array([[0, 3, 3], [1, 1, 0], [2, 0, 1]])          # (3, 3) gather index, dim 1
    si = np.array([[3, 0, 1, 2], [2, 1, 0, 3]])                # scatter_add index, dim 0
    ti = np.array([[1, 0], [3, 2], [0, 1], [2, 3]])            # distinct per row, dim 1
    ii = np.array([2, 0, 2])
    mask = np.array([[True, False, False, True]] * 4)
    check_grad(_gather_family(fl), _gather_family(jnp), x, src, gi, si, ti, ii, mask,
               wrt=[0, 1])


def test_one_hot_and_nonzero():
    i = fl.tensor([0, 2, 1, 2])
    oh = fl.one_hot(i, 4)
    assert oh.dtype.kind == "i" and oh.shape == (4, 4)
    check_values([oh, fl.one_hot(i), fl.one_hot(fl.tensor([[1], [0]]), 3)],
                 [np.eye(4, dtype=int)[[0, 2, 1, 2]], np.eye(3, dtype=int)[[0, 2, 1, 2]],
                  np.eye(3, dtype=int)[[[1], [0]]]])
    with pytest.raises(TypeError, match="one_hot"):
        fl.one_hot(fl.tensor([0.0, 1.0]), 2)
    m = fl.tensor([[True, False], [False, True]])
    assert fl.nonzero(m).tolist() == [[0, 0], [1, 1]]
    assert [t.tolist() for t in fl.where(m)] == [[0, 1], [0, 1]]


def test_second_order_of_indexing_ops(x64):
    gi = np.array([[0, 2], [1, 1], [2, 0]])
    ii = np.array([2, 0, 2])

    def make(mod):
        def fn(x, src):
            if mod is fl:
                g, i = fl.from_numpy(gi), fl.from_numpy(ii)
                y = x.clone()
                y[1:, 0] = src[0, :2] * x[0, 1]
                parts = [x[i] * x[:, 1:2], x.gather(1, g) ** 2, x.index_select(1, i) * x,
                         x.scatter_add(0, g[:2], src) * x, y ** 2,
                         x.take_along_dim(g, 1) * x[:, :2]]
                return fl.cat([q.reshape(-1) for q in parts])
            rows = jnp.arange(3)[:, None]
            y = x.at[1:, 0].set(src[0, :2] * x[0, 1])
            parts = [x[ii] * x[:, 1:2], x[rows, gi] ** 2, x[:, ii] * x,
                     x.at[gi[:2], jnp.arange(2)[None, :]].add(src[:2, :2]) * x, y ** 2,
                     x[rows, gi] * x[:, :2]]
            return jnp.concatenate([q.reshape(-1) for q in parts])
        return fn
    check_grad2(make(fl), make(jnp), randn(3, 3, seed=11), randn(2, 2, seed=12))


def test_finite_differences_indexing(x64):
    ii = np.array([1, 0, 1])
    for fn, arrays in [
        (lambda x, i: x[i, 1:] * x[:, ::2][i], (randn(2, 3, seed=8), ii)),
        (lambda x, i: x.gather(1, i.reshape(3, 1) % 2).sin(), (randn(3, 3, seed=9), ii)),
        (lambda x, i: fl.zeros(3, 3, dtype=x.dtype).scatter_add(0, i.reshape(1, 3), x),
         (randn(1, 3, seed=10), ii)),
    ]:
        check_fd(fn, *arrays)


def test_int_and_tensor_index_mix_matches_torch():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    S = slice(None)
    indexes = [lambda m: (1, S, m.tensor([2, 0])), lambda m: (m.tensor([2, 0]), 1, S),
               lambda m: (S, -1, m.tensor([2, 0])), lambda m: (m.tensor([2, 0]), S, 3),
               lambda m: (2, m.tensor([[1], [0]]), slice(1, 4, 2)),
               lambda m: (Ellipsis, 0, m.tensor([2, 0]))]
    gets, sets, wants = [], [], []
    for k, ix in enumerate(indexes):
        want = torch.from_numpy(a)[ix(torch)]
        v = np.random.default_rng(k).standard_normal(tuple(want.shape)).astype(np.float32)
        t = torch.from_numpy(a.copy())
        t[ix(torch)] = torch.from_numpy(v)
        wants.append((want.numpy(), t.numpy()))
        gets.append(fl.from_numpy(a)[ix(fl)])
        f = fl.from_numpy(a)
        f[ix(fl)] = fl.from_numpy(v)
        sets.append(f)
    fl.sync()
    for k, (g, f, (want, want_set)) in enumerate(zip(gets, sets, wants)):
        assert g.shape == want.shape and np.array_equal(g.numpy(), want), k
        assert np.array_equal(f.numpy(), want_set), k


def test_a_written_stop_equal_to_the_size_keeps_its_slice_and_stays_a_view():
    """`mask[:T, :T]` at T == the mask's size keeps the slice node it has at every other T (a
    growing T stays one length family); `x[:]` records nothing; both are views."""
    m = fl.randn(4, 4) * 1.0        # (a program's value: fresh host data is sliced on the host)
    assert "slice(" in fl.debug.graph([m[:4, :4]])
    assert "slice(" not in fl.debug.graph([m[:]])
    v = m[:4, :4]
    v[1, 2] = 5.0
    assert m[1, 2].item() == 5.0
    np.testing.assert_array_equal(v.numpy(), m.numpy())


@pytest.mark.parametrize("case", ["topk", "rows", "tensor_value", "int"])
def test_setitem_with_a_pending_bool_mask_reads_nothing_and_matches_torch(x64, case):
    # `x[mask] = value` with a lazy mask and one value is where(mask, value, x): recorded, no
    # host read of the mask (nanoGPT's sampling loop writes one every token); values and the
    # gradient as PyTorch's
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 6))
    if case == "int":
        a = (a * 10).astype(np.int64)

    def run(lib):
        x = lib.tensor(a.copy(), requires_grad=case != "int")
        e0 = fl.metrics.counters()["executions"]
        y = x * 2 if case != "int" else x + 0
        if case == "topk":
            v, _ = lib.topk(y, 3)
            y[y < v[:, [-1]]] = -float("inf")
            out = (lib.softmax(y, -1) * lib.tensor(a)).sum()
        elif case == "rows":
            y[y.sum(1) > 0] = 0.5                     # a mask over the leading dim
            out = (y * y).sum()
        elif case == "tensor_value":
            y[y > 0.3] = lib.tensor(7.0, dtype=y.dtype)
            out = (y * y).sum()
        else:
            y[y > 3] = 2.9                             # cast to the int dtype, as PyTorch
        if lib is fl:                                  # the writes ran nothing
            assert y.is_pending and fl.metrics.counters()["executions"] == e0
        if case == "int":
            return y.numpy() if lib is fl else y.detach().numpy(), None, None
        if lib is fl:
            out.backward()
            g = x.grad.numpy()
            return y.numpy(), out.item(), g
        out.backward()
        return y.detach().numpy(), out.item(), x.grad.numpy()

    got, want = run(fl), run(torch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    if got[1] is not None:
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-12, atol=1e-14)
