"""Cross-check against PyTorch itself (torch is a required test-only dependency, pinned in the
`test` extra): PyTorch modules' state_dicts load unchanged into the flowlite modules, which then
agree on outputs, input gradients, parameter gradients and buffers.  All flowlite work shares ONE
sync."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import flowlite as fl
import flowlite.nn as nn
import flowlite.nn.functional as F

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")
R = np.random.default_rng(11)


def _cases():
    """(name, flowlite module, torch module, inputs, kwargs builder, train, steps)."""
    E, H = 8, 2
    q, kv = R.standard_normal((5, 3, E)), R.standard_normal((7, 3, E))
    am = R.uniform(size=(5, 7)) > 0.7
    am[:, 0] = False
    kpm = np.zeros((3, 7), bool)
    kpm[2, 5:] = True

    def masks(lib):
        t = (lambda a: fl.from_numpy(a)) if lib == "fl" else torch.tensor
        return dict(attn_mask=t(am), key_padding_mask=t(kpm))
    return [
        ("encoder layer", nn.TransformerEncoderLayer(E, H, 16),
         torch.nn.TransformerEncoderLayer(E, H, 16), (q,), None, False, 1),
        ("encoder layer norm_first gelu batch_first",
         nn.TransformerEncoderLayer(E, H, 16, activation="gelu", norm_first=True,
                                    batch_first=True),
         torch.nn.TransformerEncoderLayer(E, H, 16, activation="gelu", norm_first=True,
                                          batch_first=True), (q,), None, False, 1),
        ("mha cross masks", nn.MultiheadAttention(E, H), torch.nn.MultiheadAttention(E, H),
         (q, kv, kv), masks, False, 1),
        ("mha kdim vdim bias_kv zero_attn",
         nn.MultiheadAttention(E, H, kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True),
         torch.nn.MultiheadAttention(E, H, kdim=3, vdim=5, add_bias_kv=True,
                                     add_zero_attn=True),
         (q, kv[:, :, :3], R.standard_normal((7, 3, 5))), masks, False, 1),
        ("conv transpose", nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                              groups=2),
         torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
         (R.standard_normal((2, 4, 5, 4)),), None, False, 1),
        ("conv reflect same", nn.Conv2d(4, 6, (3, 2), padding="same", padding_mode="reflect"),
         torch.nn.Conv2d(4, 6, (3, 2), padding="same", padding_mode="reflect"),
         (R.standard_normal((2, 4, 5, 4)),), None, False, 1),
        ("batchnorm cumulative momentum", nn.BatchNorm2d(4, momentum=None),
         torch.nn.BatchNorm2d(4, momentum=None), (R.standard_normal((3, 4, 3, 2)),), None,
         True, 2),
        ("embedding max_norm padding", nn.Embedding(10, 3, padding_idx=1, max_norm=1.0),
         torch.nn.Embedding(10, 3, padding_idx=1, max_norm=1.0),
         (np.array([[1, 2, 2], [9, 0, 1]]),), None, False, 1),
    ]


def _fl_in(a):
    t = fl.from_numpy(np.array(a))
    return t.requires_grad_(True) if t.dtype.is_floating_point else t


def _torch_in(a):
    t = torch.tensor(np.array(a))
    return t.requires_grad_(True) if t.is_floating_point() else t


def test_modules_match_pytorch(x64):
    torch.manual_seed(0)
    pending = []
    for name, fm, tm, inputs, kw, train, steps in _cases():
        tm.double()
        fm.double()
        fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        assert list(fm.state_dict()) == list(tm.state_dict()), name
        fm.train(train)
        tm.train(train)
        for step in range(steps):
            fin = [_fl_in(a) for a in inputs]
            tin = [_torch_in(a) for a in inputs]
            fo = fm(*fin, **(kw("fl") if kw else {}))
            to = tm(*tin, **(kw("torch") if kw else {}))
            fo, to = (fo[0], to[0]) if isinstance(to, tuple) else (fo, to)
            ct = R.standard_normal(tuple(to.shape))
            fm.zero_grad()
            tm.zero_grad()
            (fo * fl.from_numpy(ct)).sum().backward()
            (to * torch.tensor(ct)).sum().backward()
            pending.append((f"{name} step {step}", fm, tm, fo, to, fin, tin,
                            {k: (v.grad, dict(tm.named_parameters())[k].grad)
                             for k, v in fm.named_parameters()},
                            {k: (v.clone(), dict(tm.named_buffers())[k].clone())
                             for k, v in fm.named_buffers()}))
    fl.sync()
    for name, fm, tm, fo, to, fin, tin, grads, bufs in pending:
        np.testing.assert_allclose(fo.numpy(), to.detach().numpy(), rtol=1e-8, atol=1e-10,
                                   err_msg=name)
        for a, b in zip(fin, tin):
            if b.grad is not None:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8,
                                           atol=1e-10, err_msg=name + " input grad")
        for k, (g, tg) in grads.items():
            np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-8, atol=1e-10,
                                       err_msg=f"{name} grad {k}")
        for k, (b, tb) in bufs.items():
            np.testing.assert_allclose(b.numpy(), tb.numpy(), rtol=1e-8, atol=1e-10,
                                       err_msg=f"{name} buffer {k}")


def test_functionals_match_pytorch(x64):
    x = R.standard_normal((2, 3, 7, 6))
    logits, t = R.standard_normal((6, 5)), np.array([0, 4, -100, 2, 2, 1])
    w, y, pw = R.uniform(0.5, 2, 5), R.uniform(size=x.shape), R.uniform(size=6) + 0.5
    # each case gets (functional module, differentiable-input maker, constant maker)
    cases = [
        lambda m, X, C: m.interpolate(X(x), scale_factor=1.5, mode="bilinear"),
        lambda m, X, C: m.interpolate(X(x), size=(4, 9), mode="bilinear", align_corners=True),
        lambda m, X, C: m.interpolate(X(x), scale_factor=1.7, mode="nearest"),
        lambda m, X, C: m.max_pool2d(X(x), 3, 2, 1, ceil_mode=True),
        lambda m, X, C: m.avg_pool2d(X(x), 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda m, X, C: m.adaptive_avg_pool2d(X(x), (4, 5)),
        lambda m, X, C: m.cross_entropy(X(logits), C(t), weight=C(w), label_smoothing=0.2),
        lambda m, X, C: m.binary_cross_entropy_with_logits(X(x), C(y), pos_weight=C(pw)),
    ]
    fl_const = lambda a: fl.from_numpy(np.array(a))          # noqa: E731
    torch_const = lambda a: torch.tensor(np.array(a))        # noqa: E731
    pairs = [(case(F, _fl_in, fl_const), case(torch.nn.functional, _torch_in, torch_const))
             for case in cases]
    fl.sync()
    for k, (a, b) in enumerate(pairs):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-8, atol=1e-10,
                                   err_msg=f"functional case {k}")
