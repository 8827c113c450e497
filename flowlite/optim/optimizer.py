"""Optimizer base: PyTorch's interface, optax's math, one lazy node per group.

`step()` records, for every param group, ONE multi-output primitive whose
lowering runs the group's optax transformation (`tx.update` +
`optax.apply_updates`) inside the step's executable, then syncs.  Parameters
and optimizer state are rebound to that node's outputs, so their old buffers
are donated.  Numeric hyper-parameters (lr, betas, eps, weight_decay, ...) enter
the graph as data — host scalars, which the executor packs into one argument per
dtype of the step's executable — and the lowering builds the transformation
from them (what `optax.inject_hyperparams` does, without keeping a copy of every
hyper-parameter in the state: no extra state inputs and outputs per group).
Changing them — by a scheduler or by hand — never recompiles.

Hyper-parameters are float64 in a group with float64 parameters (PyTorch computes them as
Python floats, i.e. in double: float32 ones would put 1e-7 relative differences into a float64
training run) and float32 otherwise — also for bfloat16/float16 parameters, where b2=0.999
would round to 1.0 (`hyper_dtype`).

Recording is the hot path of every step, so while a group's entries are the very
same objects as at the last step, the transformation, its key and the
hyper-parameter tensors of that step are reused as they are.
"""
from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from .. import extend
from . import _checks, torch_state
from ..extend import (Tensor, dtypes as D, from_jax, no_grad, rebind, record_into, share,
                      user_site)

to_dtype = extend.ops.to_dtype


class _OptaxKey(NamedTuple):
    """The key of an `Optax` optimizer's update: its own transformation and the sign."""
    tx: Any
    maximize: bool


def _transformation(key):
    """The transformation an update's key names (the key travels in the node's attrs)."""
    return key if type(key) is _Factory else key.tx


class StepState(NamedTuple):
    """A flowlite optimizer's state for one group: the step count (PyTorch's "step") and
    the optax transformation's own state.  Hyper-parameters are not state: they arrive as
    inputs of every update."""
    count: Any
    inner_state: Any


class _Factory:
    """A flowlite optimizer's transformation: `factory(**hyper, **static)`, built inside the
    update's lowering from that step's hyper-parameter values (traced scalars of the
    group's `hyper_dtype`).
    It is also the key of the recorded update (in its attrs: part of the graph key), so equal
    transformations — same optimizer, factory, static options, hyper-parameter names and
    sign — record the same program, and the lowering finds the transformation in its attrs."""
    __slots__ = ("name", "factory", "static", "hyper_names", "maximize", "_id")

    def __init__(self, name, factory, static, hyper_names, maximize):
        self.name = name
        self.factory = factory
        self.static = dict(static)
        self.hyper_names = tuple(sorted(hyper_names))
        self.maximize = bool(maximize)
        self._id = (name, factory, tuple(sorted(self.static.items())), self.hyper_names,
                    self.maximize)

    def __eq__(self, other):
        return type(other) is _Factory and other._id == self._id

    def __hash__(self):
        return hash(self._id)

    def __repr__(self):
        # by value, as its equality: debug's recompile explanations compare attrs by repr
        return f"_Factory{self._id!r}"

    def __flowlite_key__(self):
        # its spelling in the graph key of flowlite's store of executables (the same in every
        # process; a factory that isn't a module-level function keeps the program out of it)
        return self._id

    def build(self, hyper):
        return self.factory(**hyper, **self.static)

    def init(self, params, hyper):
        dt = hyper_dtype([p.dtype for p in jax.tree_util.tree_leaves(params)]).np
        hp = {k: jnp.asarray(v, dt) for k, v in hyper.items()}
        return StepState(jnp.zeros([], jnp.int32), self.build(hp).init(params))


def hyper_dtype(param_dtypes):
    """The dtype of a group's hyper-parameters: float64 where a parameter is float64 (PyTorch
    computes with Python floats), else float32 whatever the parameter dtype (as
    optax.inject_hyperparams with hyperparam_dtype=float32: b2=0.999 in bfloat16 would round
    to 1.0)."""
    for d in param_dtypes:
        if d.name == "float64":        # a flowlite DType or a NumPy dtype
            return D.float64
    return D.float32


