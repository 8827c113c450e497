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

Replay is the hot path of a training loop, so everything that doesn't change
between calls is worked out once per plan (`_prepare`), and a call first
checks its guards against the plan it replayed last (`_fast_guard`) before
building the full signature.

Layer: frontend — imports engine.device, engine.executor, engine.host_data, engine.ir,
engine.lowering, engine.matmul_precision, engine.metrics, engine.rollback, engine.runtime,
tensor. Nn registers its Module guard (`register_guard`) and optimizers answer
`hyperparams_from_group()`, so nothing here imports nn or optim.
"""
from __future__ import annotations

import dis
import gc
import sys
import types
import warnings
import weakref

import jax

from ..engine import executor, ir, matmul_precision, metrics
from ..engine.device import default_device
from ..engine.host_data import HostNode, arg as host_arg
from ..engine.lowering import pack_groups, pack_values
from ..engine.rollback import verify
from ..engine.runtime import rt
from .tensor import Tensor

_DATA = ir.DATA
_getrefcount = sys.getrefcount


_TORCH_COMPILE_ARGS = frozenset(("fullgraph", "dynamic", "backend", "mode", "options",
                                  "disable"))


def compile(fn=None, *, warmup: int = 1, **torch_kwargs):  # noqa: A001 - like torch.compile
    """Decorator/wrapper: `step = flowlite.compile(step)`.

    `torch.compile(model)` of a module (ported code) returns the module itself: its forward
    is already traced into the training step's one executable, and replay applies to a
    whole step function (one sync per call), not to a forward pass.  torch.compile's
    keyword arguments are accepted; `disable=True` returns `fn` unchanged."""
    unknown = set(torch_kwargs) - _TORCH_COMPILE_ARGS
    if unknown:
        raise TypeError(f"flowlite.compile: unexpected arguments {sorted(unknown)}")
    if torch_kwargs.get("disable"):
        return fn if fn is not None else (lambda f: f)
    if fn is None:
        return lambda f: compile(f, warmup=warmup)
    if all(hasattr(fn, a) for a in ("forward", "parameters", "state_dict")):
        return fn
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
                 "rng_delta", "out_meta", "pack_layout",
                 # guards, filled in when the plan is registered (see _trace) and replayed
                 "captured", "fast_args", "cap_checks",
                 # precomputed replay work (see _prepare)
                 "replayable", "n_args", "pack_pos", "true_arg", "arg_srcs", "state_srcs", "const_srcs",
                 "scalar_vals", "rng_pos", "hp_groups", "pack",
                 "out_state", "out_grad", "out_general", "grad_general", "ret_leaf",
                 "out_kept")


class _HpGroup:
    """The hyper-parameter scalars one optimizer param group feeds into a plan."""
    __slots__ = ("opt", "gi", "key", "names", "cacheable", "snap")

    def __init__(self, opt, gi, key, cacheable):
        self.opt = opt              # weakref to the optimizer
        self.gi = gi
        self.key = key              # transformation key at trace time
        self.names = []             # (position in the scalar list, hyper-parameter name)
        self.cacheable = cacheable  # hyper values are a function of the group's entries only
        self.snap = None            # the group's entries when the values were last read



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
        self._last = None          # the plan replayed last: tried first by _fast_guard
        self._last_autocast = None  # the autocast state it was replayed under
        self._code_fn = getattr(fn, "__func__", fn)
        self._cap_spec = None      # what _captured reads, worked out once per code object
        self._precision = matmul_precision.generation()   # the plans' executables' setting

    def _forget_plans(self):
        # the float32 matmul precision changed: the plans hold programs compiled under the old
        self._plans.clear()
        self._history.clear()
        self._last = None
        self._precision = matmul_precision.generation()

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
        sig.append(_autocast_key())      # autocast changes what the body records
        return tuple(sig)

    def _captured(self):
        """Values the body reads from its closure / globals (scalars, module modes)."""
        self_obj, cells, g, names = self._capture_spec()
        out = []
        if self_obj is not None:
            out.append(_guard_value(self_obj))
        for c in cells:
            try:
                v = c.cell_contents
            except ValueError:
                continue
            out.append(_guard_value(v))
        for name in names:
            v = g.get(name, _MISSING)
            if v is not _MISSING:
                out.append(_guard_value(v))
        if self_obj is not None:
            # a bound method reads its object's attributes: guard the plain scalar ones
            attrs = _scalar_attrs(self_obj)
            if attrs is not None:
                out.append(attrs)
        return tuple(out)

    def _capture_spec(self):
        # the closure cells, globals dict and global names of a code object never change;
        # only what they hold does (re-read on every call)
        code_fn = self._code_fn
        code = getattr(code_fn, "__code__", None)
        spec = self._cap_spec
        if spec is not None and spec[0] is code:
            return spec[1]
        names = tuple(_global_names(code)) if code is not None else ()
        cap = (getattr(self.fn, "__self__", None), getattr(code_fn, "__closure__", None) or (),
               getattr(code_fn, "__globals__", {}), names)
        self._cap_spec = (code, cap)
        return cap

    def _capture_checks(self):
        """How _fast_guard can tell, value by value, that _captured() is unchanged since now:
        per closure cell / global name (bound method: its object too) a cheap check."""
        self_obj, cells, g, names = self._capture_spec()
        checks = []
        if self_obj is not None:
            checks.append((types.CellType(self_obj), None) + _value_check(self_obj))
        for c in cells:
            try:
                v = c.cell_contents
            except ValueError:
                v = _MISSING
            checks.append((c, None) + _value_check(v))
        absent = []
        for name in names:
            v = g.get(name, _MISSING)
            if v is _MISSING:
                absent.append(name)     # a builtin (len, range) or a global not set yet
            else:
                checks.append((None, name) + _value_check(v))
        attrs = _scalar_attrs(self_obj) if self_obj is not None else None
        return self._cap_spec[0], g, self_obj, attrs, checks, tuple(absent)

    def _fast_guard(self, plan, args):
        """True when the call's signature would equal the plan's, checked without building
        it: the same argument metadata and Python scalars, the same captured values."""
        spec = plan.fast_args
        if len(args) != len(spec):
            return False
        for a, (esig, x, y) in zip(args, spec):
            if esig is None:        # a Python scalar argument: same type and value
                if type(a) is not x or not (a is y or a == y):
                    return False
            else:                   # a tensor: data of the same shape/dtype (one interned int)
                if not isinstance(a, Tensor):
                    return False
                n = a._node
                if n.sig != esig or n.device is not x or a.requires_grad is not y:
                    return False
        code, g, self_obj, attrs, checks, absent = plan.cap_checks
        if getattr(self._code_fn, "__code__", None) is not code or not g.keys().isdisjoint(absent):
            return False
        for cell, name, kind, a, b in checks:
            if cell is not None:
                try:
                    v = cell.cell_contents
                except ValueError:
                    v = _MISSING
            else:
                v = g.get(name, _MISSING)
            if kind is _SAME_OBJ:
                if v is None or a() is not v:
                    return False
            elif kind is _SAME_SCALAR:
                if type(v) is not a or not (v is b or v == b):
                    return False
            elif kind is _ABSENT:       # an empty cell
                if v is not _MISSING:
                    return False
            elif kind is _SAME_MODULE:
                if v is None or a() is not v or (
                        b[0] != _stateful.version() and _stateful_state(v) != b[1]):
                    return False
            elif v is _MISSING or _guard_value(v) != b:
                return False
        return self_obj is None or _scalar_attrs(self_obj) == attrs

    # -- calls --------------------------------------------------------------------------------
    def __call__(self, *args):
        if self._precision != matmul_precision.generation():
            self._forget_plans()
        plan = self._last
        if plan is not None and self._last_autocast == _autocast_key() and \
                self._fast_guard(plan, args):
            out = self._replay(plan, args)    # all arguments are leaves: args is `flat`
            if out is not _FALLBACK:
                return out
            self._last = None
            flat, treedef = jax.tree_util.tree_flatten(args, is_leaf=_is_tensor)
            return self._trace(self._signature(flat, treedef), flat, args)
        flat, treedef = jax.tree_util.tree_flatten(args, is_leaf=_is_tensor)
        sig = self._signature(flat, treedef)
        plan = self._plans.get(sig)
        if plan is not None:
            # the captured values match the plan now: remember them for the fast guard
            checks = self._capture_checks() if plan.fast_args is not None else None
            out = self._replay(plan, flat)
            if out is not _FALLBACK:
                if checks is not None:
                    plan.cap_checks = checks
                    self._last = plan
                    self._last_autocast = sig[-1]
                return out
        self._last = None
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
        c0 = rt.rng_draws
        rt.observers.append(rec)
        try:
            result = self.fn(*args)
        finally:
            rt.observers.remove(rec)
        rec.rng = (c0, rt.rng_draws - c0)
        if sig in self._no_replay:
            return result
        info = self._analyse(rec, flat, arg_nodes, state_start, result, prev)
        if len(rec.events) > 1 and not self._warned_return:
            self._warned_return = True
            warnings.warn(f"flowlite.compile({getattr(self.fn, '__name__', 'fn')}): a call ran "
                          f"{len(rec.events)} executables, so it can't be replayed; keep one "
                          "sync per call (e.g. only opt.step()).", stacklevel=3)
        self._history[sig] = info
        if info.get("plan") is not None and prev is not None and prev.get("exe") is info["exe"] \
                and prev.get("scalars") == info["scalars"] and _same_consts(prev, info) \
                and prev.get("rng_delta") == info.get("rng_delta"):
            plan = info["plan"]
            plan.captured = sig[-1]
            plan.fast_args = _fast_arg_spec(sig, flat, args)
            self._plans[sig] = plan
        return result

    def _analyse(self, rec, flat, arg_nodes, state_start, result, prev):
        info = {"persistent": [], "exe": None, "scalars": None, "const_ids": None, "plan": None,
                "rng_delta": rec.rng[1]}
        if len(rec.events) != 1:
            return info
        exe, leaves, scalars, roots, owners, donate = rec.events[0]
        # persistent tensors: owners of outputs that survive the call
        info["persistent"] = [weakref.ref(t) for r in roots for t in owners.get(id(r), ())]
        info["exe"] = exe
        info["scalars"] = tuple((s.tag is None, s.value if s.tag is None else None)
                                for s in scalars)
        sources = _leaf_sources(leaves, arg_nodes, state_start)
        info["const_ids"] = tuple(id(s[1]) for s in sources if s[0] == "const")
        info["leaf_refs"] = [weakref.ref(leaf) for leaf in leaves]
        if prev is None:
            return info
        # the outputs: which persistent tensors are rebound, which grads set, what is returned
        root_targets, grad_targets = _output_targets(roots, owners, prev)
        ret_tree, ret_roots = _returned(result, roots, sources)
        if ret_roots is None:     # returns something the executable doesn't produce
            if not self._warned_return:
                self._warned_return = True
                warnings.warn(
                    f"flowlite.compile({getattr(self.fn, '__name__', 'fn')}): the "
                    "function returns a tensor computed after its last sync, so each "
                    "call needs a second executable and can't be replayed. Compute "
                    "returned values before opt.step()/flowlite.sync().", stacklevel=4)
            return info
        if any(s[0] == "state" and s[1]() is None for s in sources):
            return info
        plan = _Plan()
        plan.exe = exe
        plan.sources = sources
        plan.scalar_dtypes = [s.dtype for s in scalars]
        rng_start = rec.rng[0]
        plan.scalar_src = [("v", s.value) if s.tag is None else
                           ("rng", s.tag[1] - rng_start) if s.tag[0] == "rng" else
                           ("hp",) + s.tag[1:] + (_opt_key(s.tag),) for s in scalars]
        plan.rng_delta = info["rng_delta"]
        plan.root_targets = root_targets
        plan.grad_targets = grad_targets
        plan.ret_tree = ret_tree
        plan.ret_roots = ret_roots
        plan.donate = donate
        plan.state_meta = [(leaf.shape, leaf.dtype) for leaf in leaves]
        plan.out_meta = [(r.shape, r.dtype, ir.intern_sig((_DATA, (), r.shape, r.dtype, 0)),
                          r.device or default_device()) for r in roots]
        plan.pack_layout = pack_groups([sc.dtype for sc in scalars])
        plan.const_owners = _const_owners(sources)
        plan.captured = None
        plan.fast_args = None
        plan.cap_checks = None
        _prepare(plan)
        info["plan"] = plan
        return info

    def _replay(self, plan, flat, synced=False):
        if not plan.replayable:
            return _FALLBACK
        if rt.local.unverified is not None:
            executor.verify_pending()
        args = _replay_args(plan, flat)
        if type(args) is not list:            # a fallback, or an input that isn't data yet
            if args is _FALLBACK:
                return _FALLBACK
            return self._pending_input(plan, flat, args, synced)
        rng_base = rt.rng_draws
        if plan.scalar_vals is not None:
            pack = _scalar_pack(plan, rng_base)
            if pack is _FALLBACK:
                return _FALLBACK
            args[plan.pack_pos] = pack
        if plan.exe.chained:       # the previous step's flags were read: "it was ok"
            args[-1] = plan.true_arg
        outs = plan.exe.fn(*args)
        del args
        new_nodes = {}
        # everything is bound while the program runs, and only then are its check flags
        # read (they wait for it); a failed check puts back what `undo` recorded
        undo = None
        if plan.exe.n_checks:
            _bind_outputs(*plan.out_kept, outs, new_nodes)
            undo = []
        _rebind_replayed(plan, outs, new_nodes, undo)
        if plan.ret_leaf is not None:
            ret = Tensor(new_nodes[plan.ret_leaf])
        else:
            ret = []
            for kind, v in plan.ret_roots:
                if kind == "root":
                    ret.append(Tensor(new_nodes[v]))
                elif kind == "const":
                    ret.append(Tensor(v))
                else:
                    ret.append(v)
            ret = jax.tree_util.tree_unflatten(plan.ret_tree, ret)
        if undo is not None:
            _verify_replay(plan, outs, rng_base, undo)
        rt.rng_draws = rng_base + plan.rng_delta
        C = metrics._C
        C["executions"] += 1
        C["cache_hits"] += 1
        C["replays"] += 1
        self.replays += 1
        return ret

    def _pending_input(self, plan, flat, n, synced):
        """An input isn't data of the recorded shape/dtype: run its pending work, then
        replay again (once); anything else is a changed input."""
        if synced or n.op is _DATA or n.op is ir.SCALAR:
            return _FALLBACK
        executor.sync("flowlite.compile: pending input before replay", extra_roots=(n,))
        return self._replay(plan, flat, True)


_FALLBACK = object()
_MISSING = object()
_data_node = ir.data_node_fast
_SCALAR_TYPES = (int, float, bool, str, type(None))
_EXACT_SCALAR = frozenset(_SCALAR_TYPES)


def _is_tensor(x):
    return isinstance(x, Tensor)


# kinds of _fast_guard's per-value checks (compared with `is`)
_ABSENT, _SAME_SCALAR, _SAME_OBJ, _SAME_MODULE, _SAME_GUARD = "absent", "scalar", "obj", \
    "module", "guard"


def _value_check(v):
    """(kind, a, b): a check that `v`'s guard value (_guard_value) hasn't changed."""
    if v is _MISSING:
        return _ABSENT, None, None
    gv = _guard_value(v)
    try:
        if gv[0] == "module":
            return _SAME_MODULE, weakref.ref(v), (_stateful.version(), gv[2])
        if gv[0] == "obj" and not isinstance(v, (list, tuple)):
            # guarded by identity: the same (live) object, which keeps its type
            return _SAME_OBJ, weakref.ref(v), None
    except TypeError:   # not weak-referenceable: compare guard values
        return _SAME_GUARD, None, gv
    if isinstance(v, _SCALAR_TYPES):
        return _SAME_SCALAR, type(v), v
    return _SAME_GUARD, None, gv    # a short list/tuple of scalars: compared by value


def _scalar_attrs(obj):
    """A bound method's object's plain scalar attributes (None: no instance dict)."""
    d = getattr(obj, "__dict__", None)
    if not d:
        return None
    return tuple((k, v) for k, v in d.items() if isinstance(v, _SCALAR_TYPES))


def _fast_arg_spec(sig, flat, args):
    """Per argument what _fast_guard compares, or None when the arguments aren't all plain
    leaves (a tensor, or a Python int/float/bool/str) and so need jax's flattening."""
    if len(flat) != len(args) or any(f is not a for f, a in zip(flat, args)):
        return None
    spec = []
    for a, s in zip(args, sig[1:-1]):
        if isinstance(a, Tensor):
            shape, dtype, device, requires_grad = s
            spec.append((ir.intern_sig((_DATA, (), shape, dtype, 0)), device, requires_grad))
        elif type(a) in (int, float, bool, str):
            spec.append((None, type(a), a))
        else:
            return None
    return spec


