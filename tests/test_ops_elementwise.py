"""Elementwise ops forward and backward (against jax.numpy / jax.vjp in float64), operator
forms and their reflected variants, comparisons and logical ops, plus the autograd plumbing
(accumulation, retain_grad, detach, no_grad/enable_grad, flowlite.grad, higher order)."""

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import flowlite as fl
from conftest import check_fd, check_grad, check_grad2, check_values, positive, randn

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

# ---- unary ------------------------------------------------------------------------------------
# (flowlite, jax) pairs; the second argument is a positive array for ops with a restricted domain.
UNARY = [
    ("neg", lambda x, p: -x, lambda x, p: -x),
    ("neg_fn", lambda x, p: fl.neg(x), lambda x, p: -x),
    ("abs", lambda x, p: x.abs(), lambda x, p: jnp.abs(x)),
    ("sign", lambda x, p: x.sign(), lambda x, p: jnp.sign(x)),
    ("exp", lambda x, p: x.exp(), lambda x, p: jnp.exp(x)),
    ("log", lambda x, p: p.log(), lambda x, p: jnp.log(p)),
    ("log1p", lambda x, p: fl.log1p(p), lambda x, p: jnp.log1p(p)),
    ("expm1", lambda x, p: x.expm1(), lambda x, p: jnp.expm1(x)),
    ("sqrt", lambda x, p: p.sqrt(), lambda x, p: jnp.sqrt(p)),
    ("rsqrt", lambda x, p: p.rsqrt(), lambda x, p: 1 / jnp.sqrt(p)),
    ("square", lambda x, p: x.square(), lambda x, p: x * x),
    ("reciprocal", lambda x, p: p.reciprocal(), lambda x, p: 1 / p),
    ("sin", lambda x, p: x.sin(), lambda x, p: jnp.sin(x)),
    ("cos", lambda x, p: fl.cos(x), lambda x, p: jnp.cos(x)),
    ("tanh", lambda x, p: x.tanh(), lambda x, p: jnp.tanh(x)),
    ("tan", lambda x, p: (x * 0.3).tan(), lambda x, p: jnp.tan(x * 0.3)),
    ("tan_fn", lambda x, p: fl.tan(x * 0.3), lambda x, p: jnp.tan(x * 0.3)),
    ("sigmoid", lambda x, p: x.sigmoid(), lambda x, p: jax.nn.sigmoid(x)),
    ("relu", lambda x, p: x.relu(), lambda x, p: jax.nn.relu(x)),
    ("erf", lambda x, p: fl.erf(x), lambda x, p: jsp.erf(x)),
    ("floor", lambda x, p: x.floor(), lambda x, p: jnp.floor(x)),
    ("ceil", lambda x, p: x.ceil(), lambda x, p: jnp.ceil(x)),
    ("round", lambda x, p: x.round(), lambda x, p: jnp.round(x)),
    ("clamp", lambda x, p: x.clamp(-0.5, 0.7), lambda x, p: jnp.clip(x, -0.5, 0.7)),
    ("clamp_min", lambda x, p: fl.clamp(x, min=-0.3), lambda x, p: jnp.maximum(x, -0.3)),
    ("clamp_max", lambda x, p: x.clamp(max=0.2), lambda x, p: jnp.minimum(x, 0.2)),
    ("pow_int", lambda x, p: x ** 3, lambda x, p: x ** 3),
    ("pow_2", lambda x, p: x.pow(2), lambda x, p: x ** 2),
    ("pow_neg_int", lambda x, p: p ** -2, lambda x, p: p ** -2.0),
    ("pow_float", lambda x, p: p ** 1.7, lambda x, p: p ** 1.7),
    ("pow_half", lambda x, p: fl.pow(p, 0.5), lambda x, p: p ** 0.5),
    ("pow_zero", lambda x, p: x ** 0, lambda x, p: x ** 0),
    ("rpow", lambda x, p: 2.5 ** x, lambda x, p: 2.5 ** x),
    ("rpow_baked", lambda x, p: 2 ** x, lambda x, p: 2.0 ** x),
    ("trunc", lambda x, p: x.trunc(), lambda x, p: jnp.trunc(x)),
]


