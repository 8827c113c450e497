"""The scan primitive: forward and gradients against jax.lax.scan + jax.grad, captured
tensors, reverse scans, pytrees, nested scans, errors."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowlite as fl


def _r(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_values_and_grads_match_jax(x64, reverse):
    W, U, h0, xs = _r(4, 4, seed=1) * 0.5, _r(3, 4, seed=2), _r(2, 4, seed=3), _r(5, 2, 3, seed=4)

    def jref(W, U, h0, xs):
        def body(h, x):
            h = jnp.tanh(h @ W + x @ U)
            return h, h.sum(-1)
        h, ys = jax.lax.scan(body, h0, xs, reverse=reverse)
        return (h ** 2).sum() + (ys ** 3).sum()

    ts = [fl.tensor(a, requires_grad=True) for a in (W, U, h0, xs)]
    Wt, Ut, h0t, xst = ts

    def body(h, x):
        h = fl.tanh(h @ Wt + x @ Ut)
        return h, h.sum(-1)

    h, ys = fl.scan(body, h0t, xst, reverse=reverse)
    loss = (h ** 2).sum() + (ys ** 3).sum()
    loss.backward()
    np.testing.assert_allclose(loss.item(), float(jref(W, U, h0, xs)), rtol=1e-10)
    grads = jax.grad(jref, argnums=(0, 1, 2, 3))(W, U, h0, xs)
    for t, g in zip(ts, grads):
        np.testing.assert_allclose(t.grad.numpy(), np.asarray(g), rtol=1e-9, atol=1e-12)


def test_scan_pytree_carry_length_only_and_int_carry():
    def body(carry, _):
        i, acc = carry
        return (i + 1, acc * 2.0), acc

    (i, acc), ys = fl.scan(body, (fl.tensor(0), fl.tensor(1.0)), None, length=4)
    assert i.item() == 4
    assert acc.item() == 16.0
    np.testing.assert_array_equal(ys.numpy(), [1.0, 2.0, 4.0, 8.0])


def test_scan_is_one_node_regardless_of_length():
    x = fl.randn(3)

    def run(T):
        def body(c, _):
            return c * 0.5 + 1.0, c
        c, ys = fl.scan(body, x, None, length=T)
        return c

    a, b = run(4), run(400)
    assert a._node.inputs[0].op.name == "scan"
    assert b._node.inputs[0].op.name == "scan"
    assert len(a._node.inputs[0].attrs[0]) == len(b._node.inputs[0].attrs[0])


def test_second_order_gradient_through_scan(x64):
    w0 = 0.7

    def jf(w):
        def body(c, x):
            c = jnp.sin(c * w + x)
            return c, c
        c, ys = jax.lax.scan(body, 0.3, jnp.arange(4.0))
        return ys.sum()

    w = fl.tensor(w0, dtype=fl.float64, requires_grad=True)

    def body(c, x):
        c = fl.sin(c * w + x)
        return c, c

    _, ys = fl.scan(body, fl.tensor(0.3, dtype=fl.float64), fl.arange(4.0, dtype=fl.float64))
    (g,) = fl.grad(ys.sum(), w, create_graph=True)
    (gg,) = fl.grad(g, w)
    np.testing.assert_allclose(g.item(), float(jax.grad(jf)(w0)), rtol=1e-9)
    np.testing.assert_allclose(gg.item(), float(jax.grad(jax.grad(jf))(w0)), rtol=1e-8)


def test_nested_scan(x64):
    def jf(a):
        def outer(c, x):
            def inner(d, y):
                return d * a + y, d
            d, _ = jax.lax.scan(inner, c, jnp.arange(3.0) + x)
            return d, d
        c, ys = jax.lax.scan(outer, 1.0, jnp.arange(2.0))
        return ys.sum()

    a = fl.tensor(0.9, dtype=fl.float64, requires_grad=True)

    def outer(c, x):
        def inner(d, y):
            return d * a + y, d
        d, _ = fl.scan(inner, c, fl.arange(3.0, dtype=fl.float64) + x)
        return d, d

    _, ys = fl.scan(outer, fl.tensor(1.0, dtype=fl.float64), fl.arange(2.0, dtype=fl.float64))
    ys.sum().backward()
    np.testing.assert_allclose(ys.sum().item(), float(jf(0.9)), rtol=1e-10)
    np.testing.assert_allclose(a.grad.item(), float(jax.grad(jf)(0.9)), rtol=1e-9)


def test_scan_errors_are_clear():
    with pytest.raises(TypeError, match="pair"):
        fl.scan(lambda c, x: c, fl.zeros(2), fl.zeros(3, 2))
    with pytest.raises(TypeError, match="carry changed shape"):
        fl.scan(lambda c, x: (fl.cat([c, c]), x), fl.zeros(2), fl.zeros(3, 2))
    with pytest.raises(ValueError, match="same leading length"):
        fl.scan(lambda c, x: (c, x[0]), fl.zeros(2), (fl.zeros(3, 2), fl.zeros(4, 2)))


def test_the_backward_body_is_traced_once_and_reads_each_calls_weights(x64):
    # the second call reuses the first call's traced backward body (control_flow._BWD_BODIES)
    # with its own weights, including values computed from them (W.T for the matmul's
    # gradient): gradients match jax's at both calls' weights
    from flowlite.frontend import control_flow
    U, h0, xs = _r(3, 4, seed=2), _r(2, 4, seed=3), _r(6, 2, 3, seed=4)

    def jref(W, U, h0, xs):
        def body(h, x):
            h = jnp.tanh(h @ W.T + x @ U)
            return h, h.sum(-1)
        h, ys = jax.lax.scan(body, h0, xs)
        return (h ** 2).sum() + (ys ** 3).sum()

    control_flow._BWD_BODIES.clear()
    for seed in (1, 7):
        W = _r(4, 4, seed=seed) * 0.5
        ts = [fl.tensor(a, requires_grad=True) for a in (W, U, h0, xs)]
        Wt, Ut, h0t, xst = ts
        def body(h, x):
            h = fl.tanh(h @ Wt.T + x @ Ut)
            return h, h.sum(-1)

        h, ys = fl.scan(body, h0t, xst)
        ((h ** 2).sum() + (ys ** 3).sum()).backward()
        grads = jax.grad(jref, argnums=(0, 1, 2, 3))(W, U, h0, xs)
        for t, g in zip(ts, grads):
            np.testing.assert_allclose(t.grad.numpy(), np.asarray(g), rtol=1e-9, atol=1e-12)
    assert [type(v) for v in control_flow._BWD_BODIES.values()] == [tuple]


def _scan_nodes(t):
    """The scan nodes `t`'s pending graph computes from."""
    from flowlite.frontend.control_flow import scan_p
    seen, stack, found = set(), [t._node], []
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op is scan_p:
            found.append(n)
        stack.extend(n.inputs)
    return found


