"""flowlite.extend: a user-defined fused primitive records, lowers and differentiates like a
built-in one (forward and first/second-order gradients against jax)."""
import jax
import jax.numpy as jnp
import numpy as np

import flowlite as fl
from flowlite import extend


def _scaled_tanh():
    def lower(attrs, x):
        return jnp.tanh(x) * attrs[0]

    def vjp(attrs, ins, out, g):
        s = attrs[0]
        return (g * (1 - (out / s) * (out / s)) * s,)
    return extend.primitive("scaled_tanh", lower, vjp)


def _ref(x):
    return jnp.sum(jnp.tanh(x) * 2.0 * x)


def test_user_primitive_forward_and_gradient_match_jax():
    jax.config.update("jax_enable_x64", True)
    try:
        prim = _scaled_tanh()
        xs = np.linspace(-2, 2, 7)
        x = fl.tensor(xs, dtype=fl.float64, requires_grad=True)
        y = extend.record(prim, (x,), attrs=(2.0,))     # shape/dtype inferred from the lowering
        assert tuple(y.shape) == (7,) and y.dtype is fl.float64
        (y * x).sum().backward()
        np.testing.assert_allclose(y.numpy(), np.tanh(xs) * 2.0, rtol=1e-12)
        np.testing.assert_allclose(x.grad.numpy(), jax.grad(_ref)(jnp.asarray(xs)), rtol=1e-12)
        # its VJP is written in flowlite ops, so it differentiates again
        x2 = fl.tensor(xs, dtype=fl.float64, requires_grad=True)
        (g,) = fl.grad((extend.record(prim, (x2,), attrs=(2.0,)) * x2).sum(), x2,
                       create_graph=True)
        g.sum().backward()
        want = jax.grad(lambda v: jnp.sum(jax.grad(_ref)(v)))(jnp.asarray(xs))
        np.testing.assert_allclose(x2.grad.numpy(), want, rtol=1e-10)
    finally:
        jax.config.update("jax_enable_x64", False)


def test_rebind_and_set_value_keep_the_tensor_identity():
    w = fl.zeros(3, requires_grad=True)
    with fl.no_grad():
        extend.rebind(w, w + 1, "add_")
    assert w.requires_grad and w.is_leaf and w.tolist() == [1.0, 1.0, 1.0]
    extend.set_value(w, fl.full((3,), 5.0))
    assert w.requires_grad and w.tolist() == [5.0, 5.0, 5.0]
    assert extend.share(w).tolist() == [5.0, 5.0, 5.0] and not extend.share(w).requires_grad


def test_primitive_level_recorders_for_layers_are_public():
    from flowlite import extend
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fl.tensor(a)
    np.testing.assert_array_equal(extend.slice_strided(x, (0, 1), (3, 4), (2, 2)).numpy(),
                                  a[0:3:2, 1:4:2])
    np.testing.assert_array_equal(extend.pad_general(x, (1, 0), (0, 2), (0, 0), -1.0).numpy(),
                                  np.pad(a, ((1, 0), (0, 2)), constant_values=-1.0))
    idx = fl.tensor(np.array([[3], [0], [2]]))
    np.testing.assert_array_equal(extend.take_along(x, idx, 1).numpy(),
                                  np.take_along_axis(a, np.array([[3], [0], [2]]), 1))
    assert {"conv", "conv_input_grad", "reduce_window"} <= set(extend.__all__)