def _prepare(plan):
    """Work out once what every replay of `plan` needs: per input where it comes from and
    the interned signature of the data node it must be (op DATA + shape + dtype in one
    int), the scalar sources, and what each output rebinds."""
    donated = set(plan.donate)
    # donated buffers are safe only for state the replay rebinds (checked per call)
    plan.replayable = all(plan.sources[j][0] == "state" for j in plan.donate)
    plan.pack_pos = len(plan.sources)
    plan.n_args = plan.pack_pos + (1 if plan.scalar_src else 0) + plan.exe.chained
    plan.true_arg = executor._true(plan.out_meta[0][3]) if plan.exe.chained else None
    plan.arg_srcs, plan.state_srcs, plan.const_srcs = [], [], []
    for i, ((kind, ref), (shape, dtype)) in enumerate(zip(plan.sources, plan.state_meta)):
        esig = ir.intern_sig((_DATA, (), shape, dtype, 0))
        if kind == "arg":
            plan.arg_srcs.append((i, ref, esig))
        elif kind == "state":
            plan.state_srcs.append((i, ref, esig, i in donated))
        else:
            plan.const_srcs.append((i, ref))
    # scalars: constants stay in `scalar_vals`; rng offsets and hyper-parameters are
    # written over them per call
    plan.scalar_vals = plan.rng_pos = None
    plan.hp_groups = []
    plan.pack = None
    if plan.scalar_src:
        plan.scalar_vals = [src[1] if src[0] == "v" else None for src in plan.scalar_src]
        plan.rng_pos = [(p, src[1]) for p, src in enumerate(plan.scalar_src) if src[0] == "rng"]
        groups = {}
        for p, src in enumerate(plan.scalar_src):
            if src[0] != "hp":
                continue
            opt = src[1]()
            k = (id(opt), src[2])
            hg = groups.get(k)
            if hg is None:
                hg = groups[k] = _HpGroup(src[1], src[2], src[4], _hp_cacheable(opt))
            hg.names.append((p, src[3]))
        plan.hp_groups = list(groups.values())
    # outputs: a state output rebinding exactly one tensor, a gradient output setting one
    # .grad, and the general case (several holders, or returned)
    grads_of = {}
    for r, j in plan.grad_targets:
        grads_of.setdefault(j, []).append(r)
    returned = {v for kind, v in plan.ret_roots if kind == "root"}
    plan.out_state, plan.out_grad, plan.out_general, plan.grad_general = [], [], [], []
    for j, ((shape, dtype, esig, device), targets) in enumerate(zip(plan.out_meta,
                                                                    plan.root_targets)):
        meta = (esig, device, shape, dtype)
        grads = grads_of.get(j, ())
        if len(targets) == 1 and not grads and j not in returned:
            plan.out_state.append((j, targets[0]) + meta)
        elif not targets and len(grads) == 1 and j not in returned:
            plan.out_grad.append((j, grads[0]) + meta)
        elif targets or grads or j in returned:
            plan.out_general.append((j, targets) + meta)
            plan.grad_general.extend((r, j) for r in grads)
        # else: an output nothing holds after the call (a temporary the body kept alive)
    # the outputs a failed check keeps at their old values (the guarded in-place updates)
    # are bound whatever the checks say: before the flags are read, while the program runs
    keep = plan.exe.guarded if plan.exe.n_checks else ()
    plan.out_kept = ([e for e in plan.out_state if e[0] in keep],
                     [e for e in plan.out_general if e[0] in keep])
    if keep:
        plan.out_state = [e for e in plan.out_state if e[0] not in keep]
        plan.out_general = [e for e in plan.out_general if e[0] not in keep]
    plan.ret_leaf = None
    if jax.tree_util.treedef_is_leaf(plan.ret_tree) and len(plan.ret_roots) == 1 \
            and plan.ret_roots[0][0] == "root":
        plan.ret_leaf = plan.ret_roots[0][1]




