"""flowlite.linalg (flowlite/frontend/ops/decomposition.py) against PyTorch: inv, det,
slogdet, solve, cholesky, solve_triangular, qr, eigh, svd, matrix_exp, pinv, norms, cond,
lstsq, the *_ex variants and PyTorch's deprecated top-level names — values and gradients in
float64 (each factorization's gradient is PyTorch's formula), errors for singular and
non-positive-definite inputs raised at the sync, and the removed functions' errors."""
import numpy as np
import pytest
import torch

import flowlite as fl
from _torch_oracle import compare

pytestmark = [pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|should be replaced).*")]

RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 4)) + 4 * np.eye(4)
B = RNG.standard_normal((4, 3))
S = A @ A.T
AB = RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)
M = RNG.standard_normal((5, 3))
B4 = RNG.standard_normal((4, 4))
TOL = dict(rtol=1e-8, atol=1e-9)


def test_inverse_determinants_and_solves(x64):
    compare(lambda a, ab, b: (fl.linalg.inv(a), fl.inverse(ab), fl.det(ab), fl.linalg.det(a),
                              *fl.linalg.slogdet(ab), fl.logdet(a @ a.T),
                              fl.linalg.solve(a, b), fl.linalg.solve(a, b[:, 0]),
                              fl.linalg.solve(a, b.T, left=False),
                              fl.linalg.solve(ab, b[:3, :2]),
                              fl.linalg.matrix_power(a, -2), fl.matrix_power(a, 3)),
            lambda a, ab, b: (torch.linalg.inv(a), torch.inverse(ab), torch.det(ab),
                              torch.linalg.det(a), *torch.linalg.slogdet(ab),
                              torch.logdet(a @ a.T), torch.linalg.solve(a, b),
                              torch.linalg.solve(a, b[:, 0]),
                              torch.linalg.solve(a, b.T, left=False),
                              torch.linalg.solve(ab, b[:3, :2]),
                              torch.linalg.matrix_power(a, -2), torch.matrix_power(a, 3)),
            A, AB, B, **TOL)
    # PyTorch's gradient of det at an exactly singular matrix: zero
    compare(fl.det, torch.det, np.array([[1.0, 2.0], [2.0, 4.0]]))


def test_cholesky_and_triangular_solves(x64):
    compare(lambda s, a, b: (fl.linalg.cholesky(s), fl.cholesky(s, upper=True),
                             fl.linalg.solve_triangular(a, b, upper=True),
                             fl.linalg.solve_triangular(a.tril(), b.T, upper=False, left=False),
                             fl.linalg.solve_triangular(a, b, upper=False, unitriangular=True),
                             *fl.triangular_solve(b, a.triu(), True),
                             fl.cholesky_solve(b, fl.linalg.cholesky(s)),
                             fl.cholesky_inverse(fl.linalg.cholesky(s))),
            lambda s, a, b: (torch.linalg.cholesky(s), torch.cholesky(s, upper=True),
                             torch.linalg.solve_triangular(a, b, upper=True),
                             torch.linalg.solve_triangular(a.tril(), b.T, upper=False,
                                                           left=False),
                             torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True),
                             *torch.triangular_solve(b, a.triu(), True),
                             torch.cholesky_solve(b, torch.linalg.cholesky(s)),
                             torch.cholesky_inverse(torch.linalg.cholesky(s))), S, A, B, **TOL)


def test_qr_eigh_svd(x64):
    compare(lambda m, a, s: (*fl.linalg.qr(m), *fl.qr(a), *fl.linalg.eigh(s),
                             *fl.linalg.eigh(a, "U"), fl.linalg.eigvalsh(s),
                             *fl.linalg.svd(m, full_matrices=False), fl.linalg.svdvals(m),
                             *fl.svd(m), fl.linalg.matrix_exp(a * 0.3),
                             fl.linalg.pinv(m), fl.pinverse(m)),
            lambda m, a, s: (*torch.linalg.qr(m), *torch.qr(a), *torch.linalg.eigh(s),
                             *torch.linalg.eigh(a, "U"), torch.linalg.eigvalsh(s),
                             *torch.linalg.svd(m, full_matrices=False), torch.linalg.svdvals(m),
                             *torch.svd(m), torch.linalg.matrix_exp(a * 0.3),
                             torch.linalg.pinv(m), torch.pinverse(m)), M, A, S, **TOL)
    # a wide matrix: the singular vectors' signs are LAPACK's choice; compare what they make
    compare(lambda m: (fl.linalg.svd(m.T, full_matrices=False).S,
                       (lambda u, s, v: (u * s) @ v)(*fl.linalg.svd(m.T, full_matrices=False))),
            lambda m: (torch.linalg.svd(m.T, full_matrices=False).S,
                       (lambda u, s, v: (u * s) @ v)(*torch.linalg.svd(m.T, full_matrices=False))),
            M, **TOL)
    compare(lambda m: (fl.linalg.qr(m, mode="r").R, *fl.linalg.svd(m)),
            lambda m: (torch.linalg.qr(m, mode="r").R, *torch.linalg.svd(m)), M, grad=False,
            **TOL)