_site_optimizers: dict = {}    # (call, source line) -> how many optimizers made it there


def _cause(opt, call, site):
    """The sync cause of `opt.<call>` at `site` ("optimizer.step() at train.py:42"): one per
    optimizer, so that models trained (or built) through one helper's line are several
    programs, not one line recompiling (the debug layer counts recompiles per cause).
    Cached on the optimizer, per line."""
    causes = opt._causes
    if causes is None:
        causes = opt._causes = {}
    c = causes.get((call, site))
    if c is None:
        k = _site_optimizers[call, site] = _site_optimizers.get((call, site), 0) + 1
        c = causes[call, site] = f"optimizer.{call} at {site}" + (
            f" (optimizer #{k} at this line)" if k > 1 else "")
    return c


def _lower_update(attrs, *xs):
    tx_key, n, state_treedef, hp_names, maximize = attrs
    tx = _transformation(tx_key)
    params = list(xs[:n])
    grads = list(xs[n:2 * n])
    n_state = state_treedef.num_leaves
    old_leaves = xs[2 * n:2 * n + n_state]
    state = jax.tree_util.tree_unflatten(state_treedef, old_leaves)
    hps = xs[2 * n + n_state:]
    if maximize:
        grads = [-g for g in grads]
    grads = [g.astype(p.dtype) for g, p in zip(grads, params)]
    if type(tx) is _Factory:
        inner = tx.build(dict(zip(hp_names, hps)))     # each in the group's hyper_dtype
        updates, new_inner = inner.update(grads, state.inner_state, params)
        new_state = StepState(optax.safe_increment(state.count), new_inner)
    else:
        # an Optax optimizer: the user's transformation, hyper-parameters (if any) injected
        # into its optax.inject_hyperparams state
        if hp_names:
            hyper = dict(state.hyperparams)
            for name, v in zip(hp_names, hps):
                hyper[name] = v.astype(jax.numpy.asarray(hyper[name]).dtype)
            state = state._replace(hyperparams=hyper)
        updates, new_state = tx.update(grads, state, params)
    new_params = optax.apply_updates(params, updates)
    new_params = [q.astype(p.dtype) for q, p in zip(new_params, params)]
    # state keeps its dtypes (e.g. bfloat16 moments for bfloat16 params, as in PyTorch) even
    # where float32 hyper-parameters promote the arithmetic
    new_leaves = [v.astype(o.dtype) for v, o in zip(jax.tree_util.tree_leaves(new_state),
                                                     old_leaves)]
    return tuple(new_params) + tuple(new_leaves)


def _update_inplace(attrs, j):
    n = attrs[1]           # outputs: params, then state; inputs: params, grads, state, hparams
    return j if j < n else n + j


optax_update = extend.primitive("optax_update", _lower_update, None, multi=True, nondiff=True,
                                inplace=_update_inplace)


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


_IMPLEMENTATION_FLAGS = ("foreach", "fused", "capturable", "differentiable")


def _accepting_implementation_flags(init, name):
    """`init`, taking PyTorch's implementation switches it does not declare itself: foreach,
    fused and capturable choose kernels in PyTorch and change no result (accepted);
    differentiable=True is refused, as `_checks.check_differentiable` does."""
    own = set(inspect.signature(init).parameters)
    extra = [f for f in _IMPLEMENTATION_FLAGS if f not in own]
    if not extra:
        return init

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        flags = {f: kwargs.pop(f) for f in extra if f in kwargs}
        if flags.get("differentiable"):
            _checks.check_differentiable({"differentiable": True}, name)
        init(self, *args, **kwargs)
    return __init__