def _replay_args(plan, flat):
    """The executable's arguments for this call: a list, _FALLBACK, or the node of an
    input that isn't data of the recorded shape/dtype (it must run first)."""
    args = [None] * plan.n_args
    for i, k, esig in plan.arg_srcs:
        n = flat[k]._node
        if n.sig != esig:
            return n
        args[i] = n.value if n.__class__ is not HostNode else host_arg(n)
    getrc = _getrefcount
    for i, ref, esig, donated in plan.state_srcs:
        t = ref()
        if t is None:
            return _FALLBACK
        n = t._node
        if n.sig != esig:                 # pending, or another shape/dtype
            return n
        v = n.value
        # a donated buffer must be reachable only through its owner tensor, which gets
        # rebound: references are t._node, `n`, getrefcount's argument (and for the
        # array: n.value, `v`, the argument)
        if donated and (getrc(n) != 3 or getrc(v) != 3):
            return _FALLBACK
        args[i] = v
    for i, node in plan.const_srcs:
        args[i] = node.value
    for owner, node in plan.const_owners:
        t = owner()
        if t is not None and t._node is not node:
            return _FALLBACK
    return args


def _verify_replay(plan, outs, rng_base, undo):
    """A replay whose checks failed commits nothing: only the outputs that replace a donated
    leaf in place (kept at their old values when a check fails: plan.out_kept) stay bound;
    everything else gets back its value from before the call (`undo`: (object, attribute,
    old value), in binding order)."""
    bad = verify(outs[-1], plan.exe.check_infos)
    if bad:
        for obj, attr, old in reversed(undo):
            setattr(obj, attr, old)
        rt.rng_draws = rng_base
        raise bad[0][1]