def test_norms_rank_cond_and_more(x64):
    compare(lambda a, b: (fl.linalg.norm(a), fl.linalg.norm(a, "nuc"), fl.linalg.norm(a, 2),
                          fl.linalg.norm(a, -2), fl.linalg.matrix_norm(a, 1),
                          fl.linalg.matrix_norm(a, float("inf")), fl.linalg.vector_norm(a, 3),
                          fl.linalg.norm(a[0], 1), fl.linalg.norm(a, dim=1),
                          fl.nuclear_norm(a), fl.frobenius_norm(a, (0, 1)),
                          fl.norm_except_dim(a, 2, 0), fl.linalg.multi_dot([a[0], a, b, b[0]]),
                          fl.linalg.vander(a), fl.linalg.cross(a[:, :3], a[:, 1:]),
                          fl.linalg.vecdot(a, b[:, :1].T), fl.linalg.diagonal(a),
                          fl.linalg.tensorinv(a.reshape(4, 2, 2), 1),
                          fl.linalg.tensorsolve(a.reshape(2, 2, 4), b[:, 0].reshape(2, 2)),
                          fl.linalg.lstsq(a[:, :3], b).solution,
                          fl.linalg.inv_ex(a).inverse, fl.linalg.solve_ex(a, b).result,
                          fl.linalg.cholesky_ex(a @ a.T).L),
            lambda a, b: (torch.linalg.norm(a), torch.linalg.norm(a, "nuc"),
                          torch.linalg.norm(a, 2), torch.linalg.norm(a, -2),
                          torch.linalg.matrix_norm(a, 1), torch.linalg.matrix_norm(a, float("inf")),
                          torch.linalg.vector_norm(a, 3), torch.linalg.norm(a[0], 1),
                          torch.linalg.norm(a, dim=1), torch.nuclear_norm(a),
                          torch.frobenius_norm(a, (0, 1)), torch.norm_except_dim(a, 2, 0),
                          torch.linalg.multi_dot([a[0], a, b, b[0]]), torch.linalg.vander(a),
                          torch.linalg.cross(a[:, :3], a[:, 1:]),
                          torch.linalg.vecdot(a, b[:, :1].T), torch.linalg.diagonal(a),
                          torch.linalg.tensorinv(a.reshape(4, 2, 2), 1),
                          torch.linalg.tensorsolve(a.reshape(2, 2, 4), b[:, 0].reshape(2, 2)),
                          torch.linalg.lstsq(a[:, :3], b).solution,
                          torch.linalg.inv_ex(a).inverse, torch.linalg.solve_ex(a, b).result,
                          torch.linalg.cholesky_ex(a @ a.T).L), A, B4, **TOL)
    # PyTorch's own backward of cond fails (an in-place op in it): values only
    compare(lambda a: (fl.linalg.cond(a), fl.linalg.cond(a, "fro"), fl.linalg.cond(a, 1),
                       fl.linalg.cond(a, "nuc"), fl.linalg.matrix_rank(a[:3]),
                       fl.linalg.matrix_rank(fl.ones(3, 3, dtype=fl.float64))),
            lambda a: (torch.linalg.cond(a), torch.linalg.cond(a, "fro"), torch.linalg.cond(a, 1),
                       torch.linalg.cond(a, "nuc"), torch.linalg.matrix_rank(a[:3]),
                       torch.linalg.matrix_rank(torch.ones(3, 3, dtype=torch.float64))), A,
            grad=False, **TOL)


def test_failures_raise_at_the_sync():
    with pytest.raises(fl.linalg.LinAlgError, match="diagonal element 2 is zero"):
        fl.linalg.inv(fl.tensor([[1.0, 2.0], [2.0, 4.0]])).numpy()
    with pytest.raises(RuntimeError, match="not positive-definite"):
        fl.linalg.cholesky(fl.tensor([[1.0, 2.0], [2.0, 1.0]])).numpy()
    with pytest.raises(RuntimeError, match="singular"):
        fl.linalg.solve(fl.zeros(2, 2), fl.ones(2)).numpy()
    info = fl.linalg.inv_ex(fl.tensor([[1.0, 2.0], [2.0, 4.0]])).info
    assert info.item() == 2
    with pytest.raises(RuntimeError, match="square matrices"):
        fl.linalg.inv(fl.zeros(2, 3))
    for name in ("eig", "symeig", "lstsq", "matrix_rank", "solve"):
        with pytest.raises(RuntimeError, match="deprecated since version 1.9 and is now removed"):
            getattr(fl, name)(fl.eye(2), fl.eye(2)) if name in ("lstsq", "solve") else \
                getattr(fl, name)(fl.eye(2))


def test_an_executable_loaded_from_the_persistent_cache_runs_lapack(tmp_path):
    # jaxlib initialises its LAPACK kernels while lowering; a process that loads a cached
    # executable calling them lowers nothing, so flowlite initialises them itself (a process
    # without that crashed with a segmentation fault)
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = ("import flowlite as fl\n"
              "a = fl.tensor([[4.0, 1.0], [1.0, 3.0]])\n"
              "print(round(float(fl.linalg.inv(a).sum() + fl.linalg.eigvalsh(a).sum() + "
              "fl.linalg.svdvals(a).sum() + fl.linalg.cholesky(a).sum()), 4))\n")
    env = dict(os.environ, PYTHONPATH=root, FLOWLITE_CACHE_DIR=str(tmp_path / "cache"))
    outs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=300, env=env) for _ in range(2)]
    for r in outs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert outs[0].stdout == outs[1].stdout
