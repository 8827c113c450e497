"""InstanceNorm, PixelShuffle/Unshuffle, Reflection/Replication/Circular/Constant padding,
PReLU and nn.utils.rnn.pad_sequence against PyTorch: torch's state_dicts load into the
flowlite modules, which then agree on outputs, input and parameter gradients and buffers in
float64.  All flowlite work of a test shares ONE sync."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import flowlite as fl
import flowlite.nn as nn
import flowlite.nn.functional as F
from flowlite.nn.utils.rnn import pad_sequence

from _nn_helpers import compiles, executions

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")
R = np.random.default_rng(5)
TOL = dict(rtol=1e-8, atol=1e-10)


def _torch_instance_norm_without_bias():
    try:
        return torch.nn.InstanceNorm2d(3, affine=True, bias=False)
    except TypeError:       # torch before 2.13 has no `bias=`: the same module, bias removed
        m = torch.nn.InstanceNorm2d(3, affine=True)
        m.register_parameter("bias", None)
        return m


def _module_cases():
    """(name, flowlite module, torch module, input, train, steps)."""
    x1, x2, x3 = (R.standard_normal(s) for s in ((2, 3, 6), (2, 3, 4, 5), (2, 3, 3, 2, 4)))
    return [
        ("instnorm1d", nn.InstanceNorm1d(3), torch.nn.InstanceNorm1d(3), x1, True, 1),
        ("instnorm2d affine", nn.InstanceNorm2d(3, affine=True),
         torch.nn.InstanceNorm2d(3, affine=True), x2, True, 1),
        ("instnorm3d affine", nn.InstanceNorm3d(3, affine=True),
         torch.nn.InstanceNorm3d(3, affine=True), x3, False, 1),
        ("instnorm2d affine no bias", nn.InstanceNorm2d(3, affine=True, bias=False),
         _torch_instance_norm_without_bias(), x2, True, 1),
        ("instnorm2d tracked train", nn.InstanceNorm2d(3, momentum=0.3, affine=True,
                                                       track_running_stats=True),
         torch.nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True),
         x2, True, 2),
        ("instnorm1d tracked eval", nn.InstanceNorm1d(3, track_running_stats=True),
         torch.nn.InstanceNorm1d(3, track_running_stats=True), x1, False, 1),
        ("instnorm2d unbatched", nn.InstanceNorm2d(3, affine=True),
         torch.nn.InstanceNorm2d(3, affine=True), x2[0], True, 1),
        ("prelu", nn.PReLU(), torch.nn.PReLU(), x2, True, 1),
        ("prelu channels", nn.PReLU(3, init=0.1), torch.nn.PReLU(3, init=0.1), x2, True, 1),
        ("prelu 1d input", nn.PReLU(), torch.nn.PReLU(), x1[0, 0], True, 1),
        ("pixel shuffle", nn.PixelShuffle(2), torch.nn.PixelShuffle(2),
         R.standard_normal((2, 8, 3, 2)), True, 1),
        ("pixel shuffle 5d", nn.PixelShuffle(3), torch.nn.PixelShuffle(3),
         R.standard_normal((2, 1, 9, 2, 3)), True, 1),
        ("pixel unshuffle", nn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2), x2[:, :, :, :4],
         True, 1),
        ("reflect1d", nn.ReflectionPad1d((2, 5)), torch.nn.ReflectionPad1d((2, 5)), x1, True, 1),
        ("reflect1d unbatched", nn.ReflectionPad1d(3), torch.nn.ReflectionPad1d(3), x1[0],
         True, 1),
        ("reflect2d", nn.ReflectionPad2d((1, 2, 3, 0)), torch.nn.ReflectionPad2d((1, 2, 3, 0)),
         x2, True, 1),
        ("reflect3d", nn.ReflectionPad3d(1), torch.nn.ReflectionPad3d(1), x3, True, 1),
        ("replicate1d", nn.ReplicationPad1d((4, 1)), torch.nn.ReplicationPad1d((4, 1)), x1,
         True, 1),
        ("replicate2d", nn.ReplicationPad2d(3), torch.nn.ReplicationPad2d(3), x2, True, 1),
        ("replicate2d unbatched", nn.ReplicationPad2d((0, 2, 1, 1)),
         torch.nn.ReplicationPad2d((0, 2, 1, 1)), x2[0], True, 1),
        ("replicate3d", nn.ReplicationPad3d((1, 0, 2, 1, 0, 3)),
         torch.nn.ReplicationPad3d((1, 0, 2, 1, 0, 3)), x3, True, 1),
        ("circular2d", nn.CircularPad2d((1, 2, 0, 1)), torch.nn.CircularPad2d((1, 2, 0, 1)),
         x2, True, 1),
        ("constant2d", nn.ConstantPad2d((1, -1, 2, 0), 3.5),
         torch.nn.ConstantPad2d((1, -1, 2, 0), 3.5), x2, True, 1),
        ("zero1d", nn.ZeroPad1d(2), torch.nn.ZeroPad1d(2), x1, True, 1),
    ]


def test_modules_match_pytorch(x64):
    pending = []
    for name, fm, tm, x, train, steps in _module_cases():
        tm.double()
        fm.double()
        assert list(fm.state_dict()) == list(tm.state_dict()), name
        tr = repr(tm)
        # torch before 2.13 neither takes nor shows InstanceNorm's `bias=`
        fr = repr(fm) if "bias=" in tr or "InstanceNorm" not in tr else \
            re.sub(r", bias=\w+", "", repr(fm))
        assert fr == tr, name
        # non-trivial parameters and buffers, copied from torch
        with torch.no_grad():
            for t in list(tm.parameters()) + [b for b in tm.buffers() if b.is_floating_point()]:
                t.copy_(torch.tensor(R.uniform(0.5, 1.5, tuple(t.shape))))
        fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        fm.train(train)
        tm.train(train)
        for step in range(steps):
            fx = fl.from_numpy(x).requires_grad_(True)
            tx = torch.tensor(x, requires_grad=True)
            fo, to = fm(fx), tm(tx)
            ct = R.standard_normal(tuple(to.shape))
            fm.zero_grad()
            tm.zero_grad()
            (fo * fl.from_numpy(ct)).sum().backward()
            (to * torch.tensor(ct)).sum().backward()
            pending.append((f"{name} step {step}", fo, to, fx, tx,
                            {k: (v.grad, dict(tm.named_parameters())[k].grad.clone())
                             for k, v in fm.named_parameters()},
                            {k: (v.clone(), dict(tm.named_buffers())[k].clone())
                             for k, v in fm.named_buffers()}))
    fl.sync()
    for name, fo, to, fx, tx, grads, bufs in pending:
        assert tuple(fo.shape) == tuple(to.shape), name
        np.testing.assert_allclose(fo.numpy(), to.detach().numpy(), **TOL, err_msg=name)
        np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), **TOL,
                                   err_msg=name + " input grad")
        for k, (g, tg) in grads.items():
            np.testing.assert_allclose(g.numpy(), tg.numpy(), **TOL, err_msg=f"{name} grad {k}")
        for k, (b, tb) in bufs.items():
            np.testing.assert_allclose(b.numpy(), tb.numpy(), **TOL, err_msg=f"{name} buf {k}")


def test_functionals_match_pytorch(x64):
    x, w = R.standard_normal((2, 3, 5, 4)), R.uniform(0.5, 1.5, 3)
    rm, rv = R.standard_normal(3), R.uniform(0.5, 1.5, 3)
    seqs = [R.standard_normal((n, 2, 3)) for n in (3, 5, 1, 5)]
    cases = [
        lambda m, X, C: m.pad(X(x), (1, 2, 3, 1), mode="reflect"),
        lambda m, X, C: m.pad(X(x[0, 0]), (2, 2), mode="replicate"),
        lambda m, X, C: m.pad(X(x), (0, 1, 2, 0), mode="replicate"),
        lambda m, X, C: m.pixel_shuffle(X(x[:, :, :4, :3].reshape(2, 12, 1, 3)), 2),
        lambda m, X, C: m.pixel_unshuffle(X(x), 1),
        lambda m, X, C: m.prelu(X(x), X(w)),
        lambda m, X, C: m.instance_norm(X(x), weight=X(w), bias=X(w[::-1].copy()), eps=1e-3),
        lambda m, X, C: m.instance_norm(X(x), C(rm), C(rv), use_input_stats=False),
    ]

    def fl_x(a):
        t = fl.from_numpy(np.array(a)).requires_grad_(True)
        made.append(t)
        return t

    def torch_x(a):
        t = torch.tensor(np.array(a), requires_grad=True)
        made.append(t)
        return t
    pairs = []
    for k, case in enumerate(cases):
        made = []
        fo = case(F, fl_x, lambda a: fl.from_numpy(np.array(a)))
        fins = made
        made = []
        to = case(torch.nn.functional, torch_x, lambda a: torch.tensor(np.array(a)))
        ct = R.standard_normal(tuple(to.shape))
        (fo * fl.from_numpy(ct)).sum().backward()
        (to * torch.tensor(ct)).sum().backward()
        pairs.append((k, fo, to, fins, made))
    # pad_sequence: every option, gradients back to each sequence
    for bf, pv, side in ((False, 0.0, "right"), (True, -2.5, "right"), (True, 1.0, "left"),
                         (False, 7.0, "left")):
        fs = [fl.from_numpy(s).requires_grad_(True) for s in seqs]
        ts = [torch.tensor(s, requires_grad=True) for s in seqs]
        fo = pad_sequence(fs, batch_first=bf, padding_value=pv, padding_side=side)
        to = torch.nn.utils.rnn.pad_sequence(ts, batch_first=bf, padding_value=pv,
                                             padding_side=side)
        ct = R.standard_normal(tuple(to.shape))
        (fo * fl.from_numpy(ct)).sum().backward()
        (to * torch.tensor(ct)).sum().backward()
        pairs.append((f"pad_sequence {bf} {pv} {side}", fo, to, fs, ts))
    fl.sync()
    for k, fo, to, fins, tins in pairs:
        assert tuple(fo.shape) == tuple(to.shape), k
        np.testing.assert_allclose(fo.numpy(), to.detach().numpy(), **TOL, err_msg=f"case {k}")
        for a, b in zip(fins, tins):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **TOL,
                                       err_msg=f"case {k} grad")


def test_integer_dtypes_match_pytorch():
    """Shuffles, non-constant pads and pad_sequence move integers unchanged."""
    xi = R.integers(-50, 50, (2, 4, 4, 6)).astype(np.int32)
    fx, tx = fl.from_numpy(xi), torch.tensor(xi)
    pairs = [(F.pixel_shuffle(fx, 2), torch.nn.functional.pixel_shuffle(tx, 2)),
             (F.pixel_unshuffle(fx, 2), torch.nn.functional.pixel_unshuffle(tx, 2)),
             (F.pad(fx, (1, 2, 2, 1), "reflect"), torch.nn.functional.pad(tx, (1, 2, 2, 1),
                                                                          "reflect")),
             (nn.ReplicationPad1d(2)(fx[0]), torch.nn.ReplicationPad1d(2)(tx[0])),
             (pad_sequence([fx[0, 0], fx[1, 1, :2]], padding_value=-9),
              torch.nn.utils.rnn.pad_sequence([tx[0, 0], tx[1, 1, :2]], padding_value=-9))]
    fl.sync()
    for a, b in pairs:
        assert a.dtype.name == str(b.dtype).removeprefix("torch."), (a.dtype, b.dtype)
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _raises_like_torch(fl_call, torch_call, match):
    with pytest.raises(ValueError, match=match):
        fl_call()
    with pytest.raises((ValueError, RuntimeError)):
        torch_call()


def test_errors_where_pytorch_raises():
    x = np.zeros((2, 3, 4, 4), np.float32)
    fx, tx = fl.from_numpy(x), torch.tensor(x)
    tF = torch.nn.functional
    _raises_like_torch(lambda: F.pad(fx, (4, 0, 0, 0), "reflect"),
                       lambda: tF.pad(tx, (4, 0, 0, 0), "reflect"),
                       "smaller than the dimension size")
    _raises_like_torch(lambda: F.pad(fx, (1, 1), "replicate"),
                       lambda: tF.pad(tx, (1, 1), "replicate"), "expects a 2D or 3D input")
    _raises_like_torch(lambda: F.pixel_shuffle(fx, 2), lambda: tF.pixel_shuffle(tx, 2),
                       "divisible by upscale_factor")
    _raises_like_torch(lambda: F.pixel_unshuffle(fx, 3), lambda: tF.pixel_unshuffle(tx, 3),
                       "divisible by downscale_factor")
    _raises_like_torch(lambda: F.prelu(fx, fl.ones(4)), lambda: tF.prelu(tx, torch.ones(4)),
                       "doesn't match the channel size")
    one = np.zeros((2, 3, 1, 1), np.float32)
    _raises_like_torch(lambda: F.instance_norm(fl.from_numpy(one)),
                       lambda: tF.instance_norm(torch.tensor(one)), "more than 1 spatial")
    _raises_like_torch(lambda: nn.InstanceNorm2d(4, affine=True)(fx),
                       lambda: torch.nn.InstanceNorm2d(4, affine=True)(tx), "num_features")
    _raises_like_torch(lambda: nn.InstanceNorm1d(3)(fx), lambda: torch.nn.InstanceNorm1d(3)(tx),
                       "expected 2D")
    with pytest.warns(UserWarning, match="num_features"):
        nn.InstanceNorm2d(4)(fx)
    seq = [fl.zeros((2, 3)), fl.zeros((1, 3))]
    _raises_like_torch(lambda: pad_sequence(seq, padding_side="middle"),
                       lambda: torch.nn.utils.rnn.pad_sequence(
                           [torch.zeros(2, 3), torch.zeros(1, 3)], padding_side="middle"),
                       "padding_side")
    with pytest.raises(ValueError, match="every sequence must have shape"):
        pad_sequence([fl.zeros((2, 3)), fl.zeros((2, 4))])
    with pytest.raises(ValueError, match="empty list"):
        pad_sequence([])


def test_training_step_is_one_executable_without_recompiles():
    """Reflection padding, InstanceNorm's running-stat update, PReLU and PixelShuffle all
    record into the step's one graph: no host sync inside, no steady-state recompile."""
    model = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(2, 4, 3),
                          nn.InstanceNorm2d(4, affine=True, track_running_stats=True),
                          nn.PReLU(4), nn.PixelShuffle(2))
    x = fl.from_numpy(R.standard_normal((2, 2, 4, 4)).astype(np.float32))
    norm, params = model[2], list(model.parameters())

    def step():
        model.zero_grad()
        model(x).square().mean().backward()
        with fl.no_grad():
            for p in params:
                p.sub_(p.grad * 0.1)
        fl.sync()

    for _ in range(2):           # warm-up: the first steps compile (as in test_nn_training)
        step()
    c0, e0 = compiles(), executions()
    means = []
    for _ in range(3):
        step()
        means.append(norm.running_mean.numpy().copy())
    assert compiles() == c0, "steady-state steps must not recompile"
    assert executions() == e0 + 3, "one executable per training step"
    for a, b in zip(means, means[1:]):
        assert not np.allclose(a, b)            # running stats move on every step


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("bfloat16", 3e-2)])
def test_low_precision_floats_match_pytorch(dtype, tol):
    """float32 and bfloat16 forward and input gradients, in the input's dtype as PyTorch."""
    x = R.standard_normal((2, 3, 4, 6)).astype(np.float32)
    ct = R.standard_normal((2, 3, 8, 10)).astype(np.float32)
    tdt = getattr(torch, dtype)
    fmods = [nn.InstanceNorm2d(3, affine=True), nn.PReLU(3), nn.ReflectionPad2d(2),
             nn.PixelShuffle(1)]
    tmods = [torch.nn.InstanceNorm2d(3, affine=True), torch.nn.PReLU(3),
             torch.nn.ReflectionPad2d(2), torch.nn.PixelShuffle(1)]
    with torch.no_grad():
        tmods[0].weight.copy_(torch.tensor(R.uniform(0.5, 1.5, 3)))
        tmods[1].weight.copy_(torch.tensor(R.uniform(0.1, 0.5, 3)))
    for fm, tm in zip(fmods, tmods):
        tm.to(tdt)
        fm.load_state_dict({k: v.float().numpy() for k, v in tm.state_dict().items()})
        fm.to(dtype=getattr(fl, dtype))
    fx = fl.from_numpy(x).to(getattr(fl, dtype)).requires_grad_(True)
    tx = torch.tensor(x).to(tdt).requires_grad_(True)
    fo, to = fx, tx
    for fm, tm in zip(fmods, tmods):
        fo, to = fm(fo), tm(to)
    (fo * fl.from_numpy(ct).to(fo.dtype)).sum().backward()
    (to * torch.tensor(ct).to(tdt)).sum().backward()
    assert fo.dtype.name == dtype and fx.grad.dtype.name == dtype
    scale = float(to.detach().float().abs().max())
    np.testing.assert_allclose(fo.float().numpy(), to.detach().float().numpy(), rtol=tol,
                               atol=tol * scale)
    gscale = float(tx.grad.float().abs().max())
    np.testing.assert_allclose(fx.grad.float().numpy(), tx.grad.float().numpy(), rtol=tol,
                               atol=tol * gscale)
