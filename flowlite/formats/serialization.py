"""Checkpoints: `flowlite.save(obj, path)` / `flowlite.load(path)`.

`save` writes this module's format, or safetensors for a `.safetensors` path / with
`format="safetensors"` (`flowlite.safetensors_format`); `load` recognises all three of
this format, safetensors and PyTorch's `torch.save` zip (`flowlite.torch_checkpoint`,
a restricted unpickler) by their first bytes.  What follows is flowlite's own format.

Saves nested dicts / lists / tuples of tensors, numpy arrays, Python scalars
(bool, int, float incl. inf/nan), strings, None and flowlite dtypes — model
and optimizer state dicts, scheduler states, training metadata.  Loading never
executes code from the file: there is no pickle; the file is JSON plus raw
bytes, and only the node kinds below are understood.

File format, version 1 (integers little-endian)::

    offset  size  content
    0       8     magic  b"\\x89FLWLT\\r\\n"
    8       4     format version, uint32 (= 1)
    12      8     header length H, uint64
    20      H     header: UTF-8 JSON  {"tree": <node>, "data_bytes": N, "alignment": 64}
    20+H    pad   zero bytes up to a multiple of 64: the data section starts at D
    D       N     tensor bytes, little-endian, C order; each tensor at D + its "offset"
                  (offsets are multiples of 64)
    D+N     32    SHA-256 of every byte before it (offset 0 .. D+N)
    D+N+32  8     end marker  b"FLWLTEND"

A <node> uses only JSON types:  null, true/false, numbers (an int stays an int,
a float is written with a decimal point), strings and arrays (Python lists)
stand for themselves; every other value is an object with exactly one key:

    {"$float": "nan" | "inf" | "-inf"}
    {"$tuple": [<node>, ...]}
    {"$dict": [[<key node>, <value node>], ...]}       (keys of any scalar type, ordered)
    {"$tensor": {"dtype": "bfloat16", "shape": [2, 3], "offset": 0, "nbytes": 12,
                 "requires_grad": false}}
    {"$ndarray": {"dtype": ..., "shape": ..., "offset": ..., "nbytes": ...}}
    {"$dtype": "float32"}

A tensor saved twice (the same object) is stored once and loads as one tensor:
distinct tensors always have distinct offsets, so the offset identifies it.
Arrays are laid out in the order the tree lists them, each in a slot of its own
(an empty one too: a slot of 1 byte): a later entry starts at or after the end
of the one before it, except a repeat of an earlier tensor entry (the same
tensor).  Objects nest at most 100 levels deep.

Loading treats the file as untrusted, checksum or not: every entry must name a
known dtype, a shape of non-negative ints whose byte count prod(shape) * itemsize
is its "nbytes", and a slot inside the data section that overlaps no other, and
the whole tree is checked before any array is allocated — so the arrays never
total more than the file's data section: loading needs about twice the file's
size (its bytes and one copy of the arrays), and a crafted file is refused with
no more than the file and its parsed header.  Any truncated, corrupt, foreign
or crafted file raises ValueError naming the file and the problem.

Writes are atomic: the file is written to a temporary file in the target's
directory, flushed and fsync'ed, renamed over the target with `os.replace`, and
the directory is fsync'ed — a crash at any point leaves either the previous
checkpoint or the new one, never a mix.  A crash can leave a stray
`.<name>.<random>.tmp` file next to the target, which `load` never reads.

Layer: formats — imports engine.device, engine.dtypes, frontend.tensor, nn.functional,
nn.module, safetensors_format, torch_checkpoint.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import secrets
import struct
import sys

import numpy as np

from ..engine import dtypes as D
from ..engine.device import device as _device
from ..frontend.tensor import Tensor, from_numpy
from . import safetensors_format as _safetensors, torch_checkpoint as _torch_checkpoint

__all__ = ["save", "load", "FORMAT_VERSION"]

MAGIC = b"\x89FLWLT\r\n"
END_MARKER = b"FLWLTEND"
FORMAT_VERSION = 1
_ALIGN = 64
_PREFIX = struct.Struct("<8sIQ")        # magic, version, header length
_TRAILER_LEN = 32 + len(END_MARKER)     # sha256 digest + end marker
_MAX_DEPTH = 100        # nesting levels of a saved object, for save and load alike


# ---- saving ---------------------------------------------------------------------------------
class _Writer:
    """Encodes the tree into JSON nodes and lays the arrays out in the data section."""

    def __init__(self, on_leaf=None):
        self.on_leaf = on_leaf  # (value, path) -> node: another format stores the arrays
        self.arrays = []        # (offset, uint8 view) in data order
        self.size = 0
        self.by_id = {}         # id(tensor) -> node, so shared tensors are stored once
        self.keep = []          # keeps ids valid while encoding
        self.active = set()

    def add_array(self, arr):
        arr = np.ascontiguousarray(arr)
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        offset = -(-self.size // _ALIGN) * _ALIGN
        raw = arr.reshape(-1).view(np.uint8)
        self.arrays.append((offset, raw))
        # every array gets its own offset, even an empty one (offsets identify shared tensors)
        self.size = offset + max(raw.nbytes, 1)
        return offset, raw.nbytes

    def encode(self, obj, where, depth=0, path=()):
        if depth > _MAX_DEPTH:
            raise ValueError(f"flowlite.save: object nested deeper than {_MAX_DEPTH} levels at "
                             f"{where}")
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            if math.isfinite(obj):
                return float(obj)
            return {"$float": "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
        if self.on_leaf is not None and isinstance(obj, (Tensor, np.ndarray)):
            if isinstance(obj, np.ndarray):
                _dtype_name(obj.dtype, where)
            return self.on_leaf(obj, path)
        if isinstance(obj, Tensor):
            node = self.by_id.get(id(obj))
            if node is None:
                arr = np.asarray(obj.numpy())
                offset, nbytes = self.add_array(arr)
                node = {"$tensor": {"dtype": obj.dtype.name, "shape": list(obj.shape),
                                    "offset": offset, "nbytes": nbytes,
                                    "requires_grad": bool(obj.requires_grad)}}
                self.by_id[id(obj)] = node
                self.keep.append(obj)
            return node
        if isinstance(obj, np.ndarray):
            dt = _dtype_name(obj.dtype, where)
            offset, nbytes = self.add_array(obj)
            return {"$ndarray": {"dtype": dt, "shape": list(obj.shape), "offset": offset,
                                 "nbytes": nbytes}}
        if isinstance(obj, np.generic):
            return self.encode(obj.item(), where, depth)
        if isinstance(obj, D.DType):
            return {"$dtype": obj.name}
        if isinstance(obj, (list, tuple, dict)):
            if id(obj) in self.active:
                raise ValueError(f"flowlite.save: the object contains itself at {where}")
            self.active.add(id(obj))
            try:
                if isinstance(obj, dict):
                    items = []
                    for k, v in obj.items():
                        kn = self.encode_key(k, where)
                        items.append([kn, self.encode(v, f"{where}[{k!r}]", depth + 1,
                                                      path + (k,))])
                    return {"$dict": items}
                enc = [self.encode(v, f"{where}[{i}]", depth + 1, path + (i,))
                       for i, v in enumerate(obj)]
                return enc if isinstance(obj, list) else {"$tuple": enc}
            finally:
                self.active.discard(id(obj))
        raise _NotATree(f"flowlite.save: cannot save an object of type {type(obj).__name__} "
                        f"at {where} as safetensors; supported: dict, list, tuple, Tensor, "
                        "numpy array, bool, int, float, str, None, flowlite dtype")

    def encode_key(self, k, where):
        if k is None or isinstance(k, (bool, int, float, str, np.generic)):
            return self.encode(k, where)
        if isinstance(k, tuple) and all(x is None or isinstance(x, (bool, int, float, str))
                                        for x in k):
            return self.encode(k, where)
        raise TypeError(f"flowlite.save: unsupported dict key {k!r} of type "
                        f"{type(k).__name__} at {where}")


def _dtype_name(dt, where):
    # the array's own dtype: numpy arrays are host data, kept exactly (a float64 array is
    # float64 with x64 off too)
    d = D._BY_NP.get(np.dtype(dt).newbyteorder("="))
    if d is not None:
        return d.name
    try:
        return D.from_numpy_dtype(dt).name
    except Exception:
        raise TypeError(f"flowlite.save: numpy arrays of dtype {dt} are not supported (at "
                        f"{where})") from None


def _serialize(obj):
    """-> (prefix+header+padding bytes, writer) ready to stream."""
    w = _Writer()
    tree = w.encode(obj, "obj")
    header = json.dumps({"tree": tree, "data_bytes": w.size, "alignment": _ALIGN},
                        separators=(",", ":"), allow_nan=False).encode("utf-8")
    head = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header
    head += b"\0" * (-len(head) % _ALIGN)
    return head, w


def _write_stream(f, head, w):
    h = hashlib.sha256()

    def out(b):
        h.update(b)
        f.write(b)

    out(head)
    pos = 0
    for offset, raw in w.arrays:
        if offset > pos:
            out(b"\0" * (offset - pos))
        out(memoryview(raw))
        pos = offset + raw.nbytes
    if w.size > pos:
        out(b"\0" * (w.size - pos))
    f.write(h.digest())
    f.write(END_MARKER)


_SAVE_KWARGS = {"pickle_module", "pickle_protocol", "_use_new_zipfile_serialization"}


def _format_for(path, format):
    if format is not None:
        if format not in ("flowlite", "safetensors"):
            raise ValueError(f"flowlite.save: unknown format {format!r}; expected 'flowlite' "
                             "or 'safetensors'")
        return format
    name = os.fspath(path) if not hasattr(path, "write") else getattr(path, "name", "")
    return "safetensors" if str(name).endswith(".safetensors") else "flowlite"


class _NotATree(TypeError):
    """The object holds something other than tensors, containers and scalars."""


# a file of pickled Python objects (a whole nn.Module, as torch.save(model) writes): loading
# it runs code, so flowlite.load refuses it unless weights_only=False (as torch.load does)
PICKLE_MAGIC = b"\x89FLWLT-PICKLE\r\n"


def save(obj, path, format=None, **torch_kwargs) -> None:
    """Save `obj` to `path` atomically, or to a writable binary file object.

    format: "flowlite" (default) — nested dicts/lists/tuples of tensors, numpy arrays,
    scalars, strings, None; "safetensors" (default for a `.safetensors` path) — standard
    safetensors that PyTorch and the Hugging Face ecosystem read (`flowlite.safetensors_format`
    documents how nested objects are flattened).  Anything else in `obj` (a whole
    `nn.Module`, as `torch.save(model, f)` saves) is written as a pickle, which
    `flowlite.load` reads only with `weights_only=False` — as torch.load refuses it by
    default.  torch.save's `pickle_module`, `pickle_protocol` and
    `_use_new_zipfile_serialization` are accepted and ignored."""
    unknown = set(torch_kwargs) - _SAVE_KWARGS
    if unknown:
        raise TypeError(f"flowlite.save: unexpected arguments {sorted(unknown)}")
    if _format_for(path, format) == "safetensors":
        payload = _safetensors.encode(obj, lambda o, on_leaf: _Writer(on_leaf).encode(o, "obj"))
        write = lambda f: f.write(payload)   # noqa: E731
    else:
        try:
            head, w = _serialize(obj)
            write = lambda f: _write_stream(f, head, w)   # noqa: E731
        except _NotATree:
            payload = PICKLE_MAGIC + pickle.dumps(obj, protocol=4)
            write = lambda f: f.write(payload)   # noqa: E731
    if hasattr(path, "write"):
        write(path)
        return
    _atomic_write(os.fspath(path), write)


def _atomic_write(path, write) -> None:
    """Write through a temporary file, fsync, rename over `path`, fsync the directory: a
    crash or a failing write leaves the previous file intact."""
    target = os.path.realpath(path)        # write through a symlink, like open(path, "wb")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"flowlite.save: {path}: directory {directory} does not exist")
    tmp = os.path.join(directory,
                       f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        try:
            f = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _fsync_dir(directory):
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:   # platforms without directory handles (Windows)
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# ---- loading --------------------------------------------------------------------------------
# Everything below treats the file as hostile: the checksum only proves the bytes are what
# *someone* wrote, so every header field is validated before it is used, and the arrays are
# allocated only after their byte ranges are known to lie, in order and without overlap,
# inside the data section — the total allocation never exceeds the bytes the file holds.
_DTYPES = {d.name: d for d in D.ALL}        # the names `save` writes (no aliases)
_MAX_NDIM = 64                              # numpy's limit
_MAX_EXTENT = (1 << 63) - 1                 # bytes an array may span (numpy's intp)
_FLOATS = ("nan", "inf", "-inf")


def _short(v, n=60):
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _json_constant(name):
    raise ValueError(f"{name} is not allowed (non-finite floats are stored as "
                     '{"$float": ...})')


def _json_float(text):
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text[:40]} is out of range")
    return v


def _json_object(pairs):
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("an object has a duplicate key")
    return obj


class _Reader:
    """Decodes the header tree in two passes over it: `check` validates every node and
    claims every array's slot, allocating nothing; then `build` makes the objects."""

    leaf = None     # (kind, node) -> value: the arrays live elsewhere (safetensors)

    def __init__(self, name, data, data_start, data_bytes, device):
        self.name = name
        self.data = data
        self.start = data_start
        self.data_bytes = data_bytes
        self.device = device

    def bad(self, msg):
        return ValueError(f"flowlite.load: {self.name}: corrupt checkpoint: {msg}")

    def run(self, tree):
        for self.building in (False, True):
            self.end = 0        # end of the last slot: the next array must start at or after it
            self.tensors = {}   # offset -> (entry, Tensor): a tensor saved once, referenced twice
            out = self.decode(tree)
        return out

    def spec(self, val, kind):
        """Validate an array entry -> (dtype, shape, offset, nbytes)."""
        if not isinstance(val, dict):
            raise self.bad(f"malformed {kind} entry {_short(val)} (expected an object)")
        dname = val.get("dtype")
        dt = _DTYPES.get(dname) if isinstance(dname, str) else None
        if dt is None:
            raise self.bad(f"{kind} entry has unknown dtype {_short(dname)}")
        shape = val.get("shape")
        if not (isinstance(shape, list) and len(shape) <= _MAX_NDIM
                and all(type(s) is int and 0 <= s <= _MAX_EXTENT for s in shape)):
            raise self.bad(f"{kind} entry has malformed shape {_short(shape)} (expected a list "
                           f"of at most {_MAX_NDIM} integers >= 0)")
        for field in ("offset", "nbytes"):
            v = val.get(field)
            if type(v) is not int or v < 0:
                raise self.bad(f"{kind} entry has malformed {field} {_short(v)} (expected an "
                               "integer >= 0)")
        offset, nbytes = val["offset"], val["nbytes"]
        extent = dt.itemsize
        for s in shape:
            extent *= max(s, 1)
            if extent > _MAX_EXTENT:
                raise self.bad(f"{kind} of shape {_short(tuple(shape))} is too large")
        need = math.prod(shape) * dt.itemsize
        if need != nbytes:
            raise self.bad(f"{kind} of shape {_short(tuple(shape))} and dtype {dname} needs "
                           f"{need} bytes, its entry says {nbytes}")
        if offset % _ALIGN:
            raise self.bad(f"{kind} at data offset {offset}: not a multiple of {_ALIGN}")
        if offset + max(nbytes, 1) > self.data_bytes:
            raise self.bad(f"{kind} of {nbytes} bytes at data offset {offset} lies outside the "
                           f"{self.data_bytes}-byte data section")
        return dt, tuple(shape), offset, nbytes

    def read(self, dt, shape, offset, nbytes, kind, copy=True):
        """Claim slot [offset, offset + nbytes) of the data section for this entry; when
        building, return its array: a fresh copy, or (copy=False) a read-only view."""
        if offset < self.end:
            raise self.bad(f"{kind} at data offset {offset} overlaps or precedes the array "
                           f"before it (which ends at {self.end}); arrays are stored in order, "
                           "without overlap")
        self.end = offset + max(nbytes, 1)      # save gives an empty array a slot of its own
        count = nbytes // dt.itemsize
        arr = np.frombuffer(self.data, dtype=dt.np.newbyteorder("<"), count=count,
                            offset=self.start + offset)
        if not self.building:
            if dt is D.bool_ and count and arr.view(np.uint8).max() > 1:
                raise self.bad(f"bool {kind} at data offset {offset} holds bytes other than 0 "
                               "and 1")
            return None
        arr = arr.reshape(shape)
        return arr.astype(dt.np, copy=True) if copy else arr

    def key(self, node):
        """A dict key: a scalar or a tuple of scalars (what `save` accepts as keys)."""
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, dict) and len(node) == 1:
            (tag, val), = node.items()
            if tag == "$float" and isinstance(val, str) and val in _FLOATS:
                return float(val)
            if tag == "$tuple" and isinstance(val, list):
                out = []
                for v in val:       # scalars only: no tuples in tuples
                    if isinstance(v, list) or (isinstance(v, dict) and "$float" not in v):
                        raise self.bad(f"unsupported dict key {_short(node)}")
                    out.append(self.key(v))
                return tuple(out)
        raise self.bad(f"unsupported dict key {_short(node)}")

    def decode(self, node, depth=0):
        # the same limit, counted the same way, as `save` (one Python frame per level)
        if depth > _MAX_DEPTH:
            raise self.bad(f"nested deeper than {_MAX_DEPTH} levels")
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        building = self.building
        if isinstance(node, list):
            out = []
            for v in node:
                v = self.decode(v, depth + 1)
                if building:
                    out.append(v)
            return out
        if not isinstance(node, dict) or len(node) != 1:
            raise self.bad(f"unexpected header node {_short(node, 80)}")
        (tag, val), = node.items()
        if tag == "$tuple" and isinstance(val, list):
            out = []
            for v in val:
                v = self.decode(v, depth + 1)
                if building:
                    out.append(v)
            return tuple(out)
        if tag == "$dict" and isinstance(val, list):
            out = {}
            for item in val:
                if not (isinstance(item, list) and len(item) == 2):
                    raise self.bad(f"malformed dict entry {_short(item)}")
                k = self.key(item[0])
                if k in out:
                    raise self.bad(f"duplicate dict key {_short(k)}")
                out[k] = self.decode(item[1], depth + 1)
            return out
        if tag == "$float" and isinstance(val, str) and val in _FLOATS:
            return float(val)
        if tag in ("$tensor", "$ndarray") and self.leaf is not None:
            return self.leaf(tag, node) if building else None
        if tag == "$tensor":
            dt, shape, offset, nbytes = self.spec(val, "tensor")
            rg = val.get("requires_grad", False)
            if type(rg) is not bool:
                raise self.bad(f"tensor entry has malformed requires_grad {_short(rg)}")
            entry = (dt, shape, offset, nbytes, rg)
            seen = self.tensors.get(offset)
            if seen is not None:            # the same tensor, referenced again
                if seen[0] != entry:
                    raise self.bad(f"two different tensor entries at data offset {offset}")
                return seen[1]
            # from_numpy copies (or transfers) the view: one copy of the bytes, not two
            arr = self.read(dt, shape, offset, nbytes, "tensor", copy=False)
            t = None
            if building:
                t = from_numpy(arr, device=self.device)
                if rg and t.dtype.is_floating_point:
                    t.requires_grad_(True)
            self.tensors[offset] = (entry, t)
            return t
        if tag == "$ndarray":
            return self.read(*self.spec(val, "array"), "array")
        if tag == "$dtype" and isinstance(val, str) and val in D._BY_NAME:
            return D._BY_NAME[val]
        if tag in ("$tuple", "$dict", "$float", "$dtype"):
            raise self.bad(f"malformed {tag} node {_short(val)}")
        raise self.bad(f"unknown header node {_short(tag)}")