def _unary_all(fns):
    return (lambda x, p: tuple(f(x, p) for f in fns))


def test_unary_values_and_grads(x64):
    x, p = randn(2, 3, seed=1) * 1.5, positive(2, 3, seed=2)
    outs64 = check_grad(_unary_all([u[1] for u in UNARY]), _unary_all([u[2] for u in UNARY]),
                        x, p)
    # the same ops in float32 (and in float32 they stay, under x64 too)
    outs32 = _unary_all([u[1] for u in UNARY])(fl.from_numpy(x.astype(np.float32)),
                                               fl.from_numpy(p.astype(np.float32)))
    for o in outs32:
        assert o.dtype is fl.float32
    check_values(outs32, [o.numpy() for o in outs64], rtol=2e-6, atol=2e-6)


SMALL_UNARY = ("abs", "exp", "log", "rsqrt", "sigmoid", "relu", "erf", "clamp", "pow_float",
               "pow_int", "rpow", "reciprocal")


def test_unary_values_and_grads_0d_and_size1(x64):
    ops = [u for u in UNARY if u[0] in SMALL_UNARY]

    def both(k):
        return lambda x0, p0, x1, p1: tuple(u[k](x0, p0) for u in ops) + \
            tuple(u[k](x1, p1) for u in ops)
    check_grad(both(1), both(2), np.array(0.3), np.array(1.3), np.array([-1.2]), np.array([0.6]))


def test_unary_int_inputs_promote_to_float():
    i = fl.tensor([1, 2, 4])
    outs = [i.exp(), i.log(), i.sqrt(), i.sin(), i.sigmoid(), i.reciprocal(), i.tanh()]
    for o in outs:
        assert o.dtype is fl.float32
    a = np.array([1.0, 2.0, 4.0], np.float32)
    check_values(outs, [np.exp(a), np.log(a), np.sqrt(a), np.sin(a), 1 / (1 + np.exp(-a)),
                        1 / a, np.tanh(a)], rtol=1e-6)
    # integer-preserving ops stay integral
    k = fl.tensor([-3, 0, 5])
    outs = [k.abs(), -k, k.sign(), k.floor(), k.ceil(), k.round(), k ** 2, k.clamp(-1, 2),
            k.relu()]
    for o in outs:
        assert o.dtype.kind == "i", o.dtype
    check_values(outs, [[3, 0, 5], [3, 0, -5], [-1, 0, 1], [-3, 0, 5], [-3, 0, 5], [-3, 0, 5],
                        [9, 0, 25], [-1, 0, 2], [0, 0, 5]])


# ---- binary ------------------------------------------------------------------------------------
def _binary_fl(x, y, p, q):
    return (x + y, x - y, x * y, x / q, x // q, x % q, p ** y, fl.pow(p, q),
            fl.maximum(x, y), fl.minimum(x, y), fl.add(x, y, alpha=2.0), fl.sub(x, y, alpha=0.5),
            x.mul(y), x.div(q), fl.atan2(x, q), fl.remainder(x, q), x.max(y), x.min(y))


def _binary_jnp(x, y, p, q):
    return (x + y, x - y, x * y, x / q, x // q, x % q, p ** y, p ** q,
            jnp.maximum(x, y), jnp.minimum(x, y), x + 2.0 * y, x - 0.5 * y,
            x * y, x / q, jnp.arctan2(x, q), jnp.remainder(x, q), jnp.maximum(x, y),
            jnp.minimum(x, y))


def test_binary_ops_values_and_grads(x64):
    x, y = randn(3, 4, seed=5), randn(4, seed=6)
    p = positive(3, 4, seed=7)
    q = positive(4, seed=8, low=0.7, high=1.9) * np.array([1, -1, 1, -1])
    check_grad(_binary_fl, _binary_jnp, x, y, p, q)


BCAST_SHAPES = [((3, 1), (1, 4)), ((), (2, 3)), ((2, 1, 3), ()), ((1,), (1,)), ((5, 1, 1), (2, 3))]


