"""Matrix factorizations and solvers: inv, det, slogdet, solve, cholesky, solve_triangular, qr,
eigh, svd, matrix_exp — the primitives behind `torch.linalg` (flowlite/linalg.py) and
PyTorch's top-level names for them (det, logdet, slogdet, inverse, cholesky, cholesky_solve,
cholesky_inverse, triangular_solve, qr, svd, pinverse, matrix_exp).

Layer: frontend — imports checks, engine.dtypes, ops._core, ops._registry, ops.creation,
ops.elementwise, ops.joining, ops.linalg, ops.products, ops.reduction, ops.shape, tensor. The
family's primitives (`<name>_p`) are declared here, beside the front end that records them:
their gradient rules call the ops of this module and of those before it.

Each factorization's outputs are separate primitives over the same LAPACK call (XLA computes
it once); PyTorch's backward formulas are linear in the outputs' cotangents, so each output's
VJP is its share of PyTorch's formula and their sum is PyTorch's gradient. Failures PyTorch
raises for (a singular matrix for inv/solve, a matrix that is not positive-definite for
cholesky) are checked inside the same executable (flowlite.checks) and raise LinAlgError at
the sync — never a silent inf or NaN.
"""
from __future__ import annotations

import builtins
import collections

import jax.numpy as jnp
import jaxlib.lapack
import numpy as np
import jax.scipy.linalg as jsl
from jax import lax

from ...engine import dtypes as D
from ..checks import linalg_info
from ..tensor import apply, Tensor
from ._core import _st, broadcast_shapes, broadcast_to, nondiff, prim, to_dtype
from ._registry import register, torch_op
from .creation import eye, zeros
from .elementwise import eq, maximum, where
from .joining import _diag_layout, diag_embed
from .linalg import matmul
from .products import (matrix_norm as _matrix_norm, matrix_power as _matrix_power,
                       vector_norm)
from .reduction import amax, sum
from .shape import (_view_read, cat, mT, narrow, permute, reshape, squeeze, tril, triu,
                    unsqueeze)

# ---- primitives of this family: lowering, gradient rule, kind, bucketing rule ----------
_lapack_ready: list = []


def _record(prim, inputs, attrs, shape, dtype):
    """apply(), after making sure jaxlib's LAPACK kernels are initialised in this process: an
    executable loaded from the persistent cache calls them without any lowering having run
    (which is what initialises them otherwise), and would crash."""
    if not _lapack_ready:
        jaxlib.lapack.prepare_lapack_call("getrf", np.float32)
        _lapack_ready.append(True)
    return apply(prim, inputs, attrs, shape, dtype)



def _diag(x):
    return jnp.diagonal(x, axis1=-2, axis2=-1)


def _first_bad(bad, out):
    k = jnp.argmax(bad, axis=-1) + 1
    return jnp.max(jnp.where(jnp.any(bad, axis=-1), k, 0)).astype(out) if bad.ndim > 1 else \
        jnp.where(jnp.any(bad), k, 0).astype(out)


lu_info_p = nondiff("lu_info", lambda a, x: _first_bad(
    _diag(lax.linalg.lu(x)[0]) == 0, a[0].np) if x.shape[-1] else jnp.zeros((), a[0].np))


def _inv_vjp(a, i, o, g):
    ot = mT(o)
    return (-matmul(matmul(ot, g), ot),)


inv_p = prim("inv", lambda a, x: jnp.linalg.inv(x), _inv_vjp)


def _det_vjp(a, i, o, g):
    # PyTorch's: g det A^-T, and zero at an exactly singular A (where A^-T does not exist)
    scale = unsqueeze(unsqueeze(g * o, -1), -1)
    singular = unsqueeze(unsqueeze(eq(o, 0), -1), -1)
    return (where(singular, 0.0, scale * mT(_inv_raw(i[0]))),)


det_p = prim("det", lambda a, x: jnp.linalg.det(x), _det_vjp)