def load(path, map_location=None, weights_only=None, mmap=None, **pickle_load_args):
    """Load a checkpoint from `path` (or a readable binary file): flowlite's own format,
    safetensors (from PyTorch, Hugging Face, ... or `flowlite.save`), or a PyTorch
    `torch.save` file of tensors / state_dicts (read without torch, and without running
    code from the file — like `torch.load(weights_only=True)`).  `weights_only=False` (or,
    as for torch.load, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 when weights_only is not passed;
    TORCH_FORCE_WEIGHTS_ONLY_LOAD=1 forces the safe load) loads any global a trusted pickle
    names, as torch.load does then.

    `map_location`: a device (or anything `flowlite.device` accepts) to put the tensors
    on, or for torch files a dict mapping saved locations ("cuda:0") to devices; default:
    the default device.  `mmap` is accepted (the file is read into memory).  Raises
    FileNotFoundError for a missing file and ValueError naming the file and the problem
    for a truncated, corrupt, foreign or unsafe one."""
    unknown = set(pickle_load_args) - {"encoding", "pickle_module"}
    if unknown:
        raise TypeError(f"flowlite.load: unexpected arguments {sorted(unknown)}")
    if hasattr(path, "read"):
        name = getattr(path, "name", "<file object>")
        data = path.read()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"flowlite.load: {name}: the file object must be opened in binary "
                            f"mode (read() returned {type(data).__name__})")
    else:
        name = os.fspath(path)
        with open(name, "rb") as f:
            data = f.read()
    data = memoryview(data).cast("B")
    name = str(name)
    weights_only = _forced_weights_only(weights_only)
    if _torch_checkpoint.is_torch_file(data):
        return _torch_checkpoint.load(name, data, map_location, _allowlisted(),
                                      trusted=weights_only is False)
    if bytes(data[:len(PICKLE_MAGIC)]) == PICKLE_MAGIC:
        return _unpickle(name, data[len(PICKLE_MAGIC):], weights_only)
    device = None
    if map_location is not None:
        if isinstance(map_location, dict) or callable(map_location):
            raise TypeError(f"flowlite.load: {name}: map_location must be a device for "
                            "flowlite and safetensors checkpoints (a dict or function is "
                            "only understood for torch.save files)")
        device = _device(map_location)
    if bytes(data[:len(MAGIC)]) != MAGIC and _safetensors.looks_like_safetensors(data):
        return _safetensors.decode(name, data, device, lambda tree, leaf: _tree_reader(
            name, device, leaf).run(tree))
    return _decode_file(name, data, device)


