"""The op front end: every PyTorch-named tensor operation and the primitives it records.

Layer: frontend — imports ops._core, ops._registry, ops.creation, ops.creation_more,
ops.decomposition, ops.elementwise, ops.elementwise_math, ops.histogram, ops.indexing,
ops.indexing_more, ops.joining, ops.linalg, ops.nn_kernels, ops.products, ops.quantile,
ops.rearrange, ops.reduction, ops.shape, ops.sorting, ops.special. An op has one home, the
module of its family: its primitive (`<name>_p`: lowering, gradient rule written in the ops of
that module and those before it, elementwise kind, bucketing rule) and its front end, declared
once with `@torch_op` (flowlite/frontend/ops/_registry.py): this namespace, `flowlite.<name>`
and `Tensor`'s methods and in-place variants are generated from those declarations.
`flowlite.primitives` gathers the primitives under their table names. Hot paths (elementwise
binary ops, reductions, reshapes) compute their shape/dtype rule with small caches, so recording
an op costs a few dict lookups and one node; rarer ops let `tensor.infer` derive the rule from
the lowering once per signature. User errors are raised here, naming the op and the shapes
involved.
"""
from __future__ import annotations


from . import elementwise  # noqa: F401
from ._registry import OPS, torch_op  # noqa: F401
from ._core import (_scalar_types, _Node, _SCALAR, _promote, _scalar_result, _CATEGORY,
                    _promote_nodes, _BAKED, _const_cache, _scalar, _bcast_cache, _binary, _unary,
                    to_dtype, _shape_arg, _dev, _creation_dtype, sum_to)
from .elementwise import _lift, _logical, rsub, rdiv, integer_pow  # noqa: F401
from .creation import _size_arg  # noqa: F401
from .shape import (_reshape_cache, _reshape_slow, _perm_cache, _permute_slow, mT, T, _slice_prim,
                    _dyn_slice, _dyn_pad, _pad_prim, _rev_prim, _view_read, _view_write,
                    _check_cat, pad, _take_along_prim)
from .reduction import (_axes, _reduced_shape, _reduce_extreme, MinMax, _minmax_dim, _arg,
                        _zero_safe_root, _logcumsumexp_prim)
from .indexing import (_parse_index, _basic_plan, _apply_basic_plan, _basic_index, _basic_cache,
                       _BASIC_TYPES, _basic_key, getitem, getitem_plan, host_window,
                       _split_int_indices, _index,
                       _index_add, _index_set, _put, setitem, _check_index_tensor,
                       _scatter_add_prim, _scatter_prim, _scatter_args)  # noqa
from .linalg import _explicit_einsum, _einsum_cache  # noqa: F401
from .nn_kernels import (_conv_raw, _conv_input_grad, _conv_weight_grad, _window_raw,
                         _sum_window_transpose, _max_window_grad, _max_window_select)
from . import sorting, rearrange  # noqa: F401,E402
from . import elementwise_math, special, histogram, joining, products  # noqa: F401,E402
from . import indexing_more, quantile, creation_more, decomposition  # noqa: F401,E402

# every declared op (@torch_op in the family modules): flowlite.frontend.ops.<name>
globals().update({name: entry.fn for name, entry in OPS.items()})