slogdet_sign_p = nondiff("slogdet_sign", lambda a, x: jnp.linalg.slogdet(x)[0])


logabsdet_p = prim("logabsdet", lambda a, x: jnp.linalg.slogdet(x)[1],
                   lambda a, i, o, g: (unsqueeze(unsqueeze(g, -1), -1) *
                                       mT(_inv_raw(i[0])),))


def _solve_vjp(a, i, o, g):
    A, B = i
    gb = _solve_raw(mT(A), g)
    return _st(-matmul(gb, mT(o)), A), _st(gb, B)


solve_p = prim("solve", lambda a, A, B: jnp.linalg.solve(
    jnp.broadcast_to(A, B.shape[:-2] + A.shape[-2:]), B), _solve_vjp)


def _cholesky_vjp(a, i, o, g):
    L = o
    ga = tril(matmul(mT(L), g))
    ga = (ga + mT(tril(ga, -1))) * 0.5
    ga = _tri_solve_raw(mT(L), ga, upper=True, left=True)
    return (_tri_solve_raw(L, ga, upper=False, left=False),)


cholesky_p = prim("cholesky", lambda a, x: lax.linalg.cholesky(x, symmetrize_input=False),
                  _cholesky_vjp)


cholesky_info_p = nondiff("cholesky_info", lambda a, l: (
    jnp.max(jnp.any(jnp.isnan(l), axis=(-2, -1)).astype(a[0].np)) if l.size else
    jnp.zeros((), a[0].np)))


def _tri_solve_lower(a, A, B):
    upper, left, unit = a
    A = jnp.broadcast_to(A, B.shape[:-2] + A.shape[-2:])
    return lax.linalg.triangular_solve(A, B, left_side=left, lower=not upper,
                                       transpose_a=False, unit_diagonal=unit)


def _tri_solve_vjp(a, i, o, g):
    upper, left, unit = a
    A, B = i
    gb = _tri_solve_raw(mT(A), g, upper=not upper, left=left, unit=unit)
    ga = -matmul(gb, mT(o)) if left else -matmul(mT(o), gb)
    ga = triu(ga, builtins.int(unit)) if upper else tril(ga, -builtins.int(unit))
    return _st(ga, A), _st(gb, B)


tri_solve_p = prim("solve_triangular", _tri_solve_lower, _tri_solve_vjp)


def _qr_grad(gq, gr, q, r):
    m, n = q.shape[-2], r.shape[-1]
    if m < n:
        raise RuntimeError("flowlite: the gradient of linalg.qr of a wide matrix (nrows < "
                           "ncols) is not implemented")
    if gq is not None:
        ga = -matmul(mT(q), gq) if gr is None else matmul(gr, mT(r)) - matmul(mT(q), gq)
    else:
        ga = matmul(gr, mT(r))
    sym = triu(ga)
    sym = sym + mT(sym)
    sym = sym - diag_embed(_diagonal(sym) * 0.5)
    ga = matmul(q, sym)
    if gq is not None:
        ga = ga + gq
    return _tri_solve_raw(mT(r), ga, upper=False, left=False)


def _check_qr_mode(a):
    if a[0] == "complete" and a[1]:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' "
                           "and nrows > ncols.")


def _qr_q_vjp(a, i, o, g):
    _check_qr_mode(a)
    q, r = _qr_raw(i[0], a[0])
    return (_qr_grad(g, None, q, r),)


def _qr_r_vjp(a, i, o, g):
    if a[0] == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed "
                           "when mode='r'. Please use linalg.qr(A, mode='reduced') if you are "
                           "going to differentiate through linalg.qr.")
    _check_qr_mode(a)
    q, r = _qr_raw(i[0], a[0])
    return (_qr_grad(None, g, q, r),)


qr_q_p = prim("qr_q", lambda a, x: jnp.linalg.qr(x, mode=a[0])[0], _qr_q_vjp)


