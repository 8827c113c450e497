"""Products, norms and distances composed of matmul and the reductions: addmm/addbmm/baddbmm/
addmv/addr, ger, inner, vdot, chain_matmul/multi_dot, matrix_power, tensordot, cross, vecdot,
vector_norm/matrix_norm, dist, cdist, renorm, cov/corrcoef, trapezoid/trapz/
cumulative_trapezoid, aminmax, count_nonzero.

Layer: frontend — imports engine.dtypes, ops._core, ops._registry, ops.creation,
ops.elementwise, ops.joining, ops.linalg, ops.reduction, ops.shape, tensor. Every op is a
composition, so its gradient comes from the ops it is made of (with PyTorch's subgradients where
a norm is 0).
"""
from __future__ import annotations

import builtins
import collections
import math

from ...engine import dtypes as D
from ..tensor import _norm_dim, Tensor
from ._core import as_tensor, broadcast_shapes, broadcast_to, to_dtype
from ._registry import torch_op
from .creation import eye
from .elementwise import abs, gt, maximum, minimum, mul, ne, sqrt, where
from .joining import _diag_layout
from .linalg import bmm, dot, matmul, mm, mv, outer
from .reduction import _zero_safe_root, amax, amin, cumsum, norm, sum
from .shape import _view_read, cat, mT, narrow, permute, reshape, squeeze, unsqueeze


def _scaled(t, s):
    return t if s == 1 else mul(t, s)


def _beta_alpha(x, prod, beta, alpha):
    # PyTorch: beta == 0 ignores x entirely (NaN and inf in it do not propagate)
    prod = _scaled(prod, alpha)
    if beta == 0:
        broadcast_shapes(x._node.shape, prod._node.shape, op="addmm")
        return prod
    return _scaled(x, beta) + prod


@torch_op(inplace=True)
def addmm(x, mat1, mat2, *, beta=1, alpha=1):
    """beta * x + alpha * (mat1 @ mat2) (torch.addmm); beta == 0 ignores x."""
    return _beta_alpha(x, mm(mat1, mat2), beta, alpha)


@torch_op(inplace=True)
def addbmm(x, batch1, batch2, *, beta=1, alpha=1):
    """beta * x + alpha * sum_b batch1[b] @ batch2[b] (torch.addbmm)."""
    return _beta_alpha(x, sum(bmm(batch1, batch2), 0), beta, alpha)


@torch_op(inplace=True)
def baddbmm(x, batch1, batch2, *, beta=1, alpha=1):
    """beta * x + alpha * (batch1 @ batch2), batched (torch.baddbmm)."""
    return _beta_alpha(x, bmm(batch1, batch2), beta, alpha)


@torch_op(inplace=True)
def addmv(x, mat, vec, *, beta=1, alpha=1):
    """beta * x + alpha * (mat @ vec) (torch.addmv)."""
    return _beta_alpha(x, mv(mat, vec), beta, alpha)


@torch_op(inplace=True)
def addr(x, vec1, vec2, *, beta=1, alpha=1):
    """beta * x + alpha * outer(vec1, vec2) (torch.addr)."""
    return _beta_alpha(x, outer(vec1, vec2), beta, alpha)


@torch_op
def ger(x, vec2):
    """outer(x, vec2) (torch.ger, PyTorch's older name)."""
    return outer(x, vec2)


@torch_op
def inner(x, other):
    """The sum over the last dims of x and other of their products, for every other index
    pair (torch.inner); a 0-d operand multiplies."""
    if not isinstance(other, Tensor):
        other = as_tensor(other)
    if x.ndim == 0 or other.ndim == 0:
        return mul(x, other)
    if x._node.shape[-1] != other._node.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(x.shape)} and {list(other.shape)}")
    return tensordot(x, other, ([-1], [-1]))


@torch_op
def vdot(x, other):
    """The dot product of two 1-D tensors (torch.vdot; conjugation is moot for real ones)."""
    if x.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {x.ndim}D and {other.ndim}D tensors")
    return dot(x, other)


@torch_op(method=False)
def chain_matmul(*matrices):
    """matrices[0] @ matrices[1] @ ... (torch.chain_matmul; 2-D matrices)."""
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = tuple(matrices[0])
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for m in matrices:
        if m.ndim != 2:
            raise RuntimeError(f"Tensor dimension is {m.ndim}, expected 2 instead.")
    return multi_dot(matrices)


