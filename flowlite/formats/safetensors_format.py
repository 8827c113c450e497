"""safetensors checkpoints: what Hugging Face, PyTorch, MLX and tinygrad read and write.

The `safetensors` package does the format (its Rust parser bounds and validates every
offset); this module maps flowlite objects onto it, with numpy (and ml_dtypes for
bfloat16) in between — torch is never imported.

Writing (`flowlite.save(obj, "x.safetensors")`):

* a flat mapping of str -> tensor/array (a `state_dict`) is written as a plain safetensors
  file with the same keys, shapes and dtypes, so `safetensors.torch.load_file` gives
  PyTorch exactly that state_dict.  The header's metadata holds `{"format": "pt"}` (what
  Hugging Face's loaders expect) and `"flowlite.order"`, the keys' original order.
* any other object (optimizer state, epoch, RNG state — what `flowlite.save` accepts) is
  flattened: every tensor is stored under its path joined by dots
  (`{"optimizer": {"state": {0: {"exp_avg": t}}}}` -> `"optimizer.state.0.exp_avg"`, a
  repeat of a path gets `#1`, `#2` appended; a tensor that occurs twice is stored once),
  and the whole tree is kept in metadata `"flowlite.tree"` — the JSON node language of
  flowlite's own format (see `flowlite.serialization`) with `{"$tensor": {"key": k,
  "requires_grad": bool}}` and `{"$ndarray": {"key": k}}` at the leaves.  Other readers see the
  flat tensors; `flowlite.load` rebuilds the object.

Reading (`flowlite.load`): any safetensors file; without `"flowlite.tree"` it loads as a
dict of tensors in the file's key order (or `"flowlite.order"`).  Dtypes flowlite has no
equivalent of (U16, U64, float8, complex) raise ValueError naming the key.

Layer: formats — imports engine.dtypes, frontend.tensor.
"""
from __future__ import annotations

import json
import struct

import jax
import numpy as np

from ..engine import dtypes as D
from ..frontend.tensor import Tensor, from_numpy

__all__ = ["encode", "decode", "looks_like_safetensors"]

_TREE_KEY = "flowlite.tree"
_ORDER_KEY = "flowlite.order"
_MAX_HEADER = 100_000_000           # the safetensors package's own header limit

# safetensors dtype names -> flowlite dtypes (the ones both sides have)
_FROM_ST = {"F64": D.float64, "F32": D.float32, "F16": D.float16, "BF16": D.bfloat16,
            "I64": D.int64, "I32": D.int32, "I16": D.int16, "I8": D.int8, "U8": D.uint8,
            "U32": D.uint32, "BOOL": D.bool_}


def _st():
    try:
        import safetensors
        import safetensors.numpy
    except ImportError:     # a dependency, but say what is missing if it is not installed
        raise ImportError("flowlite: reading/writing .safetensors files needs the "
                          "`safetensors` package (pip install safetensors)") from None
    return safetensors


# ---- writing --------------------------------------------------------------------------------
def _host(t, where):
    if isinstance(t, Tensor):
        arr = np.asarray(t.numpy())
        want = t.dtype.np
    else:
        arr = np.asarray(t)
        want = arr.dtype
        try:
            D.from_numpy_dtype(arr.dtype)
        except Exception:
            raise TypeError(f"flowlite.save: numpy arrays of dtype {arr.dtype} cannot be "
                            f"written to safetensors (at {where})") from None
    if arr.dtype != want:           # int64/float64 stored narrower without x64: PyTorch's width
        arr = arr.astype(want)
    # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _is_flat_state_dict(obj):
    return (isinstance(obj, dict) and all(isinstance(k, str) for k in obj)
            and all(isinstance(v, (Tensor, np.ndarray)) for v in obj.values()))


def encode(obj, tree_encoder) -> bytes:
    """The safetensors bytes for `obj`.  `tree_encoder(obj, on_leaf)` encodes the tree
    with flowlite's node language, calling `on_leaf(value, path)` for tensors/arrays."""
    st = _st()
    if _is_flat_state_dict(obj):
        tensors = {k: _host(v, f"obj[{k!r}]") for k, v in obj.items()}
        meta = {"format": "pt", _ORDER_KEY: json.dumps(list(obj))}
        return st.numpy.save(tensors, metadata=meta)
    tensors, keys_by_id, keep = {}, {}, []

    def on_leaf(value, path):
        key = keys_by_id.get(id(value))
        if key is None:
            base = ".".join(str(p) for p in path) or "tensor"
            key, n = base, 0
            while key in tensors:
                n += 1
                key = f"{base}#{n}"
            tensors[key] = _host(value, base)
            keys_by_id[id(value)] = key
            keep.append(value)          # ids stay valid while encoding
        if isinstance(value, Tensor):
            return {"$tensor": {"key": key, "requires_grad": bool(value.requires_grad)}}
        return {"$ndarray": {"key": key}}

    tree = tree_encoder(obj, on_leaf)
    meta = {"format": "pt", _TREE_KEY: json.dumps(tree, separators=(",", ":"),
                                                  allow_nan=False)}
    return st.numpy.save(tensors, metadata=meta)