qr_r_p = prim("qr_r", lambda a, x: jnp.linalg.qr(x, mode="reduced" if a[0] == "r" else a[0])[1],
              _qr_r_vjp)


def _eigh_vals_vjp(a, i, o, g):
    w, v = _eigh_raw(i[0], a[0])
    return (matmul(v * unsqueeze(g, -2), mT(v)),)


def _eigh_vecs_vjp(a, i, o, g):
    w, v = _eigh_raw(i[0], a[0])
    vg = matmul(mT(v), g)
    vg = (vg - mT(vg)) * 0.5
    e = unsqueeze(w, -2) - unsqueeze(w, -1) + diag_embed(w * 0 + 1)
    return (matmul(v, matmul(vg / e, mT(v))),)


eigh_vals_p = prim("eigh_values", lambda a, x: jnp.linalg.eigh(
    x, UPLO=a[0], symmetrize_input=False)[0], _eigh_vals_vjp)


eigh_vecs_p = prim("eigh_vectors", lambda a, x: jnp.linalg.eigh(
    x, UPLO=a[0], symmetrize_input=False)[1], _eigh_vecs_vjp)


def _svd_grad(gu, gs, gvh, u, s, vh):
    m, n = u.shape[-2], vh.shape[-1]
    if gu is None and gvh is None:
        return matmul(u, unsqueeze(gs, -1) * vh) if m >= n else \
            matmul(u * unsqueeze(gs, -2), vh)

    def skew(x):
        return x - mT(x)
    s2 = s * s
    e = unsqueeze(s2, -2) - unsqueeze(s2, -1) + diag_embed(s * 0 + 1)
    if gu is not None:
        uhgu = skew(matmul(mT(u), gu))
        ga = (uhgu / e) * unsqueeze(s, -2)
        if m > n:
            ga = matmul(u, ga)
            gus = gu / unsqueeze(s, -2)
            ga = ga + gus - matmul(u, matmul(mT(u), gus))
            return matmul(ga, vh)
    else:
        vhgv = skew(matmul(vh, mT(gvh)))
        ga = unsqueeze(s, -1) * (vhgv / e)
        if m < n:
            ga = matmul(ga, vh)
            sgv = gvh / unsqueeze(s, -1)
            ga = ga + sgv - matmul(matmul(sgv, mT(vh)), vh)
            return matmul(u, ga)
    return matmul(u, matmul(ga, vh)) if m >= n else matmul(matmul(u, ga), vh)


def _svd_vjp(k):
    def vjp(a, i, o, g):
        u, s, vh = _svd_raw(i[0])
        if a[0]:                                    # full_matrices: the extra parts carry
            kk = s.shape[-1]                        # no information about A
            if k == 0:
                g = narrow(g, -1, 0, kk)
            elif k == 2:
                g = narrow(g, -2, 0, kk)
        parts = [None, None, None]
        parts[k] = g
        return (_svd_grad(parts[0], parts[1], parts[2], u, s, vh),)
    return vjp


svd_u_p = prim("svd_u", lambda a, x: jnp.linalg.svd(x, full_matrices=a[0])[0], _svd_vjp(0))


svd_s_p = prim("svd_s", lambda a, x: jnp.linalg.svd(x, compute_uv=False), _svd_vjp(1))


svd_vh_p = prim("svd_vh", lambda a, x: jnp.linalg.svd(x, full_matrices=a[0])[2], _svd_vjp(2))


def _matrix_exp_vjp(a, i, o, g):
    # PyTorch's differential: exp([[A^T, G], [0, A^T]]) holds the gradient in its top-right
    x = mT(i[0])
    n = x.shape[-1]
    z = zeros(x.shape, dtype=x.dtype, device=x.device)
    big = cat([cat([x, g], -1), cat([z, x], -1)], -2)
    return (narrow(narrow(matrix_exp(big), -2, 0, n), -1, n, n),)


matrix_exp_p = prim("matrix_exp", lambda a, x: jsl.expm(x), _matrix_exp_vjp)


