"""Length buckets: one executable for a graph whose sizes grow with one length.

Layer: engine — imports ir, lowering, runtime. The executor calls it on a cache miss.

A loop whose tensors grow by one every iteration (text generation re-running a model on the
whole, growing context: nanoGPT's `generate`) records the same program every time with one
length changed, and an exact-shape cache compiles it once per length.  Here such a family is
recognised from the graphs themselves: with every integer of the shapes and attributes taken
out, their structures are equal, and the integers that differ follow one length `s` affinely
(`k*s + c`: the context T, T+1 for the concatenated output, T*T positions...).  Once three
graphs agree, the program is lowered ONCE for a bucket of lengths — every length dimension
padded to `k*S + c` for the bucket's largest `S` (powers of two) — and run with the actual
`s` as data.  The padded region holds garbage; each primitive's rule below keeps it out of the
valid region (masks before reductions over a padded axis, offsets of slices and concatenations
at runtime, negative indices wrapped by the logical size, checks counted on the valid region
only), and a primitive without a rule sends the graph back to an exact compile.  So a bucketed
run computes what the exact program computes, or does not happen.

Outputs with a length dimension stay padded on the device: the tensor holds `unpad(buffer)`,
a lazy slice that the next bucketed graph takes as a padded leaf (no copy) and that a host read
slices on the host.
"""
from __future__ import annotations

import collections
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import make_single_device_sharding

from . import ir
from .lowering import (Draws, Executable, _stats, draw_groups, load_arguments, lower_for,
                       place_draws, scalar_layout)
from .runtime import rt

# the lazy slice of a padded buffer that a bucketed output stays as: attrs (logical shape,)
UNPAD = ir.Prim("unpad", lambda a, x: lax.slice(x, (0,) * x.ndim, a[0]), nondiff=True)

_state = {"on": os.environ.get("FLOWLITE_BUCKETS", "1") not in ("0", "off", "false")}
_MIN_BUCKET = 16
# a family cut from a loop that grows without a read (cuts.py) keeps growing, so its buckets
# are few and large: 512, 1024, ... (bigram's 500 tokens: one bucket).  Where the growing
# length reaches a contraction (nanoGPT's model run on its whole context before the crop)
# padding multiplies real work, so they start at 64 and grow 4x (64, 256, 1024: the first 64
# tokens pay at most 4x their computation — 512 at once cost 8x, doubling sample.py's
# device time)
GROW_MIN_BUCKET = 512
_CONTRACTED_MIN_BUCKET = 64
_CONTRACTED_FACTOR = 4
_CONTRACTIONS = frozenset(("linear", "matmul", "einsum", "conv", "scan"))
_families: collections.OrderedDict = collections.OrderedDict()
_MAX_FAMILIES = 64
_memo: dict = {}            # node signature -> (family signature, its integers)


def set_buckets(on: bool) -> None:
    """Turn length bucketing on or off (FLOWLITE_BUCKETS=0 starts with it off)."""
    _state["on"] = bool(on)
    if not on:
        _families.clear()


def buckets_enabled() -> bool:
    return _state["on"]


class Unsupported(Exception):
    """A primitive of the graph has no padding rule for how it uses the length; `node`: the
    graph's node that has it (its `site` is the user's line when sites are tracked)."""
    node = None


class _Cap(Exception):
    """The bucket is too large for a fixed size the graph slices into (bias[:T, :T])."""

    def __init__(self, limit):
        self.limit = limit


class Sym:
    """A size or attribute that is `k*s + c` for the family's length s (k > 0 in shapes)."""
    __slots__ = ("k", "c")

    def __init__(self, k, c):
        self.k, self.c = int(k), int(c)

    def phys(self, S):
        return self.k * S + self.c

    def __eq__(self, o):
        return isinstance(o, Sym) and o.k == self.k and o.c == self.c

    def __hash__(self):
        return hash((self.k, self.c))

    def __repr__(self):
        return f"Sym({self.k}*s{self.c:+d})"


# ---- families ---------------------------------------------------------------------------------
_INT = object()     # where an integer was taken out of a signature


def _erase(x, ints):
    t = type(x)
    if t is int or isinstance(x, np.integer):
        ints.append(int(x))
        return _INT
    if t is tuple or isinstance(x, tuple) and not hasattr(x, "_fields"):   # (Size too)
        return tuple(_erase(e, ints) for e in x)
    return x


