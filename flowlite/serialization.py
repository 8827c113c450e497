"""Checkpoints: `flowlite.save(obj, path)` / `flowlite.load(path)`.

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

Writes are atomic: the file is written to a temporary file in the target's
directory, flushed and fsync'ed, renamed over the target with `os.replace`, and
the directory is fsync'ed — a crash at any point leaves either the previous
checkpoint or the new one, never a mix.  A crash can leave a stray
`.<name>.<random>.tmp` file next to the target, which `load` never reads.

Layer: above the tensor — imports dtypes, device and tensor.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import struct
import sys

import numpy as np

from . import dtypes as D
from .device import device as _device
from .tensor import Tensor, from_numpy

__all__ = ["save", "load", "FORMAT_VERSION"]

MAGIC = b"\x89FLWLT\r\n"
END_MARKER = b"FLWLTEND"
FORMAT_VERSION = 1
_ALIGN = 64
_PREFIX = struct.Struct("<8sIQ")        # magic, version, header length
_TRAILER_LEN = 32 + len(END_MARKER)     # sha256 digest + end marker
_MAX_DEPTH = 512


# ---- saving ---------------------------------------------------------------------------------
class _Writer:
    """Encodes the tree into JSON nodes and lays the arrays out in the data section."""

    def __init__(self):
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

    def encode(self, obj, where, depth=0):
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
                        items.append([kn, self.encode(v, f"{where}[{k!r}]", depth + 1)])
                    return {"$dict": items}
                enc = [self.encode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(obj)]
                return enc if isinstance(obj, list) else {"$tuple": enc}
            finally:
                self.active.discard(id(obj))
        raise TypeError(f"flowlite.save: cannot save an object of type {type(obj).__name__} at "
                        f"{where}; supported: dict, list, tuple, Tensor, numpy array, bool, "
                        "int, float, str, None, flowlite dtype")

    def encode_key(self, k, where):
        if k is None or isinstance(k, (bool, int, float, str, np.generic)):
            return self.encode(k, where)
        if isinstance(k, tuple) and all(x is None or isinstance(x, (bool, int, float, str))
                                        for x in k):
            return self.encode(k, where)
        raise TypeError(f"flowlite.save: unsupported dict key {k!r} of type "
                        f"{type(k).__name__} at {where}")


def _dtype_name(dt, where):
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


def save(obj, path) -> None:
    """Save `obj` (nested dicts/lists/tuples of tensors, numpy arrays, scalars, strings,
    None) to `path` atomically, or to a writable binary file object."""
    head, w = _serialize(obj)
    if hasattr(path, "write"):
        _write_stream(path, head, w)
        return
    path = os.fspath(path)
    target = os.path.realpath(path)        # write through a symlink, like open(path, "wb")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"flowlite.save: {path}: directory {directory} does not exist")
    tmp = os.path.join(directory,
                       f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_stream(f, head, w)
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
class _Reader:
    def __init__(self, name, data, data_start, data_bytes, device):
        self.name = name
        self.data = data
        self.start = data_start
        self.data_bytes = data_bytes
        self.device = device
        self.tensors = {}   # offset -> Tensor (a tensor saved once, referenced twice)

    def bad(self, msg):
        return ValueError(f"flowlite.load: {self.name}: corrupt checkpoint: {msg}")

    def array(self, spec, kind):
        if not isinstance(spec, dict):
            raise self.bad(f"malformed {kind} entry")
        dname = spec.get("dtype")
        dt = D._BY_NAME.get(dname) if isinstance(dname, str) else None
        if dt is None or dname not in {d.name for d in D.ALL}:
            raise self.bad(f"unknown dtype {dname!r}")
        shape = spec.get("shape")
        offset, nbytes = spec.get("offset"), spec.get("nbytes")
        if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)
                and type(offset) is int and type(nbytes) is int):
            raise self.bad(f"malformed {kind} entry {spec!r}")
        count = math.prod(shape)
        if count * dt.itemsize != nbytes or offset < 0 or offset + nbytes > self.data_bytes:
            raise self.bad(f"{kind} of shape {tuple(shape)} and dtype {dname} does not fit its "
                           f"{nbytes} bytes at offset {offset} of the data section")
        arr = np.frombuffer(self.data, dtype=dt.np.newbyteorder("<"), count=count,
                            offset=self.start + offset).reshape(shape)
        return dt, arr.astype(dt.np, copy=True)

    def decode(self, node, depth=0):
        if depth > _MAX_DEPTH:
            raise self.bad("nesting too deep")
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v, depth + 1) for v in node]
        if not isinstance(node, dict) or len(node) != 1:
            raise self.bad(f"unexpected header node {str(node)[:80]}")
        (tag, val), = node.items()
        if tag == "$tuple" and isinstance(val, list):
            return tuple(self.decode(v, depth + 1) for v in val)
        if tag == "$dict" and isinstance(val, list):
            out = {}
            for item in val:
                if not (isinstance(item, list) and len(item) == 2):
                    raise self.bad("malformed dict entry")
                k = self.decode(item[0], depth + 1)
                try:
                    hash(k)
                except TypeError:
                    raise self.bad(f"unhashable dict key {k!r}") from None
                out[k] = self.decode(item[1], depth + 1)
            return out
        if tag == "$float" and val in ("nan", "inf", "-inf"):
            return float(val)
        if tag == "$tensor":
            key = (val.get("offset"), val.get("dtype"), str(val.get("shape"))) \
                if isinstance(val, dict) else None
            t = self.tensors.get(key)
            if t is None:
                _, arr = self.array(val, "tensor")
                t = from_numpy(arr, device=self.device)
                if val.get("requires_grad") is True and t.dtype.is_floating_point:
                    t.requires_grad_(True)
                self.tensors[key] = t
            return t
        if tag == "$ndarray":
            return self.array(val, "array")[1]
        if tag == "$dtype" and isinstance(val, str) and val in D._BY_NAME:
            return D._BY_NAME[val]
        raise self.bad(f"unknown header node {tag!r}")


def load(path, map_location=None):
    """Load an object saved by `flowlite.save` from `path` (or a readable binary file).

    `map_location`: a device (or anything `flowlite.device` accepts) to put the tensors
    on; default: the default device.  Raises FileNotFoundError for a missing file and
    ValueError naming the file and the problem for a truncated, corrupt or foreign one."""
    if hasattr(path, "read"):
        name = getattr(path, "name", "<file object>")
        data = path.read()
    else:
        name = os.fspath(path)
        with open(name, "rb") as f:
            data = f.read()
    device = None
    if map_location is not None:
        device = _device(map_location)
    return _decode_file(str(name), memoryview(data), device)


def _decode_file(name, data, device):
    size = len(data)
    if size < len(MAGIC) or bytes(data[:len(MAGIC)]) != MAGIC:
        if size < len(MAGIC) and MAGIC.startswith(bytes(data)):
            raise ValueError(f"flowlite.load: {name}: file is truncated ({size} bytes)")
        pickled = bytes(data[:1]) == b"\x80" or bytes(data[:2]) == b"PK"
        hint = " (it looks like a pickle or a torch.save zip; flowlite never unpickles)" \
            if pickled else ""
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
        what = f"expected {expected} bytes" if expected else "the end marker is missing"
        raise ValueError(f"flowlite.load: {name}: file is truncated or incomplete ({size} "
                         f"bytes, {what})")
    body = size - _TRAILER_LEN
    digest = bytes(data[body:body + 32])
    if hashlib.sha256(data[:body]).digest() != digest:
        raise ValueError(f"flowlite.load: {name}: checksum mismatch — the file is corrupt")
    # From here on the bytes are exactly what `save` wrote; still validate every field.
    if _PREFIX.size + hlen > body:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint: header length {hlen} "
                         "exceeds the file")
    try:
        header = json.loads(bytes(data[_PREFIX.size:_PREFIX.size + hlen]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint header: {e}") from None
    if not isinstance(header, dict) or "tree" not in header \
            or type(header.get("data_bytes")) is not int:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint header")
    start = _PREFIX.size + hlen
    start += -start % _ALIGN
    if start + header["data_bytes"] != body:
        raise ValueError(f"flowlite.load: {name}: corrupt checkpoint: data section of "
                         f"{header['data_bytes']} bytes does not match the file size")
    return _Reader(name, data, start, header["data_bytes"], device).decode(header["tree"])


def _expected_size(data, hlen):
    """Total file size announced by an intact header, or None."""
    end = _PREFIX.size + hlen
    if hlen > 1 << 34 or end > len(data):
        return None
    try:
        header = json.loads(bytes(data[_PREFIX.size:end]).decode("utf-8"))
        start = end + (-end % _ALIGN)
        return start + int(header["data_bytes"]) + _TRAILER_LEN
    except Exception:
        return None
