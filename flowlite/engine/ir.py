"""The lazy IR: immutable nodes with an interned structural signature.

Layer: engine — imports namespace.

A `Node` is one recorded operation (or a leaf holding device data / a host
scalar).  Its *signature* — primitive, static attributes, shape, dtype, number
of inputs — is interned at construction into a small integer `sig`, so the
graph key built at a sync is a flat tuple of ints (signatures and input
wiring) that is exact: two graphs share a key only if they are the same
program.  Leaves carry no value in their signature, so new data never
recompiles.
"""
from __future__ import annotations

import itertools

from .namespace import prefix as _prefix

# signature tuple -> small int; never shrinks, bounded by the variety of programs.
_SIGS: dict = {}
_next_sig = itertools.count(1).__next__


def intern_sig(sig: tuple) -> int:
    s = _SIGS.get(sig)
    if s is None:
        # setdefault: two threads interning the same new signature agree on its number
        s = _SIGS.setdefault(sig, _next_sig())
    return s


class Size(tuple):
    """Shape tuple (PyTorch's torch.Size)."""
    __slots__ = ()

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self):
        return f"{_prefix()}.Size({list(self)})"     # torch.Size([4, 100]) under flowlite.run


class Prim:
    """One primitive: a lowering to jax and a VJP written in flowlite ops (declared in the
    flowlite.ops module of its family, beside its front end).

    lower(attrs, *jax_values) -> jax value (a tuple for multi-output prims)
    vjp(attrs, inputs, output, cotangent) -> one cotangent per input (a flowlite Tensor or
        None); inputs/output are the saved values as Tensors, cotangent a Tensor (a list
        with one entry per output, None for zero, for multi-output prims)
    """
    __slots__ = ("name", "lower", "vjp", "multi", "nondiff", "inplace", "elementwise", "bucket",
                 "batch", "__weakref__")

    def __init__(self, name, lower, vjp=None, multi=False, nondiff=False, inplace=None,
                 elementwise=False, bucket=None, batch=None):
        self.name = name
        self.lower = lower
        self.vjp = vjp
        self.multi = multi
        self.nondiff = nondiff
        # inplace(attrs, j) -> index of the input that output j replaces (an optimizer's
        # new parameter replaces the old one): the executor gives that output the input's
        # donated buffer, so XLA updates it in place instead of copying
        self.inplace = inplace
        # elementwise: each output element is computed from the same element of the inputs
        # only -- the ops XLA fuses into one loop (lowering bounds their chains; buckets pads
        # them freely)
        self.elementwise = elementwise
        # bucket(ctx, op, attrs, shape, in_shapes, values) -> jax value: how to run this
        # primitive on operands padded along a length (flowlite.buckets); None: no padded
        # form (an elementwise primitive gets buckets' elementwise rule)
        self.bucket = bucket
        # batch(attrs_list, key, counters) -> values: several nodes of this primitive that
        # share their first input (a random draw's key) lowered as one computation (lowering
        # batches a program's draws: one hash and one erf_inv for all of an initialisation's
        # draws instead of one each, which XLA:CPU compiled for seconds)
        self.batch = batch

    def __repr__(self):
        return f"<prim {self.name}>"



class Node:
    """One IR node.  `op is DATA` marks a materialised value (`value` is a
    jax.Array); `op is SCALAR` a host Python scalar passed in as data.

    The tracing hot paths (tensor.apply, recording.record_into, backward_templates.emit)
    build nodes inline, as `node_with_sig` does: a new slot must be set there too."""
    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "device", "sig", "value",
                 "site", "tag", "check", "mark", "epoch", "size", "__weakref__")

    def __init__(self, op, inputs, attrs, shape, dtype, device, value=None):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.value = value
        self.site = None    # the user's source line that recorded it (debug.track_sites)
        self.tag = None     # what a host scalar stands for: ("rng", draw) or a hyper-parameter
        self.check = None   # a check node's record (flowlite.frontend.checks)
        # this node's number in a numbering: the graph key being recorded (graph_key) or an
        # executor walk (executor._walk_marked); `epoch` is that numbering's own object
        self.mark = 0
        self.epoch = None
        self.size = None    # `shape` as a Size, made on the first Tensor.shape read
        self.sig = intern_sig((op, attrs, shape, dtype, len(inputs)))

    def __repr__(self):
        return f"Node({self.op.name}, shape={self.shape}, dtype={self.dtype.name})"


DATA = Prim("data", None, nondiff=True)
SCALAR = Prim("scalar", None, nondiff=True)


def data_node(value, shape, dtype, device) -> Node:
    return Node(DATA, (), (), shape, dtype, device, value)


def node_with_sig(op, inputs, attrs, shape, dtype, device, sig, value=None) -> Node:
    """A node whose signature the caller interned once for many (bulk-recorded outputs,
    backward templates, replayed data leaves): no tuple built or hashed per node."""
    n = Node.__new__(Node)
    n.op = op
    n.inputs = inputs
    n.attrs = attrs
    n.shape = shape
    n.dtype = dtype
    n.device = device
    n.value = value
    n.site = n.tag = n.check = None
    n.mark = 0
    n.epoch = None
    n.size = None
    n.sig = sig
    return n


def data_node_fast(value, shape, dtype, device, sig) -> Node:
    """A data leaf with a precomputed signature (flowlite.compile's replay hot path)."""
    return node_with_sig(DATA, (), (), shape, dtype, device, sig, value)


def scalar_node(value, dtype) -> Node:
    return Node(SCALAR, (), (), (), dtype, None, value)