# ---- pickled objects (torch.save(model)): weights-only unpickling with an allowlist ------------
_safe_globals: list = []


def add_safe_globals(objs) -> None:
    """Allow these classes/functions in weights-only loads of pickled objects (as
    torch.serialization.add_safe_globals)."""
    _safe_globals.extend(objs)


_TRUE = ("1", "y", "yes", "true")


def _forced_weights_only(weights_only):
    """weights_only as torch.load's environment variables set it: TORCH_FORCE_WEIGHTS_ONLY_LOAD
    forces True; TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD makes an unset one False."""
    force = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    force_no = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE
    if force and force_no:
        raise RuntimeError("flowlite.load: only one of TORCH_FORCE_WEIGHTS_ONLY_LOAD and "
                           "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD may be set, but both were set")
    if force:
        return True
    if force_no and weights_only is None:
        return False
    return weights_only


def _allowlisted() -> dict:
    """The user's allowlisted globals by (module, qualified name), as a pickle names them."""
    return {(getattr(o, "__module__", None), getattr(o, "__qualname__", None)): o
            for o in _safe_globals}


def get_safe_globals() -> list:
    return list(_safe_globals)


def clear_safe_globals() -> None:
    _safe_globals.clear()


class safe_globals:
    """`with safe_globals([RNNModel, nn.LSTM]): fl.load(f)` — the allowlist, for the block."""

    def __init__(self, objs):
        self.objs = list(objs)

    def __enter__(self):
        self.n = len(_safe_globals)
        _safe_globals.extend(self.objs)
        return self

    def __exit__(self, *exc):
        del _safe_globals[self.n:]