# ---- raw (unchecked) recorders: the VJPs' building blocks ---------------------------------------
def _inv_raw(x):
    return _record(inv_p, (x,), (), x._node.shape, x._node.dtype)


def _det_raw(x):
    return _record(det_p, (x,), (), x._node.shape[:-2], x._node.dtype)


def _solve_raw(A, B):
    shape = tuple(_bshape(A, B, "solve")) + B._node.shape[-2:]
    return _record(solve_p, (A, broadcast_to(B, shape)), (), shape, B._node.dtype)


def _bshape(A, B, op):
    return broadcast_shapes(A._node.shape[:-2], B._node.shape[:-2], op=op)


def _tri_solve_raw(A, B, *, upper, left, unit=False):
    shape = tuple(_bshape(A, B, "solve_triangular")) + B._node.shape[-2:]
    return _record(tri_solve_p, (A, broadcast_to(B, shape)),
                 (builtins.bool(upper), builtins.bool(left), builtins.bool(unit)), shape,
                 B._node.dtype)


def _qr_raw(x, mode):
    m, n = x._node.shape[-2:]
    k = builtins.min(m, n) if mode != "complete" else m
    batch = x._node.shape[:-2]
    attrs = (mode, m > n)
    q = _record(qr_q_p, (x,), attrs, batch + (m, k), x._node.dtype)
    r = _record(qr_r_p, (x,), attrs, batch + (k if mode != "r" else builtins.min(m, n), n),
              x._node.dtype)
    return q, r


def _eigh_raw(x, uplo):
    n = x._node.shape[-1]
    batch = x._node.shape[:-2]
    w = _record(eigh_vals_p, (x,), (uplo,), batch + (n,), x._node.dtype)
    v = _record(eigh_vecs_p, (x,), (uplo,), batch + (n, n), x._node.dtype)
    return w, v


def _svd_raw(x, full_matrices=False):
    m, n = x._node.shape[-2:]
    k = builtins.min(m, n)
    batch = x._node.shape[:-2]
    fm = builtins.bool(full_matrices)
    u = _record(svd_u_p, (x,), (fm,), batch + (m, m if fm else k), x._node.dtype)
    s = _record(svd_s_p, (x,), (fm,), batch + (k,), x._node.dtype)
    vh = _record(svd_vh_p, (x,), (fm,), batch + (n if fm else k, n), x._node.dtype)
    return u, s, vh


def _diagonal(x):
    n = builtins.min(x._node.shape[-2:])
    vshape, off, st = _diag_layout(x._node.shape, 0, x.ndim - 2, x.ndim - 1)
    return _view_read(x, vshape, off, st) if n else reshape(x, x._node.shape[:-2] + (0,))