def test_binary_broadcasting_shapes_values_and_grads(x64):
    def make(mod):
        def fn(*xs):
            out = []
            for k in range(len(BCAST_SHAPES)):
                x, y, p = xs[3 * k: 3 * k + 3]
                mx = jnp.maximum if mod is jnp else fl.maximum
                out += [x * y - x, x / (y * y + 1.0), p ** y + mx(x, y)]
            return tuple(out)
        return fn
    arrays = []
    for k, (sx, sy) in enumerate(BCAST_SHAPES):
        arrays += [randn(*sx, seed=50 + k), randn(*sy, seed=60 + k), positive(*sx, seed=70 + k)]
    check_grad(make(fl), make(jnp), *arrays)


def test_scalar_operands_and_reflected_forms(x64):
    def fl_fn(x, p):
        return (x + 2.5, 2.5 + x, x - 1.25, 1.25 - x, 3.5 * x, x * 3.5, x / 1.5, 1.5 / p,
                x // 0.75, 0.75 // p, x % 0.75, 4.25 % p, x ** 2, 1.5 ** x, p ** 0.3,
                x + 1, 1 - x, 2 * x, x / 2, -1 * x, x * 0.5, x - 0, 7 - x, 3 / p, x + True)

    def jnp_fn(x, p):
        return (x + 2.5, 2.5 + x, x - 1.25, 1.25 - x, 3.5 * x, x * 3.5, x / 1.5, 1.5 / p,
                x // 0.75, 0.75 // p, x % 0.75, 4.25 % p, x ** 2, 1.5 ** x, p ** 0.3,
                x + 1, 1 - x, 2 * x, x / 2, -1 * x, x * 0.5, x - 0, 7 - x, 3 / p, x + 1.0)

    check_grad(fl_fn, jnp_fn, randn(2, 3, seed=10), positive(2, 3, seed=11))


def test_tensor_exponent_pow_and_rpow_grads(x64):
    def fl_fn(b, e):
        return (b ** e, fl.pow(b, e), 3.0 ** e, b ** 2.0, e.pow(b))

    def jnp_fn(b, e):
        return (b ** e, b ** e, 3.0 ** e, b ** 2.0, e ** b)

    check_grad(fl_fn, jnp_fn, positive(3, 2, seed=12), positive(2, seed=13))


def test_pow_at_zero_base_has_finite_grads(x64):
    # d/dx x**2 at 0 is 0; d/dy 0**y is 0 for y > 0 (jax and PyTorch agree)
    check_grad(lambda b, e: (b ** e, b ** 2, b ** 2.0), lambda b, e: (b ** e, b ** 2, b ** 2.0),
               np.array([0.0, 1.5, 2.0]), np.array([2.0, 3.0, 1.0]))


