"""A program's random draws lowered together (lowering.draw_groups): the draws of one kind
that share their key are hashed as one vector and finished (erf_inv for normals) once, so
an initialisation of many parameters compiles one such computation, not one per parameter,
and every draw keeps the numbers it has when drawn alone, bit for bit. (On the CPU the global
stream draws on the host, PyTorch's numbers: these tests draw in programs, inside
`flowlite.random.device_draws()`.)"""
import numpy as np
import pytest

import flowlite as fl


@pytest.fixture(autouse=True)
def _in_programs():
    with fl.random.device_draws():
        yield


_MAKERS = [lambda: fl.randn(3, 5), lambda: fl.rand(7), lambda: fl.randn(11, dtype=fl.float64),
           lambda: fl.rand(4, 4), lambda: fl.randn(1), lambda: fl.randn(2, 3, dtype=fl.bfloat16),
           lambda: fl.rand(6, dtype=fl.float16)]


def test_draws_in_one_program_equal_each_drawn_alone(x64):
    fl.manual_seed(7)
    together = [make() for make in _MAKERS]
    fl.sync()
    got = [t.float().numpy() for t in together]
    fl.manual_seed(7)
    alone = [make().float().numpy() for make in _MAKERS]    # read now: one program each
    for g, a in zip(got, alone):
        assert g.shape == a.shape
        np.testing.assert_array_equal(g, a)


def _erf_invs(text):
    """How many erf_inv computations a lowered program holds: jax 0.10 keeps `chlo.erf_inv`,
    jax 0.12 expands each into a polynomial with one `log` — counted in units of what one
    lone normal draw lowers to, in the JAX at hand."""
    count = lambda t: t.count("erf_inv") + t.count("stablehlo.log ")   # noqa: E731
    fl.manual_seed(0)
    unit = count(fl.debug.hlo([fl.randn(4)]))
    assert unit >= 1
    n = count(text)
    assert n % unit == 0, (n, unit)
    return n // unit


def test_an_initialisation_lowers_one_erf_inv_for_all_its_normal_draws():
    fl.manual_seed(0)
    layers = [fl.nn.Linear(8, 8) for _ in range(6)]
    for lin in layers:
        fl.nn.init.normal_(lin.weight, std=0.02)
        fl.nn.init.normal_(lin.bias, std=0.02)
    text = fl.debug.hlo([p for lin in layers for p in lin.parameters()])
    assert _erf_invs(text) == 1


@pytest.mark.parametrize("size,batches",
                         [((1 << 20) - 5, 1), ((1 << 20) - 4, 2), ((1 << 20) + 1, 2)])
def test_a_batch_holds_at_most_2_to_the_20_elements_and_the_numbers_stay(size, batches):
    fl.manual_seed(3)
    big, small = fl.randn(size), fl.randn(5)
    text = fl.debug.hlo([big, small])
    fl.sync()
    got = small.numpy(), big.numpy()[-4:]
    fl.manual_seed(3)
    b = fl.randn(size)
    want_big = b.numpy()[-4:]
    want_small = fl.randn(5).numpy()
    np.testing.assert_array_equal(got[0], want_small)
    np.testing.assert_array_equal(got[1], want_big)
    assert _erf_invs(text) == batches