def _bind_outputs(out_state, out_general, outs, new_nodes, undo=None):
    """Point the tensors of `out_state` (one holder each) and `out_general` (the new nodes
    go to `new_nodes`) at this call's outputs; `undo`, when given, collects what each
    binding replaced."""
    getrc = _getrefcount
    make = _data_node
    # outputs rebinding one tensor: its old node, when nothing else can reach it (t._node,
    # `n`, getrefcount's argument), takes the new value in place of a new node
    for j, tref, esig, device, shape, dtype in out_state:
        t = tref()
        if t is not None:
            n = t._node
            if n.sig == esig and n.device is device and getrc(n) == 3:
                if undo is not None:
                    undo.append((n, "value", n.value))
                n.value = outs[j]
            else:
                if undo is not None:
                    undo.append((t, "_node", n))
                t._node = make(outs[j], shape, dtype, device, esig)
    for j, targets, esig, device, shape, dtype in out_general:
        node = new_nodes[j] = make(outs[j], shape, dtype, device, esig)
        for r in targets:
            t = r()
            if t is not None:
                if undo is not None:
                    undo.append((t, "_node", t._node))
                t._node = node


def _rebind_replayed(plan, outs, new_nodes, undo=None):
    """Point the persistent tensors and .grads at this call's outputs (the kept ones are
    bound already); `new_nodes` collects the new nodes of the outputs more than one holder
    (or the return value) shares; `undo`, when given, what each binding replaced."""
    getrc = _getrefcount
    make = _data_node
    _bind_outputs(plan.out_state, plan.out_general, outs, new_nodes, undo)
    # gradients: the traced body gives .grad a new tensor each call; keeping the old
    # tensor and node is the same when nothing else holds either (p.grad / g._node,
    # `g` / `n`, getrefcount's argument)
    for j, pref, esig, device, shape, dtype in plan.out_grad:
        p = pref()
        if p is not None:
            g = p.grad
            if isinstance(g, Tensor) and getrc(g) == 3:
                n = g._node
                if n.sig == esig and n.device is device and getrc(n) == 3:
                    if undo is not None:
                        undo.append((n, "value", n.value))
                    n.value = outs[j]
                    continue
            if undo is not None:
                undo.append((p, "grad", g))
            p.grad = Tensor(make(outs[j], shape, dtype, device, esig))
    for r, j in plan.grad_general:
        p = r()
        if p is not None:
            g = p.grad
            if isinstance(g, Tensor):
                if undo is not None:
                    undo.append((g, "_node", g._node))
                g._node = new_nodes[j]
            else:
                if undo is not None:
                    undo.append((p, "grad", g))
                p.grad = Tensor(new_nodes[j])
    return new_nodes