def test_the_backward_reads_the_forwards_saved_steps_instead_of_recomputing_them(x64):
    # a differentiable forward keeps its steps' values (residuals); the backward body reads
    # them (scan_saved) and runs only the derivative: no tanh in it (tanh' = 1 - tanh^2)
    from flowlite.frontend.control_flow import scan_saved
    W, h0, xs = _r(4, 4, seed=1) * 0.5, _r(2, 4, seed=3), _r(5, 2, 4, seed=4)
    Wt = fl.tensor(W, requires_grad=True)
    h, _ = fl.scan(lambda h, x: (fl.tanh(h @ Wt + x), None), fl.tensor(h0), fl.tensor(xs))
    (g,) = fl.grad((h ** 2).sum(), Wt)
    fwd, = _scan_nodes(h)
    # it kept the matmul's and the tanh's values; the add is recomputed from them (cheap)
    assert [e[0].name for e in fwd.attrs[0]] == ["matmul", "add", "tanh"]
    assert fwd.attrs[7] == 2
    bwd = [n for n in _scan_nodes(g) if n is not fwd]
    assert len(bwd) == 1
    ops = [e[0] for e in bwd[0].attrs[0]]
    assert scan_saved in ops and not any(p.name == "tanh" for p in ops)

    def jref(W):
        h, _ = jax.lax.scan(lambda h, x: (jnp.tanh(h @ W + x), None), h0, xs)
        return (h ** 2).sum()
    np.testing.assert_allclose(g.numpy(), np.asarray(jax.grad(jref)(W)), rtol=1e-10)


def test_a_scan_nothing_differentiates_keeps_no_residuals():
    W = fl.randn(4, 4)
    h, _ = fl.scan(lambda h, x: (fl.tanh(h @ W + x), None), fl.zeros(2, 4), fl.randn(5, 2, 4))
    with fl.no_grad():
        h2, _ = fl.scan(lambda h, x: (fl.tanh(h @ W + x), None), fl.zeros(2, 4),
                        fl.randn(5, 2, 4, requires_grad=True))
    assert _scan_nodes(h)[0].attrs[7] == 0 and _scan_nodes(h2)[0].attrs[7] == 0
