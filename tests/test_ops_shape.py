"""Shape ops forward and backward against jax.numpy (float64): reshape/view/flatten/unflatten,
squeeze/unsqueeze, permute/transpose/T/mT, expand/broadcast_to/repeat, split/chunk/unbind,
flip, cat/stack, tril/triu, narrow, contiguous and constant padding; 0-d and size-1 cases."""

import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
import flowlite.frontend.ops as F
from conftest import check_fd, check_grad, check_grad2, check_values, randn

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")


def _fl_shape_ops(x, y):
    """x: (2, 3, 4), y: (3, 1)."""
    return (
        x.reshape(4, -1), x.view(6, 4), x.reshape((24,)), fl.reshape(x, (2, 12)),
        x.flatten(), x.flatten(1), x.flatten(0, 1), x.unflatten(2, (2, 2)),
        x.unflatten(-1, (-1, 1)),
        x.reshape(1, 2, 1, 12).squeeze(), x.reshape(1, 2, 1, 12).squeeze(2),
        x.reshape(1, 2, 1, 12).squeeze(1), x.reshape(1, 2, 1, 12).squeeze((0, 2)),
        x.unsqueeze(0), x.unsqueeze(-1), x.unsqueeze(2),
        x.permute(2, 0, 1), x.permute([1, 2, 0]), x.transpose(0, 2), x.transpose(-1, 1),
        x[0].T, x.mT, x[0].t(), fl.transpose(x, 0, 1),
        y.expand(2, 3, 5), y.expand(-1, 4), y.expand_as(x), y.broadcast_to((4, 3, 2)),
        fl.broadcast_to(y, (3, 3)),
        x.repeat(1, 2, 1), y.repeat(2, 3), y.repeat(2, 1, 2),
        *x.split(2, dim=2), *x.split([1, 2], 1), *fl.split(x, 1, 0), *x.chunk(2, -1),
        *fl.chunk(x, 2, 1), *x.unbind(1), *fl.unbind(x, -1),
        x.flip(0), x.flip((0, 2)), fl.flip(x, [-1, 1]),
        fl.cat([x, x * 2], 0), fl.cat([x, x[:, :1]], 1), fl.cat((x[..., :1], x, x), -1),
        fl.stack([x, x * 3]), fl.stack([x[0], x[1]], 1), fl.stack([x, x], -1),
        x.tril(), x.triu(), x.tril(1), x.triu(-1), fl.tril(x[0], -1), fl.triu(x[1], 2),
        x.narrow(2, 1, 2), x.narrow(0, 1, 1), x.narrow(-1, -3, 2), fl.narrow(x, 1, 0, 3),
        x.transpose(0, 1).contiguous(),
        F.pad(x, (1, 2)), F.pad(x, (0, 1, 2, 0), value=1.5), F.pad(x, (1, 1, 0, 0, 2, 1)),
        F.pad(x, (-1, 2)), F.pad(x, (1, -2, -1, 0), value=-0.5),
    )


def _jnp_shape_ops(x, y):
    return (
        x.reshape(4, -1), x.reshape(6, 4), x.reshape(24), x.reshape(2, 12),
        x.reshape(-1), x.reshape(2, 12), x.reshape(6, 4), x.reshape(2, 3, 2, 2),
        x.reshape(2, 3, 4, 1),
        x.reshape(2, 12), x.reshape(1, 2, 12), x.reshape(1, 2, 1, 12), x.reshape(2, 12),
        x[None], x[..., None], x[:, :, None],
        x.transpose(2, 0, 1), x.transpose(1, 2, 0), x.transpose(2, 1, 0), x.transpose(0, 2, 1),
        x[0].T, jnp.swapaxes(x, -1, -2), x[0].T, x.transpose(1, 0, 2),
        jnp.broadcast_to(y, (2, 3, 5)), jnp.broadcast_to(y, (3, 4)), jnp.broadcast_to(y, x.shape),
        jnp.broadcast_to(y, (4, 3, 2)), jnp.broadcast_to(y, (3, 3)),
        jnp.tile(x, (1, 2, 1)), jnp.tile(y, (2, 3)), jnp.tile(y, (2, 1, 2)),
        x[..., :2], x[..., 2:], x[:, :1], x[:, 1:], x[:1], x[1:], x[..., :2], x[..., 2:],
        x[:, :2], x[:, 2:], x[:, 0], x[:, 1], x[:, 2], x[..., 0], x[..., 1], x[..., 2], x[..., 3],
        x[::-1], x[::-1, :, ::-1], x[:, ::-1, ::-1],
        jnp.concatenate([x, x * 2], 0), jnp.concatenate([x, x[:, :1]], 1),
        jnp.concatenate([x[..., :1], x, x], -1),
        jnp.stack([x, x * 3]), jnp.stack([x[0], x[1]], 1), jnp.stack([x, x], -1),
        jnp.tril(x), jnp.triu(x), jnp.tril(x, 1), jnp.triu(x, -1), jnp.tril(x[0], -1),
        jnp.triu(x[1], 2),
        x[..., 1:3], x[1:2], x[..., 1:3], x,
        x.transpose(1, 0, 2),
        jnp.pad(x, ((0, 0), (0, 0), (1, 2))),
        jnp.pad(x, ((0, 0), (2, 0), (0, 1)), constant_values=1.5),
        jnp.pad(x, ((2, 1), (0, 0), (1, 1))),
        jnp.pad(x[..., 1:], ((0, 0), (0, 0), (0, 2))),
        jnp.pad(x[:, 1:, :-2], ((0, 0), (0, 0), (1, 0)), constant_values=-0.5),
    )