# ---- reading --------------------------------------------------------------------------------
def looks_like_safetensors(data) -> bool:
    """An 8-byte little-endian header length, then a JSON object that fits in the file."""
    if len(data) < 10:
        return False
    (n,) = struct.unpack_from("<Q", data, 0)
    return 2 <= n <= min(len(data) - 8, _MAX_HEADER) and bytes(data[8:9]) == b"{"


def _metadata(name, data):
    (n,) = struct.unpack_from("<Q", data, 0)
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"flowlite.load: {name}: corrupt safetensors header: "
                         f"{str(e)[:200]}") from None
    if not isinstance(header, dict):
        raise ValueError(f"flowlite.load: {name}: corrupt safetensors header (not an object)")
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"flowlite.load: {name}: corrupt safetensors header: __metadata__ "
                         "is not an object")
    return meta, [k for k in header if k != "__metadata__"]


def to_tensor(arr: np.ndarray, name: str, key: str, device) -> Tensor:
    """A host array as a flowlite tensor, refusing int64 values that JAX's 32-bit mode
    would silently wrap (flowlite stores int64 as int32 unless x64 is on)."""
    if arr.dtype == np.int64 and not jax.config.jax_enable_x64 and arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < -2 ** 31 or hi >= 2 ** 31:
            raise ValueError(f"flowlite.load: {name}: int64 tensor {key!r} holds values in "
                             f"[{lo}, {hi}], outside int32; enable JAX's x64 mode "
                             '(jax.config.update("jax_enable_x64", True)) to load it')
    return from_numpy(arr, device=device)


def decode(name: str, data, device, tree_decoder):
    """Load a safetensors file's bytes.  `tree_decoder(tree, leaf)` rebuilds a flowlite
    tree, calling `leaf(kind, node)` for `$tensor` / `$ndarray` nodes."""
    st = _st()
    meta, header_keys = _metadata(name, data)
    try:
        entries = st.deserialize(bytes(data))
    except Exception as e:      # the package's parser refused the file
        raise ValueError(f"flowlite.load: {name}: not a valid safetensors file: "
                         f"{str(e)[:300]}") from None
    arrays = {}
    for key, info in entries:
        dt = _FROM_ST.get(info["dtype"])
        if dt is None:
            raise ValueError(f"flowlite.load: {name}: tensor {key!r} has dtype "
                             f"{info['dtype']}, which flowlite has no equivalent of (it has "
                             f"{', '.join(sorted(_FROM_ST))})")
        np_dt = np.dtype(dt.np).newbyteorder("<")
        arr = np.frombuffer(info["data"], dtype=np_dt).reshape(info["shape"])
        if dt is D.bool_ and arr.size and arr.view(np.uint8).max() > 1:
            raise ValueError(f"flowlite.load: {name}: bool tensor {key!r} holds bytes other "
                             "than 0 and 1")
        arrays[key] = arr
    tree = meta.get(_TREE_KEY)
    if tree is None:
        order = header_keys
        try:
            saved = json.loads(meta.get(_ORDER_KEY, "null"))
            if isinstance(saved, list) and sorted(saved) == sorted(arrays):
                order = saved
        except ValueError:
            pass
        return {k: to_tensor(arrays[k], name, k, device) for k in order if k in arrays}
    try:
        tree = json.loads(tree)
    except (ValueError, RecursionError):
        raise ValueError(f"flowlite.load: {name}: corrupt {_TREE_KEY} metadata") from None
    made, used = {}, set()

    def leaf(kind, node):
        val = node[kind]
        key = val.get("key") if isinstance(val, dict) else None
        if not isinstance(key, str) or key not in arrays:
            raise ValueError(f"flowlite.load: {name}: {_TREE_KEY} names tensor {key!r}, "
                             "which the file does not hold")
        used.add(key)
        if kind == "$ndarray":
            return arrays[key].copy()
        t = made.get(key)
        if t is None:
            t = made[key] = to_tensor(arrays[key], name, key, device)
            if val.get("requires_grad") is True and t.dtype.is_floating_point:
                t.requires_grad_(True)
        return t

    return tree_decoder(tree, leaf)
