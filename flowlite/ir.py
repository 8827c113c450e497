"""The lazy IR: immutable nodes with an interned structural signature.

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

# signature tuple -> small int; never shrinks, bounded by the variety of programs.
_SIGS: dict = {}
_next_sig = itertools.count(1).__next__


def intern_sig(sig: tuple) -> int:
    s = _SIGS.get(sig)
    if s is None:
        s = _SIGS[sig] = _next_sig()
    return s


class Prim:
    """One primitive: a lowering to jax and a VJP written in flowlite ops.

    lower(attrs, *jax_values) -> jax value (or tuple for multi-output prims)
    vjp(ctx, g) -> tuple of cotangents (flowlite Tensors or None) per input
    """
    __slots__ = ("name", "lower", "vjp", "multi", "nondiff", "inplace", "__weakref__")

    def __init__(self, name, lower, vjp=None, multi=False, nondiff=False, inplace=None):
        self.name = name
        self.lower = lower
        self.vjp = vjp
        self.multi = multi
        self.nondiff = nondiff
        # inplace(attrs, j) -> index of the input that output j replaces (an optimizer's
        # new parameter replaces the old one): the executor gives that output the input's
        # donated buffer, so XLA updates it in place instead of copying
        self.inplace = inplace

    def __repr__(self):
        return f"<prim {self.name}>"


class Node:
    """One IR node.  `op is DATA` marks a materialised value (`value` is a
    jax.Array); `op is SCALAR` a host Python scalar passed in as data."""
    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "device", "sig", "value",
                 "site", "mark", "__weakref__")

    def __init__(self, op, inputs, attrs, shape, dtype, device, value=None):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.value = value
        self.site = None
        self.mark = 0       # the executor's walk numbering (see executor._walk_marked)
        self.sig = intern_sig((op, attrs, shape, dtype, len(inputs)))

    @property
    def is_data(self) -> bool:
        return self.op is DATA

    def materialize(self, value, sig=None) -> None:
        """Turn a computed node into a data leaf; its upstream graph is released."""
        self.op = DATA
        self.inputs = ()
        self.attrs = ()
        self.value = value
        self.sig = sig or intern_sig((DATA, (), self.shape, self.dtype, 0))

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
    n.site = None
    n.mark = 0
    n.sig = sig
    return n


def data_node_fast(value, shape, dtype, device, sig) -> Node:
    """A data leaf with a precomputed signature (flowlite.compile's replay hot path)."""
    return node_with_sig(DATA, (), (), shape, dtype, device, sig, value)


def scalar_node(value, dtype) -> Node:
    return Node(SCALAR, (), (), (), dtype, None, value)