# ---- front ends --------------------------------------------------------------------------------
def _square(x, op, what="A"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: argument '{what}' must be Tensor")
    if x.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor {what} must have at least 2 dimensions.")
    if x._node.shape[-1] != x._node.shape[-2]:
        raise RuntimeError(f"{op}: {what} must be batches of square matrices, but they are "
                           f"{x._node.shape[-2]} by {x._node.shape[-1]} matrices")
    _float(x, op)


def _float(x, op):
    if x.dtype.kind != "f" or x.dtype in (D.float16, D.bfloat16):
        raise RuntimeError(f"{op}: Expected a floating point tensor as input. Got {x.dtype}")


def _info_dtype():
    return D.canonical(D.int64)


def _check_lu(x, out, op, message):
    info = _record(lu_info_p, (x,), (_info_dtype(),), (), _info_dtype())
    linalg_info(info, op, message, out)


def inv(A):
    """torch.linalg.inv: the inverse of square matrices; a singular one raises LinAlgError
    (at the sync), as in PyTorch."""
    _square(A, "linalg.inv")
    out = _inv_raw(A)
    _check_lu(A, out, "linalg.inv", "linalg.inv: The diagonal element {} is zero, the "
              "inversion could not be completed because the input matrix is singular.")
    return out


@torch_op
def inverse(x):
    """torch.inverse: torch.linalg.inv."""
    return inv(x)


@torch_op
def det(x):
    """The determinant of square matrices (torch.det, torch.linalg.det); the gradient is the
    adjugate's transpose, valid at singular matrices too."""
    _square(x, "linalg.det")
    return _det_raw(x)


Slogdet = collections.namedtuple("slogdet", ["sign", "logabsdet"])


@torch_op
def slogdet(x):
    """(sign, log |det|) of square matrices (torch.slogdet, torch.linalg.slogdet)."""
    _square(x, "linalg.slogdet")
    shape = x._node.shape[:-2]
    s = _record(slogdet_sign_p, (x,), (), shape, x._node.dtype)
    return Slogdet(s, _record(logabsdet_p, (x,), (), shape, x._node.dtype))


@torch_op
def logdet(x):
    """log det x: NaN where det < 0, -inf where 0 (torch.logdet)."""
    s, la = slogdet(x)
    return where(eq(s, -1), float("nan"), la)


def solve(A, B, *, left=True):
    """torch.linalg.solve: X with A X = B (left=False: X A = B); B a matrix or a vector;
    a singular A raises LinAlgError at the sync, as in PyTorch."""
    _square(A, "linalg.solve")
    if not left:
        return mT(solve(mT(A), mT(B)))
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B._node.shape == A._node.shape[:-1])
    b = unsqueeze(B, -1) if vector else B
    out = _solve_raw(A, to_dtype(b, A.dtype))
    _check_lu(A, out, "linalg.solve", "torch.linalg.solve: The solver failed because the "
              "input matrix is singular.")
    return squeeze(out, -1) if vector else out


def cholesky_raw(A, upper=False, op="linalg.cholesky"):
    _square(A, op)
    L = _record(cholesky_p, (A,), (), A._node.shape, A._node.dtype)
    info = _record(cholesky_info_p, (L,), (_info_dtype(),), (), _info_dtype())
    linalg_info(info, op, f"{op}: The factorization could not be completed because the "
                "input is not positive-definite.", L)
    return mT(L) if upper else L


@torch_op
def cholesky(A, upper=False):
    """The Cholesky factor L (A = L L^T; upper: U = L^T) of symmetric positive-definite
    matrices, reading A's lower triangle (torch.cholesky, torch.linalg.cholesky); a matrix
    that is not positive-definite raises LinAlgError at the sync."""
    return cholesky_raw(A, upper, "linalg.cholesky" if not upper else "cholesky")


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """torch.linalg.solve_triangular: X with A X = B (left=False: X A = B) for triangular A."""
    _square(A, "linalg.solve_triangular")
    return _tri_solve_raw(A, to_dtype(B, A.dtype), upper=upper, left=left, unit=unitriangular)


TriangularSolve = collections.namedtuple("triangular_solve", ["solution", "cloned_coefficient"])


@torch_op
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """torch.triangular_solve (deprecated): (X, A.clone()) with op(A) X = b."""
    a = mT(A) if transpose else A
    x = solve_triangular(a, b, upper=upper != transpose, left=True, unitriangular=unitriangular)
    return TriangularSolve(x, A * 1)


@torch_op
def cholesky_solve(B, L, upper=False):
    """X with (L L^T) X = B, L the Cholesky factor (upper: U^T U) (torch.cholesky_solve)."""
    if upper:
        y = solve_triangular(mT(L), B, upper=False)
        return solve_triangular(L, y, upper=True)
    y = solve_triangular(L, B, upper=False)
    return solve_triangular(mT(L), y, upper=True)


@torch_op
def cholesky_inverse(L, upper=False):
    """(L L^T)^-1 from the Cholesky factor L (upper: (U^T U)^-1) (torch.cholesky_inverse)."""
    n = L._node.shape[-1]
    ident = broadcast_to(eye(n, dtype=L.dtype, device=L.device), L._node.shape)
    return cholesky_solve(ident, L, upper)


