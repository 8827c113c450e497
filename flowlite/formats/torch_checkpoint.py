"""Reading PyTorch's own `torch.save` files — without torch, and without running their code.

A `torch.save` file (PyTorch >= 1.6) is a zip archive: `<name>/data.pkl`, a pickle of the
object whose tensors refer to storages by key, and `<name>/data/<key>`, each storage's raw
bytes (`<name>/byteorder` says their byte order).  Unpickling normally imports and calls
whatever the pickle names; here the unpickler resolves only an allowlist, as
`torch.load(weights_only=True)` does:

* `torch._utils._rebuild_tensor_v2` / `_rebuild_tensor` / `_rebuild_parameter` /
  `_rebuild_parameter_with_state` (rebuilt here from the storage bytes, with numpy),
* the typed storages `torch.FloatStorage`, `HalfStorage`, `BFloat16Storage`,
  `DoubleStorage`, `LongStorage`, `IntStorage`, `ShortStorage`, `CharStorage`,
  `ByteStorage`, `BoolStorage` (only as tags of the persistent storage references),
* `torch.Size`, torch dtypes (`torch.float32`, ... -> flowlite dtypes),
  `collections.OrderedDict`, `builtins.set` / `frozenset`, and `_codecs.encode` with
  latin-1 (how protocol 2 spells bytes).

Any other global — `os.system`, `builtins.eval`, a user class, numpy arrays — is refused
with an UnpicklingError naming it, before anything is called; no torch module is imported.
Storage sizes are checked against their zip entries and every tensor's view (offset,
shape, strides) against its storage before bytes are read.  Tensors come back as
flowlite tensors (on `map_location`), containers as they were saved.

Layer: formats — imports engine.device, engine.dtypes, frontend.tensor, safetensors_format.
"""
from __future__ import annotations

import _codecs
import collections
import io
import pickle
import struct
import zipfile

import numpy as np

from ..engine import dtypes as D
from ..engine.device import device as _device
from .safetensors_format import to_tensor
from ..frontend.tensor import Size

__all__ = ["is_torch_file", "load"]

_STORAGES = {
    "FloatStorage": D.float32, "DoubleStorage": D.float64, "HalfStorage": D.float16,
    "BFloat16Storage": D.bfloat16, "LongStorage": D.int64, "IntStorage": D.int32,
    "ShortStorage": D.int16, "CharStorage": D.int8, "ByteStorage": D.uint8,
    "BoolStorage": D.bool_,
}
_DTYPES = {
    "float32": D.float32, "float": D.float32, "float64": D.float64, "double": D.float64,
    "float16": D.float16, "half": D.float16, "bfloat16": D.bfloat16, "int64": D.int64,
    "long": D.int64, "int32": D.int32, "int": D.int32, "int16": D.int16, "short": D.int16,
    "int8": D.int8, "uint8": D.uint8, "bool": D.bool_, "uint32": D.uint32,
}
_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
_MAX_DEPTH = 100


def is_torch_file(data) -> bool:
    """A torch.save zip, or the legacy (pre-1.6) pickle stream that starts with its magic."""
    head = bytes(data[:4])
    if head == b"PK\x03\x04":
        return True
    return head[:1] == b"\x80" and _legacy_magic(data)


def _legacy_magic(data) -> bool:
    try:
        return pickle.loads(bytes(data[:32])) == _LEGACY_MAGIC
    except Exception:       # only a pickled int is of interest; anything else is not it
        return False


class _StorageTag:
    """What `torch.FloatStorage` & co. resolve to: the dtype of a storage reference."""

    def __init__(self, name):
        self.name, self.dtype = name, _STORAGES[name]

    def __call__(self, *args, **kwargs):
        raise pickle.UnpicklingError(f"torch.{self.name} may only tag a storage reference")


class _Storage:
    __slots__ = ("array", "location")

    def __init__(self, array, location):
        self.array, self.location = array, location


class _TensorRef:
    """A rebuilt tensor, as a host array until the whole pickle has been read."""
    __slots__ = ("array", "requires_grad", "location")

    def __init__(self, array, requires_grad, location):
        self.array, self.requires_grad, self.location = array, requires_grad, location



def _ints(v, what):
    if not isinstance(v, (tuple, list)) or not all(type(x) is int for x in v):
        raise pickle.UnpicklingError(f"torch checkpoint: malformed tensor {what} {v!r:.80}")
    return tuple(v)