def _family_sig(n):
    got = _memo.get(n.sig)
    if got is None:
        ints = []
        shape = _erase(tuple(n.shape), ints)     # (a multi-output node's is nested)
        attrs = _erase(n.attrs, ints)
        # (equal signatures can hold 0 and 0.0 alike: the first one seen defines the erasure)
        got = _memo[n.sig] = (ir.intern_sig(("family", n.op, shape, attrs, n.dtype,
                                             len(n.inputs))), tuple(ints), shape, attrs)
    return got


def _data_sig(n):
    return _family_sig(ir.data_node(None, n.shape, n.dtype, n.device))


def _by_slot(order, leaves, scalars):
    by_slot = [None] * (len(order) + len(leaves) + len(scalars))
    for ns in (leaves, scalars, order):
        for n in ns:
            by_slot[n.mark] = n
    ghost = set()
    for n in order:
        if n.op is UNPAD and n.inputs[0].op is ir.DATA:
            ghost.add(id(n.inputs[0]))
    return by_slot, ghost


def family_nodes(order, leaves, scalars):
    """The family nodes of a walked graph whose family_of is known (its structure was seen)."""
    by_slot, ghost = _by_slot(order, leaves, scalars)
    return [n for n in by_slot if id(n) not in ghost] if ghost else by_slot


def family_of(order, leaves, scalars, roots, checks, device):
    """(family key, integer vector, family nodes) of a walked graph, or None when the graph
    can't be bucketed.  An `unpad` of a padded buffer counts as a leaf of its logical shape,
    so a bucketed output fed back looks like the exact one it stands for."""
    by_slot, ghost = _by_slot(order, leaves, scalars)
    n_slots = len(by_slot)
    new = [-1] * n_slots
    nodes, entries, ints = [], [], []
    for slot, n in enumerate(by_slot):
        if id(n) in ghost:
            continue
        new[slot] = len(nodes)
        if n.op is UNPAD and id(n.inputs[0]) in ghost:
            fs, xs, _, _ = _data_sig(n)
            entries.append((fs,))
        else:
            fs, xs, _, _ = _family_sig(n)
            entries.append((fs,) + tuple(new[i.mark] for i in n.inputs))
        nodes.append(n)
        ints.extend(xs)
    outs = tuple(new[r.mark] for r in roots)
    chk = tuple(new[c.mark] for c in checks)
    if -1 in outs:
        return None
    key = (device, tuple(entries), outs, chk)
    return key, np.asarray(ints, dtype=np.int64), nodes


class _Family:
    __slots__ = ("hist", "templates")

    def __init__(self):
        self.hist = []          # the last two integer vectors seen
        self.templates = []


class _Template:
    """The family's integers as K*s + C, s being the integer at position `ref` (K[ref] == 1)."""
    __slots__ = ("K", "C", "ref", "exes", "bad", "skeleton", "grows", "contracted")

    def __init__(self, K, C, ref):
        self.K, self.C, self.ref = K, C, ref
        self.exes = {}
        self.bad = False
        self.skeleton = None
        self.grows = False      # a loop cut into pieces (cuts.py): larger buckets
        self.contracted = None  # (grows) whether a contraction works on a padded size

    def match(self, V):
        s = int(V[self.ref])
        if V.shape == self.C.shape and np.array_equal(V, self.K * s + self.C):
            return s
        return None


def _infer(V0, V1, V2, two=False):
    """A template through V1 and V2 (the differences in one ratio per integer) that V0 also
    satisfies (unless `two`: V1 and V2 alone), or None."""
    D = V2 - V1
    nz = np.flatnonzero(D)
    if not len(nz):
        return None
    step = int(D[nz[np.argmin(np.abs(D[nz]))]])
    if np.any(D % step):
        return None
    K = D // step
    ones = np.flatnonzero(K == 1)
    if not len(ones):
        return None
    ref = int(ones[0])
    C = V2 - K * int(V2[ref])
    tpl = _Template(K, C, ref)
    if not two and tpl.match(V0) is None or tpl.match(V1) is None:
        return None
    return tpl


def lookup(key, V, grows=False):
    """(template, s) for this graph's integers, or None (compile it exactly).  `grows`: the
    graph is a piece of a loop cut where it grows (cuts.py): its second graph already
    defines the template (the cut found the repetition), and its buckets are larger."""
    fam = _families.get(key)
    if fam is None:
        fam = _families[key] = _Family()
        if len(_families) > _MAX_FAMILIES:
            _families.popitem(last=False)
    else:
        _families.move_to_end(key)
    for tpl in fam.templates:
        s = tpl.match(V)
        if s is not None:
            return (None if tpl.bad else tpl), s
    found = None
    if grows and fam.hist:
        tpl = _infer(fam.hist[-1], fam.hist[-1], V, two=True)
        if tpl is not None:
            tpl.grows = True
    elif len(fam.hist) == 2:
        tpl = _infer(fam.hist[0], fam.hist[1], V)
    else:
        tpl = None
    if tpl is not None:
        fam.templates.append(tpl)
        del fam.templates[:-4]
        found = (tpl, tpl.match(V))
    fam.hist.append(V)
    del fam.hist[:-2]
    return found


