"""The executable cache: graph structures and their executables, keyed by graph.

Layer: engine — imports buckets, exec_store, ir, lowering, matmul_precision, metrics, phases,
rollback. A graph key maps to a _Structure (what every run of that graph fixes: donatable
leaves, check masks, packed host scalars) holding its executables by donation set, least
recently used first, at most `set_cache_limit()` structures; a key recorded with the ops maps
straight to its structure (_by_stream). JAX's persistent compilation cache is set up under
~/.cache/flowlite/xla (FLOWLITE_CACHE_DIR; "off" disables it), and in it flowlite's own store of
executables keyed by graph (exec_store: a second process loads them without tracing).
clear_cache() drops the in-memory ones and every cache registered with on_clear().
"""
from __future__ import annotations

import collections
import os
import sys

import jax

from . import buckets, exec_store, ir, matmul_precision, metrics
from .lowering import pack_groups, pack_values
from .phases import clock, note_h2d
from .rollback import _replaced_input

_DATA = ir.DATA
_getrefcount = sys.getrefcount


# graph key -> _Structure (its executables by donation set), least recently used first
_cache: collections.OrderedDict = collections.OrderedDict()


# at most this many graph structures stay compiled (a run uses a handful; eager mode one per
# op signature); FLOWLITE_CACHE_LIMIT or set_cache_limit() change it
_limit = {"structures": max(1, int(os.environ.get("FLOWLITE_CACHE_LIMIT", "") or 256))}


def _setup_persistent_cache():
    """JAX's persistent compilation cache under a flowlite directory, on by default."""
    path = os.environ.get("FLOWLITE_CACHE_DIR")
    if path is None:
        path = os.path.join(os.path.expanduser("~"), ".cache", "flowlite", "xla")
    if path in ("", "0", "off", "none"):
        return
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except Exception:  # read-only home, old jax: run without the persistent cache
        return
    # flowlite's own store of executables, keyed by the graph: a hit skips JAX's tracing
    exec_store.configure(path)
    try:
        from jax import monitoring

        def _on_event(event, **kw):
            if event == "/jax/compilation_cache/cache_hits":
                metrics._C["persistent_cache_hits"] += 1
        monitoring.register_event_listener(_on_event)
    except Exception:
        pass


_setup_persistent_cache()


def _check_masks(order, roots, checks):
    """Per root, a bitmask of the checks (by position) whose failure fails it: those it is
    computed from (the checked op's result) or whose index tensor it reads (the op's
    backward reads the index, not the result)."""
    outs, readers = {}, {}
    for i, c in enumerate(checks):
        for ref, into in ((c.check.out, outs), (c.check.index, readers)):
            n = ref() if ref is not None else None
            if n is not None:
                into[id(n)] = into.get(id(n), 0) | 1 << i
    mask = {}
    for n in order:
        m = outs.get(id(n), 0)
        for i in n.inputs:
            m |= mask.get(id(i), 0) | readers.get(id(i), 0)
        if m:
            mask[id(n)] = m
    return [mask.get(id(r), 0) for r in roots]


def _replaced_leaf(root, leaf_pos):
    """Index of the leaf this output replaces in place (see Prim.inplace), or None."""
    n = _replaced_input(root)
    return None if n is None else leaf_pos.get(id(n))


# the concrete jax.Array classes seen: a set lookup instead of jax.Array's isinstance check
_ARRAY_TYPES: set = set()


def _is_array(v) -> bool:
    if isinstance(v, jax.Array):
        _ARRAY_TYPES.add(type(v))
        return True
    return False