def _rebuild_tensor(storage, storage_offset, size, stride, requires_grad=False,
                    backward_hooks=None, metadata=None):
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("torch checkpoint: a tensor must be rebuilt from a "
                                     f"storage reference, got {type(storage).__name__}")
    size, stride = _ints(size, "size"), _ints(stride, "stride")
    if type(storage_offset) is not int or storage_offset < 0 or len(size) != len(stride) \
            or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise pickle.UnpicklingError(f"torch checkpoint: malformed tensor view (offset "
                                     f"{storage_offset!r}, size {size}, stride {stride})")
    base = storage.array
    if 0 not in size:
        last = storage_offset + sum((n - 1) * st for n, st in zip(size, stride))
        if last >= base.size:
            raise pickle.UnpicklingError(
                f"torch checkpoint: tensor view (offset {storage_offset}, size {size}, stride "
                f"{stride}) reaches element {last} of a {base.size}-element storage")
        item = base.itemsize
        if size:
            view = np.lib.stride_tricks.as_strided(base[storage_offset:], shape=size,
                                                   strides=[st * item for st in stride],
                                                   writeable=False)
            arr = np.ascontiguousarray(view)
        else:                   # as_strided reads shape=() as "keep the base's shape"
            arr = base[storage_offset:storage_offset + 1].reshape(()).copy()
    else:
        arr = np.zeros(size, dtype=base.dtype)
    return _TensorRef(arr, bool(requires_grad), storage.location)


def _rebuild_tensor_v1(storage, storage_offset, size, stride):
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad, backward_hooks, *state):
    if not isinstance(data, _TensorRef):
        raise pickle.UnpicklingError("torch checkpoint: a Parameter must wrap a tensor")
    if state and state[0]:
        raise pickle.UnpicklingError("torch checkpoint: Parameter attributes are not loaded "
                                     f"({sorted(state[0])!r:.80})")
    data.requires_grad = bool(requires_grad)
    return data


def _codecs_encode(text, encoding="utf-8"):
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("torch checkpoint: _codecs.encode is allowed only for "
                                     "latin-1 text (how a pickle spells bytes)")
    return _codecs.encode(text, encoding)


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor_v1,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): Size,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set, ("__builtin__", "set"): set,
    ("builtins", "frozenset"): frozenset, ("__builtin__", "frozenset"): frozenset,
    ("_codecs", "encode"): _codecs_encode,
}