def test_shape_ops_values_and_grads(x64):
    check_grad(_fl_shape_ops, _jnp_shape_ops, randn(2, 3, 4, seed=1), randn(3, 1, seed=2))


def test_shape_ops_0d_and_size1(x64):
    def fl_fn(s, u):   # s: 0-d, u: (1,)
        return (s.reshape(1, 1), s.view(-1), s.flatten(), s.unsqueeze(0), s.unsqueeze(-1),
                s.expand(2, 3), s.broadcast_to((1,)), s.repeat(2, 3), fl.stack([s, s * 2]),
                fl.stack([s, s], -1), s.reshape(()), s.T, s.permute(()), s.squeeze(),
                u.squeeze(), u.squeeze(0), u.reshape(()), u.expand(4), u.repeat(3),
                fl.cat([u, u * 2, u]), u.flip(0), u.unsqueeze(0).mT, u.narrow(0, 0, 1),
                F.pad(u, (2, 0), value=3.0), *u.split(1), *u.chunk(3), *u.unbind())

    def jnp_fn(s, u):
        return (s.reshape(1, 1), s.reshape(1), s.reshape(1), s[None], s[None],
                jnp.broadcast_to(s, (2, 3)), s.reshape(1), jnp.broadcast_to(s, (2, 3)),
                jnp.stack([s, s * 2]), jnp.stack([s, s], -1), s, s, s, s,
                u.reshape(()), u.reshape(()), u.reshape(()), jnp.broadcast_to(u, (4,)),
                jnp.tile(u, 3), jnp.concatenate([u, u * 2, u]), u, u.reshape(1, 1), u,
                jnp.pad(u, (2, 0), constant_values=3.0), u, u, u[0])

    check_grad(fl_fn, jnp_fn, np.array(1.25), np.array([-0.5]))


def test_shape_metadata_and_views_share_nothing_mutable():
    x = fl.zeros(2, 3, 4)
    assert x.reshape(-1, 4).shape == (6, 4) and x.shape == fl.Size([2, 3, 4])
    assert x.T.shape == (4, 3, 2) and x.mT.shape == (2, 4, 3)
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.ndim == 3 and x.dim() == 3 and x.numel() == 24 and len(x) == 2
    assert x.contiguous() is x
    assert [t.shape for t in x.split(3, 2)] == [(2, 3, 3), (2, 3, 1)]
    assert [t.shape for t in x.chunk(3, 1)] == [(2, 1, 4)] * 3
    assert [t.shape for t in x.chunk(3, 2)] == [(2, 3, 2)] * 2    # like torch.chunk
    assert len(x.unbind(2)) == 4 and x.unbind(2)[0].shape == (2, 3)
    # PyTorch's aliasing: an in-place update of a view writes its source (flowlite.views)
    a = fl.tensor([1.0, 2.0, 3.0, 4.0])
    b = a.view(2, 2)
    b += 1
    assert a.tolist() == [2.0, 3.0, 4.0, 5.0] and b.tolist() == [[2.0, 3.0], [4.0, 5.0]]


