"""Trace-once replay: `flowlite.compile(step_fn)`.

A training step written in plain Python costs its Python tracing on every
call.  `compile` traces the first calls normally, watches the executable the
call produces, and learns where each of its inputs comes from (a function
argument, a persistent tensor such as a parameter / optimizer state / RNG key,
or a constant) and where each output goes (which tensors get rebound, what the
function returns).  Later calls with matching argument shapes/dtypes run that
executable directly, without the Python body.

Guards fall back to tracing — never to a stale result — when: argument
shapes/dtypes/devices or Python-scalar arguments change; a Python scalar the
function reads through its closure or globals changes; a module's train/eval
mode changes; a persistent input tensor changed shape/dtype; or the traced
call did not produce exactly one executable.  Optimizer hyper-parameters
(learning rates from schedulers) are re-read on every replay.
"""
from __future__ import annotations

import sys
import types
import weakref

import jax
import numpy as np

from . import executor, ir, metrics
from . import random as _random
from .tensor import Tensor

_DATA = ir.DATA
_getrefcount = sys.getrefcount


def compile(fn=None, *, warmup: int = 1):  # noqa: A001 - flowlite.compile, like torch.compile
    """Decorator/wrapper: `step = flowlite.compile(step)`."""
    if fn is None:
        return lambda f: CompiledFunction(f, warmup)
    return CompiledFunction(fn, warmup)


class _Recording:
    """What one traced call did: its single execution, with sources of inputs/outputs."""

    def __init__(self):
        self.events = []

    def __call__(self, exe, leaves, scalars, roots, owners, donate):
        self.events.append((exe, list(leaves), list(scalars), list(roots),
                            {k: list(v) for k, v in (owners or {}).items()}, donate))


class _Plan:
    __slots__ = ("exe", "sources", "scalar_src", "root_targets", "grad_targets", "ret_tree",
                 "ret_roots", "donate", "state_meta", "const_owners", "scalar_dtypes",
                 "rng_delta", "out_meta", "pack_layout")


def _leaf_arrays(flat_args):
    return [a for a in flat_args if isinstance(a, Tensor)]