def bucket_for(s, grows=False, contracted=False):
    b, f = ((_CONTRACTED_MIN_BUCKET, _CONTRACTED_FACTOR) if contracted else (GROW_MIN_BUCKET, 2)) \
        if grows else (_MIN_BUCKET, 2)
    while b < s:
        b *= f
    return b


def _contracted(skel):
    """Whether a contraction (a matmul, a convolution, a recurrence) of the program works on a
    size that follows the length."""
    for op, _a, shape, _d, ins in skel:
        if op.name in _CONTRACTIONS and (_syms(shape) or any(_syms(skel[i][2]) for i in ins)):
            return True
    return False


# ---- the padded program -----------------------------------------------------------------------
def _rebuild(x, it, K, C):
    if x is _INT:
        p = next(it)
        return int(C[p]) if K[p] == 0 else Sym(K[p], C[p])
    if type(x) is tuple:
        return tuple(_rebuild(e, it, K, C) for e in x)
    return x


def _skeleton(tpl, nodes):
    """Per family node: (prim, attrs, shape, dtype, input positions) with Sym where the
    integer follows the length (an unpad leaf is a data leaf here)."""
    out, pos = [], 0
    K, C = tpl.K, tpl.C
    where = {id(n): j for j, n in enumerate(nodes)}
    for n in nodes:
        fed = n.op is UNPAD and n.inputs[0].op is ir.DATA
        leaf = fed or n.op is ir.DATA or n.op is ir.SCALAR
        _, xs, shape, attrs = _data_sig(n) if fed else _family_sig(n)
        it = iter(range(pos, pos + len(xs)))
        shape = _rebuild(shape, it, K, C)
        attrs = () if leaf else _rebuild(attrs, it, K, C)
        pos += len(xs)
        if _shrinks(shape):
            raise Unsupported("a size that shrinks as the length grows")
        op = ir.DATA if fed else n.op
        out.append((op, attrs, shape, n.dtype,
                    () if leaf else tuple(where[id(i)] for i in n.inputs)))
    return out


def _shrinks(x):
    if isinstance(x, Sym):
        return x.k < 0
    return type(x) is tuple and any(_shrinks(e) for e in x)


def _syms(x):
    if isinstance(x, Sym):
        return True
    if type(x) is tuple:
        return any(_syms(e) for e in x)
    return False


class _Ctx:
    """S: the bucket; s: the traced length; step: the graph updates tensors in place (a
    training step); grows: a piece of a loop cut where it grows (cuts.py)."""
    __slots__ = ("S", "s", "step", "grows")

    def __init__(self, S, s, step=False, grows=False):
        self.S, self.s, self.step, self.grows = S, s, step, grows

    def phys(self, shape):
        return tuple(d.phys(self.S) if isinstance(d, Sym) else d for d in shape)

    def val(self, d):
        """A size or attribute's value: an int, or the traced k*s + c."""
        return d.k * self.s + d.c if isinstance(d, Sym) else d

    def valid(self, shape, axes=None):
        """True on the logical region of a padded array (broadcastable), or None if no axis
        of `axes` is padded."""
        phys = self.phys(shape)
        m = None
        for ax, d in enumerate(shape):
            if isinstance(d, Sym) and (axes is None or ax in axes):
                sh = [1] * len(shape)
                sh[ax] = phys[ax]
                io = lax.broadcasted_iota(jnp.int32, tuple(sh), ax) < self.val(d)
                m = io if m is None else m & io
        return m


def logical_index(ctx, shape):
    """uint32, of the padded shape: each element's flat (row-major) position in the logical
    shape (the padding's positions are garbage)."""
    phys = ctx.phys(shape)
    idx, mult = jnp.zeros(phys, jnp.uint32), jnp.uint32(1)
    for ax in reversed(range(len(shape))):
        io = lax.broadcasted_iota(jnp.uint32, phys, ax)
        idx = idx + io * mult
        mult = mult * jnp.asarray(ctx.val(shape[ax]), jnp.uint32)
    return idx


def _fill(x, ctx, shape, axes, value):
    m = ctx.valid(shape, axes)
    return x if m is None else jnp.where(m, x, jnp.asarray(value, x.dtype))