def multi_dot(tensors):
    """torch.linalg.multi_dot: the product of a list of matrices (the first may be 1-D, a row;
    the last 1-D, a column), multiplied in the cheapest order."""
    ts = list(tensors)
    if len(ts) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(ts)}")
    first, last = ts[0].ndim == 1, ts[-1].ndim == 1
    if first:
        ts[0] = unsqueeze(ts[0], 0)
    if last:
        ts[-1] = unsqueeze(ts[-1], 1)
    for i, t in enumerate(ts):
        if t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    dims = [ts[0]._node.shape[0]] + [t._node.shape[1] for t in ts]
    n = len(ts)
    # the classic matrix-chain order (exact ties: left to right)
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def chain(i, j):
        if i == j:
            return ts[i]
        k = split[i][j]
        return mm(chain(i, k), chain(k + 1, j))
    out = chain(0, n - 1)
    if first:
        out = squeeze(out, 0)
    if last:
        out = squeeze(out, -1)
    return out


def matrix_power(x, n):
    """x @ x @ ... (n times) for square matrices (batched), n >= 0; n == 0 gives the identity
    (torch.matrix_power, with negative n, is ops.decomposition's)."""
    if x.ndim < 2 or x._node.shape[-1] != x._node.shape[-2]:
        raise RuntimeError(f"matrix_power: expected a tensor of square matrices, got shape "
                           f"{tuple(x.shape)}")
    n = builtins.int(n)
    if n < 0:
        raise RuntimeError("matrix_power: a negative exponent needs the inverse")
    if n == 0:
        return broadcast_to(eye(x._node.shape[-1], dtype=x.dtype, device=x.device),
                            x._node.shape) * 1
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


@torch_op(method=False)
def tensordot(a, b, dims=2):
    """Contract the last `dims` dims of a with the first of b, or the listed pairs of dims
    (torch.tensordot)."""
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da = list(range(a.ndim - dims, a.ndim))
        db = list(range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
    da = [_norm_dim(d, a.ndim, "tensordot") for d in da]
    db = [_norm_dim(d, b.ndim, "tensordot") for d in db]
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    for i, j in zip(da, db):
        if a._node.shape[i] != b._node.shape[j]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a._node.shape[i]} in dim {i} and second has size "
                               f"{b._node.shape[j]} in dim {j}")
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = 1
    for d in da:
        k *= a._node.shape[d]
    ra = reshape(permute(a, fa + da), (-1, k))
    rb = reshape(permute(b, db + fb), (k, -1))
    out_shape = tuple(a._node.shape[d] for d in fa) + tuple(b._node.shape[d] for d in fb)
    return reshape(mm(ra, rb), out_shape)


@torch_op
def cross(x, other, dim=None):
    """The 3-vector cross product along dim (torch.cross: by default the first dim of size 3;
    torch.linalg.cross: dim=-1); the operands broadcast."""
    shape = broadcast_shapes(x._node.shape, other._node.shape, op="cross")
    x, other = broadcast_to(x, shape), broadcast_to(other, shape)
    if dim is None:
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError(f"no dimension of size 3 in input (shape {tuple(shape)})")
    d = _norm_dim(dim, len(shape), "cross")
    if shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{x._node.shape[d]} and {other._node.shape[d]}")

    def c(t, i):
        return narrow(t, d, i, 1)
    a0, a1, a2 = c(x, 0), c(x, 1), c(x, 2)
    b0, b1, b2 = c(other, 0), c(other, 1), c(other, 2)
    return cat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


def vecdot(x, y, *, dim=-1):
    """torch.linalg.vecdot: sum(x * y) over dim (the operands broadcast)."""
    return sum(mul(x, y), dim)