def _leaf_sources(leaves, arg_nodes, state_start):
    """Where each executable input comes from: ("arg", i) a function argument, ("state",
    ref) a persistent tensor, ("const", node) anything else (fixed across calls)."""
    arg_index = {}
    for i, n in enumerate(arg_nodes):
        if n is not None:
            arg_index.setdefault(id(n), i)
    sources = []
    for leaf in leaves:
        k = id(leaf)
        if k in arg_index:
            sources.append(("arg", arg_index[k]))
        elif k in state_start:
            sources.append(("state", weakref.ref(state_start[k])))
        else:
            sources.append(("const", leaf))
    return sources


def _output_targets(roots, owners, prev):
    """Per output, the persistent tensors it rebinds; and the (param, output) .grad pairs."""
    prev_objs = {id(r()) for r in prev["persistent"] if r() is not None}
    root_targets = [[weakref.ref(t) for t in owners.get(id(r), ()) if id(t) in prev_objs]
                    for r in roots]
    root_index = {id(r): j for j, r in enumerate(roots)}
    grad_targets = []
    for r in prev["persistent"]:
        p = r()
        if p is not None and isinstance(p.grad, Tensor) and id(p.grad._node) in root_index:
            grad_targets.append((weakref.ref(p), root_index[id(p.grad._node)]))
    return root_targets, grad_targets