def _lowest(dt, low):
    if jnp.issubdtype(dt, jnp.floating):
        return -jnp.inf if low else jnp.inf
    if dt == jnp.bool_:
        return not low
    info = jnp.iinfo(dt)
    return info.min if low else info.max


def rule_elementwise(ctx, op, a, shape, ins, vals):
    if _syms(a):
        raise Unsupported(op.name)
    return op.lower(a, *vals)


def rule_reduce(fill_low):
    def rule(ctx, op, a, shape, ins, vals):
        axes, x = a[0], vals[0]
        if _syms(a):
            raise Unsupported(op.name)
        xs = ins[0]
        ax = range(len(xs)) if axes is None else (axes if type(axes) is tuple else (axes,))
        ax = {d % len(xs) for d in ax} if xs else set()
        if fill_low is None:
            x = _fill(x, ctx, xs, ax, 0)
        else:
            x = _fill(x, ctx, xs, ax, _lowest(x.dtype, fill_low))
        return op.lower(a, x)
    return rule


def rule_softmax(ctx, op, a, shape, ins, vals):
    if _syms(a):
        raise Unsupported(op.name)
    xs = ins[0]
    x = _fill(vals[0], ctx, xs, {a[0] % len(xs)}, -jnp.inf)
    return op.lower(a, x)


def rule_last_static(k_of):
    """linear / layer_norm: the trailing k axes are contracted or normalised: static only."""
    def rule(ctx, op, a, shape, ins, vals):
        k = k_of(a)
        if _syms(a) or any(_syms(s) for s in ins[1:]) or _syms(ins[0][len(ins[0]) - k:]):
            raise Unsupported(op.name)
        return op.lower(a, *vals)
    return rule


def rule_matmul(ctx, op, a, shape, ins, vals):
    xs, ys = ins
    if len(xs) < 2 or len(ys) < 2:
        if any(_syms(s) for s in ins):
            raise Unsupported("matmul of a vector with a padded length")
        return op.lower(a, *vals)
    x, y = vals
    if isinstance(xs[-1], Sym):      # a padded contraction: zero both sides of it
        x = _fill(x, ctx, xs, {len(xs) - 1}, 0)
        y = _fill(y, ctx, ys, {len(ys) - 2}, 0)
    return op.lower(a, x, y)


def rule_batch(n_batched, window=False, shape_attr=None):
    """An op whose operands' dim 0 is an independent batch (convolutions, pooling and their
    gradients): padded along dim 0 only, it runs as is (padding rows stay in padding
    rows); when the result has no padded dim (a weight's gradient sums over the batch) the
    operands' padding is zeroed first.  `window`: attrs (kind, dims, strides, padding) must
    leave dim 0 alone; `shape_attr`: the attribute holding a padded operand's shape."""
    def only_dim0(s):
        return not _syms(tuple(s)[1:])

    def rule(ctx, op, a, shape, ins, vals):
        if shape_attr is not None and only_dim0(a[shape_attr]):
            a = a[:shape_attr] + (ctx.phys(a[shape_attr]),) + a[shape_attr + 1:]
        if _syms(a) or (window and (a[1][0] != 1 or a[2][0] != 1 or
                                    tuple(a[3][0]) != (0, 0))):
            raise Unsupported(op.name + " with a padded window or size")
        if not _syms(shape):
            vals = [_fill(v, ctx, s, None, 0) for v, s in zip(vals, ins)]
        elif not only_dim0(shape) or not all(only_dim0(s) for s in ins[:n_batched]) or \
                any(_syms(s) for s in ins[n_batched:]):
            raise Unsupported(op.name + " over a padded dim other than the batch")
        return op.lower(a, *vals)
    return rule


def _einsum_letters(spec, ndims):
    lhs, out = spec.split("->")
    subs = lhs.split(",")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in spec]
    n_ell = max((nd - len(sb.replace("...", "")) for sb, nd in zip(subs, ndims) if "..." in sb),
                default=0)
    ell = "".join(free[:n_ell])
    res = []
    for sb, nd in zip(subs, ndims):
        if "..." in sb:
            k = nd - len(sb.replace("...", ""))
            sb = sb.replace("...", ell[n_ell - k:])
        res.append(sb)
    return res, out.replace("...", ell)