def test_integer_arithmetic_semantics():
    a = fl.tensor([7, -7, 5, -5, 0])
    b = fl.tensor([2, 2, -3, -3, 4])
    outs = [a + b, a - b, a * b, a // b, a % b, a / b, a // 2, a % 3, -7 // b, 9 % b,
            a + 1.5, a * 2, a ** 2, 2 ** b.abs(), fl.maximum(a, b), fl.minimum(a, 1)]
    an, bn = np.array([7, -7, 5, -5, 0]), np.array([2, 2, -3, -3, 4])
    refs = [an + bn, an - bn, an * bn, an // bn, an % bn, an / bn, an // 2, an % 3, -7 // bn,
            9 % bn, an + 1.5, an * 2, an ** 2, 2 ** np.abs(bn), np.maximum(an, bn),
            np.minimum(an, 1)]
    assert (a / b).dtype is fl.float32      # true division of integers gives floats
    assert (a // b).dtype.kind == "i" and (a % b).dtype.kind == "i"
    assert (a + 1.5).dtype is fl.float32     # float scalar promotes an int tensor
    check_values(outs, refs, rtol=1e-6)


def test_float_floor_divide_and_remainder_follow_python_signs():
    a = fl.tensor([7.5, -7.5, 7.5, -7.5])
    b = fl.tensor([2.0, 2.0, -2.0, -2.0])
    an, bn = np.array([7.5, -7.5, 7.5, -7.5]), np.array([2.0, 2.0, -2.0, -2.0])
    check_values([a // b, a % b, fl.fmod(a, b), a.div(b, rounding_mode="trunc"),
                  a.div(b, rounding_mode="floor")],
                 [an // bn, an % bn, np.fmod(an, bn), np.trunc(an / bn), np.floor(an / bn)])


def test_where_maximum_minimum_grads(x64):
    def fl_fn(c, x, y):
        m = c > 0
        return (fl.where(m, x, y), fl.where(m, x, 0.5), fl.where(m, 2.5, y), x.clamp(y, 0.9),
                fl.where(m, x * y, -x))

    def jnp_fn(c, x, y):
        m = c > 0
        return (jnp.where(m, x, y), jnp.where(m, x, 0.5), jnp.where(m, 2.5, y),
                jnp.minimum(jnp.maximum(x, y), 0.9), jnp.where(m, x * y, -x))

    check_grad(fl_fn, jnp_fn, randn(3, 1, seed=14), randn(3, 4, seed=15), randn(4, seed=16),
               wrt=[1, 2])


def test_maximum_tie_splits_gradient_evenly():
    x = fl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = fl.tensor([1.0, 1.0, 4.0], requires_grad=True)
    fl.maximum(x, y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.5, 1.0, 0.0])
    np.testing.assert_allclose(y.grad.numpy(), [0.5, 0.0, 1.0])


def test_clamp_passes_the_gradient_at_its_bounds():
    x = fl.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], requires_grad=True)
    lo = fl.tensor([0.0, 0.0, 1.0, 0.0, 0.0], requires_grad=True)
    (x.clamp(0, 1) + x.clamp(min=lo) * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0, 3, 1, 3, 2])     # like PyTorch
    np.testing.assert_allclose(lo.grad.numpy(), [2, 0, 2, 0, 0])
    nan = fl.tensor([float("nan"), 5.0]).clamp(0, 1).tolist()
    assert np.isnan(nan[0]) and nan[1] == 1.0


def test_where_with_scalar_branches_and_dtype():
    c = fl.tensor([True, False, True])
    x = fl.tensor([1, 2, 3])
    check_values([fl.where(c, x, 0), fl.where(c, x, 0.5), fl.where(c, 1.0, 0.0),
                  fl.where(fl.tensor([1, 0, 2]), x, -x)],
                 [np.array([1, 0, 3]), np.array([1, 0.5, 3], np.float32),
                  np.array([1.0, 0.0, 1.0], np.float32), np.array([1, -2, 3])])
    assert fl.where(c, x, 0).dtype.kind == "i"
    assert fl.where(c, x, 0.5).dtype is fl.float32


# ---- comparisons and logical ops ---------------------------------------------------------------
def test_comparisons():
    a = randn(3, 4, seed=17).astype(np.float32)
    b = randn(4, seed=18).astype(np.float32)
    b[1] = a[0, 1]  # an equal pair
    x, y = fl.from_numpy(a), fl.from_numpy(b)
    outs = [x == y, x != y, x < y, x <= y, x > y, x >= y, x > 0, 0.5 < x, x == 1,
            fl.eq(x, y), fl.ne(x, y), fl.lt(x, y), fl.le(x, 0.0), fl.gt(x, y), fl.ge(x, y),
            x.isfinite(), (x / 0).isinf(), (x * 0 / 0).isnan()]
    refs = [a == b, a != b, a < b, a <= b, a > b, a >= b, a > 0, 0.5 < a, a == 1,
            a == b, a != b, a < b, a <= 0, a > b, a >= b, np.isfinite(a),
            np.ones_like(a, bool), np.ones_like(a, bool)]
    for o in outs:
        assert o.dtype is fl.bool
    check_values(outs, refs)
    # mixed int tensor / float scalar compares as float, like PyTorch
    i = fl.tensor([1, 2, 3])
    check_values([i > 1.5, i == 2.0, i < fl.tensor([1.5, 2.5, 2.5])],
                 [np.array([False, True, True]), np.array([False, True, False]),
                  np.array([True, True, False])])