class CompiledFunction:
    def __init__(self, fn, warmup=1):
        self.fn = fn
        self.warmup = max(1, int(warmup))
        self._plans = {}
        self._history = {}
        self._no_replay = set()
        self.__wrapped__ = fn
        self.replays = 0
        self.traces = 0
        self._warned_return = False

    # -- guards -----------------------------------------------------------------------------
    def _signature(self, flat, treedef):
        sig = [treedef]
        for a in flat:
            if isinstance(a, Tensor):
                n = a._node
                sig.append((n.shape, n.dtype, n.device, a.requires_grad))
            elif isinstance(a, (int, float, bool, str, type(None))):
                sig.append(("py", type(a), a))
            else:
                sig.append(("obj", id(a)))
        sig.append(self._captured())
        return tuple(sig)

    def _captured(self):
        """Values the body reads from its closure / globals (scalars, module modes)."""
        out = []
        fn = self.fn
        self_obj = getattr(fn, "__self__", None)
        code_fn = getattr(fn, "__func__", fn)
        values = []
        if self_obj is not None:
            values.append(self_obj)
        cells = getattr(code_fn, "__closure__", None) or ()
        for c in cells:
            try:
                values.append(c.cell_contents)
            except ValueError:
                pass
        g = getattr(code_fn, "__globals__", {})
        code = getattr(code_fn, "__code__", None)
        if code is not None:
            for name in _global_names(code):
                if name in g:
                    values.append(g[name])
        for v in values:
            out.append(_guard_value(v))
        if self_obj is not None:
            # a bound method reads its object's attributes: guard the plain scalar ones
            d = getattr(self_obj, "__dict__", None)
            if d:
                out.append(tuple((k, v) for k, v in d.items()
                                 if isinstance(v, (int, float, bool, str, type(None)))))
        return tuple(out)

    # -- calls --------------------------------------------------------------------------------
    def __call__(self, *args):
        flat, treedef = jax.tree_util.tree_flatten(args, is_leaf=lambda x: isinstance(x, Tensor))
        sig = self._signature(flat, treedef)
        plan = self._plans.get(sig)
        if plan is not None:
            out = self._replay(plan, flat)
            if out is not _FALLBACK:
                return out
        return self._trace(sig, flat, args)

    def _trace(self, sig, flat, args):
        self.traces += 1
        rec = _Recording()
        arg_nodes = [a._node if isinstance(a, Tensor) else None for a in flat]
        prev = self._history.get(sig)
        state_start = {}
        if prev is not None:
            for t in prev["persistent"]:
                t = t()
                if t is not None:
                    state_start.setdefault(id(t._node), t)
        from . import random as _random
        c0 = _random._counter[0]
        executor.observers.append(rec)
        try:
            result = self.fn(*args)
        finally:
            executor.observers.remove(rec)
        rec.rng = (c0, _random._counter[0] - c0)
        if sig in self._no_replay:
            return result
        info = self._analyse(rec, flat, arg_nodes, state_start, result, prev)
        if len(rec.events) > 1 and not self._warned_return:
            self._warned_return = True
            import warnings
            warnings.warn(f"flowlite.compile({getattr(self.fn, '__name__', 'fn')}): a call ran "
                          f"{len(rec.events)} executables, so it can't be replayed; keep one "
                          "sync per call (e.g. only opt.step()).", stacklevel=3)
        self._history[sig] = info
        if info.get("plan") is not None and prev is not None and prev.get("exe") is info["exe"] \
                and prev.get("scalars") == info["scalars"] and _same_consts(prev, info) \
                and prev.get("rng_delta") == info.get("rng_delta"):
            self._plans[sig] = info["plan"]
        return result

    def _analyse(self, rec, flat, arg_nodes, state_start, result, prev):
        info = {"persistent": [], "exe": None, "scalars": None, "const_ids": None, "plan": None,
                "rng_delta": rec.rng[1]}
        rng_start = rec.rng[0]
        if len(rec.events) != 1:
            return info
        exe, leaves, scalars, roots, owners, donate = rec.events[0]
        # persistent tensors: owners of outputs that survive the call
        persistent = []
        for r in roots:
            for t in owners.get(id(r), ()):
                persistent.append(weakref.ref(t))
        info["persistent"] = persistent
        info["exe"] = exe
        info["scalars"] = tuple((s.site is None, s.value if s.site is None else None)
                                for s in scalars)
        arg_index = {}
        for i, n in enumerate(arg_nodes):
            if n is not None:
                arg_index.setdefault(id(n), i)
        sources = []
        const_ids = []
        for leaf in leaves:
            k = id(leaf)
            if k in arg_index:
                sources.append(("arg", arg_index[k]))
            elif k in state_start:
                sources.append(("state", weakref.ref(state_start[k])))
            else:
                sources.append(("const", leaf))
                const_ids.append(k)
        info["const_ids"] = tuple(const_ids)
        info["leaf_refs"] = [weakref.ref(leaf) for leaf in leaves]
        if prev is None:
            return info
        # the outputs: which persistent tensors are rebound, which grads set, what is returned
        prev_objs = {id(r()) for r in prev["persistent"] if r() is not None}
        root_targets = []
        grad_targets = []
        for j, r in enumerate(roots):
            tgt = []
            for t in owners.get(id(r), ()):
                if id(t) in prev_objs:
                    tgt.append(weakref.ref(t))
            root_targets.append(tgt)
        root_index = {id(r): j for j, r in enumerate(roots)}
        for r in prev["persistent"]:
            p = r()
            if p is not None and isinstance(p.grad, Tensor) and id(p.grad._node) in root_index:
                grad_targets.append((weakref.ref(p), root_index[id(p.grad._node)]))
        ret_flat, ret_tree = jax.tree_util.tree_flatten(
            result, is_leaf=lambda x: isinstance(x, Tensor))
        ret_roots = []
        for v in ret_flat:
            if isinstance(v, Tensor):
                j = root_index.get(id(v._node))
                if j is None:
                    if v._node.op is _DATA and any(s[0] == "const" and s[1] is v._node
                                                   for s in sources):
                        ret_roots.append(("const", v._node))
                        continue
                    if not self._warned_return:
                        self._warned_return = True
                        import warnings
                        warnings.warn(
                            f"flowlite.compile({getattr(self.fn, '__name__', 'fn')}): the "
                            "function returns a tensor computed after its last sync, so each "
                            "call needs a second executable and can't be replayed. Compute "
                            "returned values before opt.step()/flowlite.sync().", stacklevel=4)
                    return info   # returns something the executable doesn't produce
                ret_roots.append(("root", j))
            else:
                ret_roots.append(("py", v))
        for s in sources:
            if s[0] == "state":
                t = s[1]()
                if t is None:
                    return info
        plan = _Plan()
        plan.exe = exe
        plan.sources = sources
        plan.scalar_dtypes = [s.dtype for s in scalars]
        plan.scalar_src = [("v", s.value) if s.site is None else
                           ("rng", s.site[1] - rng_start) if s.site[0] == "rng" else
                           ("hp",) + s.site[1:] + (_opt_key(s.site),) for s in scalars]
        plan.rng_delta = info["rng_delta"]
        plan.root_targets = root_targets
        plan.grad_targets = grad_targets
        plan.ret_tree = ret_tree
        plan.ret_roots = ret_roots
        plan.donate = donate
        plan.state_meta = [(leaf.shape, leaf.dtype) for leaf in leaves]
        from .device import default_device
        plan.out_meta = [(r.shape, r.dtype, ir.intern_sig((_DATA, (), r.shape, r.dtype, 0)),
                          r.device or default_device()) for r in roots]
        groups = {}
        for i, sc in enumerate(scalars):
            groups.setdefault(sc.dtype, []).append(i)
        plan.pack_layout = [(d.np, groups[d]) for d in sorted(groups, key=lambda d: d.name)]
        plan.const_owners = _const_owners(sources)
        info["plan"] = plan
        return info

    def _replay(self, plan, flat):
        args = []
        nodes = []
        for (kind, ref), (shape, dtype) in zip(plan.sources, plan.state_meta):
            if kind == "arg":
                t = flat[ref]
            elif kind == "state":
                t = ref()
                if t is None:
                    return _FALLBACK
            else:
                nodes.append(ref)
                args.append(ref.value)
                continue
            n = t._node
            if n.op is not _DATA:
                executor.sync("flowlite.compile: pending input before replay",
                              extra_roots=(n,))
                n = t._node
            if n.shape != shape or n.dtype is not dtype:
                return _FALLBACK
            nodes.append(n)
            args.append(n.value)
        for owner, node in plan.const_owners:
            t = owner()
            if t is not None and t._node is not node:
                return _FALLBACK
        # donated buffers must be reachable only through the tensors we rebind
        for j in plan.donate:
            n = nodes[j]
            kind, ref = plan.sources[j]
            if kind != "state":
                return _FALLBACK
            holders = 1 if ref() is not None and ref()._node is n else 0
            # nodes list + `n` + getrefcount arg + owner tensor(s)
            if _getrefcount(n) != 3 + holders:
                return _FALLBACK
            if _getrefcount(n.value) != 3:   # n.value, args list, getrefcount arg
                return _FALLBACK
        rng_base = _random._counter[0]
        if plan.scalar_src:
            scalars = []
            hp_cache = {}
            for src in plan.scalar_src:
                kind = src[0]
                if kind == "v":
                    scalars.append(src[1])
                elif kind == "rng":
                    scalars.append((rng_base + src[1]) % 4294967296)
                else:
                    opt = src[1]()
                    if opt is None:
                        return _FALLBACK
                    ck = (id(opt), src[2])
                    kh = hp_cache.get(ck)
                    if kh is None:
                        kh = hp_cache[ck] = opt._tx_for(src[2])
                    if kh[0] != src[4]:      # an option changed the update's structure
                        return _FALLBACK
                    v = kh[1][src[3]]
                    scalars.append(float(v.item() if isinstance(v, Tensor) else v))
            args.append(_pack(plan, scalars))
        del nodes
        outs = plan.exe.fn(*args)
        del args
        _random._counter[0] = rng_base + plan.rng_delta
        C = metrics._C
        C["executions"] += 1
        C["cache_hits"] += 1
        C["replays"] += 1
        self.replays += 1
        new_nodes = []
        make = ir.data_node_fast
        for v, (shape, dtype, sig, device), targets in zip(outs, plan.out_meta,
                                                          plan.root_targets):
            node = make(v, shape, dtype, device, sig)
            new_nodes.append(node)
            for r in targets:
                t = r()
                if t is not None:
                    t._node = node
        for r, j in plan.grad_targets:
            p = r()
            if p is not None:
                if isinstance(p.grad, Tensor):
                    p.grad._node = new_nodes[j]
                else:
                    p.grad = Tensor(new_nodes[j])
        ret = []
        for kind, v in plan.ret_roots:
            if kind == "root":
                ret.append(Tensor(new_nodes[v]))
            elif kind == "const":
                ret.append(Tensor(v))
            else:
                ret.append(v)
        return jax.tree_util.tree_unflatten(plan.ret_tree, ret)