class _Unpickler(pickle._Unpickler):
    """The pure-Python unpickler (state dict pickles are small: the bytes live in the
    storages), so that BUILD can be restricted too: only a dict's / OrderedDict's plain
    attributes (a state_dict's `_metadata`) may be set, never attributes of anything the
    allowlist hands out."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, name, storage, safe=None, trusted=False):
        super().__init__(file, encoding="utf-8")
        self._name = name
        self._storage = storage
        # weights_only=False: any global, any object's state (the user trusts the file)
        self._trusted = trusted
        # the user's allowlist by (module, name) (flowlite.serialization.add_safe_globals /
        # safe_globals, as torch's): those globals may be loaded, and instances of those
        # classes restored
        self._safe = safe or {}
        self._safe_types = {o for o in self._safe.values() if isinstance(o, type)}

    def load_build(self):
        if self._trusted:
            return pickle._Unpickler.load_build(self)
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) in self._safe_types:
            setstate = getattr(inst, "__setstate__", None)
            if setstate is not None:
                setstate(state)
            else:
                inst.__dict__.update(state)
            return
        if not (type(inst) in (dict, collections.OrderedDict) and isinstance(state, dict)
                and all(type(k) is str for k in state)) or type(inst) is dict:
            raise pickle.UnpicklingError(
                f"flowlite.load: {self._name}: refusing to set the state of a "
                f"{type(inst).__name__} (only an OrderedDict's attributes may be restored)")
        inst.__dict__.update(state)

    dispatch[pickle.BUILD[0]] = load_build

    def find_class(self, module, name):
        fn = _ALLOWED.get((module, name))
        if fn is not None:
            return fn
        if module == "torch" and name in _STORAGES:
            return _StorageTag(name)
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        fn = self._safe.get((module, name))
        if fn is not None:
            return fn
        if self._trusted:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"flowlite.load: {self._name}: refusing to load the global {module}.{name}: "
            "flowlite loads only tensors, state dicts and plain containers from torch.save "
            "files and never runs code from them (like torch.load(weights_only=True)); if "
            "you trust the file, allow it with flowlite.serialization.add_safe_globals([...]) "
            "or `with flowlite.serialization.safe_globals([...]):`, or load it with "
            "weights_only=False, as in PyTorch")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"flowlite.load: {self._name}: unknown persistent "
                                         f"reference {pid!r:.80}")
        _, tag, key, location, numel = pid[:5]
        if not isinstance(tag, _StorageTag):
            raise pickle.UnpicklingError(f"flowlite.load: {self._name}: unsupported storage "
                                         f"type {tag!r:.60}")
        if type(numel) is not int or numel < 0 or not isinstance(location, str):
            raise pickle.UnpicklingError(f"flowlite.load: {self._name}: malformed storage "
                                         f"reference {pid!r:.80}")
        return self._storage(str(key), tag.dtype, numel, location)


def _zip_loader(name, zf, prefix, byteorder):
    cache = {}

    def storage(key, dtype, numel, location):
        hit = cache.get(key)
        if hit is not None:
            return hit
        entry = f"{prefix}data/{key}"
        try:
            info = zf.getinfo(entry)
        except KeyError:
            raise pickle.UnpicklingError(f"flowlite.load: {name}: storage {key!r} is missing "
                                         "from the archive") from None
        need = numel * dtype.itemsize
        if info.file_size != need:
            raise pickle.UnpicklingError(
                f"flowlite.load: {name}: storage {key!r} should hold {numel} {dtype.name} "
                f"elements ({need} bytes), its entry holds {info.file_size} bytes")
        raw = zf.read(info)
        arr = np.frombuffer(raw, dtype=np.dtype(dtype.np).newbyteorder(byteorder), count=numel)
        cache[key] = s = _Storage(arr.astype(dtype.np), location)
        return s
    return storage


def _materialise(name, obj, device_for):
    """Replace every _TensorRef in the unpickled object by a flowlite tensor (in place for
    dicts and lists, so an OrderedDict keeps its `_metadata`)."""
    made, seen = {}, set()

    def conv(x, depth):
        if depth > _MAX_DEPTH:
            raise ValueError(f"flowlite.load: {name}: nested deeper than {_MAX_DEPTH} levels")
        if isinstance(x, _TensorRef):
            t = made.get(id(x))
            if t is None:
                t = made[id(x)] = to_tensor(x.array, name, "in the checkpoint",
                                            device_for(x.location))
                if x.requires_grad and t.dtype.is_floating_point:
                    t.requires_grad_(True)
            return t
        if isinstance(x, (dict, list)):
            if id(x) in seen:
                return x
            seen.add(id(x))
            items = x.items() if isinstance(x, dict) else enumerate(x)
            for k, v in list(items):
                x[k] = conv(v, depth + 1)
            return x
        if isinstance(x, tuple) and not isinstance(x, Size):
            return type(x)(conv(v, depth + 1) for v in x) if not hasattr(x, "_fields") else x
        if isinstance(x, (set, frozenset)) and any(isinstance(v, _TensorRef) for v in x):
            raise ValueError(f"flowlite.load: {name}: tensors inside a set are not supported")
        if isinstance(x, _StorageTag):
            raise ValueError(f"flowlite.load: {name}: a bare storage type in the checkpoint")
        return x

    return conv(obj, 0)


def _device_for(map_location):
    if map_location is None:
        return lambda loc: None
    if isinstance(map_location, dict):
        mapped = {k: (None if v is None else _device(v)) for k, v in map_location.items()}
        return lambda loc: mapped.get(loc)
    if callable(map_location):
        raise TypeError("flowlite.load: map_location as a function is not supported for "
                        "torch.save files; pass a device or a dict of locations to devices")
    dev = _device(map_location)
    return lambda loc: dev


def load(name: str, data, map_location=None, safe=None, trusted=False):
    """The object of torch.save zip archive `data`; `safe`: the user's allowlisted globals by
    (module, qualified name); `trusted` (weights_only=False): any global may be loaded."""
    device_for = _device_for(map_location)
    if bytes(data[:4]) != b"PK\x03\x04":
        return _load_legacy(name, data, device_for)
    try:
        zf = zipfile.ZipFile(io.BytesIO(bytes(data)))
        names = zf.namelist()
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise ValueError(f"flowlite.load: {name}: not a flowlite checkpoint, and not a "
                         f"readable torch.save zip archive either ({e})") from None
    pkls = [n for n in names if n == "data.pkl" or n.endswith("/data.pkl")]
    pkls = [n for n in pkls if n.count("/") <= 1]
    if len(pkls) != 1:
        raise ValueError(f"flowlite.load: {name}: not a flowlite checkpoint: a zip file but "
                         f"not a torch.save archive (expected one <name>/data.pkl, found "
                         f"{len(pkls)})")
    prefix = pkls[0][:-len("data.pkl")]
    byteorder = "<"
    if f"{prefix}byteorder" in names:
        order = zf.read(f"{prefix}byteorder").strip()
        if order not in (b"little", b"big"):
            raise ValueError(f"flowlite.load: {name}: unknown byteorder {order!r:.40}")
        byteorder = "<" if order == b"little" else ">"
    storage = _zip_loader(name, zf, prefix, byteorder)
    try:
        obj = _Unpickler(io.BytesIO(zf.read(pkls[0])), name, storage, safe, trusted).load()
    except pickle.UnpicklingError as e:
        raise ValueError(str(e) if str(e).startswith("flowlite.load") else
                         f"flowlite.load: {name}: {e}") from None
    except (EOFError, struct.error, TypeError, KeyError, IndexError, AttributeError,
            ValueError, RecursionError, MemoryError) as e:
        raise ValueError(f"flowlite.load: {name}: corrupt torch.save pickle "
                         f"({type(e).__name__}: {str(e)[:200]})") from None
    return _materialise(name, obj, device_for)


def _load_legacy(name, data, device_for):
    raise ValueError(f"flowlite.load: {name}: a legacy (PyTorch < 1.6, non-zip) torch.save "
                     "file; flowlite reads the zip format torch.save has written since 1.6 — "
                     "re-save it with a current torch.save, or as safetensors")