def test_logical_ops_on_bools():
    a = np.array([[True, False, True, False]])
    b = np.array([[True], [False]])
    x, y = fl.from_numpy(a), fl.from_numpy(b)
    outs = [x & y, x | y, x ^ y, ~x, x & True, False | x, True ^ x,
            fl.logical_and(x, y), fl.logical_or(x, y), fl.logical_xor(x, y), fl.logical_not(x),
            fl.logical_and(fl.tensor([0.0, 1.0, 2.0]), fl.tensor([1, 1, 0]))]
    refs = [a & b, a | b, a ^ b, ~a, a & True, False | a, True ^ a, a & b, a | b, a ^ b, ~a,
            np.array([False, True, False])]
    for o in outs:
        assert o.dtype is fl.bool
    check_values(outs, refs)
    # bitwise on integers
    i, j = fl.tensor([12, 10, -1]), fl.tensor([10, 6, 3])
    check_values([i & j, i | j, i ^ j, ~i],
                 [np.array([8, 2, 3]), np.array([14, 14, -1]), np.array([6, 12, -4]),
                  np.array([-13, -11, 0])])


def test_in_place_elementwise():
    x = fl.tensor([1.0, -2.0, 3.0])
    y = x
    x += 1
    assert y is x
    x *= fl.tensor([2.0, 2.0, 0.5])
    x -= 0.5
    x /= 2
    x.clamp_(max=1.5)
    x.neg_().abs_()
    x.add_(fl.tensor([1.0, 1.0, 1.0]), alpha=2.0)
    np.testing.assert_allclose(x.numpy(), np.abs(-np.minimum(((np.array([1.0, -2.0, 3.0]) + 1)
                                                              * [2, 2, 0.5] - 0.5) / 2, 1.5))
                               + 2.0, rtol=1e-6)
    i = fl.tensor([5, 6])
    i += 1
    i //= 2
    assert i.dtype.kind == "i"
    assert i.tolist() == [3, 3]
    m = fl.tensor([True, False])
    m &= fl.tensor([True, True])
    m |= fl.tensor([False, True])
    assert m.tolist() == [True, True]


def test_in_place_ops_on_non_leaves_are_differentiable():
    x = fl.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    y.add_(1)
    y.mul_(x)
    y.clamp_(max=10.0)
    y.sub_(x, alpha=0.5)
    y[1] = x[0] * 5
    (y * y).sum().backward()
    np.testing.assert_allclose(y.numpy(), [2.5, 5.0, 8.5])
    np.testing.assert_allclose(x.grad.numpy(), [72.5, 0.0, -8.5])   # as computed by PyTorch


def test_second_order_of_binary_ops(x64):
    def make(mod):
        def fn(x, y, p):
            mx = fl.maximum if mod is fl else jnp.maximum
            at = fl.atan2 if mod is fl else jnp.arctan2
            return (x * y * x + x / (y * y + 1.0) + p ** y + 1.5 ** x + mx(x * x, y) +
                    at(x, p) + (x - y) % p + mod.where(x > 0, x * p, y * y))
        return fn
    check_grad2(make(fl), make(jnp), randn(3, 4, seed=80), randn(4, seed=81),
                positive(3, 4, seed=82))


# ---- finite differences (float64) ---------------------------------------------------------------
FD_CASES = [
    ("tanh*exp", lambda x, y: x.tanh() * y.exp(), (2, 3), (3,)),
    ("div_pow", lambda x, y: (x * x + 1.0) / (y * y + 1.0) ** 1.5, (2, 3), (1, 3)),
    ("sigmoid_erf", lambda x, y: x.sigmoid() + fl.erf(x * y), (2, 2), ()),
    ("atan2_max", lambda x, y: fl.atan2(x, y * y + 0.5) + fl.maximum(x, y), (3,), (3,)),
    ("log_sqrt", lambda x, y: (x * x + 1.0).log() * (y * y + 0.5).sqrt(), (2, 2), (2, 1)),
    ("where", lambda x, y: fl.where(x > 0, x * y, y.sin()), (2, 3), (3,)),
]