def _returned(result, roots, sources):
    """(treedef, per returned leaf ("root", j) | ("const", node) | ("py", value)); the list
    is None when the function returns a tensor the executable doesn't produce."""
    ret_flat, ret_tree = jax.tree_util.tree_flatten(
        result, is_leaf=lambda x: isinstance(x, Tensor))
    root_index = {id(r): j for j, r in enumerate(roots)}
    ret_roots = []
    for v in ret_flat:
        if not isinstance(v, Tensor):
            ret_roots.append(("py", v))
            continue
        j = root_index.get(id(v._node))
        if j is not None:
            ret_roots.append(("root", j))
        elif v._node.op is _DATA and any(s[0] == "const" and s[1] is v._node for s in sources):
            ret_roots.append(("const", v._node))
        else:
            return ret_tree, None
    return ret_tree, ret_roots

def _hp_cacheable(opt):
    """An optimizer whose hyper-parameters derive from its param group alone says so
    (`hyperparams_from_group()`): an unchanged group then means unchanged values; any
    other (Optax, user overrides) is re-read on every replay."""
    own = getattr(opt, "hyperparams_from_group", None)
    return bool(own is not None and own())


def _group_snapshot(group):
    """The group's keys and values when all values but its params are immutable scalars or
    tuples of them, so that the very same objects mean the same values; None otherwise."""
    for k, v in group.items():
        if k == "params":
            continue
        if type(v) is tuple:
            if not all(type(x) in _EXACT_SCALAR for x in v):
                return None
        elif type(v) not in _EXACT_SCALAR:
            return None
    return len(group), [(k, v) for k, v in group.items() if k != "params"]


