"""The op front end: every PyTorch-named tensor operation, built from the primitive table.

Layer: op front end — one module per category, each importing only those before it:
_core -> elementwise -> creation -> shape -> reduction -> indexing -> linalg -> nn_kernels
-> sorting -> rearrange.
Hot paths (elementwise binary ops, reductions, reshapes) compute their shape/dtype rule
with small caches, so recording an op costs a few dict lookups and one node; rarer ops let
`tensor.infer` derive the rule from the lowering once per signature.  User errors are
raised here, naming the op and the shapes involved.
"""
from __future__ import annotations

import sys

from .. import primitives as P  # (the table, as ops.P)
from . import elementwise
from ._core import (  # noqa: F401
    _scalar_types, _Node, _SCALAR, _promote, _scalar_result, _CATEGORY,
    _promote_nodes, _BAKED, _const_cache, _scalar, as_tensor, _bcast_cache,
    broadcast_shapes, _binary, _unary, to_dtype, _shape_arg, broadcast_to,
    _take_along_prim, nonzero, _dev, _creation_dtype)
from .elementwise import (  # noqa: F401
    add, sub, rsub, _lift, mul, div, rdiv, floor_divide, remainder, fmod, atan2, pow,
    integer_pow, maximum, minimum, eq, ne, lt, le, gt, ge, _logical, logical_and, logical_or,
    logical_xor, logical_not, bitwise_not, neg, abs, sign, floor, ceil, trunc, round, square,
    reciprocal, relu, isfinite, isnan, isinf, clamp, clip, where, FLOAT_UNARY,
    FLOAT_ALIASES, lerp, bitwise_left_shift, bitwise_right_shift)
from .creation import (  # noqa: F401
    full, _size_arg, zeros, ones, empty, zeros_like,
    ones_like, empty_like, full_like, arange, linspace, eye)
from .shape import (  # noqa: F401
    _reshape_cache, reshape, _reshape_slow, view, flatten, unflatten,
    squeeze, unsqueeze, _perm_cache, permute, _permute_slow, transpose,
    t, mT, T, expand, expand_as, repeat,
    _slice_prim, _dyn_slice, _dyn_pad, _pad_prim, _rev_prim, _view_read, _view_write, narrow, flip, _check_cat,
    cat, concat, stack, split, chunk, unbind,
    tril, triu, pad, contiguous, clone)
from .reduction import (  # noqa: F401
    _axes, _reduced_shape, sum, sum_to, mean, _reduce_extreme,
    MinMax, amax, amin, max, min, _minmax_dim,
    _arg, argmax, argmin, prod, all, any,
    var, std, logsumexp, cumsum, cumprod, norm,
    _zero_safe_root, cummax, cummin, logcumsumexp, _logcumsumexp_prim, var_mean, std_mean)
from .indexing import (  # noqa: F401
    _parse_index, _basic_plan, _apply_basic_plan, _basic_index, _basic_cache, _BASIC_TYPES,
    _basic_key, getitem, getitem_plan, _split_int_indices, _index, _index_add, _index_set,
    index_put, _put, setitem, _check_index_tensor, gather, take_along_dim,
    _scatter_add_prim, _scatter_prim, _scatter_args, scatter, scatter_add, index_select,
    index_add, take, index_fill, index_copy, masked_fill, one_hot)
from .linalg import (  # noqa: F401
    matmul, bmm, mm, dot, outer, _explicit_einsum,
    _einsum_cache, einsum)
from .nn_kernels import (  # noqa: F401
    _conv_raw, _conv_input_grad, _conv_weight_grad, _window_raw, _sum_window_transpose,
    _max_window_grad, _max_window_select, softmax, log_softmax)
from .sorting import (  # noqa: F401
    sort, argsort, msort, topk, kthvalue, median, nanmedian, mode, unique, searchsorted,
    bucketize)
from .rearrange import (  # noqa: F401
    roll, repeat_interleave, meshgrid)

globals().update({name: getattr(elementwise, name) for name in FLOAT_UNARY})
globals().update({alias: getattr(elementwise, name) for alias, name in FLOAT_ALIASES.items()})

P.bind_front_end(sys.modules[__name__])   # the table's VJPs build cotangents with these ops