def test_finite_differences_elementwise(x64):
    for i, (name, fn, sx, sy) in enumerate(FD_CASES):
        x = randn(*sx, seed=20 + i)
        y = randn(*sy, seed=40 + i)
        x[np.abs(x) < 0.05] = 0.3   # keep away from kinks
        check_fd(fn, x, y)


# ---- autograd plumbing ------------------------------------------------------------------------
def test_grad_accumulates_across_backward_calls():
    x = fl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    (3 * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0, 3.0]) + 3)
    x.grad = None
    x.sin().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos([1.0, 2.0, 3.0]), rtol=1e-6)


@pytest.mark.filterwarnings("ignore:flowlite. a sync")
def test_leaf_nonleaf_retain_grad_and_grad_fn():
    x = fl.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    k = h * h          # non-leaf without retain_grad
    y = k.sum()
    assert x.is_leaf and not h.is_leaf and x.grad_fn is None and h.grad_fn is not None
    y.backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * np.array([3.0, 6.0]))
    np.testing.assert_allclose(x.grad.numpy(), 18 * np.array([1.0, 2.0]))
    assert k.grad is None
    with pytest.raises(RuntimeError):
        y.backward()   # the graph was freed
    n = fl.tensor([1.0])
    assert not n.requires_grad
    with pytest.raises(RuntimeError):
        n.retain_grad()
    with pytest.raises(RuntimeError):
        fl.tensor([1, 2]).requires_grad_()   # integer tensors can't require grad


def test_backward_retain_graph_and_gradient_argument():
    x = fl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(fl.tensor([1.0, 0.5, 0.0]), retain_graph=True)
    y.backward(fl.tensor([1.0, 1.0, 1.0]))
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0, 3.0]) *
                               np.array([2.0, 1.5, 1.0]))
    with pytest.raises(RuntimeError, match="scalar"):
        (x * 2).backward()


def test_detach_no_grad_enable_grad():
    x = fl.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    y = (x * d).sum()          # d is a constant
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])
    with fl.no_grad():
        z = x * 2
        assert not z.requires_grad and not fl.is_grad_enabled()
        with fl.enable_grad():
            w = x * 3
            assert w.requires_grad
    assert fl.is_grad_enabled() and not z.requires_grad

    @fl.no_grad()
    def f(t):
        return t * t
    assert not f(x).requires_grad
    with fl.no_grad():
        x += 1          # in-place on a leaf is fine under no_grad
    np.testing.assert_allclose(x.numpy(), [2.0, 3.0])
    with pytest.raises(RuntimeError, match="in-place"):
        x += 1


def test_flowlite_grad_with_grad_outputs_and_multiple_inputs(x64):
    a = randn(3, seed=30)
    b = randn(3, seed=31)
    x, y = fl.from_numpy(a).requires_grad_(), fl.from_numpy(b).requires_grad_()
    out = x * y.sin()
    go = np.array([1.0, -2.0, 0.5])
    gx, gy = fl.grad(out, [x, y], grad_outputs=fl.from_numpy(go))
    assert x.grad is None and y.grad is None   # grad() writes no .grad
    np.testing.assert_allclose(gx.numpy(), go * np.sin(b))
    np.testing.assert_allclose(gy.numpy(), go * a * np.cos(b))
    # several outputs, each with its grad_output, summed
    o1, o2 = x * 2, (y * x).sum()
    gx2, = fl.grad([o1, o2], [x], grad_outputs=[fl.from_numpy(go), None])
    np.testing.assert_allclose(gx2.numpy(), 2 * go + b)
    with pytest.raises(RuntimeError):
        fl.grad((x * 2).sum(), [y])
    gy_none, = fl.grad((x * 2).sum(), [y], allow_unused=True)
    assert gy_none is None