_FALLBACK = object()


def _same_consts(prev, info):
    """Constant inputs of this call must have been inputs of the previous call too
    (a leaf created inside the body — host data read per call — is not replayable)."""
    before = {id(r()) for r in prev.get("leaf_refs", ()) if r() is not None}
    return all(k in before for k in info["const_ids"])


def _pack(plan, scalars):
    # same layout as executor._pack_scalars: one array per dtype, sorted by dtype name
    return tuple(np.array([scalars[i] for i in idx], dtype=d) for d, idx in plan.pack_layout)


def _opt_key(site):
    opt = site[1]()
    return opt._tx_for(site[2])[0] if opt is not None else None


def _dtype_of(v):
    from .dtypes import from_numpy_dtype
    return from_numpy_dtype(v.dtype)


def _global_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def _guard_value(v):
    if isinstance(v, (int, float, bool, str, type(None))):
        return (type(v), v)
    try:
        from .nn.module import Module
    except Exception:  # nn not importable: no module guards
        Module = None
    if Module is not None and isinstance(v, Module):
        return ("module", id(v), _module_modes(v))
    if isinstance(v, (list, tuple)) and len(v) < 16 and all(
            isinstance(x, (int, float, bool, str, type(None))) for x in v):
        return (type(v), tuple(v))
    return ("obj", id(v))


_mode_cache: dict = {}


def _module_modes(m):
    """train/eval flags of a module tree, recomputed only after some train()/eval() call."""
    from .nn import module as _m
    version = _m.MODE_VERSION[0]
    hit = _mode_cache.get(id(m))
    if hit is not None and hit[0] == version and hit[1]() is m:
        return hit[2]
    flags = tuple(x.training for x in m.modules())
    _mode_cache[id(m)] = (version, weakref.ref(m), flags)
    return flags


def _const_owners(sources):
    import gc
    out = []
    for kind, ref in sources:
        if kind != "const":
            continue
        for o in gc.get_referrers(ref):
            if isinstance(o, Tensor) and o._node is ref:
                out.append((weakref.ref(o), ref))
    return out
