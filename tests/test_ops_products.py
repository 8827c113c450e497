"""flowlite/frontend/ops/products.py against PyTorch: addmm & co., inner/vdot/ger,
chain_matmul, matrix_power, tensordot, cross, dist/cdist, renorm, cov/corrcoef, trapezoid,
aminmax, count_nonzero — values and gradients in float64, float32 methods, integer inputs."""
import numpy as np
import pytest
import torch

import flowlite as fl
from _torch_oracle import compare

pytestmark = [pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|default value of dim).*")]

RNG = np.random.default_rng(0)
A, B, C = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 5)), RNG.standard_normal((3, 5))
X, Y = RNG.standard_normal((30, 4)), RNG.standard_normal((40, 4))


def _products(m):
    return lambda a, b, c: (
        m.addmm(c, a, b, beta=0.5, alpha=2), c.addmm(a, b, beta=0),
        m.baddbmm(c, a.expand(2, 3, 4), b.expand(2, 4, 5)),
        m.addbmm(c, a.expand(2, 3, 4), b.expand(2, 4, 5), alpha=0.5),
        m.addmv(c[:, 0], a, b[:, 0]), m.addr(c, a[:, 0], b[0]), m.ger(a[0], b[0]),
        m.inner(a, b.T), m.vdot(a[0], b[:, 0]), m.chain_matmul(a, b, c.T),
        m.matrix_power(a[:, :3], 5), m.matrix_power(a[:, :3], 0), m.tensordot(a, b, 1),
        m.tensordot(a, b.T[:3, :4], ([0, 1], [0, 1])), m.cross(a[:, :3], b[:3, :3], dim=1),
        m.cross(a[:, :3], b[:3, :3], dim=0), m.dist(a, b.T[:3]), m.dist(a, b.T[:3], 3),
        m.dist(a, b.T[:3], float("inf")), m.cdist(a, b.T), m.cdist(a, b.T, 1.5),
        m.renorm(a, 2, 0, 1.5), m.renorm(a, 1, 1, 0.8), m.cov(a), m.cov(a[0]),
        m.cov(a, correction=0), m.corrcoef(a), m.corrcoef(a[0]), m.trapezoid(a),
        m.trapezoid(a, dx=0.3, dim=0), m.trapezoid(a, b[0, :4].cumsum(0)), m.trapz(a, a),
        m.cumulative_trapezoid(a), m.cumulative_trapezoid(a, dx=2.0),
        m.cumulative_trapezoid(a, a), *m.aminmax(a), *a.aminmax(dim=1, keepdim=True),
        a.inner(c[:, :4]), a.kron(b[:1]))


def test_products_values_and_gradients_vs_pytorch(x64):
    compare(_products(fl), _products(torch), A, B, C, rtol=1e-10, atol=1e-10)


def test_cdist_matmul_path_and_weights(x64):
    compare(lambda x, y: (fl.cdist(x, y), fl.cdist(x[None], y[None], 2.0,
                                                    "use_mm_for_euclid_dist")),
            lambda x, y: (torch.cdist(x, y), torch.cdist(x[None], y[None], 2.0,
                                                         "use_mm_for_euclid_dist")), X, Y,
            rtol=1e-8, atol=1e-9)
    fw, aw = np.array([1, 2, 1, 3]), np.array([0.5, 1.0, 2.0, 1.0])
    compare(lambda a, f, w: (fl.cov(a, fweights=f, aweights=w),
                             fl.cov(a, correction=0, fweights=f, aweights=w)),
            lambda a, f, w: (torch.cov(a, fweights=f, aweights=w),
                             torch.cov(a, correction=0, fweights=f, aweights=w)), A, fw, aw,
            rtol=1e-12, atol=1e-12)


def test_float32_and_integer_inputs():
    a = A.astype(np.float32)
    compare(lambda t: (t[:, :3].addmm(t[:, :3], t[:, :3].T, beta=2), fl.dist(t, t * 2),
                       t.count_nonzero(),
                       fl.count_nonzero(t > 0, dim=(0, 1)), fl.count_nonzero(t > 0, 1),
                       fl.trapezoid(t, dx=0.5), fl.cov(t)),
            lambda t: (t[:, :3].addmm(t[:, :3], t[:, :3].T, beta=2), torch.dist(t, t * 2),
                       t.count_nonzero(),
                       torch.count_nonzero(t > 0, dim=(0, 1)), torch.count_nonzero(t > 0, 1),
                       torch.trapezoid(t, dx=0.5), torch.cov(t)), a, rtol=1e-5, atol=1e-5)
    i = np.arange(12, dtype=np.int64).reshape(3, 4) - 5
    compare(lambda t: (fl.aminmax(t).min, fl.aminmax(t).max, fl.trapezoid(t),
                       fl.cumulative_trapezoid(t), fl.cov(t), fl.cross(t[:, :3], t[:, 1:], 1),
                       fl.tensordot(t, t.T, 1), fl.matrix_power(t[:, :3], 3)),
            lambda t: (torch.aminmax(t).min, torch.aminmax(t).max, torch.trapezoid(t),
                       torch.cumulative_trapezoid(t), torch.cov(t),
                       torch.cross(t[:, :3], t[:, 1:], 1), torch.tensordot(t, t.T, 1),
                       torch.matrix_power(t[:, :3], 3)), i, rtol=1e-6, atol=1e-6)


def test_errors_follow_pytorch():
    with pytest.raises(RuntimeError, match="cannot compute aminmax"):
        fl.aminmax(fl.zeros(0))
    with pytest.raises(RuntimeError, match="must have length 3"):
        fl.cross(fl.zeros(2, 4), fl.zeros(2, 4), dim=1)
    with pytest.raises(RuntimeError, match="same number of columns"):
        fl.cdist(fl.zeros(2, 3), fl.zeros(2, 4))
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        fl.tensordot(fl.zeros(2, 3), fl.zeros(4, 2), 1)