class _Structure:
    """What a cached graph structure fixes for every run of it: which leaves may be
    donated (an output of the same shape/dtype can reuse the buffer) and how many of the
    graph's input tuples hold each — so a cache hit checks donations without a re-count."""
    __slots__ = ("candidates", "out_sigs", "exes", "partners", "last_pack", "checked",
                 "masks", "fallible")

    def __init__(self, order, leaves, roots, checks=()):
        checked = bool(checks)
        avail = {}
        for r in roots:
            k = (r.shape, r.dtype)
            avail[k] = avail.get(k, 0) + 1
        uses = [0] * len(leaves)
        pos = {id(leaf): j for j, leaf in enumerate(leaves)}
        for n in order:
            for i in n.inputs:
                j = pos.get(id(i))
                if j is not None:
                    uses[j] += 1
        self.partners = [_replaced_leaf(r, pos) for r in roots]
        self.checked = checked
        # which checks each output is computed from (a bit per check), so a failed run
        # knows what failed without its graph; outputs that replace a leaf in place (they
        # keep the leaf's old value when a check fails) never fail
        self.masks = _check_masks(order, roots, checks) if checked else None
        self.fallible = [i for i, p in enumerate(self.partners) if p is None]
        # a graph with checks may fail after it ran: then only the outputs that replace a
        # leaf in place (updated under lax.cond(ok, ...)) give a donated buffer back, so
        # only those leaves are donated
        keep = set(self.partners) if checked else None
        groups = {}
        cands = []
        for j, leaf in enumerate(leaves):
            k = (leaf.shape, leaf.dtype)
            if k in avail and (keep is None or j in keep):
                g = groups.setdefault(k, [avail[k], 0])   # (outputs to take them, leaves)
                g[1] += 1
                cands.append((j, uses[j], g))
        # (leaf index, its reference count when only this graph holds it: the `leaves` list,
        # donatable's `leaf`, getrefcount's argument and one per input tuple of the graph;
        # the outputs its donation competes for, or None when they are enough for every leaf)
        self.candidates = [(j, 3 + n, g if g[1] > g[0] else None) for j, n, g in cands]
        self.out_sigs = [ir.intern_sig((_DATA, (), r.shape, r.dtype, 0)) for r in roots]
        self.exes = {}    # donated leaf indices -> Executable
        # (scalar values, their packed arrays, whether those are device arrays) of the last run
        self.last_pack = None

    def scalar_pack(self, scalars, device):
        """The host scalars, packed: numpy arrays the call copies in (~10 µs each, where a
        device_put costs ~140 µs on a slow CPU) while a value changes from run to run (the
        random-draw counter does every step), device arrays made once when a run repeats the
        last one's values (learning rates usually don't change from one step to the next)."""
        vals = [s.value for s in scalars]
        last = self.last_pack
        if last is not None and last[0] == vals:
            pack = last[1]
            if not last[2]:
                if getattr(device, "mesh", None) is None:
                    pack = tuple(jax.device_put(a, device.jax_device) for a in pack)
                self.last_pack = (vals, pack, True)
            return pack
        pack = _pack_scalars(scalars)
        if clock.on:
            for a in pack:
                note_h2d(a.nbytes)
        self.last_pack = (vals, pack, False)
        return pack

    def donatable(self, leaves):
        """Indices of leaves whose buffers nothing outside this graph can reach."""
        if not self.candidates:
            return ()
        left = None
        donate = []
        for j, expect, cap in self.candidates:
            leaf = leaves[j]
            # any holder beyond those counted in `expect` (a tensor, the tape) means the
            # buffer is still reachable
            if _getrefcount(leaf) != expect:
                continue
            # host data updated in place (parameters initialised on the host, PyTorch's
            # draws): uploaded now, so the first step donates it as every later step donates
            # its own outputs — one program, not a first one without donation
            v = leaf.value
            # the array itself: leaf.value, `v`, getrefcount's argument (a deleted array
            # fails the call whether donated or not)
            if (type(v) in _ARRAY_TYPES or _is_array(v)) and _getrefcount(v) == 3:
                if cap is not None:     # more such leaves than outputs to take them
                    if left is None:
                        left = {}
                    k = id(cap)
                    n = left.get(k, cap[0])
                    if n <= 0:
                        continue
                    left[k] = n - 1
                donate.append(j)
        return tuple(donate)


# graph key recorded with the ops (graph_key) -> (its structure, that structure's key in
# _cache, where the structure's leaves and host scalars sit in the stream's `ext`, nodes)
_by_stream: dict = {}


def _remember_stream(skey, stream, st, key, leaves, scalars, n_nodes):
    """Map a stream key to the walked structure, unless the stream read a node twice (a walk
    or another thread renumbered it in between): its positions would be ambiguous."""
    pos = {}
    for j, r in enumerate(stream.ext):
        n = r()
        if n is not None and pos.setdefault(id(n), j) != j:
            return
    try:
        at_leaf = tuple([pos[id(n)] for n in leaves])
        at_scalar = tuple([pos[id(n)] for n in scalars])
    except KeyError:     # (can't happen for a valid stream: every input was coded)
        return
    if len(_by_stream) >= 4 * _limit["structures"]:
        _by_stream.clear()
    _by_stream[skey] = (st, key, at_leaf, at_scalar, n_nodes)


def _pack_scalars(scalars):
    """All host scalars of a graph travel as one small array per dtype (lowering.pack_groups)."""
    return pack_values(pack_groups([s.dtype for s in scalars]), [s.value for s in scalars])


_on_clear: list = []


def on_clear(fn) -> None:
    """Call `fn()` from every clear_cache(): for caches kept above this layer (device
    constants of nn.functional, the front end's baked constants)."""
    _on_clear.append(fn)


def clear_cache() -> None:
    """Drop every compiled executable (the next sync of each graph compiles again, or loads
    it from JAX's persistent cache) and every cache registered with on_clear."""
    _cache.clear()
    _by_stream.clear()
    buckets.clear()
    for fn in _on_clear:
        fn()


# a new float32 matmul precision is baked into programs compiled from now on
matmul_precision.on_change(clear_cache)


def set_cache_limit(n: int) -> None:
    """Keep at most `n` compiled graph structures (least recently used are dropped)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_cache_limit: expected a positive int, got {n!r}")
    _limit["structures"] = n
    while len(_cache) > n:
        _cache.popitem(last=False)
        _by_stream.clear()


def executables() -> list:
    """Every cached executable, oldest first."""
    return [exe for st in _cache.values() for exe in st.exes.values()]


def cache_size() -> int:
    return len(executables())
