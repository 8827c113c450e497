"""`Module` and `Parameter`: PyTorch's registration, traversal, state_dict and mode semantics.

A `Parameter` is a leaf `Tensor` that requires grad; registering one (by assigning it as a
module attribute) makes it part of `parameters()` and `state_dict()`.  Buffers are tensors that
belong to the model state but are not trained (BatchNorm's running statistics); layers update
them by rebinding them with in-place ops, so the update is a pending node of the same graph as
the forward pass and lands in the step's one executable.

`state_dict()` returns handles on the current (immutable) nodes: a snapshot that later in-place
updates of the model do not change — the behaviour of `copy.deepcopy(model.state_dict())` in
PyTorch — and reading it is free until a value is needed.
"""
from __future__ import annotations

import collections
import copy
import itertools
from typing import Iterator, NamedTuple

import numpy as np

from .. import extend
from ..extend import Tensor, dtypes as D, from_numpy, no_grad, set_value, share
from ..extend import ops as _ops

to_dtype = _ops.to_dtype


class Parameter(Tensor):
    """A tensor that is a module parameter: a leaf that requires grad (by default)."""
    __slots__ = ()

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = _ops.empty(0)
        elif not isinstance(data, Tensor):
            data = from_numpy(np.array(data))   # a private copy (see load_state_dict)
        extend.share_into(self, data)
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        r = memo.get(id(self))
        if r is None:
            r = memo[id(self)] = Parameter(share(self), self.requires_grad)
            if self.grad is not None:
                r.grad = share(self.grad)
        return r

    def __reduce__(self):
        return (_parameter_from_pickle, (self.numpy(), self.requires_grad))


def _parameter_from_pickle(arr, requires_grad):
    return Parameter(from_numpy(arr), requires_grad)


def _copy_handle(t: Tensor) -> Tensor:
    """A new handle on the same (immutable) node: a lazy, sync-free deep copy."""
    if isinstance(t, Parameter):
        return Parameter(share(t), t.requires_grad)
    out = share(t)
    if t.requires_grad and t.is_leaf:
        out.requires_grad_(True)
    return out


class _IncompatibleKeys(NamedTuple):
    missing_keys: list
    unexpected_keys: list

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self.missing_keys}, " \
               f"unexpected_keys={self.unexpected_keys})"


class RemovableHandle:
    _ids = itertools.count()

    def __init__(self, hooks: dict):
        self.hooks = hooks
        self.id = next(RemovableHandle._ids)

    def remove(self):
        self.hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _shape_str(shape):
    return f"({', '.join(str(s) for s in shape)}{',' if len(shape) == 1 else ''})"


def _addindent(s, n):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


MODE_VERSION = [0]   # bumped whenever some module's train/eval mode changes


