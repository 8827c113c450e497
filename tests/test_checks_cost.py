"""Checked execution's cost in the executable: with checks on, the optimizer's update is
still fused and updated in place (it runs under cond(all checks ok, update, old values)
instead of a where() on each output, which made XLA copy every donated buffer), and a
failed step still gives back parameters and state bit-identical, for several optimizers."""
import numpy as np
import pytest

import flowlite as fl
from flowlite import nn, optim
import flowlite.nn.functional as F

X = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
GOOD = np.arange(16) % 10
BAD = GOOD.copy()
BAD[3] = 11

OPTS = {
    "adam": lambda ps: optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "sgd_momentum": lambda ps: optim.SGD(ps, lr=1e-2, momentum=0.9),
}


def _setup(name):
    fl.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    return m, OPTS[name](m.parameters())


def _step(m, opt, y):
    opt.zero_grad()
    loss = F.cross_entropy(m(fl.tensor(X)), fl.tensor(y))
    loss.backward()
    opt.step()
    return loss


def _snapshot(m, opt):
    return [p.numpy().copy() for p in m.parameters()] + \
        [s.numpy().copy() for s in opt._opt_state[0]]


@pytest.mark.parametrize("name", sorted(OPTS))
def test_checked_step_needs_no_copy_of_the_state(name):
    m, opt = _setup(name)
    temp = {}
    try:
        for on in (False, True):
            fl.set_checks(on)
            for _ in range(2):
                _step(m, opt, GOOD).item()
            temp[on] = fl.debug.executables()[-1]["temp_bytes"]
    finally:
        fl.set_checks(True)
    state = sum(a.nbytes for a in _snapshot(m, opt))
    # a where() on every output cost about one more copy of params + state in scratch
    assert temp[True] <= temp[False] + state // 4, (temp, state)


@pytest.mark.parametrize("name", sorted(OPTS))
def test_failed_step_gives_back_params_and_state(name):
    m, opt = _setup(name)
    _step(m, opt, GOOD).item()
    before = _snapshot(m, opt)
    loss = _step(m, opt, BAD)
    with pytest.raises(IndexError, match="Target 11 is out of bounds"):
        loss.item()
    for a, b in zip(before, _snapshot(m, opt)):
        np.testing.assert_array_equal(a, b)
    after = _step(m, opt, GOOD).item()
    m2, opt2 = _setup(name)                 # the same run without the failed step
    _step(m2, opt2, GOOD).item()
    assert _step(m2, opt2, GOOD).item() == after
    for a, b in zip(_snapshot(m, opt), _snapshot(m2, opt2)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("old_dtype", ["float32", "float16"])
@pytest.mark.parametrize("ok", [True, False])
def test_cond_update_is_where_on_the_replaced_outputs(ok, old_dtype):
    # the guard of one multi-output node: cond when old values match the outputs, else a
    # where per output (a cond's branches must agree) — the same values either way
    import jax.numpy as jnp
    from flowlite.lowering import _cond_update
    x = jnp.arange(4.0, dtype=jnp.float32)
    old = jnp.full((4,), -1.0, old_dtype)
    outs = _cond_update(jnp.asarray(ok), lambda a, v: (v * 2, v + 1), None, [x], {0: old})
    np.testing.assert_array_equal(np.asarray(outs[0]), np.asarray(x * 2 if ok else old))
    if ok:                  # output 1 replaces no leaf: no reader, its failed value is moot
        np.testing.assert_array_equal(np.asarray(outs[1]), np.asarray(x + 1))
    assert outs[1].shape == (4,) and outs[1].dtype == jnp.float32