# ---- norms and distances ------------------------------------------------------------------------
def _float_input(x, dtype, op):
    if dtype is not None:
        x = to_dtype(x, dtype)
    if x.dtype.kind != "f":
        raise RuntimeError(f"{op}: Expected a floating point tensor as input. Got {x.dtype}")
    return x


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.vector_norm: the ord-norm of x flattened (or over dim): sum(|x|**ord) **
    (1/ord), max |x| for inf, min |x| for -inf, the count of non-zeros for 0."""
    x = _float_input(x, dtype, "linalg.vector_norm")
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    if dim is not None and not isinstance(dim, (list, tuple)):
        dim = (dim,)
    if ord == math.inf:
        return amax(abs(x), dim, keepdim) if x.numel() else sum(abs(x), dim, keepdim)
    if ord == -math.inf:
        return amin(abs(x), dim, keepdim)
    return norm(x, ord if ord != 2 else 2, dim, keepdim)


def matrix_norm(x, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.matrix_norm: 'fro', and the 1/-1/inf/-inf norms (max/min absolute column
    or row sum). 'nuc' and 2/-2 need singular values (not implemented)."""
    x = _float_input(x, dtype, "linalg.matrix_norm")
    if x.ndim < 2:
        raise RuntimeError(f"linalg.matrix_norm: The input tensor A must have at least 2 "
                           f"dimensions (got shape {tuple(x.shape)})")
    d0, d1 = (_norm_dim(d, x.ndim, "matrix_norm") for d in dim)
    if ord == "fro":
        return norm(x, "fro", (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        raise NotImplementedError(f"flowlite: torch.linalg.matrix_norm with ord={ord!r} is "
                                  "not implemented (it needs singular values)")
    if ord in (1, -1, math.inf, -math.inf):
        summed, other = (d0, d1) if ord in (1, -1) else (d1, d0)
        s = sum(abs(x), summed, keepdim=True)
        r = amax(s, other, keepdim=True) if ord > 0 else amin(s, other, keepdim=True)
        return r if keepdim else squeeze(squeeze(r, builtins.max(d0, d1)),
                                         builtins.min(d0, d1))
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


@torch_op
def dist(x, other, p=2):
    """The p-norm of x - other (torch.dist)."""
    return vector_norm(x - other, p)


def _cdist_euclid(x1, x2):
    # the matmul form (PyTorch's default for large inputs is the same identity), clamped at 0
    n1 = sum(x1 * x1, -1, keepdim=True)
    n2 = sum(x2 * x2, -1, keepdim=True)
    d2 = n1 - 2 * matmul(x1, mT(x2)) + mT(n2)
    return _zero_safe_root(maximum(d2, 0.0), sqrt)


@torch_op(method=False)
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distance between each row of x1 (..., P, M) and each row of x2 (..., R, M)
    (torch.cdist); the gradient at zero distance is 0, as in PyTorch."""
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D "
                           f"X2 got: {x2.ndim}D")
    if x1._node.shape[-1] != x2._node.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{x1._node.shape[-1]} X2: {x2._node.shape[-1]}")
    if p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values, got {p}")
    if x1.dtype.kind != "f":
        raise RuntimeError(f"cdist only supports floating-point dtypes, X1 got: {x1.dtype}")
    r1, r2 = x1._node.shape[-2], x2._node.shape[-2]
    use_mm = (p == 2 and (compute_mode == "use_mm_for_euclid_dist" or
                          (compute_mode == "use_mm_for_euclid_dist_if_necessary" and
                           (r1 > 25 or r2 > 25))))
    if use_mm:
        batch = broadcast_shapes(x1._node.shape[:-2], x2._node.shape[:-2], op="cdist")
        return _cdist_euclid(broadcast_to(x1, batch + x1._node.shape[-2:]),
                             broadcast_to(x2, batch + x2._node.shape[-2:]))
    diff = unsqueeze(x1, -2) - unsqueeze(x2, -3)
    return vector_norm(diff, p, -1)


@torch_op(inplace=True)
def renorm(x, p, dim, maxnorm):
    """Each slice along dim whose p-norm exceeds maxnorm is rescaled to norm maxnorm
    (torch.renorm); the scale is computed as PyTorch does, maxnorm / (norm + 1e-7)."""
    if p <= 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported (p = {p})")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    d = _norm_dim(dim, x.ndim, "renorm")
    others = tuple(i for i in range(x.ndim) if i != d)
    n = vector_norm(x, p, others, keepdim=True)
    scale = where(gt(n, maxnorm), maxnorm / (n + 1e-7), 1.0)
    return x * scale


def _cov(x, correction, fweights, aweights):
    # PyTorch's at::cov, op for op
    if x.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an "
                           f"input with {x.ndim} dimensions")
    if x.dtype is D.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    if x.ndim < 2:
        x = reshape(x, (1, -1))
    if x.dtype.kind != "f":
        x = to_dtype(x, D.default_float())
    w = None
    for t, name in ((fweights, "fweights"), (aweights, "aweights")):
        if t is None:
            continue
        if t.ndim > 1 or (t.ndim == 1 and t._node.shape[0] != x._node.shape[1]):
            raise RuntimeError(f"cov(): expected {name} to have one dimension and "
                               f"{x._node.shape[1]} elements, got shape {tuple(t.shape)}")
        if name == "fweights" and t.dtype.kind not in "iu":
            raise RuntimeError(f"cov(): expected fweights to have integral dtype but got "
                               f"{t.dtype}")
        w = t if w is None else w * t
    w_sum = x._node.shape[1] if w is None else sum(w)
    avg = sum(x if w is None else x * w, 1) / w_sum
    if w is not None and aweights is not None and correction != 0:
        norm_factor = w_sum - correction * sum(w * aweights) / w_sum
    else:
        norm_factor = w_sum - correction
    if isinstance(norm_factor, Tensor):
        norm_factor = where(gt(norm_factor, 0), norm_factor, 0)
    elif norm_factor <= 0:
        norm_factor = 0
    xm = x - unsqueeze(avg, 1)
    c = mm(xm, mT(xm if w is None else xm * w))
    c = c / norm_factor if isinstance(norm_factor, Tensor) or norm_factor else c / 0.0
    return squeeze(c)


@torch_op
def cov(x, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in x's rows (observations in columns), with
    optional integer frequency and observation weights (torch.cov); squeezed, as PyTorch's."""
    return _cov(x, correction, fweights, aweights)


@torch_op
def corrcoef(x):
    """Pearson correlation coefficients of x's rows, clipped to [-1, 1] (torch.corrcoef)."""
    c = _cov(x, 1, None, None)
    if c.ndim == 0:
        return c / c
    vshape, off, st = _diag_layout(c._node.shape, 0, 0, 1)
    d = sqrt(_view_read(c, vshape, off, st))
    c = c / reshape(d, (-1, 1))
    c = c / reshape(d, (1, -1))
    return minimum(maximum(c, -1.0), 1.0)


def _trapezoid(y, x, dx, dim, cumulative, op):
    # PyTorch's at::trapezoid / cumulative_trapezoid, op for op
    d = _norm_dim(dim, y.ndim, op)
    n = y._node.shape[d]
    if n == 0:
        return sum(y, d) * 0 if not cumulative else narrow(y, d, 0, 0) * 0
    left, right = narrow(y, d, 0, n - 1), narrow(y, d, 1, n - 1)
    if not isinstance(x, Tensor):
        h = (1 if dx is None else dx) if x is None else x
        if cumulative:
            return cumsum(mul(left + right, h / 2.0), d)
        ends = narrow(y, d, 0, 1) + narrow(y, d, n - 1, 1)
        return mul(sum(y, d) - squeeze(ends, d) * 0.5, h)
    if x.ndim == 1:
        if x._node.shape[0] != n:
            raise RuntimeError(f"{op}: There must be one `x` value for each sample point")
        shape = [1] * y.ndim
        shape[d] = n
        x = reshape(x, tuple(shape))
    elif x.ndim < y.ndim:
        x = reshape(x, (1,) * (y.ndim - x.ndim) + x._node.shape)
    m = x._node.shape[d]
    h = narrow(x, d, 1, m - 1) - narrow(x, d, 0, m - 1)
    if cumulative:
        return cumsum((left + right) * h, d) / 2.0
    return sum(h * (right + left), d) / 2.0


@torch_op(method=False)
def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoid rule along dim, at sample points x (a tensor) or spacing dx (a number;
    default 1) (torch.trapezoid)."""
    return _trapezoid(y, x, dx, dim, False, "trapezoid")


@torch_op(method=False)
def trapz(y, x=None, *, dx=None, dim=-1):
    """torch.trapz: trapezoid()."""
    return _trapezoid(y, x, dx, dim, False, "trapz")


@torch_op(method=False)
def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoid rule along dim, one element shorter (torch.cumulative_trapezoid)."""
    return _trapezoid(y, x, dx, dim, True, "cumulative_trapezoid")


AminMax = collections.namedtuple("aminmax", ["min", "max"])


@torch_op
def aminmax(x, *, dim=None, keepdim=False):
    """(amin, amax) over dim or all elements (torch.aminmax); an empty reduction is an
    error, as in PyTorch."""
    if x.numel() == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    if dim is None and keepdim:
        return AminMax(reshape(amin(x), (1,) * x.ndim), reshape(amax(x), (1,) * x.ndim))
    return AminMax(amin(x, dim, keepdim), amax(x, dim, keepdim))


@torch_op
def count_nonzero(x, dim=None):
    """The number of non-zero elements, over dim(s) or all (int64)."""
    return sum(to_dtype(ne(x, 0), D.canonical(D.int64)), dim)