def _autocast_key():
    """This thread's autocast regions, comparable across calls (None outside any)."""
    state = rt.local.autocast
    return None if state is None else tuple(sorted((k, v.name) for k, v in state.items()))


def _scalar_pack(plan, rng_base):
    """The packed host scalars of this call; rebuilt only when a value changed."""
    vals = plan.scalar_vals
    for hg in plan.hp_groups:
        opt = hg.opt()
        if opt is None:
            return _FALLBACK
        groups = opt.param_groups
        if hg.gi >= len(groups):
            return _FALLBACK
        group = groups[hg.gi]
        snap = hg.snap
        if snap is not None and len(group) == snap[0]:
            # identity, not ==: the very same immutable objects (== could reach a Tensor)
            for k, v in snap[1]:
                if group.get(k, _MISSING) is not v:
                    break
            else:
                continue                  # the same entries: the same values as last time
        key, hyper = opt.update_transform(hg.gi)
        if key != hg.key:                 # an option changed the update's structure
            return _FALLBACK
        for p, name in hg.names:
            v = hyper[name]
            vals[p] = float(v.item() if isinstance(v, Tensor) else v)
        hg.snap = _group_snapshot(group) if hg.cacheable else None
        plan.pack = None
    if plan.rng_pos:
        for p, off in plan.rng_pos:
            vals[p] = (rng_base + off) % 4294967296
        plan.pack = None
    if plan.pack is None:
        plan.pack = _pack(plan, vals)
    return plan.pack


