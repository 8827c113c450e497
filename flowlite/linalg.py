"""`torch.linalg` for flowlite: factorizations, solvers, norms and products under PyTorch's
names.

Layer: entry — imports frontend.checks, frontend.ops, frontend.ops.decomposition,
frontend.ops.products, frontend.surface, frontend.views. The functions live in their op families
(factorizations and solvers in flowlite/frontend/ops/decomposition.py, products and norms in
ops/products.py); this module is the namespace a PyTorch program reaches as `torch.linalg`. The
names flowlite does not implement (LU and LDL factorizations, eig, Householder products) raise
NotImplementedError naming them (flowlite/frontend/surface.py).
"""
from __future__ import annotations

from .frontend import ops as _ops
from .frontend import surface as _surface
from .frontend.checks import LinAlgError  # noqa: F401  (torch.linalg.LinAlgError)
from .frontend import views as _views
from .frontend.ops.decomposition import (cholesky_ex, cond, eigh, eigvalsh, inv, inv_ex, lstsq,
                                         matrix_norm, matrix_rank, norm, pinv, qr_linalg as qr,
                                         solve, solve_ex, solve_triangular, svd, svdvals,
                                         tensorinv, tensorsolve)
from .frontend.ops.products import multi_dot, vecdot, vector_norm

det = _ops.det
slogdet = _ops.slogdet
matrix_exp = _ops.matrix_exp
matrix_power = _ops.matrix_power
matmul = _ops.matmul


def cholesky(A, *, upper=False):
    """torch.linalg.cholesky: the lower (upper=True: upper) Cholesky factor."""
    return _ops.cholesky(A, upper)


def cross(x, other, *, dim=-1):
    """torch.linalg.cross: the 3-vector cross product along dim (default the last)."""
    return _ops.cross(x, other, dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """torch.linalg.diagonal: A.diagonal over the last two dims by default (a view)."""
    return _views.diagonal(A, offset, dim1, dim2)


def vander(x, *, N=None):
    """torch.linalg.vander: columns x**0, x**1, ..., x**(N-1) (increasing powers), batched
    over leading dims."""
    n = x.shape[-1] if N is None else N
    if n < 1:
        raise RuntimeError("N must be greater than 1.")
    if x.ndim == 1:
        return _ops.vander(x, n, increasing=True)
    ones = _ops.ones_like(_ops.unsqueeze(x, -1))
    if n == 1:
        return ones
    return _ops.cumprod(_ops.cat([ones, _ops.unsqueeze(x, -1).expand(*x.shape, n - 1)], -1),
                        -1)


__all__ = ["cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eigh", "eigvalsh",
           "inv", "inv_ex", "lstsq", "matmul", "matrix_exp", "matrix_norm", "matrix_power",
           "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet", "solve", "solve_ex",
           "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve", "vander",
           "vecdot", "vector_norm"]

_surface.install("torch.linalg", globals())