def test_integer_and_bool_shape_ops():
    i = fl.tensor([[1, 2, 3], [4, 5, 6]])
    b = i > 2
    outs = [i.T, i.flip(1), fl.cat([i, i]), fl.stack([b, b]), i.repeat(1, 2), b.tril(),
            i.triu(1), F.pad(i, (1, 1), value=7), F.pad(b, (0, 1)), i.reshape(3, 2),
            fl.cat([i, fl.tensor([[0.5, 0.5, 0.5]])])]
    ai = np.array([[1, 2, 3], [4, 5, 6]])
    refs = [ai.T, ai[:, ::-1], np.concatenate([ai, ai]), np.stack([ai > 2, ai > 2]),
            np.tile(ai, (1, 2)), np.tril(ai > 2), np.triu(ai, 1),
            np.pad(ai, ((0, 0), (1, 1)), constant_values=7), np.pad(ai > 2, ((0, 0), (0, 1))),
            ai.reshape(3, 2), np.concatenate([ai, [[0.5, 0.5, 0.5]]]).astype(np.float32)]
    check_values(outs, refs)
    assert fl.cat([i, fl.tensor([[0.5, 0.5, 0.5]])]).dtype is fl.float32   # cat promotes
    assert fl.cat([fl.zeros(0), fl.ones(2)]).tolist() == [1.0, 1.0]   # legacy empty 1-D skip


def test_second_order_of_shape_ops(x64):
    def make(mod):
        def fn(x):
            if mod is fl:
                y = fl.cat([x.flip(1), x.T.reshape(2, 3), F.pad(x, (1, 0), value=2.0)[:, :3]], 0)
                z = fl.stack([y.tril(), y.triu(1)], -1).repeat(1, 2, 1)
                return (z.unsqueeze(0).expand(2, -1, -1, -1) ** 2).sum(0) * z
            y = jnp.concatenate([x[:, ::-1], x.T.reshape(2, 3),
                                 jnp.pad(x, ((0, 0), (1, 0)), constant_values=2.0)[:, :3]], 0)
            z = jnp.tile(jnp.stack([jnp.tril(y), jnp.triu(y, 1)], -1), (1, 2, 1))
            return (jnp.broadcast_to(z[None], (2,) + z.shape) ** 2).sum(0) * z
        return fn
    check_grad2(make(fl), make(jnp), randn(2, 3, seed=6))


def test_finite_differences_shape_ops(x64):
    for fn, a in [
        (lambda x: fl.cat([x.flip(0), x.T.reshape(2, 3)], 1).tril(), randn(2, 3, seed=3)),
        (lambda x: F.pad(x, (1, -1, 0, 2), value=0.5) * 2, randn(2, 3, seed=4)),
        (lambda x: fl.stack(x.unbind(1), 0).repeat(1, 2).triu(1), randn(2, 3, seed=5)),
    ]:
        check_fd(fn, a)


def test_pad_rejects_bad_arguments():
    x = fl.zeros(2, 3)
    with pytest.raises(ValueError, match="pad"):
        F.pad(x, (1,))
    with pytest.raises(ValueError, match="pad"):
        F.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(NotImplementedError, match="reflect"):
        F.pad(x, (1, 1), mode="reflect")


def _split_back(lib, x, dt, use):
    """The gradient of a tensor taken apart by split (the pieces in `use` take part)."""
    a = lib.from_numpy(x).to(dt).requires_grad_(True)
    q, k, v = a.split(4, dim=1)
    parts = {"q": (q * q).sum(), "k": (k * 3.0).sum(), "v": v.sum() * 2.0}
    loss = parts[use[0]]
    for u in use[1:]:
        loss = loss + parts[u]
    loss.float().backward()
    return a


@pytest.mark.parametrize("use", ["qkv", "vkq", "vq", "k"])
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_the_gradient_of_split_pieces_is_one_concatenate_with_torchs_values(use, dt):
    """The cotangents of split's pieces (zero pads of disjoint ranges) are joined by one
    concatenate (zeros in the gaps of unused pieces), not summed as pad + add; the values are
    PyTorch's, in float32 and bfloat16, whatever order the pieces' gradients arrive in."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((6, 12)).astype(np.float32)
    with fl.debug.eager(False):         # the program is what this checks (FLOWLITE_EAGER=1 too)
        a = _split_back(fl, x, getattr(fl, dt), use)
        text = fl.debug.hlo([a.grad])
    t = _split_back(torch, x, getattr(torch, dt), use)
    if len(use) > 1:            # one piece alone stays one pad
        assert "stablehlo.concatenate" in text and "stablehlo.pad" not in text, text
    np.testing.assert_array_equal(a.grad.float().numpy(), t.grad.float().numpy())


def test_split_pieces_keep_a_differentiable_gradient_under_create_graph():
    """With create_graph the pieces' cotangents are summed as before (each keeps its tape), so
    the gradient of the gradient is PyTorch's."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    res = []
    for lib in (fl, torch):
        a = lib.from_numpy(x.copy()).requires_grad_(True)
        p, q = a.split(4, dim=1)
        (g,) = lib.autograd.grad((p ** 3).sum() + (q ** 2).sum(), a, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), a)
        res.append((g.detach().numpy(), gg.numpy()))
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-6)
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-5)