def rule_einsum(ctx, op, a, shape, ins, vals):
    if _syms(a):
        raise Unsupported(op.name)
    subs, out = _einsum_letters(a[0], [len(s) for s in ins])
    vals = list(vals)
    for j, (sb, xs) in enumerate(zip(subs, ins)):
        axes = {i for i, (c, d) in enumerate(zip(sb, xs)) if c not in out and isinstance(d, Sym)}
        if axes:
            vals[j] = _fill(vals[j], ctx, xs, axes, 0)
    return op.lower(a, *vals)


def rule_reshape(ctx, op, a, shape, ins, vals):
    xs, ys = ins[0], a[0]
    sx = [d for d in xs if isinstance(d, Sym)]
    sy = [d for d in ys if isinstance(d, Sym)]

    def segments(shp):
        seg, p = [], 1
        for d in shp:
            if isinstance(d, Sym):
                seg.append(p)
                p = 1
            else:
                p *= d
        return seg + [p]
    if sx == sy and segments(xs) == segments(ys):
        # lengths map one to one with equal static products between them: a plain reshape
        return jnp.reshape(vals[0], ctx.phys(ys))
    return _regather(ctx, vals[0], xs, ys)


def _regather(ctx, x, xs, ys):
    """A reshape that merges or splits a padded length ((B, T, V) -> (B*T, V)): the valid
    elements are gathered to the leading region of the result, in the logical (row-major)
    order, so every rule downstream sees a padded array as usual."""
    out_shape = ctx.phys(ys)
    inner = 1       # the trailing static dims both shapes share move as whole rows
    while xs and ys and not isinstance(xs[-1], Sym) and xs[-1] == ys[-1]:
        inner *= xs[-1]
        xs, ys = xs[:-1], ys[:-1]
    px, py = ctx.phys(xs), ctx.phys(ys)
    rows = x.reshape((int(np.prod(px, dtype=np.int64)), inner))
    rem = jnp.arange(int(np.prod(py, dtype=np.int64)), dtype=jnp.int32)
    # each result row's logical row-major position, and whether it is a real one
    ok, pos, mult = True, 0, 1
    for d, p in zip(reversed(ys), reversed(py)):
        o, rem = rem % p, rem // p
        n = ctx.val(d)
        ok = ok & (o < n)
        pos, mult = pos + o * mult, mult * n
    # that position's row in the padded input
    src, mult = 0, 1
    for d, p in zip(reversed(xs), reversed(px)):
        n = ctx.val(d)
        src, pos, mult = src + (pos % n) * mult, pos // n, mult * p
    return jnp.take(rows, jnp.where(ok, src, 0), axis=0).reshape(out_shape)


def rule_broadcast_to(ctx, op, a, shape, ins, vals):
    return jnp.broadcast_to(vals[0], ctx.phys(a[0]))


def rule_transpose(ctx, op, a, shape, ins, vals):
    if _syms(a):
        raise Unsupported(op.name)
    return op.lower(a, *vals)