QR = collections.namedtuple("qr", ["Q", "R"])


def qr_linalg(A, mode="reduced"):
    """torch.linalg.qr: Q R with orthonormal Q; mode 'reduced', 'complete' or 'r' (Q empty)."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           f"'reduced' (default), 'r', or 'complete'")
    if A.ndim < 2:
        raise RuntimeError(f"linalg.qr: The input tensor A must have at least 2 dimensions.")
    _float(A, "linalg.qr")
    q, r = _qr_raw(A, mode)
    if mode == "r":
        q = zeros(0, dtype=A.dtype, device=A.device)
    return QR(q, r)


@torch_op
def qr(x, some=True):
    """torch.qr (deprecated): linalg.qr with mode 'reduced' (some) or 'complete'."""
    return qr_linalg(x, "reduced" if some else "complete")


Eigh = collections.namedtuple("eigh", ["eigenvalues", "eigenvectors"])


def eigh(A, UPLO="L"):
    """torch.linalg.eigh: ascending eigenvalues and orthonormal eigenvectors of symmetric
    matrices, reading the UPLO triangle."""
    _square(A, "linalg.eigh")
    if UPLO not in ("L", "U"):
        raise RuntimeError("Expected UPLO argument to be 'L' or 'U', but got " + str(UPLO))
    return Eigh(*_eigh_raw(A, UPLO))


def eigvalsh(A, UPLO="L"):
    """torch.linalg.eigvalsh: the eigenvalues of eigh (with their gradient)."""
    return eigh(A, UPLO).eigenvalues


SVD = collections.namedtuple("svd", ["U", "S", "Vh"])
SVDOld = collections.namedtuple("svd", ["U", "S", "V"])


def svd(A, full_matrices=True, *, driver=None):
    """torch.linalg.svd: U, S (descending), Vh with A = U diag(S) Vh."""
    if A.ndim < 2:
        raise RuntimeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    _float(A, "linalg.svd")
    return SVD(*_svd_raw(A, full_matrices))


def svdvals(A, *, driver=None):
    """torch.linalg.svdvals: the singular values (differentiable)."""
    return svd(A, False).S


def _svd_old(x, some=True, compute_uv=True):
    """torch.svd (deprecated): U, S, V (not Vh) with x = U diag(S) V^T; some: the reduced
    factors; compute_uv=False: U and V are zeros, as in PyTorch."""
    u, s, vh = svd(x, full_matrices=not some)
    if not compute_uv:
        m, n = x._node.shape[-2:]
        batch = x._node.shape[:-2]
        return SVDOld(zeros(batch + (m, m if not some else builtins.min(m, n)), dtype=x.dtype),
                      s, zeros(batch + (n, n if not some else builtins.min(m, n)),
                               dtype=x.dtype))
    return SVDOld(u, s, mT(vh))


register("svd", _svd_old)


@torch_op
def matrix_exp(x):
    """The matrix exponential of square matrices (torch.matrix_exp, torch.linalg.matrix_exp)."""
    _square(x, "linalg.matrix_exp")
    return _record(matrix_exp_p, (x,), (), x._node.shape, x._node.dtype)


def _cutoff(s, atol, rtol, m, n, hermitian=False):
    smax = amax(s, -1, keepdim=True) if s._node.shape[-1] else s
    if rtol is None:
        eps = float(jnp.finfo(s.dtype.np).eps)
        rtol = 0.0 if atol is not None and atol > 0 else builtins.max(m, n) * eps
    tol = smax * rtol
    if atol is not None:
        tol = maximum(tol, atol)
    return tol


def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """torch.linalg.pinv: the Moore-Penrose pseudo-inverse through the SVD, singular values
    at most max(atol, rtol * largest) treated as zero."""
    _float(A, "linalg.pinv")
    m, n = A._node.shape[-2:]
    u, s, vh = svd(A, full_matrices=False)
    tol = _cutoff(s, atol, rtol, m, n)
    keep = s > tol
    sinv = where(keep, 1 / where(keep, s, 1.0), 0.0)
    return matmul(mT(vh) * unsqueeze(sinv, -2), mT(u))


@torch_op
def pinverse(x, rcond=1e-15):
    """torch.pinverse: linalg.pinv with rtol=rcond."""
    return pinv(x, rtol=rcond)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None):
    """torch.linalg.matrix_rank: the number of singular values above the tolerance (int64)."""
    _float(A, "linalg.matrix_rank")
    m, n = A._node.shape[-2:]
    s = svdvals(A.detach())
    if tol is not None:
        atol, rtol = tol, 0.0
    return sum(to_dtype(s > _cutoff(s, atol, rtol, m, n), D.canonical(D.int64)), -1)


def cond(A, p=None):
    """torch.linalg.cond: the condition number (2-norm by default: largest / smallest
    singular value; 'fro', 'nuc', inf, -inf, 1, -1 through the inverse)."""
    if p in (None, 2, -2):
        s = svdvals(A)
        hi, lo = narrow(s, -1, 0, 1), narrow(s, -1, s._node.shape[-1] - 1, 1)
        r = hi / lo if p != -2 else lo / hi
        return squeeze(r, -1)
    if p == "nuc":
        return _nuc(A) * _nuc(inv(A))
    return _matrix_norm(A, p) * _matrix_norm(inv(A), p)


def _nuc(A):
    return sum(svdvals(A), -1)


def tensorinv(A, ind=2):
    """torch.linalg.tensorinv: the inverse of A as a linear map from its first `ind` dims to
    the rest."""
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    out_shape = A._node.shape[ind:] + A._node.shape[:ind]
    m = prod_of(A._node.shape[:ind])
    return reshape(inv(reshape(A, (m, -1))), out_shape)


def prod_of(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def tensorsolve(A, B, dims=None):
    """torch.linalg.tensorsolve: X with tensordot(A, X, X.ndim) == B."""
    if dims is not None:
        nd = A.ndim
        dims = [d % nd for d in dims]
        rest = [d for d in range(nd) if d not in dims]
        A = permute(A, rest + dims)
    x_shape = A._node.shape[B.ndim:]
    m = prod_of(B._node.shape)
    return reshape(solve(reshape(A, (m, -1)), reshape(B, (m,))), x_shape)


Lstsq = collections.namedtuple("lstsq", ["solution", "residuals", "rank", "singular_values"])


def lstsq(A, B, rcond=None, *, driver=None):
    """torch.linalg.lstsq: the least-squares solution of A X = B through the pseudo-inverse
    (PyTorch's default CPU driver 'gelsy' returns no residuals or singular values; the rank
    is returned)."""
    vector = B.ndim == A.ndim - 1
    b = unsqueeze(B, -1) if vector else B
    m, n = A._node.shape[-2:]
    x = matmul(pinv(A, rtol=rcond), b)
    if vector:
        x = squeeze(x, -1)
    empty = zeros(0, dtype=A.dtype, device=A.device)
    return Lstsq(x, empty, matrix_rank(A, rtol=rcond), empty)


def inv_ex(A, *, check_errors=False):
    """torch.linalg.inv_ex: (inverse, info); info is the failing pivot (0: success)."""
    _square(A, "linalg.inv_ex")
    out = _inv_raw(A)
    info = _record(lu_info_p, (A,), (D.int32,), (), D.int32)
    if check_errors:
        _check_lu(A, out, "linalg.inv_ex", "linalg.inv_ex: The diagonal element {} is zero, "
                  "the inversion could not be completed because the input matrix is singular.")
    return collections.namedtuple("inv_ex", ["inverse", "info"])(out, info)


def cholesky_ex(A, *, upper=False, check_errors=False):
    """torch.linalg.cholesky_ex: (L, info); info > 0 where A is not positive-definite."""
    _square(A, "linalg.cholesky_ex")
    L = _record(cholesky_p, (A,), (), A._node.shape, A._node.dtype)
    info = _record(cholesky_info_p, (L,), (D.int32,), (), D.int32)
    if check_errors:
        linalg_info(to_dtype(info, _info_dtype()), "linalg.cholesky_ex", "linalg.cholesky_ex: "
                    "The factorization could not be completed because the input is not "
                    "positive-definite.", L)
    return collections.namedtuple("cholesky_ex", ["L", "info"])(mT(L) if upper else L, info)


def solve_ex(A, B, *, left=True, check_errors=False):
    """torch.linalg.solve_ex: (result, info)."""
    _square(A, "linalg.solve_ex")
    if not left:
        r = solve_ex(mT(A), mT(B), check_errors=check_errors)
        return collections.namedtuple("solve_ex", ["result", "info"])(mT(r.result), r.info)
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B._node.shape == A._node.shape[:-1])
    b = unsqueeze(B, -1) if vector else B
    out = _solve_raw(A, to_dtype(b, A.dtype))
    info = _record(lu_info_p, (A,), (D.int32,), (), D.int32)
    if check_errors:
        _check_lu(A, out, "linalg.solve_ex", "torch.linalg.solve_ex: The solver failed because "
                  "the input matrix is singular.")
    return collections.namedtuple("solve_ex", ["result", "info"])(
        squeeze(out, -1) if vector else out, info)


@torch_op
def matrix_power(A, n):
    """A ** n for square matrices (torch.matrix_power, torch.linalg.matrix_power); n < 0
    through the inverse."""
    n = builtins.int(n)
    if n < 0:
        return _matrix_power(inv(A), -n)
    return _matrix_power(A, n)



def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.matrix_norm: 'fro', 'nuc', 2/-2 (largest/smallest singular value) and
    1/-1/inf/-inf (max/min absolute column/row sum)."""
    if ord not in ("nuc", 2, -2):
        return _matrix_norm(A, ord, dim, keepdim, dtype=dtype)
    if dtype is not None:
        A = to_dtype(A, dtype)
    _float(A, "linalg.matrix_norm")
    d0, d1 = (d % A.ndim for d in dim)
    rest = [i for i in range(A.ndim) if i not in (d0, d1)]
    s = svdvals(permute(A, rest + [d0, d1]))
    r = sum(s, -1) if ord == "nuc" else amax(s, -1) if ord == 2 else \
        narrow(s, -1, s._node.shape[-1] - 1, 1).squeeze(-1)
    if keepdim:
        for d in sorted((d0, d1)):
            r = unsqueeze(r, d)
    return r


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm: a vector norm (ord a number, over dim or all of A when ord is None)
    or a matrix norm (dim a pair, or ord given for a 2-D A without dim)."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim,
                           keepdim, dtype=dtype)
    if dim is None and ord is not None and A.ndim != 1:
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be "
                           f"1D or 2D. Got {A.ndim}D.")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


@torch_op(method=False)
def nuclear_norm(x, dim=None, keepdim=False):
    """The sum of singular values (deprecated torch.nuclear_norm; linalg.matrix_norm 'nuc')."""
    return matrix_norm(x, "nuc", (-2, -1) if dim is None else dim, keepdim)


@torch_op(method=False)
def frobenius_norm(x, dim=(-2, -1), keepdim=False):
    """sqrt of the sum of squares over dim (deprecated torch.frobenius_norm)."""
    return vector_norm(x, 2, dim, keepdim)


@torch_op(method=False)
def norm_except_dim(v, pow=2, dim=0):  # noqa: A002 - PyTorch's name
    """The pow-norm over every dim but `dim` (kept, size-1 elsewhere); dim=-1: of all of v."""
    if dim == -1:
        return vector_norm(v, pow)
    d = dim % v.ndim
    others = tuple(i for i in range(v.ndim) if i != d)
    return vector_norm(v, pow, others, keepdim=True)