def _builtin_safe():
    import collections
    import builtins
    from ..nn.module import _parameter_from_pickle
    from ..frontend.tensor import _from_pickle
    core = getattr(np, "_core", None) or np.core
    return {("flowlite.frontend.tensor", "_from_pickle"): _from_pickle,
            ("flowlite.tensor", "_from_pickle"): _from_pickle,     # files from before the move
            ("flowlite.nn.module", "_parameter_from_pickle"): _parameter_from_pickle,
            ("flowlite.engine.dtypes", "from_any"): D.from_any,
            ("flowlite.dtypes", "from_any"): D.from_any,
            ("numpy._core.multiarray", "_reconstruct"): core.multiarray._reconstruct,
            ("numpy.core.multiarray", "_reconstruct"): core.multiarray._reconstruct,
            ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
            ("collections", "OrderedDict"): collections.OrderedDict,
            **{("builtins", n): getattr(builtins, n)
               for n in ("set", "frozenset", "slice", "complex", "bytearray", "range")}}


class _WeightsOnlyUnpickler(pickle.Unpickler):
    """Rebuilds tensors, numpy arrays, containers, flowlite's functional ops and the
    allowlisted classes — found in that list, never imported by the name the file gives."""

    def __init__(self, name, f):
        super().__init__(f)
        self.name = name
        self.allowed = {**_builtin_safe(), **_allowlisted()}

    def find_class(self, module, qualname):
        o = self.allowed.get((module, qualname))
        if o is None and module == "flowlite.nn.functional":
            from ..nn import functional
            o = getattr(functional, qualname, None) if "." not in qualname else None
        if o is None:
            raise pickle.UnpicklingError(
                f"flowlite.load: {self.name} holds pickled Python objects (a whole nn.Module "
                f"saved with flowlite.save / torch.save) and needs {module}.{qualname}, which "
                "is not allowed in a weights-only load (unpickling can run arbitrary code). "
                "If you trust the file, allow its classes with "
                "flowlite.serialization.safe_globals([...]) / add_safe_globals([...]), or "
                "load with weights_only=False; better, save the model's state_dict().")
        return o


