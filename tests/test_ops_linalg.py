"""Linear algebra forward and backward against jax.numpy (float64): matmul/@ over all of
PyTorch's 1-D/2-D/batched broadcasting cases, bmm/mm/dot/outer, einsum (ellipsis, implicit
output, an index summed inside one operand), and second order through matmul/tanh."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl
from conftest import check_fd, check_grad, check_grad2, check_values, randn

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

# (shape of a, shape of b) for a @ b: every PyTorch matmul case
MATMUL_SHAPES = [
    ((4,), (4,)),              # dot -> 0-d
    ((4,), (4, 3)),            # vector-matrix
    ((2, 4), (4,)),            # matrix-vector
    ((2, 4), (4, 3)),          # mm
    ((5, 2, 4), (5, 4, 3)),    # bmm
    ((5, 2, 4), (4, 3)),       # batched @ matrix (broadcast)
    ((2, 4), (5, 4, 3)),       # matrix @ batched
    ((4,), (5, 4, 3)),         # vector @ batched
    ((5, 2, 4), (4,)),         # batched @ vector
    ((2, 1, 3, 4), (5, 4, 2)),  # batch dims broadcast against each other
    ((1, 4), (4, 1)),          # size-1 everywhere
    ((2, 3, 2, 4), (4, 3)),    # two batch dims @ matrix
    ((2, 4), (3, 2, 4, 3)),    # matrix @ two batch dims
]


def test_matmul_broadcasting_cases_values_and_grads(x64):
    arrays = []
    for k, (sa, sb) in enumerate(MATMUL_SHAPES):
        arrays += [randn(*sa, seed=10 + k), randn(*sb, seed=40 + k)]

    def fl_fn(*xs):
        outs = []
        for k in range(len(MATMUL_SHAPES)):
            a, b = xs[2 * k], xs[2 * k + 1]
            outs.append(a @ b if k % 2 else fl.matmul(a, b))
        return tuple(outs)

    def jnp_fn(*xs):
        return tuple(jnp.matmul(xs[2 * k], xs[2 * k + 1]) for k in range(len(MATMUL_SHAPES)))

    outs = check_grad(fl_fn, jnp_fn, *arrays)
    assert [tuple(o.shape) for o in outs] == [(), (3,), (2,), (2, 3), (5, 2, 3), (5, 2, 3),
                                             (5, 2, 3), (5, 3), (5, 2), (2, 5, 3, 2), (1, 1),
                                             (2, 3, 2, 3), (3, 2, 2, 3)]


@pytest.mark.parametrize("batched_left", [True, False])
def test_matrix_broadcast_over_a_batch_gets_its_gradient_from_one_dot(batched_left):
    # x (T, B, K) @ w (K, N): w's gradient is one (K, T*B) @ (T*B, N) dot, not T dots and a
    # sum over T (XLA:CPU's sum over a leading dim was ~30x the dot: word_language_model)
    x = fl.randn(7, 5, 4, requires_grad=True)
    w = fl.randn(4, 3, requires_grad=True)
    out = x @ w if batched_left else fl.matmul(w.mT, x.mT)
    out.sum().backward()
    node = w.grad._node
    while node.op.name in ("transpose", "reshape"):
        node = node.inputs[0]
    assert node.op.name == "matmul"
    assert [len(i.shape) for i in node.inputs] == [2, 2]
    # the cotangent is all ones: every column of w's gradient is x summed over (T, B)
    want = np.broadcast_to(np.asarray(x.detach()).sum((0, 1))[:, None], (4, 3))
    np.testing.assert_allclose(np.asarray(w.grad), want, rtol=1e-5)


def test_bmm_mm_dot_outer_and_methods(x64):
    def fl_fn(a, b, v, w):
        return (fl.bmm(a, b), a.bmm(b), fl.mm(a[0], b[0]), a[1].mm(b[1]), fl.dot(v, w),
                v.dot(w), fl.outer(v, w), v.outer(w), a[0].matmul(v[:4]), v[:2] @ a[0])

    def jnp_fn(a, b, v, w):
        return (a @ b, a @ b, a[0] @ b[0], a[1] @ b[1], v @ w, v @ w, jnp.outer(v, w),
                jnp.outer(v, w), a[0] @ v[:4], v[:2] @ a[0])

    check_grad(fl_fn, jnp_fn, randn(3, 2, 4, seed=1), randn(3, 4, 5, seed=2), randn(5, seed=3),
               randn(5, seed=4))


EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
    ("...ij,jk->...ik", [(5, 2, 2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),              # implicit output
    ("ij->ji", [(2, 3)]),
    ("ij->j", [(2, 3)]),                       # a one-operand reduction
    ("ij,jk->k", [(2, 3), (3, 4)]),           # i is summed inside the first operand only
    ("ijk,k->j", [(2, 3, 4), (4,)]),          # i summed inside operand 0, k contracted
    ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(3,), (2,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("...i,...i->...", [(2, 1, 3), (4, 3)]),   # ellipsis dims broadcast (2,1) with (4,)
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    (" ij , jk -> ik ", [(2, 3), (3, 1)]),    # spaces; size-1 output dim
]


def test_einsum_values_and_grads(x64):
    arrays, spans = [], []
    for k, (eq, shapes) in enumerate(EINSUMS):
        spans.append((len(arrays), len(shapes)))
        arrays += [randn(*s, seed=100 + 10 * k + j) for j, s in enumerate(shapes)]

    def make(einsum):
        def fn(*xs):
            return tuple(einsum(eq, *xs[s:s + n]) for (eq, _), (s, n) in zip(EINSUMS, spans))
        return fn

    check_grad(make(fl.einsum), make(lambda eq, *ops: jnp.einsum(eq.replace(" ", ""), *ops)),
               *arrays)


def test_einsum_list_operands_and_dtype_promotion():
    a = fl.tensor([[1, 2], [3, 4]])
    b = fl.tensor([[0.5, 1.0], [1.5, 2.0]])
    r = fl.einsum("ij,jk->ik", [a, b])
    assert r.dtype is fl.float32
    check_values([r, fl.einsum("ij->i", a)],
                 [np.array([[1, 2], [3, 4]]) @ np.array([[0.5, 1.0], [1.5, 2.0]]),
                  np.array([3, 7])])


def test_matmul_dtypes():
    i = fl.tensor([[1, 2], [3, 4]])
    f = fl.tensor([[1.0, 0.0], [0.0, 2.0]])
    h = f.half()
    outs = [i @ i, i @ f, f @ i, h @ h, f.bfloat16() @ f.bfloat16()]
    assert [o.dtype for o in outs] == [i.dtype, fl.float32, fl.float32, fl.float16, fl.bfloat16]
    ai = np.array([[1, 2], [3, 4]])
    af = np.array([[1.0, 0.0], [0.0, 2.0]])
    check_values(outs, [ai @ ai, ai @ af, af @ ai, af @ af, af @ af], rtol=1e-2)


def test_hessian_vector_product_through_matmul_and_tanh(x64):
    X = randn(5, 3, seed=5)
    y = randn(5, seed=6)
    w0 = randn(3, seed=7)
    v0 = randn(3, seed=8)
    Xt, yt = fl.from_numpy(X), fl.from_numpy(y)
    w = fl.from_numpy(w0).requires_grad_()
    v = fl.from_numpy(v0)
    loss = ((fl.tanh(Xt @ w) - yt) ** 2).mean() + (w @ w) * 0.1
    g, = fl.grad(loss, w, create_graph=True)
    hv, = fl.grad((g * v).sum(), w)
    # the same HVP as a second reverse pass over a matrix-valued parameter
    W = fl.from_numpy(np.stack([w0, -w0], 1)).requires_grad_()
    loss2 = (fl.tanh(Xt @ W) ** 2).sum()
    G, = fl.grad(loss2, W, create_graph=True)
    HV, = fl.grad((G * fl.from_numpy(np.stack([v0, v0], 1))).sum(), W)

    def f(w):
        return jnp.mean((jnp.tanh(X @ w) - y) ** 2) + (w @ w) * 0.1

    def f2(W):
        return jnp.sum(jnp.tanh(X @ W) ** 2)

    ref = jax.jit(lambda: (jax.grad(f)(w0), jax.jvp(jax.grad(f), (w0,), (v0,))[1],
                           jax.jvp(jax.grad(f2), (np.stack([w0, -w0], 1),),
                                   (np.stack([v0, v0], 1),))[1]))()
    fl.sync()
    np.testing.assert_allclose(g.numpy(), ref[0], rtol=1e-10)
    np.testing.assert_allclose(hv.numpy(), ref[1], rtol=1e-9)
    np.testing.assert_allclose(HV.numpy(), ref[2], rtol=1e-9)


def test_second_order_of_matmul_and_einsum(x64):
    def make(mod):
        def fn(a, b, v):
            if mod is fl:
                return fl.cat([(fl.tanh(a @ b) @ v).reshape(-1),
                               fl.einsum("ij,jk,k->i", a, b, v) ** 2,
                               fl.einsum("ij,ij->j", a, a * 2.0), (v @ b.T @ a.T) ** 3])
            return jnp.concatenate([(jnp.tanh(a @ b) @ v).reshape(-1),
                                    jnp.einsum("ij,jk,k->i", a, b, v) ** 2,
                                    jnp.einsum("ij,ij->j", a, a * 2.0), (v @ b.T @ a.T) ** 3])
        return fn
    check_grad2(make(fl), make(jnp), randn(2, 3, seed=20), randn(3, 4, seed=21),
                randn(4, seed=22))


def test_finite_differences_linalg(x64):
    for fn, arrays in [
        (lambda a, b: (a @ b).tanh(), (randn(2, 3, seed=9), randn(3, 2, seed=10))),
        (lambda a, b: fl.einsum("bij,jk->bk", a, b),
         (randn(2, 2, 3, seed=11), randn(3, 2, seed=12))),
        (lambda a, b: a @ b[0], (randn(2, 1, 3, seed=13), randn(2, 3, seed=14))),
    ]:
        check_fd(fn, *arrays)


def test_numpy_operand_on_the_left():
    a = np.array([[1.0, 2.0]], np.float32)
    t = fl.tensor([[3.0], [4.0]])
    r = a @ t
    assert isinstance(r, fl.Tensor) and r.tolist() == [[11.0]]