def test_second_and_third_derivative_of_sin_x_cubed(x64):
    a = np.array([-1.3, 0.0, 0.4, 2.0])
    x = fl.from_numpy(a).requires_grad_()
    y = (x.sin() * x ** 3).sum()
    g1, = fl.grad(y, x, create_graph=True)
    g2, = fl.grad(g1.sum(), x, create_graph=True)
    g3, = fl.grad(g2.sum(), x)
    f = lambda v: jnp.sin(v) * v ** 3
    refs = jax.jit(lambda v: (jax.vmap(jax.grad(f))(v), jax.vmap(jax.grad(jax.grad(f)))(v),
                              jax.vmap(jax.grad(jax.grad(jax.grad(f))))(v)))(a)
    fl.sync()
    for got, r in zip((g1, g2, g3), refs):
        np.testing.assert_allclose(got.numpy(), r, rtol=1e-10, atol=1e-12)


def test_double_backward_of_elementwise_ops(x64):
    """d/dx of <v, grad f(x)> for each unary op: second-order VJPs of every primitive."""
    a = randn(5, seed=32) * 0.8
    p = positive(5, seed=33)
    fns = [(u[0], u[2]) for u in UNARY if u[0] not in (
        "floor", "ceil", "round", "sign", "trunc", "relu", "clamp", "clamp_min", "clamp_max",
        "pow_zero", "abs", "neg", "neg_fn", "pow_2", "pow_half", "rpow_baked")]
    x = fl.from_numpy(a).requires_grad_()
    pt = fl.from_numpy(p).requires_grad_()
    hv = []
    by_name = {u[0]: u[1] for u in UNARY}
    for name, _ in fns:
        y = by_name[name](x, pt).sum()
        gx, gp = fl.grad(y, [x, pt], create_graph=True, allow_unused=True)
        tot = (gx.sum() if gx is not None else 0) + (gp.sum() if gp is not None else 0)
        # a linear op's gradient is constant: nothing to differentiate a second time
        hv.append(fl.grad(tot, [x, pt], allow_unused=True) if tot.requires_grad else (None, None))
    fl.sync()

    def second(xv, pv):
        out = []
        for _, fj in fns:
            def first(u, w):
                gx, gp = jax.grad(lambda u, w: jnp.sum(fj(u, w)), argnums=(0, 1))(u, w)
                return jnp.sum(gx) + jnp.sum(gp)
            out.append(jax.grad(first, argnums=(0, 1))(xv, pv))
        return out
    refs = jax.jit(second)(a, p)
    for (name, _), got, ref in zip(fns, hv, refs):
        for g, r in zip(got, ref):
            np.testing.assert_allclose(np.zeros_like(a) if g is None else g.numpy(), r,
                                       rtol=1e-9, atol=1e-12, err_msg=name)


# ---- device-less baked constants and the sync ---------------------------------------------------
def test_sync_while_tape_holds_a_baked_constant():
    """`x * 2` records the baked constant 2 (a device-less `full` node) as a saved input of its
    GradFn; a sync while that GradFn is alive (print before backward, retain_graph=True,
    create_graph=True) must not treat the constant as a sync root."""
    x = fl.tensor([1.0, 3.0], requires_grad=True)
    y = x * 2
    assert y.tolist() == [2.0, 6.0]     # a host read while y's tape is alive
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_host_read_of_a_python_scalar_constant():
    assert fl.as_tensor(2.0).item() == 2.0


def test_sync_with_live_tape_keeps_baked_constants_constant():
    """A sync while a tape entry holds a baked constant (x * 2 before backward) must not turn
    the shared, cached constant node into a device-data leaf: afterwards every `t * 2` graph
    would key differently and recompile."""
    # bfloat16 * 0.5: a constant no other test syncs while it is held by a tape
    a = fl.tensor([1.0, 2.0], dtype=fl.bfloat16)
    (a * 0.5).numpy()
    x = fl.tensor([1.0, 2.0], dtype=fl.bfloat16, requires_grad=True)
    y = x * 0.5
    y.tolist()                       # sync while y's GradFn holds the constant
    before = fl.metrics.counters()["compiles"]
    assert (a * 0.5).tolist() == [0.5, 1.0]
    assert fl.metrics.counters()["compiles"] == before, "a * 0.5 recompiled after the sync"
    y.sum().backward()
    assert x.grad.tolist() == [0.5, 0.5]


