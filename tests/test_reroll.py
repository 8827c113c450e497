"""Re-rolling: repeated segments of a recorded program (stacked layers, a cell stepped over
time) lower as one loop, forward, backward and update, with the values of the unrolled
program; it can be turned off."""
import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite.engine import cache, executor, metrics, reroll


@pytest.fixture
def rerolling():
    """Re-rolling on for the test (whatever the environment says), caches cleared around it."""
    was = reroll.reroll_enabled()
    fl.clear_cache()
    yield
    reroll.set_reroll(was)
    fl.clear_cache()


def _programs():
    return [e.compiled.as_text() for st in cache._cache.values() for e in st.exes.values()]


def _stack(lib, layers, d, dropout=0.0):
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 2 * d)
            self.out = nn.Linear(2 * d, d)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            return x + self.drop(self.out(F.gelu(self.fc(self.ln(x)))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.head = nn.Linear(d, 3)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)
    return Net()


def _train(lib, model, x, y, steps=3, sgd=False, wait_at=None):
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if sgd else \
        lib.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for k in range(steps):
        if k == wait_at:
            executor.wait_for_compiles()
        loss = lib.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _stack_run(on, layers=12, d=8, dropout=0.0, seed=0):
    reroll.set_reroll(on)
    fl.clear_cache()
    fl.manual_seed(seed)
    model = _stack(fl, layers, d, dropout).double()
    rng = np.random.default_rng(1)
    x = fl.from_numpy(rng.normal(size=(4, d)))
    y = fl.from_numpy(rng.integers(0, 3, size=4))
    before = metrics.counters()["rerolled_runs"]
    out = _train(fl, model, x, y)
    return out, metrics.counters()["rerolled_runs"] - before, _programs()


def test_stacked_layers_train_as_loops_with_the_unrolled_values(x64, rerolling):
    (losses, params), runs, texts = _stack_run(True)
    assert runs >= 2                          # the layers' forward and their backward
    assert any("while(" in t for t in texts)
    (losses0, params0), runs0, texts0 = _stack_run(False)
    assert runs0 == 0 and not any("while(" in t for t in texts0)
    np.testing.assert_allclose(losses, losses0, rtol=1e-13)
    for k in params0:
        np.testing.assert_allclose(params[k], params0[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_stacked_layers_match_torch(x64, rerolling):
    # (SGD: flowlite's optimizers take float32 hyper-parameters, PyTorch's Python floats,
    # which Adam's epsilon turns into ~1e-7 relative differences after a few steps)
    reroll.set_reroll(True)
    torch.manual_seed(0)
    ref = _stack(torch, 12, 8).double()
    model = _stack(fl, 12, 8).double()
    model.load_state_dict({k: fl.from_numpy(v.detach().numpy()) for k, v in ref.state_dict().items()})
    rng = np.random.default_rng(1)
    xn, yn = rng.normal(size=(4, 8)), rng.integers(0, 3, size=4)
    before = metrics.counters()["rerolled_runs"]
    want, wparams = _train(torch, ref, torch.from_numpy(xn), torch.from_numpy(yn), sgd=True)
    got, gparams = _train(fl, model, fl.from_numpy(xn), fl.from_numpy(yn), sgd=True)
    assert metrics.counters()["rerolled_runs"] - before >= 2
    np.testing.assert_allclose(got, want, rtol=1e-7)
    for k in wparams:
        np.testing.assert_allclose(gparams[k], wparams[k], rtol=1e-6, atol=1e-9, err_msg=k)


def test_dropout_in_repeated_layers_draws_what_the_unrolled_program_draws(x64, rerolling):
    (losses, params), runs, _ = _stack_run(True, dropout=0.3, seed=5)
    (losses0, params0), _, _ = _stack_run(False, dropout=0.3, seed=5)
    assert runs >= 2
    np.testing.assert_allclose(losses, losses0, rtol=1e-13)
    for k in params0:
        np.testing.assert_allclose(params[k], params0[k], rtol=1e-12, atol=1e-14, err_msg=k)


def _cell_loop(lib, cell, seq, batch, hidden, read_first=False):
    """The loss of a cell stepped over `seq`, after its backward (`read_first`: read before
    backward(), as time_sequence_prediction's closure does)."""
    h = c = lib.zeros(batch, hidden, dtype=lib.float64)
    outs = []
    for x_t in seq.split(1, dim=1):
        h, c = cell(x_t, (h, c))
        outs.append(h)
    loss = (lib.stack(outs) ** 2).mean()
    value = loss.item() if read_first else None
    loss.backward()
    return loss.item() if value is None else value


def test_cell_stepped_over_time_rolls_and_matches_torch(x64, rerolling):
    reroll.set_reroll(True)
    steps, batch, hidden = 40, 3, 5
    ref = torch.nn.LSTMCell(1, hidden).double()
    cell = fl.nn.LSTMCell(1, hidden).double()
    cell.load_state_dict({k: fl.from_numpy(v.detach().numpy())
                          for k, v in ref.state_dict().items()})
    seq = np.random.default_rng(1).normal(size=(batch, steps))
    before = metrics.counters()["rerolled_segments"]
    got = _cell_loop(fl, cell, fl.from_numpy(seq), batch, hidden)
    assert metrics.counters()["rerolled_segments"] - before >= 2 * (steps - 2)   # fwd, bwd
    want = _cell_loop(torch, ref, torch.from_numpy(seq), batch, hidden)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for (name, p), q in zip(cell.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, err_msg=name)


def test_a_long_cell_loop_read_before_backward_rolls_and_matches_torch(x64, rerolling):
    """time_sequence_prediction reads its loss inside LBFGS's closure, before backward(): a
    read that made each step's saved activations outputs could not run as a loop (minutes
    of compiling 999 steps); past executor._SAVED_OUTPUTS_MAX the read leaves them to the
    backward program, which computes them again: both programs roll, values as torch's."""
    reroll.set_reroll(True)
    steps, batch, hidden = 60, 3, 5
    ref = torch.nn.LSTMCell(1, hidden).double()
    cell = fl.nn.LSTMCell(1, hidden).double()
    cell.load_state_dict({k: fl.from_numpy(v.detach().numpy())
                          for k, v in ref.state_dict().items()})
    seq = np.random.default_rng(2).normal(size=(batch, steps))
    runs0, n0 = metrics.counters()["rerolled_runs"], len(metrics._compile_log)
    got = _cell_loop(fl, cell, fl.from_numpy(seq), batch, hidden, read_first=True)
    grads = [p.grad.numpy() for p in cell.parameters()]      # (runs the backward program)
    assert metrics.counters()["rerolled_runs"] - runs0 >= 2
    assert metrics._compile_log[n0][3] < 100     # the live h_t and the loss, not ~2,500 saved
    want = _cell_loop(torch, ref, torch.from_numpy(seq), batch, hidden, read_first=True)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for g, q in zip(grads, ref.parameters()):
        np.testing.assert_allclose(g, q.grad.numpy(), rtol=1e-10)


def test_float32_stack_is_close_to_the_unrolled_program(rerolling):
    def run(on):
        reroll.set_reroll(on)
        fl.clear_cache()
        fl.manual_seed(0)
        model = _stack(fl, 8, 16)
        rng = np.random.default_rng(2)
        x = fl.from_numpy(rng.normal(size=(6, 16)).astype(np.float32))
        y = fl.from_numpy(rng.integers(0, 3, size=6))
        return _train(fl, model, x, y, steps=2)
    (l1, p1), (l0, p0) = run(True), run(False)
    np.testing.assert_allclose(l1, l0, rtol=1e-5)
    for k in p0:
        np.testing.assert_allclose(p1[k], p0[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_metrics_report_names_the_rerolled_runs(rerolling):
    metrics.reset()
    _stack_run(True)
    assert "re-rolled:" in fl.metrics.report()


def test_short_programs_stay_unrolled(rerolling):
    reroll.set_reroll(True)
    before = metrics.counters()["rerolled_runs"]
    x = fl.ones(4, 4)
    for _ in range(3):
        x = x * 2 + 1
    x.numpy()
    assert metrics.counters()["rerolled_runs"] == before


def test_stacked_layers_switch_to_the_unrolled_program_after_their_first_steps(x64, rerolling):
    # the loop form is for the first steps (compile time); the unrolled one runs the rest
    reroll.set_reroll(True)
    fl.manual_seed(0)
    model = _stack(fl, 12, 8).double()
    rng = np.random.default_rng(1)
    x = fl.from_numpy(rng.normal(size=(4, 8)))
    y = fl.from_numpy(rng.integers(0, 3, size=4))
    before = metrics.counters()["rerolled_upgrades"]
    bg = metrics.counters()["background_compiles"]
    # (the unrolled form compiles in the background meanwhile: wait for it at one step)
    losses, params = _train(fl, model, x, y, steps=reroll.UPGRADE_AFTER + 4,
                            wait_at=reroll.UPGRADE_AFTER + 2)
    assert metrics.counters()["rerolled_upgrades"] - before == 1
    assert metrics.counters()["background_compiles"] - bg == 1
    assert "the unrolled form of a re-rolled program" in fl.metrics.report()
    reroll.set_reroll(False)
    fl.clear_cache()
    fl.manual_seed(0)
    model0 = _stack(fl, 12, 8).double()
    losses0, params0 = _train(fl, model0, x, y, steps=reroll.UPGRADE_AFTER + 4)
    np.testing.assert_allclose(losses, losses0, rtol=1e-12)
    for k in params0:
        np.testing.assert_allclose(params[k], params0[k], rtol=1e-11, atol=1e-13, err_msg=k)


def test_long_time_loops_stay_loops():
    assert reroll.upgrade_after([reroll.UPGRADE_MAX_REPS + 1]) is None
    assert reroll.upgrade_after([12]) == reroll.UPGRADE_AFTER
    assert reroll.upgrade_after([]) is None


def test_elementwise_chain_over_time_rolls_with_the_unrolled_values(x64, rerolling):
    # a state updated in a Python loop (c = f * c + g): two-op segments, a carry, per-step
    # inputs cut from one array (x[:, t]) taken from it as one block
    rng = np.random.default_rng(3)
    x0, f0 = rng.normal(size=(4, 80)), rng.normal(size=(4,)) * 0.3

    def run(on):
        reroll.set_reroll(on)
        fl.clear_cache()
        x, f = fl.from_numpy(x0).requires_grad_(), fl.from_numpy(f0).requires_grad_()
        c = fl.zeros(4, dtype=fl.float64)
        outs = []
        for t in range(80):
            c = f * c + x[:, t]
            outs.append(c)
        loss = (fl.stack(outs, dim=1) ** 2).sum()
        before = metrics.counters()["rerolled_runs"]
        loss.backward()
        got = [loss.item(), x.grad.numpy(), f.grad.numpy()]
        return got, metrics.counters()["rerolled_runs"] - before
    got, runs = run(True)
    want, runs0 = run(False)
    assert runs >= 2 and runs0 == 0
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


class _TwoCells:
    """time_sequence_prediction's model: two LSTM cells and a linear layer stepped over
    `x.split(1, dim=1)`, the outputs concatenated."""

    def __init__(self, lib, hidden=6):
        self.lib, self.hidden = lib, hidden
        self.c1 = lib.nn.LSTMCell(1, hidden).double()
        self.c2 = lib.nn.LSTMCell(hidden, hidden).double()
        self.out = lib.nn.Linear(hidden, 1).double()

    def modules(self):
        return (self.c1, self.c2, self.out)

    def __call__(self, x, future=0):
        lib = self.lib
        h = c = h2 = c2 = lib.zeros(x.shape[0], self.hidden, dtype=lib.float64)
        outs = []
        for x_t in x.split(1, dim=1):
            h, c = self.c1(x_t, (h, c))
            h2, c2 = self.c2(h, (h2, c2))
            outs.append(self.out(h2))
        for _ in range(future):         # the output fed back as the next input
            h, c = self.c1(outs[-1], (h, c))
            h2, c2 = self.c2(h, (h2, c2))
            outs.append(self.out(h2))
        return lib.cat(outs, dim=1)


def _entry(text):
    return text[text.index("ENTRY"):]


def _two_cells(steps, seed=2):
    ref, got = _TwoCells(torch), _TwoCells(fl)
    for m, r in zip(got.modules(), ref.modules()):
        m.load_state_dict({k: fl.from_numpy(v.detach().numpy())
                           for k, v in r.state_dict().items()})
    return ref, got, np.random.default_rng(seed).normal(size=(4, steps))


def test_per_step_slices_of_one_input_reach_the_loop_as_one_block(x64, rerolling):
    # the loop's segments may be taken last first; either way the steps' x[:, t] are one
    # block of x, not one slice kernel per step (T=200: compile 3.7 s -> 0.8 s)
    reroll.set_reroll(True)
    steps = 30
    ref, got, x = _two_cells(steps)
    with fl.no_grad():
        y = got(fl.from_numpy(x)).numpy()
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-14)
    assert metrics.counters()["rerolled_runs"] > 0
    text = _entry(_programs()[-1])
    assert text.count("slice") < steps // 2, text


def test_a_loop_that_feeds_its_output_back_after_a_loop_over_inputs_rolls_too(x64, rerolling):
    # time_sequence_prediction's prediction: the same cell ops over the input's steps, then
    # over their own outputs; the second loop is wired differently and its segments are one
    # op longer (no slice), so it is a loop of its own (999 + 1000 steps: > 3 minutes of
    # compiling unrolled, 8 s as loops)
    reroll.set_reroll(True)
    steps, future = 24, 24
    ref, got, x = _two_cells(steps, seed=3)
    before = metrics.counters()["rerolled_segments"]
    with fl.no_grad():
        y = got(fl.from_numpy(x), future=future).numpy()
    with torch.no_grad():
        want = ref(torch.from_numpy(x), future=future).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-11, atol=1e-13)
    assert metrics.counters()["rerolled_segments"] - before >= (steps - 2) + (future - 2)