class Optimizer:
    """Base class.  Subclasses implement `_transform(group)` returning
    (factory, hyper: dict name->float, static: dict) where `factory(**hyper,
    **static)` builds an optax GradientTransformation that includes the
    learning-rate scaling (the update is added to the parameters)."""
    _causes = None      # (call, source line) -> this optimizer's sync cause (_cause)

    # PyTorch's names for the per-parameter fields of this optimizer's optax state (e.g.
    # {"e_g": "square_avg"}).  When set, state_dict() has PyTorch's layout — {"state":
    # {param_index: {"step": ..., name: tensor}}, "param_groups": [...]} — which
    # torch.optim loads, and load_state_dict() reads PyTorch's state dicts.
    _torch_state_names: dict | None = None
    # names of per-parameter state for `optimizer.state` when state_dict keeps flowlite's layout
    _param_state_names: dict | None = None

    def __init_subclass__(cls, **kwargs):
        # every optimizer accepts PyTorch's implementation switches (foreach, fused,
        # capturable): a flowlite update is already one fused, captured program
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _accepting_implementation_flags(init, cls.__name__)

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: list = []
        self.state = torch_state.ParamState(self)   # per parameter, torch's names
        self._opt_state: list = []   # per group: list of state Tensors (optax leaves)
        self._treedefs: list = []
        self._keys: list = []        # per group: registry key of the transformation in use
        self._group_steps: list = []  # per group: updates recorded (host-side mirror of count)
        self._recorded: list = []    # per group: what its last update reused (see _record_group)
        self._step_count = 0
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for g in params:
            self.add_param_group(g)
        # materialise initial parameters and state now, so the first training step
        # already has the steady-state graph (one compile for the whole loop)
        extend.sync(_cause(self, "__init__()", user_site(2)))

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)

    # -- groups --------------------------------------------------------------------------------
    def add_param_group(self, group: dict) -> None:
        if not isinstance(group, dict):
            raise TypeError(f"param group must be a dict, got {type(group).__name__}")
        ps = group["params"]
        ps = [ps] if isinstance(ps, Tensor) else list(ps)
        for p in ps:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in ps):
            raise ValueError("some parameters appear in more than one parameter group")
        g = dict(group)
        g["params"] = ps
        for k, v in self.defaults.items():
            if v is required and k not in g:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {k}")
            g.setdefault(k, v)
        self._validate(g)
        self.param_groups.append(g)
        self._init_state(len(self.param_groups) - 1)

    def _validate(self, group):
        lr = group.get("lr")
        if lr is not None and not (isinstance(lr, Tensor) or lr >= 0):
            raise ValueError(f"Invalid learning rate: {lr}")

    def _transform(self, group):
        raise NotImplementedError

    # ---- the seam flowlite.compile uses (it imports nothing of optim) ----
    def hyperparams_from_group(self) -> bool:
        """flowlite's own optimizers derive their hyper-parameters from the param group alone
        (this `update_transform` over a flowlite `_transform`), so flowlite.compile may skip
        re-reading them while the group is unchanged; Optax and user overrides are re-read
        every replay."""
        cls = type(self)
        return cls.update_transform is Optimizer.update_transform and \
            getattr(cls._transform, "__module__", "").startswith("flowlite.optim.")

    def update_transform(self, gi):
        """(key, hyper) of param group `gi`: `key` names the recorded update's transformation
        (its structure: a changed key is a new program), `hyper` its hyper-parameter values
        (inputs of every update, as data)."""
        group = self.param_groups[gi]
        factory, hyper, static = self._transform(group)
        # maximize flips the update's sign inside the recorded node: part of its structure
        key = _Factory(type(self).__name__, factory, static, hyper,
                       group.get("maximize", False))
        return key, hyper

    def _init_values(self, gi, key):
        group = self.param_groups[gi]
        dev = group["params"][0].device if group["params"] else None
        with jax.default_device(dev.jax_device if dev and dev.type != "mesh" else None):
            zeros = [jnp.zeros(tuple(p.shape), p.dtype.np) for p in group["params"]]
            tx = _transformation(key)
            if type(tx) is _Factory:
                hyper = {k: float(_as_float(v)) for k, v in self.update_transform(gi)[1].items()}
                return tx.init(zeros, hyper)
            return tx.init(zeros)

    def _init_state(self, gi):
        key, _ = self.update_transform(gi)
        leaves, treedef = jax.tree_util.tree_flatten(self._init_values(gi, key))
        params = self.param_groups[gi]["params"]
        self._opt_state.append([from_jax(_place_like(v, params)) for v in leaves])
        self._treedefs.append(treedef)
        self._keys.append(key)
        self._group_steps.append(0)
        self._recorded.append(None)

    def _sync_structure(self, gi):
        """The group's transformation for its current options; returns (key, hyper).

        Options that change the state's structure (SGD's momentum becoming non-zero,
        amsgrad switched on, ...) get a freshly initialised state, as PyTorch creates
        missing buffers lazily; options that keep the structure reuse the state."""
        key, hyper = self.update_transform(gi)
        if key != self._keys[gi]:
            old = self._opt_state[gi]
            group = self.param_groups[gi]
            tx = _transformation(key)
            init = (lambda ps: tx.init(ps, hyper)) if type(tx) is _Factory else tx.init
            shapes = jax.eval_shape(
                init, [jax.ShapeDtypeStruct(tuple(p.shape), p.dtype.np)
                       for p in group["params"]])
            leaves, treedef = jax.tree_util.tree_flatten(shapes)
            same = treedef == self._treedefs[gi] and all(
                tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype.np
                for a, b in zip(leaves, old))
            if not same:
                fresh, treedef = jax.tree_util.tree_flatten(self._init_values(gi, key))
                self._opt_state[gi] = [from_jax(_place_like(v, self.param_groups[gi]["params"]))
                                       for v in fresh]
                self._treedefs[gi] = treedef
            self._keys[gi] = key
        return key, hyper

    # -- stepping -------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad = p.grad.detach() * 0

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with extend.enable_grad():
                loss = closure()
        # the run summary times the recording and the sync of a training iteration
        prev = extend.step_enter() if extend.clock.on else None
        try:
            with no_grad():
                for gi in range(len(self.param_groups)):
                    self._record_group(gi)
            self._step_count += 1
            if prev is not None:
                extend.step_sync()
            extend.sync(_cause(self, "step()", user_site(2)))
        finally:
            if prev is not None:
                extend.step_leave(prev)
        return loss

    def _record_group(self, gi):
        group = self.param_groups[gi]
        params = group["params"]
        gs = [p.grad for p in params]
        if any([g is None for g in gs]):      # (not `None in gs`: that compares tensors)
            if all(g is None for g in gs):
                return
            # a subset of params has grads: update them alone, keeping their state slices
            key, hyper = self._sync_structure(gi)
            return self._record_subset(gi, [i for i, g in enumerate(gs) if g is not None],
                                       key, hyper)
        for p, g in zip(params, gs):
            gshape, pshape = g._node.shape, p._node.shape
            if gshape != pshape:
                raise RuntimeError(f"optimizer: gradient shape {tuple(gshape)} does not match "
                                   f"parameter shape {tuple(pshape)}")
        rec = self._recorded[gi]
        if rec is None or not _same_entries(group, rec[0]) or rec[1] != self._keys[gi] or \
                rec[2][1] != len(params):
            rec = self._recorded[gi] = self._prepare_group(gi, rec)
        attrs, hps, memo = rec[2], rec[3], rec[4]
        state = self._opt_state[gi]
        record_into([*params, *state], optax_update, (*params, *gs, *state, *hps), attrs, memo)
        self._group_steps[gi] += 1

    def _prepare_group(self, gi, prev):
        """(snapshot of the group's entries, key, attrs, hyper-parameter tensors, memo, those
        tensors by name): what the group's update records while its entries stay the same
        objects.  Hyper-parameter tensors whose value is unchanged are kept (a scheduler
        changes lr alone)."""
        group = self.param_groups[gi]
        key, hyper = self._sync_structure(gi)
        hp_names = tuple(sorted(hyper))
        old = prev[5] if prev is not None else {}
        vals = {k: float(_as_float(hyper[k])) for k in hp_names}
        dt = hyper_dtype([p._node.dtype for p in group["params"]])
        hps = tuple([old[k] if k in old and old[k]._node.value == vals[k] and
                     old[k]._node.dtype == dt else self._hparam(gi, k, vals[k], dt)
                     for k in hp_names])
        attrs = (key, len(group["params"]), self._treedefs[gi], hp_names,
                 bool(group.get("maximize", False)))
        # flowlite's own optimizers derive everything from the group's entries: while those
        # are the same objects, all of this holds; others (Optax, user overrides) re-read
        snap = _group_entries(group) if self.hyperparams_from_group() else None
        # the update node's signature hashes every shape and the optax treedef: record_into
        # interns it once per group and reuses it while nothing it covers has changed
        memo = prev[4] if prev is not None else {}
        return (snap, key, attrs, hps, memo, dict(zip(hp_names, hps)))

    def _torch_state_dict(self) -> dict:
        return torch_state.torch_state_dict(self)

    def _load_torch_state_dict(self, sd) -> None:
        torch_state.load_torch_state_dict(self, sd)

    def _hparam(self, gi, name, value, dtype=D.float32):
        # always data (never a baked constant) and tagged with its source, so a replayed
        # step (flowlite.compile) re-reads the current value from the param group
        return extend.host_scalar(float(_as_float(value)), dtype,
                                  ("hparam", weakref.ref(self), gi, name))

    def current_hparam(self, gi, name) -> float:
        return float(_as_float(self.update_transform(gi)[1][name]))

    def _record_subset(self, gi, live, key, hyper):
        # Rare path (some params unused this step): fall back to a per-group update where
        # params without grads get zero grads but keep their state untouched by masking.
        group = self.param_groups[gi]
        params = group["params"]
        saved = {}
        for i, p in enumerate(params):
            if p.grad is None:
                saved[i] = p
                p.grad = extend.ops.zeros_like(p)
        old_params = [share(p) for p in params]
        old_state = [share(s) for s in self._opt_state[gi]]
        try:
            self._record_group(gi)
        finally:
            for i, p in saved.items():
                p.grad = None
        # restore params (and their state entries) that had no gradient
        state = self._opt_state[gi]
        for i in saved:
            rebind(params[i], old_params[i], "optimizer.step")
        per_param = _state_index(self._treedefs[gi], len(params))
        for j, owner in enumerate(per_param):
            if owner in saved:
                rebind(state[j], old_state[j], "optimizer.step")

    # -- (de)serialisation ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        if self._torch_state_names is not None:
            return self._torch_state_dict()
        groups = []
        idx = 0
        for g in self.param_groups:
            d = {k: v for k, v in g.items() if k != "params"}
            d["params"] = list(range(idx, idx + len(g["params"])))
            idx += len(g["params"])
            groups.append(d)
        state = {gi: {f"leaf{j}": share(t) for j, t in enumerate(st)}
                 for gi, st in enumerate(self._opt_state)}
        return {"state": state, "param_groups": groups, "step": self._step_count}

    def _without_saved_hyperparams(self, gi, entry, n):
        """A state saved before hyper-parameters left the state (flowlite's layout kept the
        optax.inject_hyperparams state: leaf0 the count, then one leaf per hyper-parameter,
        sorted by name, then the transformation's state) in today's layout."""
        key = self._keys[gi]
        k = len(key.hyper_names) if type(key) is _Factory else 0
        if not k or len(entry) != n + k or any(f"leaf{j}" not in entry for j in range(n + k)):
            return entry
        out = {"leaf0": entry["leaf0"]}
        for j in range(1, n):
            out[f"leaf{j}"] = entry[f"leaf{j + k}"]
        return out

    def load_state_dict(self, sd: dict) -> None:
        if self._torch_state_names is not None and not _is_leaf_layout(sd["state"]):
            return self._load_torch_state_dict(sd)
        torch_state.load_group_options(self, sd["param_groups"])
        state = sd["state"]
        for gi in range(len(self.param_groups)):
            self._sync_structure(gi)   # loaded options may imply another state layout
        for gi, st in enumerate(self._opt_state):
            entry = state.get(gi, state.get(str(gi)))
            if entry is None:
                raise KeyError(f"optimizer state for group {gi} missing from the state dict")
            entry = self._without_saved_hyperparams(gi, entry, len(st))
            if len(entry) != len(st):
                raise ValueError(f"optimizer state of group {gi} has {len(entry)} entries in "
                                 f"the state dict, {len(st)} expected (another optimizer or "
                                 "other options?)")
            for j, t in enumerate(st):
                if f"leaf{j}" not in entry:
                    raise KeyError(f"optimizer state leaf{j} of group {gi} missing from the "
                                   "state dict")
                v = entry[f"leaf{j}"]
                v = v if isinstance(v, Tensor) else from_jax(jax.numpy.asarray(v))
                if tuple(v.shape) != tuple(t.shape):
                    raise ValueError(f"optimizer state leaf{j} of group {gi}: shape "
                                     f"{tuple(v.shape)} in the state dict, {tuple(t.shape)} "
                                     "expected")
                with no_grad():
                    rebind(t, to_dtype(v.to(t.device), t.dtype), "load_state_dict")
        self._step_count = int(sd.get("step", 0))


