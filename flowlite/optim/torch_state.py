"""PyTorch's optimizer state_dict layout for optimizers that name their optax state fields.

torch.optim keeps state per parameter — {"state": {param_index: {"step": tensor(t),
"square_avg": ..., ...}}, "param_groups": [{..., "params": [indices]}]} — with no entry for a
parameter that has never been stepped.  flowlite keeps one optax state per group.  The
mapping is read off the optax state tree itself: a NamedTuple field named in the
optimizer's `_torch_state_names` holds either one leaf per parameter (a list) or one scalar
per group (PyTorch stores a copy per parameter, e.g. ASGD's eta and mu); every `count` field is
the step; hyper-parameters are not state (they are inputs of every update, read from the group).
"""
from __future__ import annotations

import jax
import numpy as np

from ..extend import Tensor, dtypes as D, from_numpy, no_grad, ops, rebind, share

_GetAttr = jax.tree_util.GetAttrKey
_Seq = jax.tree_util.SequenceKey


def leaf_roles(opt, gi, names=None) -> list:
    """Per state leaf of group gi: "step", (param i, name), ("*", name) or None."""
    treedef = opt._treedefs[gi]
    probe = jax.tree_util.tree_unflatten(treedef, list(range(treedef.num_leaves)))
    roles = [None] * treedef.num_leaves
    names = opt._torch_state_names if names is None else names
    for path, j in jax.tree_util.tree_flatten_with_path(probe)[0]:
        fields = [k.name for k in path if isinstance(k, _GetAttr)]
        if not fields or "hyperparams" in fields:
            continue
        field = fields[-1]
        if field == "count":
            roles[j] = "step"
        elif field in names:
            roles[j] = (path[-1].idx, names[field]) if isinstance(path[-1], _Seq) \
                else ("*", names[field])
    return roles


def _group_params_offsets(opt):
    off, out = 0, []
    for g in opt.param_groups:
        out.append(off)
        off += len(g["params"])
    return out


def torch_state_dict(opt) -> dict:
    state, groups = {}, []
    for gi, (g, off) in enumerate(zip(opt.param_groups, _group_params_offsets(opt))):
        n = len(g["params"])
        d = {k: v for k, v in g.items() if k != "params"}
        d["params"] = list(range(off, off + n))
        groups.append(d)
        if opt._group_steps[gi] == 0:
            continue                        # PyTorch has no state before the first step
        leaves = opt._opt_state[gi]
        roles = leaf_roles(opt, gi)
        step = next((leaves[j] for j, r in enumerate(roles) if r == "step"), None)
        for i in range(n):
            entry = {}
            if step is not None:
                entry["step"] = ops.to_dtype(share(step), D.float32)
            for j, r in enumerate(roles):
                if isinstance(r, tuple) and r[0] in (i, "*"):
                    entry[r[1]] = share(leaves[j])
            state[off + i] = entry
    return {"state": state, "param_groups": groups}


def _host(v) -> np.ndarray:
    if isinstance(v, Tensor):
        return v.numpy()
    if hasattr(v, "detach"):                 # a torch tensor, read without importing torch
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def _as_tensor(v):
    return v if isinstance(v, Tensor) else from_numpy(np.array(_host(v)))


def load_group_options(opt, groups) -> None:
    """Both state-dict layouts start here: the saved groups must match the optimizer's (count
    and sizes, PyTorch's messages); their options (lr, betas, ...) replace the current ones."""
    if len(groups) != len(opt.param_groups):
        raise ValueError(f"loaded state dict has {len(groups)} parameter groups, the "
                         f"optimizer has {len(opt.param_groups)}")
    for g, lg in zip(opt.param_groups, groups):
        if len(lg["params"]) != len(g["params"]):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             f"the size of optimizer's group ({len(lg['params'])} vs "
                             f"{len(g['params'])})")
    for g, lg in zip(opt.param_groups, groups):
        for k, v in lg.items():
            if k != "params":
                g[k] = v