def _same_consts(prev, info):
    """Constant inputs of this call must have been inputs of the previous call too
    (a leaf created inside the body — host data read per call — is not replayable)."""
    before = {id(r()) for r in prev.get("leaf_refs", ()) if r() is not None}
    return all(k in before for k in info["const_ids"])


def _pack(plan, scalars):
    return pack_values(plan.pack_layout, scalars)


def _opt_key(tag):
    opt = tag[1]()
    return opt.update_transform(tag[2])[0] if opt is not None else None



def _global_names(code):
    """Names the code (and code nested in it) loads as globals.  co_names alone also holds
    every attribute name (`opt.step`, `loss.backward`), which no global can affect."""
    names = {ins.argval for ins in dis.get_instructions(code)
             if ("GLOBAL" in ins.opname or ins.opname == "LOAD_NAME")
             and isinstance(ins.argval, str)}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def _guard_value(v):
    t = type(v)
    if t in _EXACT_SCALAR or isinstance(v, _SCALAR_TYPES):
        return (t, v)
    cls = _stateful.cls
    if cls is not None and isinstance(v, cls):
        return ("module", id(v), _stateful_state(v))
    if isinstance(v, (list, tuple)) and len(v) < 16 and all(
            isinstance(x, _SCALAR_TYPES) for x in v):
        return (type(v), tuple(v))
    return ("obj", id(v))


class _stateful:
    """Objects whose state changes what a step computes (nn.Module's train/eval flags),
    as `register_guard` declared them."""
    cls = None
    state = None
    version = staticmethod(lambda: 0)


def register_guard(cls, state, version) -> None:
    """Guard compiled steps on instances of `cls` by `state(obj)` (a hashable snapshot);
    `version()` changes whenever the state of any instance may have changed, so a replay
    re-reads the state only then.  nn registers its Module class here."""
    _stateful.cls, _stateful.state, _stateful.version = cls, state, staticmethod(version)


_state_cache: dict = {}


def _stateful_state(m):
    version = _stateful.version()
    hit = _state_cache.get(id(m))
    if hit is not None and hit[0] == version and hit[1]() is m:
        return hit[2]
    flags = _stateful.state(m)
    _state_cache[id(m)] = (version, weakref.ref(m), flags)
    return flags


def _const_owners(sources):
    out = []
    for kind, ref in sources:
        if kind != "const":
            continue
        for o in gc.get_referrers(ref):
            if isinstance(o, Tensor) and o._node is ref:
                out.append((weakref.ref(o), ref))
    return out