# modules that moved into the layer sub-packages: files pickled before name the old path
_MOVED_MODULES = {"flowlite.tensor": "flowlite.frontend.tensor",
                  "flowlite.dtypes": "flowlite.engine.dtypes"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, qualname):
        return super().find_class(_MOVED_MODULES.get(module, module), qualname)


def _unpickle(name, payload, weights_only):
    import io
    if weights_only is False:
        return _Unpickler(io.BytesIO(payload)).load()
    try:
        return _WeightsOnlyUnpickler(name, io.BytesIO(payload)).load()
    except pickle.UnpicklingError:
        raise
    except Exception as e:
        raise pickle.UnpicklingError(f"flowlite.load: {name}: weights-only unpickling failed "
                                     f"({type(e).__name__}: {e})") from e


def _tree_reader(name, device, leaf):
    r = _Reader(name, b"", 0, 0, device)
    r.leaf = leaf
    return r


def _decode_file(name, data, device):
    size = len(data)
    if size < len(MAGIC) or bytes(data[:len(MAGIC)]) != MAGIC:
        if size < len(MAGIC) and MAGIC.startswith(bytes(data)):
            raise ValueError(f"flowlite.load: {name}: file is truncated ({size} bytes)")
        pickled = bytes(data[:1]) == b"\x80"
        hint = " (it looks like a pickle that is not a torch.save checkpoint; flowlite " \
            "never unpickles arbitrary objects)" if pickled else ""
        raise ValueError(f"flowlite.load: {name}: not a flowlite checkpoint (bad magic bytes "
                         f"{bytes(data[:len(MAGIC)])!r}){hint}")
    if size < _PREFIX.size:
        raise ValueError(f"flowlite.load: {name}: file is truncated ({size} bytes)")
    _, version, hlen = _PREFIX.unpack_from(data, 0)
    if version != FORMAT_VERSION:
        raise ValueError(f"flowlite.load: {name}: unsupported checkpoint format version {version} "
                         f"(this flowlite reads version {FORMAT_VERSION})")
    if size < _PREFIX.size + _TRAILER_LEN or bytes(data[size - len(END_MARKER):]) != END_MARKER:
        expected = _expected_size(data, hlen)
        if expected is not None and expected < size:
            raise ValueError(f"flowlite.load: {name}: file has {size - expected} unexpected "
                             f"bytes after its end ({size} bytes, expected {expected})")
        what = f"expected {expected} bytes" if expected else "the end marker is missing"
        raise ValueError(f"flowlite.load: {name}: file is truncated or incomplete ({size} "
                         f"bytes, {what})")
    body = size - _TRAILER_LEN
    digest = bytes(data[body:body + 32])
    if hashlib.sha256(data[:body]).digest() != digest:
        raise ValueError(f"flowlite.load: {name}: checksum mismatch — the file is corrupt")
    # From here on the bytes are exactly what was written, but not necessarily by `save`:
    # validate every field before using it.
    if _PREFIX.size + hlen > body:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint: header length {hlen} "
                         "exceeds the file")
    try:
        header = json.loads(str(data[_PREFIX.size:_PREFIX.size + hlen], "utf-8"),
                            parse_constant=_json_constant, parse_float=_json_float,
                            object_pairs_hook=_json_object)
    except RecursionError:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint header: nested too "
                         "deeply") from None
    except ValueError as e:         # bad UTF-8 or JSON, or a value rejected above
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint header: "
                         f"{str(e)[:200]}") from None
    if not isinstance(header, dict) or "tree" not in header:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint header: not an object "
                         "with a 'tree'")
    data_bytes = header.get("data_bytes")
    if type(data_bytes) is not int or data_bytes < 0:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint header: data_bytes "
                         f"{_short(data_bytes)} is not an integer >= 0")
    alignment = header.get("alignment", _ALIGN)
    if type(alignment) is not int or alignment != _ALIGN:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint header: alignment "
                         f"{_short(alignment)}, expected {_ALIGN}")
    start = _PREFIX.size + hlen
    start += -start % _ALIGN
    if start + data_bytes != body:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint: data section of "
                         f"{data_bytes} bytes does not match the file size")
    reader = _Reader(name, data, start, data_bytes, device)
    try:
        return reader.run(header["tree"])
    except RecursionError:          # only when the caller's own stack is already deep
        raise ValueError(f"flowlite.load: {name}: nested too deeply for the interpreter's "
                         f"recursion limit ({sys.getrecursionlimit()})") from None


def _expected_size(data, hlen):
    """Total file size announced by an intact header, or None."""
    end = _PREFIX.size + hlen
    if hlen > 1 << 34 or end > len(data):
        return None
    try:
        header = json.loads(str(data[_PREFIX.size:end], "utf-8"))
        start = end + (-end % _ALIGN)
        total = start + int(header["data_bytes"]) + _TRAILER_LEN
        return total if total > 0 else None
    except Exception:        # any damage: no size to announce
        return None
