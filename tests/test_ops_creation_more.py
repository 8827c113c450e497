"""flowlite/frontend/ops/creation_more.py against PyTorch: logspace, range, the spectral
windows (every length class, periodic or not, float32 and float64), scalar_tensor, fftfreq,
frombuffer, asarray, from_dlpack, empty_strided / empty_permuted."""
import numpy as np
import pytest
import torch

import flowlite as fl


def _same(a, b, tol=0.0):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)
    assert a.dtype.name == str(b.dtype).replace("torch.", ""), (a.dtype, b.dtype)


def test_logspace_and_range(x64):
    _same(fl.logspace(0, 2, 5), torch.logspace(0, 2, 5), 1e-7)
    _same(fl.logspace(-1, 1, 4, base=2, dtype=fl.float64),
          torch.logspace(-1, 1, 4, base=2, dtype=torch.float64), 1e-15)
    _same(fl.logspace(0, 3, 4, dtype=fl.int64), torch.logspace(0, 3, 4, dtype=torch.int64))
    for args, kw in (((1, 4), {}), ((0, 1, 0.3), {}), ((1, 4), dict(dtype=torch.int64))):
        fkw = {k: fl.int64 for k in kw}
        _same(fl.range(*args, **fkw), _torch_range(*args, **kw))


def _torch_range(*args, **kw):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.range(*args, **kw)


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window",
                                  "bartlett_window", "kaiser_window"])
def test_windows(name, x64):
    for n in (0, 1, 2, 5, 8):
        for periodic in (True, False):
            _same(getattr(fl, name)(n, periodic), getattr(torch, name)(n, periodic), 2e-7)
            _same(getattr(fl, name)(n, periodic, dtype=fl.float64),
                  getattr(torch, name)(n, periodic, dtype=torch.float64), 1e-15)
    with pytest.raises(RuntimeError, match="floating point"):
        getattr(fl, name)(4, dtype=fl.int64)


def test_window_parameters_and_fft_helpers(x64):
    _same(fl.hamming_window(6, True, 0.6, 0.3), torch.hamming_window(6, True, 0.6, 0.3), 1e-7)
    _same(fl.kaiser_window(6, False, 5.0), torch.kaiser_window(6, False, 5.0), 1e-6)
    _same(fl.fft.fftfreq(5), torch.fft.fftfreq(5))
    _same(fl.fft.rfftfreq(6, 0.1), torch.fft.rfftfreq(6, 0.1))
    x = np.arange(12).reshape(3, 4)
    _same(fl.fft.fftshift(fl.tensor(x)), torch.fft.fftshift(torch.tensor(x)))
    _same(fl.fft.ifftshift(fl.tensor(x), 1), torch.fft.ifftshift(torch.tensor(x), 1))


def test_small_constructors(x64):
    _same(fl.scalar_tensor(3), torch.scalar_tensor(3))
    buf = bytearray(b"\x01\x00\x02\x00\x03\x00")
    _same(fl.frombuffer(buf, dtype=fl.int16, count=2, offset=2),
          torch.frombuffer(buf, dtype=torch.int16, count=2, offset=2))
    _same(fl.asarray([1, 2]), torch.asarray([1, 2]))
    t = fl.tensor([1.0, 2.0])
    assert fl.asarray(t) is t and fl.asarray(t, copy=True) is not t
    _same(fl.from_dlpack(torch.arange(4.0)), torch.arange(4.0))
    _same(fl.empty_strided((2, 3), (3, 1)), torch.zeros(2, 3))
    _same(fl.empty_permuted((2, 3), (1, 0)), torch.zeros(2, 3))
    e = fl.ones(2).new_empty((3, 2))
    assert tuple(e.shape) == (3, 2) and e.dtype is fl.float32
    with pytest.raises(ValueError):
        fl.frombuffer(bytearray(), dtype=fl.int8)