def load_torch_state_dict(opt, sd) -> None:
    name = type(opt).__name__
    groups, state = sd["param_groups"], sd["state"]
    load_group_options(opt, groups)
    for gi in range(len(opt.param_groups)):
        opt._validate(opt.param_groups[gi])
        opt._sync_structure(gi)
    for gi, lg in enumerate(groups):
        ids = list(lg["params"])
        entries = [state.get(i, state.get(str(i))) for i in ids]
        have = [e is not None for e in entries]
        if not any(have):
            _reset_group(opt, gi)
            continue
        if not all(have):
            raise ValueError(f"{name}.load_state_dict: group {gi} has state for some "
                             "parameters only; flowlite keeps one state per group (one step "
                             "count), so every parameter of a group must have been stepped")
        steps = {float(_host(e["step"])) for e in entries if "step" in e}
        if len(steps) > 1:
            raise ValueError(f"{name}.load_state_dict: the parameters of group {gi} have "
                             f"different step counts {sorted(steps)}; flowlite keeps one per "
                             "group")
        leaves = opt._opt_state[gi]
        for j, r in enumerate(leaf_roles(opt, gi)):
            if r is None:
                continue
            key, src = ("step", entries[0]) if r == "step" else \
                (r[1], entries[0] if r[0] == "*" else entries[r[0]])
            if key not in src:
                raise KeyError(f"{name}.load_state_dict: state entry {key!r} missing for a "
                               f"parameter of group {gi}")
            v = _as_tensor(src[key])
            t = leaves[j]
            if tuple(v.shape) != tuple(t.shape):
                raise ValueError(f"{name}.load_state_dict: state {key!r} of group {gi} has "
                                 f"shape {tuple(v.shape)}, {tuple(t.shape)} expected")
            with no_grad():
                rebind(t, ops.to_dtype(v.to(t.device), t.dtype), "load_state_dict")
        opt._group_steps[gi] = int(steps.pop()) if steps else 1


def _reset_group(opt, gi):
    """No saved state for the group: it starts afresh, as in PyTorch."""
    key = opt._keys[gi]
    fresh = jax.tree_util.tree_leaves(opt._init_values(gi, key))
    for t, v in zip(opt._opt_state[gi], fresh):
        with no_grad():
            rebind(t, ops.to_dtype(from_numpy(np.asarray(v)).to(t.device), t.dtype),
                   "load_state_dict")
    opt._group_steps[gi] = 0


class ParamState(dict):
    """`optimizer.state`, as torch.optim has it: per parameter, its state tensors by
    PyTorch's names ("exp_avg", "momentum_buffer", ...; "step" is the group's count).  The
    tensors are the optimizer's own, so an in-place write to one (`state[p]["exp_avg"]
    .zero_()`) is what the next step() reads.  Rebuilt on every access (cheap, host-only); a
    parameter that has no state yet maps to {} (torch's defaultdict)."""

    def __init__(self, opt):
        super().__init__()
        self._opt = opt

    def _fill(self):
        opt = self._opt
        names = opt._torch_state_names or opt._param_state_names
        self.clear()
        if not names:
            return
        for gi, g in enumerate(opt.param_groups):
            if gi >= len(opt._opt_state) or opt._group_steps[gi] == 0:
                continue
            params, leaves = g["params"], opt._opt_state[gi]
            for j, role in enumerate(leaf_roles(opt, gi, names)):
                if role is None:
                    continue
                if role == "step" or role[0] == "*":
                    name = "step" if role == "step" else role[1]
                    for p in params:
                        dict.setdefault(self, p, {}).setdefault(name, leaves[j])
                else:
                    dict.setdefault(self, params[role[0]], {})[role[1]] = leaves[j]

    def __getitem__(self, p):
        self._fill()
        return dict.get(self, p, {})

    def __contains__(self, p):
        self._fill()
        return dict.__contains__(self, p)

    def __iter__(self):
        self._fill()
        return dict.__iter__(self)

    def __len__(self):
        self._fill()
        return dict.__len__(self)

    def keys(self):
        self._fill()
        return dict.keys(self)

    def values(self):
        self._fill()
        return dict.values(self)

    def items(self):
        self._fill()
        return dict.items(self)
