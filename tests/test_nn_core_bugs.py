"""Core bugs found while building flowlite.nn: minimal reproductions.

These were core bugs found while building flowlite.nn (now fixed); they stay as regression
tests. (flowlite.nn.functional uses the window primitives when they differentiate.)
"""
import numpy as np
import pytest

import flowlite as fl
from flowlite.frontend import ops


def test_reduce_window_max_gradient_lowers():
    x = fl.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), requires_grad=True)
    y = ops._window_raw(x, ("max", (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4))
    y.sum().backward()
    g = x.grad.numpy()
    assert g.sum() == 4 and g[0, 0, 1, 1] == 1


def test_reduce_window_sum_gradient_lowers():
    x = fl.tensor(np.ones((1, 1, 4, 4), np.float32), requires_grad=True)
    y = ops._window_raw(x, ("sum", (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((1, 1, 4, 4)))


def test_tensor_copies_host_data():
    raw = np.zeros(4 * 1000 + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    a = raw[off:off + 4 * 1000].view(np.float32)     # aligned: what numpy gives large arrays
    t = fl.tensor(a)
    a += 1.0
    assert t.numpy()[0] == 0.0
