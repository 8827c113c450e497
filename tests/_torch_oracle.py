"""PyTorch as the oracle: run the same function in flowlite and in PyTorch (CPU) on the same
data and compare every output's value (integers exactly, floats with NaNs in the same places)
and the vector-Jacobian product with one random cotangent per floating output.  Everything
flowlite computes in one check — outputs and gradients — comes from ONE sync."""
from __future__ import annotations

import numpy as np
import torch

import flowlite as fl

_TORCH_DTYPE = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                np.dtype(np.float16): torch.float16, np.dtype(np.int32): torch.int32,
                np.dtype(np.int64): torch.int64, np.dtype(np.int8): torch.int8,
                np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool,
                np.dtype(np.int16): torch.int16}


_NUMPY_DTYPE = {v: k for k, v in _TORCH_DTYPE.items()}


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [y for v in x for y in _flat(v)]
    return [x]


def to_torch(a, requires_grad=False):
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        t = torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    else:
        t = torch.from_numpy(np.array(a, copy=True)).to(_TORCH_DTYPE[a.dtype])
    return t.requires_grad_(True) if requires_grad else t


def to_numpy(t):
    t = t.detach()
    if t._is_zerotensor():      # PyTorch's gradient of a piecewise-constant op (sgn, ...)
        return np.zeros(tuple(t.shape), _NUMPY_DTYPE.get(t.dtype, np.float32))
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def compare(fl_fn, torch_fn, *arrays, grad=True, rtol=1e-6, atol=1e-7, seed=0,
            check_dtype=True):
    """fl_fn(*flowlite tensors) vs torch_fn(*torch tensors); returns the flowlite outputs."""
    arrays = [np.asarray(a) for a in arrays]
    diff = [grad and a.dtype.kind == "f" for a in arrays]
    fts = [fl.from_numpy(a) for a in arrays]
    tts = [to_torch(a, d) for a, d in zip(arrays, diff)]
    for t, d in zip(fts, diff):
        if d:
            t.requires_grad_(True)
    fouts = _flat(fl_fn(*fts))
    touts = _flat(torch_fn(*tts))
    assert len(fouts) == len(touts), f"{len(fouts)} flowlite outputs vs {len(touts)} torch"
    g = np.random.default_rng(seed)
    cts = [g.standard_normal(tuple(o.shape)) if o.dtype.is_floating_point else None
           for o in touts]
    fl_loss = t_loss = None
    for fo, to, ct in zip(fouts, touts, cts):
        if ct is None or not to.requires_grad:
            continue
        ft = (fo * fl.from_numpy(ct.astype(fo.dtype.np))).sum()
        tt = (to * torch.from_numpy(ct).to(to.dtype)).sum()
        fl_loss = ft if fl_loss is None else fl_loss + ft
        t_loss = tt if t_loss is None else t_loss + tt
    wrt = [i for i, d in enumerate(diff) if d]
    fgrads = []
    if fl_loss is not None and wrt:
        fgrads = fl.grad(fl_loss, [fts[i] for i in wrt], allow_unused=True)
    fl.sync()
    for k, (fo, to) in enumerate(zip(fouts, touts)):
        tv = to_numpy(to)
        fv = fo.numpy()
        if fv.dtype.name == "bfloat16":
            fv = fv.astype(np.float32)
        assert fv.shape == tv.shape, f"output {k}: shape {fv.shape} vs torch {tv.shape}"
        if check_dtype:
            assert fv.dtype.kind == tv.dtype.kind or (fv.dtype.kind in "iu" and
                                                       tv.dtype.kind in "iu"), \
                f"output {k}: dtype {fv.dtype} vs torch {tv.dtype}"
        if tv.dtype.kind in "biu":
            np.testing.assert_array_equal(fv, tv, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(fv.astype(np.float64), tv.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"output {k}")
    if fl_loss is not None and wrt:
        tgrads = torch.autograd.grad(t_loss, [tts[i] for i in wrt], allow_unused=True)
        for i, fg, tg in zip(wrt, fgrads, tgrads):
            tv = np.zeros(arrays[i].shape) if tg is None else to_numpy(tg)
            fv = np.zeros(arrays[i].shape) if fg is None else fg.numpy()
            np.testing.assert_allclose(fv.astype(np.float64), tv.astype(np.float64),
                                       rtol=rtol, atol=atol, err_msg=f"grad wrt input {i}")
    return fouts
