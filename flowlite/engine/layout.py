"""Strided layouts: where a view's elements live in its root's storage.

Layer: engine — imports nothing of flowlite. A view's layout is (offset, strides) in units of
its root's elements, the root being laid out contiguously (row-major) — exactly PyTorch's
storage model, so the same rules decide what is a view and what a write may touch. `views`
derives layouts op by op; the `view_read` / `view_write` primitives lower a layout to the
cheapest XLA form (`plan`): a reshape, a static slice (+ transpose), or a gather/scatter through
an in-graph index.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np


def contiguous_strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def is_contiguous(shape, strides) -> bool:
    """PyTorch's is_contiguous: strides of the dims that matter (size > 1) are row-major."""
    acc = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s != 1:
            if st != acc:
                return False
            acc *= s
    return True


@lru_cache(maxsize=4096)
def view_strides(old_shape, old_strides, new_shape):
    """Strides of `old.view(new_shape)` — or None when PyTorch's view would refuse
    (a new dim spans two non-mergeable old dims).  PyTorch's computeStride rule: walk the
    old dims from the back in chunks that are contiguous among themselves."""
    if numel(old_shape) == 0 or not old_shape:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[d]
        if d == 0 or (old_shape[d - 1] != 1 and old_strides[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = old_strides[d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


# ---- derived layouts, one rule per view kind ------------------------------------------------
def slice_layout(off, strides, starts, steps):
    off += sum(b * s for b, s in zip(starts, strides))
    return off, tuple(s * k for s, k in zip(strides, steps))


def permute_layout(off, strides, perm):
    return off, tuple(strides[p] for p in perm)


def expand_layout(off, strides, old_shape, new_shape):
    lead = len(new_shape) - len(old_shape)
    st = [0] * lead
    for o, n, s in zip(old_shape, new_shape[lead:], strides):
        st.append(s if o == n else 0)
    return off, tuple(st)


def diagonal_shape(shape, offset, d1, d2):
    n1, n2 = shape[d1], shape[d2]
    n = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    return tuple(s for i, s in enumerate(shape) if i not in (d1, d2)) + (n,)


def diagonal_layout(off, strides, shape, offset, d1, d2):
    if diagonal_shape(shape, offset, d1, d2)[-1] > 0:
        off += offset * strides[d2] if offset >= 0 else -offset * strides[d1]
    st = tuple(s for i, s in enumerate(strides) if i not in (d1, d2))
    return off, st + (strides[d1] + strides[d2],)


def unfold_shape(shape, dim, size, step):
    n = (shape[dim] - size) // step + 1
    return shape[:dim] + (n,) + shape[dim + 1:] + (size,)


def unfold_layout(off, strides, dim, step):
    st = strides[:dim] + (strides[dim] * step,) + strides[dim + 1:] + (strides[dim],)
    return off, st


# ---- what a layout touches ------------------------------------------------------------------
def index_map(shape, off, strides):
    """The root element each view element lives at (numpy, trace time only)."""
    idx = np.full(shape, off, dtype=np.int64)
    for d, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s:
            r = [1] * len(shape)
            r[d] = n
            idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(r)
    return idx


@lru_cache(maxsize=4096)
def self_overlapping(shape, off, strides) -> bool:
    """True when two elements of the layout share one root element (expanded views, unfold
    windows that overlap, as_strided)."""
    if numel(shape) == 0:
        return False
    dims = sorted((s, n) for n, s in zip(shape, strides) if n > 1)
    if not dims:
        return False
    if dims[0][0] == 0:
        return True
    reach = 0
    for s, n in dims:            # sufficient test: each stride jumps past everything before it
        if s <= reach:
            break
        reach += s * (n - 1)
    else:
        return False
    m = index_map(shape, off, strides).ravel()
    return np.unique(m).size != m.size


def overlaps(shape, strides) -> bool:
    """PyTorch's refusal test for writes (MemOverlap::Yes): a dim of size > 1 with stride 0
    (an expanded view).  Other overlaps (unfold windows, as_strided) PyTorch lets through;
    an elementwise in-place op then writes the same value to each shared element."""
    return numel(shape) > 0 and any(s == 0 and n > 1 for n, s in zip(shape, strides))


@lru_cache(maxsize=4096)
def plan(root_shape, shape, off, strides):
    """How to lower a layout: ("identity",), ("box", starts, limits, steps, box_dims, perm)
    or ("gather",).  A box is a static slice of the root whose kept dims, in root order,
    are the view's non-trivial dims permuted by `perm`; broadcast (stride-0) dims are not
    boxes."""
    mapped = [(i, n, s) for i, (n, s) in enumerate(zip(shape, strides)) if n > 1]
    if off == 0 and numel(shape) == numel(root_shape) and is_contiguous(shape, strides):
        return ("identity",)
    if any(s == 0 for _, _, s in mapped) or numel(shape) == 0:
        return ("gather",)
    cs = contiguous_strides(root_shape)
    total = numel(root_shape)
    if not 0 <= off < max(total, 1):
        return ("gather",)
    starts = [(off // c) % n if n else 0 for c, n in zip(cs, root_shape)]
    steps = [1] * len(root_shape)
    sizes = [1] * len(root_shape)
    owner = {}
    for i, n, s in mapped:
        cands = [d for d in range(len(root_shape)) if root_shape[d] > 1 and cs[d] <= s]
        if not cands:
            return ("gather",)
        d = max((c for c in cands if s % cs[c] == 0), key=lambda c: cs[c], default=None)
        if d is None or d in owner:
            return ("gather",)
        k = s // cs[d]
        if starts[d] + (n - 1) * k >= root_shape[d]:
            return ("gather",)
        owner[d] = i
        steps[d], sizes[d] = k, n
    limits = [b + (n - 1) * k + 1 for b, n, k in zip(starts, sizes, steps)]
    dims = sorted(owner)                       # root dims kept, in root order
    perm = tuple(sorted(range(len(dims)), key=lambda j: owner[dims[j]]))
    return ("box", tuple(starts), tuple(limits), tuple(steps), tuple(dims), perm)