def _group_entries(group):
    """A group's entries (but its params) when every value is an immutable scalar or a tuple
    of them — so that the very same objects mean the same values — else None."""
    items = []
    for k, v in group.items():
        if k == "params":
            continue
        t = type(v)
        if t is tuple:
            if not all(type(x) in _IMMUTABLE for x in v):
                return None
        elif t not in _IMMUTABLE:
            return None
        items.append((k, v))
    return len(group), tuple(items)


_IMMUTABLE = frozenset((int, float, bool, str, type(None)))
_MISSING = object()


def _same_entries(group, snap) -> bool:
    if snap is None or len(group) != snap[0]:
        return False
    get = group.get
    for k, v in snap[1]:
        if get(k, _MISSING) is not v:      # identity, not ==: == could reach a Tensor
            return False
    return True


def _is_leaf_layout(state) -> bool:
    """flowlite's generic layout ({group: {"leaf0": ...}}) rather than PyTorch's."""
    return any(isinstance(e, dict) and "leaf0" in e for e in state.values())


def _place_like(v, params):
    """Optimizer state lives where its parameter lives (same device, same sharding)."""
    put = extend.put
    vshape = tuple(v.shape)
    for p in params:
        if tuple(p.shape) == vshape:
            arr = extend.device_array(p)
            if arr is not None:
                return put(v, arr.sharding)
    if params:
        dev = params[0].device
        mesh = getattr(dev, "mesh", None)
        return put(v, mesh.replicated if mesh is not None else dev.jax_device)
    return v