class Module:
    """Base class of every layer and model (PyTorch's `nn.Module`)."""

    _version = 1
    training: bool

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments "
                            f"(Module.__init__ takes none)")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = {}
        d["_forward_hooks"] = {}
        d["_forward_pre_hooks"] = {}

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  f'"forward" function')

    def __call__(self, *args, **kwargs):
        if not self._forward_pre_hooks and not self._forward_hooks:
            return self.forward(*args, **kwargs)
        for hook in list(self._forward_pre_hooks.values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            r = hook(self, args, out)
            if r is not None:
                out = r
        return out

    def register_forward_hook(self, hook) -> RemovableHandle:
        h = RemovableHandle(self._forward_hooks)
        self._forward_hooks[h.id] = hook
        return h

    def register_forward_pre_hook(self, hook) -> RemovableHandle:
        h = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[h.id] = hook
        return h

    # ---- registration ------------------------------------------------------------------------
    def _check_name(self, name, kind):
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if name == "" or "." in name:
            raise KeyError(f"{kind} name can't be empty or contain \".\", got: {name!r}")

    def register_parameter(self, name: str, param) -> None:
        self._check_name(name, "parameter")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (flowlite.nn.Parameter or None required)")
        self._buffers.pop(name, None)
        self._modules.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        self._check_name(name, "buffer")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            f"(flowlite Tensor or None required)")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            d.pop(name, None)
            self._buffers.pop(name, None)
            self._modules.pop(name, None)
            self._non_persistent_buffers_set.discard(name)
            params[name] = value
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                f"(flowlite.nn.Parameter or None expected)")
            params[name] = None
            return
        if isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            d.pop(name, None)
            params.pop(name, None)
            self._buffers.pop(name, None)
            self._modules[name] = value
            return
        modules = d.get("_modules")
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (flowlite.nn.Module or None expected)")
            modules[name] = None
            return
        buffers = d.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                f"(flowlite Tensor or None expected)")
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for k in ("_parameters", "_buffers", "_modules"):
            s = d.get(k)
            if s is not None and name in s:
                return s[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for k in ("_parameters", "_buffers", "_modules"):
            s = self.__dict__[k]
            if name in s:
                del s[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(super().__dir__()) + list(self._parameters) + list(self._modules) + \
            list(self._buffers)
        return sorted(set(k for k in keys if not k[:1].isdigit()))

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __deepcopy__(self, memo):
        # tensors are copied as new handles on the same immutable nodes: lazy, no sync
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for t in store.values():
                    if t is not None and id(t) not in memo:
                        memo[id(t)] = _copy_handle(t)
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = copy.deepcopy(v, memo)
        return new

    # ---- traversal ---------------------------------------------------------------------------
    def _named_members(self, get, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for k, v in get(m):
                if v is None:
                    continue
                if remove_duplicate:
                    if id(v) in seen:
                        continue
                    seen.add(id(v))
                yield (mprefix + ("." if mprefix else "") + k, v)

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator:
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                   remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator:
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                   remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self) -> Iterator:
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator:
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from m.named_modules(memo, sub, remove_duplicate)

    def modules(self) -> Iterator:
        for _, m in self.named_modules():
            yield m

    def get_submodule(self, target: str) -> "Module":
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if item not in mod._modules or mod._modules[item] is None:
                raise AttributeError(f"{type(mod).__name__} has no submodule `{item}` "
                                     f"(looking up '{target}')")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"{type(mod).__name__} has no buffer `{name}`")
        return mod._buffers[name]

    # ---- modes and bulk operations -----------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        if self.training != mode:
            MODE_VERSION[0] += 1     # lets flowlite.compile's guard skip re-walking modules
        self.training = mode
        for m in self.children():     # recursive calls, so subclasses may override train()
            m.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = _ops.zeros_like(p.grad)

    def apply(self, fn) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply_tensors(self, fn, params=True, buffers=True):
        """Rebind every parameter/buffer (and grad) to fn(tensor); identities are preserved."""
        with no_grad():
            for m in self.modules():
                if params:
                    for p in m._parameters.values():
                        if p is None:
                            continue
                        new = fn(p)
                        if new is not p:
                            set_value(p, new)
                        if p.grad is not None:
                            g = fn(p.grad)
                            if g is not p.grad:
                                p.grad = share(g)
                if buffers:
                    for k, b in m._buffers.items():
                        if b is None:
                            continue
                        new = fn(b)
                        if new is not b:
                            set_value(b, new)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """`to(device)`, `to(dtype)`, `to(device, dtype)`, `to(tensor)`: floating-point
        parameters and buffers change dtype; everything moves device."""
        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to(): unexpected arguments {sorted(kwargs)}")
        Device = extend.Device
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, D.DType):
                dtype = a
            elif isinstance(a, (str, Device)):
                device = a
            elif a is not None:
                try:
                    dtype = D.from_any(a)
                except TypeError:
                    raise TypeError(f"Module.to(): unsupported argument {a!r}") from None
        if dtype is not None:
            dtype = D.canonical(D.from_any(dtype))
            if not dtype.is_floating_point:
                raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got "
                                f"desired dtype={dtype}")

        def convert(t):
            out = t
            if device is not None:
                if extend.device(device) is not t.device:
                    out = share(out.to(device))
            if dtype is not None and out.dtype.is_floating_point and out.dtype is not dtype:
                out = to_dtype(share(out), dtype)
            return out
        return self._apply_tensors(convert)

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def half(self):
        return self.to(D.float16)

    def bfloat16(self):
        return self.to(D.bfloat16)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else f"cuda:{device}")

    def type(self, dst_type):
        return self.to(dst_type)

    # ---- state dict --------------------------------------------------------------------------
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else share(p)
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else share(b)

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        if args:  # PyTorch's deprecated positional form (destination, prefix, keep_vars)
            destination = args[0]
            if len(args) > 1:
                prefix = args[1]
            if len(args) > 2:
                keep_vars = args[2]
        if destination is None:
            destination = collections.OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".",
                             keep_vars=keep_vars)
        return destination

    def _load_from_state_dict(self, state_dict, prefix, missing, unexpected, errors, assign):
        local = {**{k: v for k, v in self._parameters.items() if v is not None},
                 **{k: v for k, v in self._buffers.items()
                    if v is not None and k not in self._non_persistent_buffers_set}}
        for name, target in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append((key, tuple(target.shape)))
                continue
            value = state_dict[key]
            src = value if isinstance(value, Tensor) else None
            if src is None:
                try:
                    arr = np.asarray(value)
                except Exception:
                    errors.append(f'While copying the parameter named "{key}", expected a '
                                  f"tensor or array, got {type(value).__name__}")
                    continue
                shape = tuple(arr.shape)
            else:
                shape = tuple(src.shape)
            if shape != tuple(target.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{_shape_str(shape)} from checkpoint, the shape in current model "
                              f"is {_shape_str(tuple(target.shape))}.")
                continue
            if src is None:
                if arr.dtype.kind not in "biuf":
                    errors.append(f'While copying the parameter named "{key}": unsupported '
                                  f"dtype {arr.dtype}")
                    continue
                # always a private copy: on CPU the device buffer may alias the host array,
                # which the caller (e.g. a live PyTorch tensor's .numpy()) could still mutate
                src = from_numpy(np.array(arr, dtype=target.dtype.np), device=target.device)
            elif src.device is not target.device:
                src = share(src.to(target.device))
            if src.dtype is not target.dtype and not assign:
                src = to_dtype(share(src), target.dtype)
            set_value(target, src)
        for key in state_dict:
            if key.startswith(prefix):
                rest = key[len(prefix):]
                head = rest.split(".", 1)[0]
                if "." not in rest:
                    if rest not in local:
                        unexpected.append((key, _value_shape(state_dict[key])))
                elif head not in self._modules or self._modules[head] is None:
                    unexpected.append((key, _value_shape(state_dict[key])))

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy parameters and buffers from `state_dict` (flowlite tensors, numpy arrays or
        anything `np.asarray` accepts, e.g. a converted PyTorch checkpoint)."""
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []

        def load(module, prefix):
            module._load_from_state_dict(state_dict, prefix, missing, unexpected, errors,
                                         assign)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")
        with no_grad():
            load(self, "")
        order = {k: i for i, k in enumerate(state_dict)}
        unexpected.sort(key=lambda ks: order[ks[0]])     # in the checkpoint's order
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(
                    f'"{k}" (shape {_shape_str(s) if s is not None else "?"} in checkpoint)'
                    for k, s in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(
                    f'"{k}" (shape {_shape_str(s)} in current model)' for k, s in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        return _IncompatibleKeys([k for k, _ in missing], [k for k, _ in unexpected])

    # ---- repr -------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        child_lines = []
        for key, m in self._modules.items():
            mod_str = _addindent(repr(m), 2)
            child_lines.append(f"({key}): {mod_str}")
        lines = lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra.split("\n")) == 1 and not child_lines:
                main += extra
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


def _value_shape(v):
    try:
        return tuple(v.shape)
    except AttributeError:
        try:
            return tuple(np.shape(v))
        except Exception:
            return None


def _modes(m: Module) -> tuple:
    return tuple(x.training for x in m.modules())


# a compiled step replays only while the train/eval modes it was traced with still hold
extend.register_guard(Module, _modes, lambda: MODE_VERSION[0])
