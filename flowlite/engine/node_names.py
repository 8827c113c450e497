"""PyTorch's names for autograd nodes (`grad_fn=<MulBackward0>`, `y.grad_fn.name()`).

PyTorch names a node after the ATen function the user's call ran (`x.view(...)` ->
`ViewBackward0`, `x[0]` -> `SelectBackward0`, `F.linear(x, w, b)` on a matrix ->
`AddmmBackward0`). flowlite records primitives, several user calls sharing one (a `reshape`
primitive serves `view`, `x[0]`, `squeeze`, `unsqueeze`, ...), so the name comes from two
places: the front end of a call whose primitive does not say it labels the node it made
(`tensor.name_grad_fn`), and the rest is derived here from the primitive, its attributes and
its inputs' kinds and ranks.

Layer: engine — imports ir.
"""
from __future__ import annotations

from . import ir

# primitive -> node name, where PyTorch's differs from the primitive's name in CamelCase
_RENAMED = {
    "reshape": "ViewBackward0",
    "transpose": "PermuteBackward0",
    "broadcast_to": "ExpandBackward0",
    "concatenate": "CatBackward0",
    "rev": "FlipBackward0",
    "slice": "SliceBackward0",
    "dyn_slice": "SliceBackward0",
    "index": "IndexBackward0",
    "index_set": "IndexPutBackward0",
    "take_along": "GatherBackward0",
    "integer_pow": "PowBackward0",
    "convert": "ToCopyBackward0",
    "layer_norm": "NativeLayerNormBackward0",
    "conv": "ConvolutionBackward0",
    "view_read": "AsStridedBackward0",
    "view_write": "CopySlices",             # a write through a view (`y[0] = 5`)
    "pad": "ConstantPadNdBackward0",
    "logcumsumexp": "LogcumsumexpBackward0",
}


def _is_scalar(n) -> bool:
    """A Python number lifted into the graph (`2 ** x`, `1 - x`), not a 0-d tensor."""
    return n is not None and (n.op is ir.SCALAR or (n.op.name == "full" and not n.inputs and
                                                    not n.shape))


def _camel(name: str) -> str:
    # as PyTorch's code generator spells ATen names: title() per part ("log1p" -> "Log1P")
    return "".join(p.title() for p in name.split("_"))


def _full_reduction(attrs, out) -> bool:
    """A reduction over every dimension that keeps none (`x.sum()`, `x.max()`)."""
    return not out.shape and not (len(attrs) > 1 and attrs[1])


def name_of(prim, attrs, inputs, out, n_inputs: int) -> str:
    """The node name PyTorch prints for this primitive's usual user call. `inputs` is None
    once a backward pass has freed them (the name then rests on the output alone)."""
    name = prim.name
    first = inputs[0] if inputs else None
    if name in ("sub", "div", "pow"):
        if inputs is not None and _is_scalar(first):
            # `1 - x` runs rsub; `2 / x` runs x.reciprocal() * 2; `2 ** x` the scalar-base pow
            return {"sub": "RsubBackward1", "div": "MulBackward0", "pow": "PowBackward2"}[name]
        if name == "pow":
            second = inputs[1] if inputs is not None else None
            return "PowBackward0" if _is_scalar(second) else "PowBackward1"
    elif name == "sum":
        return "SumBackward0" if _full_reduction(attrs, out) else "SumBackward1"
    elif name == "prod":
        return "ProdBackward0" if _full_reduction(attrs, out) else "ProdBackward1"
    elif name in ("amax", "amin"):
        if _full_reduction(attrs, out):          # x.max(): PyTorch's max() over everything
            return "MaxBackward1" if name == "amax" else "MinBackward1"
    elif name == "matmul":
        ranks = (len(inputs[0].shape), len(inputs[1].shape)) if inputs else None
        if ranks == (2, 2) or (ranks is None and len(out.shape) == 2):
            return "MmBackward0"
        if ranks == (1, 1):
            return "DotBackward0"
        if ranks == (2, 1):
            return "MvBackward0"
        if ranks is not None and ranks[0] == 1:
            return "SqueezeBackward4"
        return "UnsafeViewBackward0"            # batched: PyTorch folds to mm/bmm and views
    elif name == "linear":
        bias = n_inputs > 2
        rank = len(out.shape)
        if rank == 2:
            return "AddmmBackward0" if bias else "MmBackward0"
        if rank == 1 and not bias:
            return "SqueezeBackward4"
        return "ViewBackward0" if bias else "UnsafeViewBackward0"
    elif name in ("nll", "nll_t"):
        rank = len(first.shape) if first is not None else len(out.shape) + 1
        return "NllLoss2DBackward0" if rank > 2 else "NllLossBackward0"
    elif name == "einsum":
        if n_inputs == 1:
            return "PermuteBackward0" if first is not None and \
                len(out.shape) == len(first.shape) else "SumBackward1"
        return "ViewBackward0"                  # PyTorch contracts with bmm, then views
    elif name == "tuple_get":                   # one output of a multi-output primitive
        if first is not None and first.op is not ir.DATA:
            return name_of(first.op, first.attrs, first.inputs, first, len(first.inputs))
    renamed = _RENAMED.get(name)
    if renamed is not None:
        return renamed
    return _camel(name) + "Backward0"