def test_atan2_gradient_at_the_origin_is_pytorch_zero_not_nan():
    import torch
    xs = np.array([0.0, 1.0, -2.0, 0.0], np.float32)
    ys = np.array([0.0, 0.5, 3.0, -1.0], np.float32)
    x, y = fl.tensor(xs, requires_grad=True), fl.tensor(ys, requires_grad=True)
    fl.atan2(x, y).sum().backward()
    tx, ty = torch.tensor(xs, requires_grad=True), torch.tensor(ys, requires_grad=True)
    torch.atan2(tx, ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-6)


def test_tan_added_through_the_float_unary_table_matches_pytorch():
    # float unary math: one primitive entry plus one declaration in ops/elementwise.py
    import torch
    xs = np.array([-1.2, -0.3, 0.0, 0.7, 1.4], np.float32)
    x = fl.tensor(xs, requires_grad=True)
    fl.tan(x).sum().backward()
    t = torch.tensor(xs, requires_grad=True)
    torch.tan(t).sum().backward()
    np.testing.assert_allclose(fl.tan(x).detach().numpy(), torch.tan(t).detach().numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5)
    ints = fl.tensor([0, 1])                        # integers become float, as in PyTorch
    assert ints.tan().dtype is fl.float32
    y = fl.tensor(xs)
    y.tan_()
    np.testing.assert_allclose(y.numpy(), np.tan(xs), rtol=1e-6)


# ---- hypot (declared whole in ops/elementwise.py) ------------------------------------------------
def test_hypot_values_and_grads_with_broadcasting_match_jax(x64):
    x, y = randn(3, 4, seed=11), randn(4, seed=12)
    check_grad(lambda a, b: (fl.hypot(a, b), a.hypot(b), fl.hypot(b, a)),
               lambda a, b: (jnp.hypot(a, b), jnp.hypot(a, b), jnp.hypot(b, a)), x, y)
    check_fd(lambda a, b: fl.hypot(a, b), randn(2, 3, seed=13), randn(3, seed=14))


def test_hypot_matches_pytorch_forward_backward_in_place_and_dtypes():
    import torch
    xs = np.array([0.0, 3.0, -1.0, 1e30, 1e-30], np.float32)
    ys = np.array([0.0, 4.0, 2.0, 1e30, 1e-30], np.float32)
    x, y = fl.tensor(xs, requires_grad=True), fl.tensor(ys, requires_grad=True)
    out = fl.hypot(x, y)
    out.sum().backward()
    tx, ty = torch.tensor(xs, requires_grad=True), torch.tensor(ys, requires_grad=True)
    tout = torch.hypot(tx, ty)
    tout.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-6)
    # nan at the origin, like PyTorch
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-6, equal_nan=True)
    h = fl.tensor([3.0], dtype=fl.float16)
    assert fl.hypot(h, fl.tensor([4.0])).dtype is fl.float32       # promoted, as in torch
    assert fl.hypot(h, 4.0).dtype is fl.float16
    b = fl.tensor([3.0, 5.0], dtype=fl.bfloat16)
    np.testing.assert_allclose(fl.hypot(b, b).float().numpy(),
                               torch.hypot(torch.tensor([3.0, 5.0], dtype=torch.bfloat16),
                                           torch.tensor([3.0, 5.0], dtype=torch.bfloat16))
                               .float().numpy())
    z = fl.tensor([1.0, 6.0])
    z.hypot_(fl.tensor([1.0, 8.0]))
    np.testing.assert_allclose(z.numpy(), [2 ** 0.5, 10.0], rtol=1e-6)


def test_hypot_of_integer_tensors_is_not_implemented_as_in_pytorch():
    with pytest.raises(NotImplementedError, match=r"hypot\(\).*int.*shape \(2,\)"):
        fl.hypot(fl.tensor([3, 4]), fl.tensor([4, 3]))
    with pytest.raises(ValueError, match="hypot"):
        fl.hypot(fl.ones(2), fl.ones(3))