def rule_slice(ctx, op, a, shape, ins, vals):
    starts, stops, steps = a
    xs = ins[0]
    if not any(isinstance(d, Sym) for d in starts + stops + xs):
        return op.lower(a, *vals)
    if any(k != 1 for k in steps):
        raise Unsupported("a strided slice next to a padded length")
    S = ctx.S
    st_vals, sizes = [], []
    for d, b, e, k, size in zip(xs, starts, stops, steps, shape):
        if isinstance(b, Sym) and b.k < 0:
            raise Unsupported("a slice start that shrinks as the length grows")
        phys_out = size.phys(S) if isinstance(size, Sym) else size
        bk, bc = (b.k, b.c) if isinstance(b, Sym) else (0, b)
        # the largest start plus the physical size must stay inside the physical input
        dk, dc = (d.k, d.c) if isinstance(d, Sym) else (0, d)
        ok_k = bk + (size.k if isinstance(size, Sym) else 0) - dk
        ok_c = bc + (size.c if isinstance(size, Sym) else size) - dc
        if ok_k * S + ok_c > 0:
            if ok_k > 0:
                raise _Cap((-ok_c) // ok_k)
            raise Unsupported("a slice running past the padded input")
        st_vals.append(ctx.val(b))
        sizes.append(phys_out)
    return lax.dynamic_slice(vals[0], [jnp.asarray(v, jnp.int32) for v in st_vals], sizes)


def rule_concatenate(ctx, op, a, shape, ins, vals):
    axis = a[0]
    if not isinstance(shape[axis], Sym) and not any(isinstance(s[axis], Sym) for s in ins):
        return op.lower(a, *vals)
    out = jnp.zeros(ctx.phys(shape), vals[0].dtype)
    off = 0
    for xs, v in zip(ins, vals):
        idx = [0] * len(shape)
        idx[axis] = off
        out = lax.dynamic_update_slice(out, v.astype(out.dtype),
                                       [jnp.asarray(i, jnp.int32) for i in idx])
        off = off + ctx.val(xs[axis])
    return out


def rule_index(ctx, op, a, shape, ins, vals):
    spec = a[0]
    xs = ins[0]
    x, tensors = vals[0], list(vals[1:])
    out, dim, t = [], 0, 0
    n_real = sum(1 for it in spec if it[0] in "sit")
    for it in spec:
        k = it[0]
        if k == "e":
            for _ in range(len(xs) - n_real):
                out.append(slice(None))
                dim += 1
            continue
        if k == "n":
            out.append(None)
            continue
        d = xs[dim]
        if k == "s":
            _, b, e, st = it
            if isinstance(d, Sym):
                if b != 0 or e != d or st != 1:
                    raise Unsupported("a partial slice of a padded length inside indexing")
                out.append(slice(None))
            elif _syms(it):
                raise Unsupported("indexing with a padded bound")
            else:
                out.append(slice(b, e, st))
        elif k == "i":
            if isinstance(d, Sym) or _syms(it):
                raise Unsupported("an integer index into a padded length")
            out.append(it[1])
        else:
            v = tensors[t]
            if isinstance(d, Sym):     # wrap negatives by the logical size, not the physical
                v = jnp.where(v < 0, v + ctx.val(d), v)
            out.append(v)
            t += 1
        dim += 1
    return x[tuple(out)]


def rule_arange(ctx, op, a, shape, ins, vals):
    start, end, step, n, d = a
    if isinstance(start, Sym) or isinstance(step, Sym) or not isinstance(n, Sym):
        if _syms(a):
            raise Unsupported(op.name)
        return op.lower(a)
    m = n.phys(ctx.S)
    if d.kind == "f":
        return op.lower((start, start + step * m, step, m, d))
    return (start + step * jnp.arange(m, dtype=d.np)).astype(d.np)


def rule_full(ctx, op, a, shape, ins, vals):
    if _syms(a[1:]):
        raise Unsupported(op.name)
    return op.lower((ctx.phys(a[0]),) + tuple(a[1:]), *vals)


def rule_tri(ctx, op, a, shape, ins, vals):
    if _syms(a):
        raise Unsupported(op.name)
    return op.lower(a, *vals)


def rule_check_range(ctx, op, a, shape, ins, vals):
    lo, hi, ignore, dt = a
    lo, hi = ctx.val(lo), ctx.val(hi)
    out = dt.np
    idx = vals[0]
    if idx.size == 0:
        return jnp.zeros((2,), out)
    x = idx.astype(out)
    m = ctx.valid(ins[0])
    keep = jnp.ones(x.shape, bool) if m is None else jnp.broadcast_to(m, x.shape)
    if ignore is not None:
        keep = keep & (x != ignore)
    mx = jnp.max(jnp.where(keep, x, jnp.iinfo(out).min))
    mn = jnp.min(jnp.where(keep, x, jnp.iinfo(out).max))
    over = jnp.any(keep) & (mx >= hi)
    bad = over | (jnp.any(keep) & (mn < lo))
    return jnp.stack([bad.astype(out), jnp.where(over, mx, mn).astype(out)])


def rule_check_nonzero(ctx, op, a, shape, ins, vals):
    out = a[0].np
    y = vals[0]
    if y.size == 0:
        return jnp.zeros((2,), out)
    m = ctx.valid(ins[0])
    bad = (y == 0) if m is None else ((y == 0) & m)
    return jnp.stack([jnp.any(bad).astype(out), jnp.zeros((), out)])




def padded_shape(shape):
    return any(isinstance(d, Sym) for d in shape)


def root_shapes(tpl, nodes, outs):
    """The shapes (with Sym) of the graph's outputs."""
    if tpl.skeleton is None:
        tpl.skeleton = _skeleton(tpl, nodes)
    return [tpl.skeleton[j][2] for j in outs]


def leaf_nodes(tpl, nodes):
    """The graph's nodes that are the program's leaf arguments, in argument order."""
    if tpl.skeleton is None:
        tpl.skeleton = _skeleton(tpl, nodes)
    return [n for n, _ in _leaves(tpl.skeleton, nodes)]


def prepare(tpl, s, nodes, outs, chk, device, step=False, donate=(), guards=()):
    """(executable, arguments, output shapes with Sym (None: not padded), compile seconds or
    None on a hit) for length `s`, or None when no bucket can hold it.  Raises Unsupported
    for a graph no bucket can run.  `step`: the graph updates tensors in place (a training
    step); `donate`: leaf argument positions whose buffers the program may reuse; `guards`:
    (output, leaf argument) pairs of in-place updates that keep the leaf's value when a
    check fails."""
    if tpl.skeleton is None:
        tpl.skeleton = _skeleton(tpl, nodes)
    skel = tpl.skeleton
    if tpl.grows and tpl.contracted is None:
        tpl.contracted = _contracted(skel)
    S = bucket_for(s, tpl.grows, tpl.contracted)
    compile_s = None
    for _ in range(3):
        got = tpl.exes.get((S, donate, guards))
        if got is not None:
            break
        specs = [_spec(leaf_value(n), shp, S) for n, shp in _leaves(skel, nodes)]
        packs = _pack(skel, nodes)
        if packs:
            specs.append(tuple(jax.ShapeDtypeStruct(p.shape, p.dtype) for p in packs))
        specs.append(jax.ShapeDtypeStruct((), jnp.int32))
        try:
            exe, compile_s = build(tpl, nodes, outs, chk, S, device, specs, step, donate,
                                   guards)
        except _Cap as cap:
            if cap.limit < s or cap.limit >= S:
                return None
            S = cap.limit
            continue
        exe.bucket = S
        # the output shapes (None: not padded) and each leaf argument's node and padded
        # shape (None: passed as it is), fixed for the bucket
        got = tpl.exes[(S, donate, guards)] = (
            exe, [skel[j][2] if padded_shape(skel[j][2]) else None for j in outs],
            [(j, e[2] if _syms(e[2]) else None) for j, e in enumerate(skel)
             if e[0] is ir.DATA])
        break
    else:
        return None
    exe, out_shapes, plan = got
    args = [leaf_value(nodes[j]) if shp is None else
            _padded_leaf(leaf_value(nodes[j]), nodes[j].shape, shp, S, device)
            for j, shp in plan]
    packs = _pack(skel, nodes)
    if packs:
        args.append(packs if device.type == "cpu" else     # (numpy: cache.scalar_pack)
                    tuple(jax.device_put(p, device.jax_device) for p in packs))
    args.append(np.asarray(s, np.int32))
    return exe, args, out_shapes, compile_s


def _phys(shape, S):
    return tuple(d.phys(S) if isinstance(d, Sym) else d for d in shape)


def _spec(value, shape, S):
    if type(value) is tuple:        # a multi-output node's results (an RNN's scan)
        return tuple(_spec(v, s, S) for v, s in zip(value, shape))
    return jax.ShapeDtypeStruct(_phys(shape, S), value.dtype)


def _padded_leaf(value, logical, shape, S, device):
    if type(value) is tuple:
        return tuple(_padded_leaf(v, lg, s, S, device)
                     for v, lg, s in zip(value, logical, shape))
    return padded(value, logical, _phys(shape, S), device)


def _leaves(skel, nodes):
    """(node, shape with Sym) of each data leaf, in graph order."""
    return [(n, e[2]) for e, n in zip(skel, nodes) if e[0] is ir.DATA]


def _pack(skel, nodes):
    """The graph's host scalars, one array per dtype (by name), in graph order."""
    by = {}
    for (op, _a, _s, d, _i), n in zip(skel, nodes):
        if op is ir.SCALAR:
            by.setdefault(d, []).append(n.value)
    return tuple(np.asarray(v, dtype=d.np) for d, v in sorted(by.items(),
                                                             key=lambda kv: kv[0].name))


def build(tpl, nodes, outs, chk, S, device, arg_specs, step=False, donate=(), guards=()):
    """A compiled program for bucket S: arguments are the leaves (padded), the packed host
    scalars and s; outputs the roots (padded) and, with checks, their flags."""
    if tpl.skeleton is None:
        tpl.skeleton = _skeleton(tpl, nodes)
    skel = tpl.skeleton
    leaf_pos = [j for j, (op, *_r) in enumerate(skel) if op is ir.DATA]
    scalar_map = scalar_layout([(j, e[3]) for j, e in enumerate(skel) if e[0] is ir.SCALAR])
    program = []
    for j, (op, attrs, shape, dt, ins) in enumerate(skel):
        if op is ir.DATA or op is ir.SCALAR:
            continue
        in_shapes = tuple(skel[i][2] for i in ins)
        anysym = _syms(shape) or _syms(attrs) or any(_syms(s) for s in in_shapes)
        rule = None
        if anysym:
            rule = op.bucket or (rule_elementwise if op.elementwise else None)
            if rule is None:
                e = Unsupported(f"{op.name} (no padding rule)")
                e.node = nodes[j]
                raise e
        program.append((op, attrs, shape, in_shapes, rule, ins, j,
                        None if op.multi else dt.np))
    program = _batch_draws(program, skel, device)

    def run(*flat):
        env = load_arguments(len(skel), leaf_pos, scalar_map, flat)
        ctx = _Ctx(S, flat[-1], step, tpl.grows)
        for e in program:
            if type(e) is Draws:
                e.run(env)
                continue
            op, attrs, shape, in_shapes, rule, ins, j, dt = e
            args = [env[i] for i in ins]
            try:
                v = op.lower(attrs, *args) if rule is None else \
                    rule(ctx, op, attrs, shape, in_shapes, args)
            except Unsupported as e:
                e.node = nodes[j]
                raise
            if dt is not None and v.dtype != dt:
                v = v.astype(dt)
            env[j] = v
        res = [env[j] for j in outs]
        if chk:
            flags = jnp.stack([env[j] for j in chk])
            if guards:      # a failed check: in-place updates keep the old values
                ok = jnp.all(flags[:, 0] == 0)
                for i, p in guards:
                    res[i] = jnp.where(ok, res[i], flat[p])
            res.append(flags)
        return tuple(res)

    t0 = time.perf_counter()
    jitted = jax.jit(run, out_shardings=make_single_device_sharding(device.jax_device),
                     donate_argnums=donate)
    compiled = lower_for(jitted, device, arg_specs).compile()
    exe = Executable(compiled, len(outs), donate)
    exe.n_checks = len(chk)
    exe.guarded = frozenset(i for i, _ in guards) if chk else frozenset()
    exe.stats = _stats(compiled, len(arg_specs), len(outs), donate,
                       [getattr(arg_specs[j], "nbytes", 0) for j in donate])
    exe.need_bytes = max(0, exe.stats.get("output_bytes", 0) + exe.stats.get("temp_bytes", 0))
    return exe, time.perf_counter() - t0


def _batch_draws(program, skel, device):
    """The program with its draws of fixed shapes batched (lowering.draw_groups)."""
    cands = [(e[6], e[0], e[1], e[5][0], e[5][1]) for e in program
             if e[0].batch is not None and e[4] is None and len(e[5]) == 2 and
             all(skel[i][0] is ir.DATA or skel[i][0] is ir.SCALAR for i in e[5])]
    return place_draws(program, draw_groups(cands, getattr(device, "type", None) == "cpu"),
                       lambda e: e[6])


# ---- arguments and results ----------------------------------------------------------------------
_pads: dict = {}


def padded(value, logical, phys, device):
    """`value` (a buffer whose leading region of shape `logical` is the data) as an array of
    shape `phys` (zeros beyond): sliced/padded on the host for CPU, by a small cached program
    elsewhere."""
    if tuple(value.shape) == tuple(phys):
        return value
    if device.type == "cpu":       # (the executable takes the numpy array as it is)
        arr = np.asarray(value)[tuple(slice(0, d) for d in logical)]
        out = np.zeros(phys, arr.dtype)
        out[tuple(slice(0, d) for d in logical)] = arr
        return out
    key = (tuple(value.shape), tuple(logical), tuple(phys), value.dtype)
    fn = _pads.get(key)
    if fn is None:
        def fn(v, _l=tuple(logical), _p=tuple(phys)):
            v = lax.slice(v, (0,) * v.ndim, _l)
            return jnp.pad(v, [(0, p - n) for n, p in zip(_l, _p)])
        fn = _pads[key] = jax.jit(fn)
    return fn(value)


def exact_parts(values, shapes):
    """A multi-output node's padded results cut to their logical shapes."""
    return tuple(v if tuple(v.shape) == tuple(shp) else
                 lax.slice(v, (0,) * v.ndim, tuple(shp)) for v, shp in zip(values, shapes))


def unpad(node, value):
    """Make an output node the lazy logical slice of its padded buffer."""
    leaf = ir.data_node(value, tuple(value.shape), node.dtype, node.device)
    node.op = UNPAD
    node.inputs = (leaf,)
    node.attrs = (tuple(node.shape),)
    node.value = None
    node.sig = ir.intern_sig((UNPAD, node.attrs, node.shape, node.dtype, 1))


def leaf_value(n):
    """The buffer behind a family leaf (a data node, or an unpad's padded buffer)."""
    return n.inputs[0].value if n.op is UNPAD else n.value


def clear() -> None:
    _families.clear()
    _pads.clear()
