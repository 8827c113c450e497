"""`torch.special` for flowlite: the special functions under PyTorch's names.

Layer: entry — imports frontend.ops, frontend.ops.elementwise_math, frontend.ops.special,
frontend.surface. The functions live in their op families (flowlite/frontend/ops/special.py and
the elementwise modules); this module is the namespace a PyTorch program reaches as
`torch.special`. The names flowlite does not implement (Bessel functions of the second kind,
orthogonal polynomials, ...) raise NotImplementedError naming them
(flowlite/frontend/surface.py).
"""
from __future__ import annotations

from .frontend import ops as _ops
from .frontend import surface as _surface
from .frontend.ops.elementwise_math import xlog1py, xlogy, logit, sinc
from .frontend.ops.special import (digamma, entr, erfc, erfcx, erfinv, i0, i0e, i1, i1e,
                                   log_ndtr, multigammaln, ndtr, ndtri, polygamma,
                                   spherical_bessel_j0, zeta)
from .frontend.ops.special import digamma as psi, lgamma as gammaln, i0 as modified_bessel_i0
from .frontend.ops.special import i1 as modified_bessel_i1
from .frontend.ops.special import igamma as gammainc, igammac as gammaincc

erf = _ops.erf
exp2 = _ops.exp2
expm1 = _ops.expm1
log1p = _ops.log1p
round = _ops.round  # noqa: A001 - PyTorch's name
expit = _ops.sigmoid
softmax = _ops.softmax
log_softmax = _ops.log_softmax
logsumexp = _ops.logsumexp

__all__ = ["digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1",
           "gammainc", "gammaincc", "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr",
           "log_softmax", "logit", "logsumexp", "modified_bessel_i0", "modified_bessel_i1",
           "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round", "sinc", "softmax",
           "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]

_surface.install("torch.special", globals())