def _as_float(v):
    if isinstance(v, Tensor):
        return v.item()
    return v


def _state_index(treedef, n_params):
    """For each state leaf, the index of the parameter it belongs to (or None)."""
    probe = jax.tree_util.tree_unflatten(treedef, list(range(treedef.num_leaves)))
    owner = [None] * treedef.num_leaves
    # leaves inside per-parameter lists (mu, nu, trace...) are laid out as lists of n_params
    def visit(node):
        if isinstance(node, (list, tuple)) and len(node) == n_params and \
                all(isinstance(x, int) for x in node) and not hasattr(node, "_fields"):
            for i, leaf in enumerate(node):
                owner[leaf] = i
            return
        if isinstance(node, dict):
            for v in node.values():
                visit(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                visit(v)
    visit(probe)
    return owner


class Optax(Optimizer):
    """Any optax GradientTransformation as a flowlite optimizer: `Optax(params, tx)`.

    The transformation's own hyper-parameters are fixed inside it (wrap it with
    `optax.inject_hyperparams` yourself and pass the names in `hyperparams` to
    change them per step without recompiling).
    """

    def __init__(self, params, tx, hyperparams: dict | None = None):
        if not isinstance(tx, optax.GradientTransformation):
            raise TypeError(f"Optax: expected an optax.GradientTransformation, got "
                            f"{type(tx).__name__}")
        self._tx = tx
        self._hp = dict(hyperparams or {})
        super().__init__(params, dict(self._hp))

    def update_transform(self, gi):
        group = self.param_groups[gi]
        key = _OptaxKey(self._tx, bool(group.get("maximize", False)))
        return key, {k: group[k] for k in self._hp}
