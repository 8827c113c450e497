"""flowlite.save / flowlite.load: round trips, the documented format, corrupt files, atomicity."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pathlib
import pickle
import random
import re
import signal
import struct
import time
import tracemalloc
import warnings

import numpy as np
import pytest

import flowlite as fl
from flowlite import serialization as ser


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype.itemsize == 2 and a.dtype.kind not in "iu" else a


def assert_tensor_equal(t, want, dtype):
    assert isinstance(t, fl.Tensor)
    assert t.dtype is dtype
    assert tuple(t.shape) == np.shape(want)
    np.testing.assert_array_equal(_bits(t.numpy()), _bits(np.asarray(want, dtype=dtype.np)))


ALL_DTYPES = [fl.float32, fl.float16, fl.bfloat16, fl.int8, fl.int16, fl.int32, fl.uint8,
              fl.uint32, fl.bool]


def _sample(dtype, shape, seed):
    r = np.random.default_rng(seed)
    if dtype is fl.bool:
        return r.random(shape) > 0.5
    if dtype.is_floating_point:
        return (r.standard_normal(shape) * 3).astype(dtype.np)
    info = np.iinfo(dtype.np)
    return r.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype.np)


def test_round_trip_nested_state(tmp_path):
    arrays = {d.name: _sample(d, (3, 4), i) for i, d in enumerate(ALL_DTYPES)}
    zero_d = {d.name: _sample(d, (), i) for i, d in enumerate(ALL_DTYPES)}
    w = fl.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    obj = {
        "model": {k: fl.tensor(v, dtype=fl.engine.dtypes.from_any(k)) for k, v in arrays.items()},
        "scalars": {k: fl.tensor(v, dtype=fl.engine.dtypes.from_any(k)) for k, v in zero_d.items()},
        "empty": fl.zeros(0, 3),
        "pending": w.detach() * 2,              # a lazy value is materialised by save
        "w": w,
        "optimizer": {"state": {0: {"leaf0": w}, 1: {}},          # int keys, shared tensor
                      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                        "amsgrad": False, "params": [0, 1], "name": None}]},
        "numbers": [0, -1, 2 ** 62, 1.0, -0.0, 1e-300, float("inf"), float("-inf")],
        "nan": float("nan"),
        "strings": ("", "ünïcødé ✓", "$tuple", '{"$dict": []}'),
        (1, "a"): "tuple key", 2.5: "float key", None: "none key", True: "bool key",
        "nested": [[[], ()], {"": {"x": (1, (2, [3]))}}],
        "numpy": np.arange(5, dtype=np.int16),
        "dtype": fl.bfloat16,
        "np_scalar": np.float32(1.5),
    }
    fl.save(obj, tmp_path / "a.fl")
    got = fl.load(tmp_path / "a.fl")
    assert list(got) == list(obj)
    for k, v in arrays.items():
        assert_tensor_equal(got["model"][k], v, fl.engine.dtypes.from_any(k))
        assert_tensor_equal(got["scalars"][k], zero_d[k], fl.engine.dtypes.from_any(k))
    assert tuple(got["empty"].shape) == (0, 3)
    np.testing.assert_array_equal(got["pending"].numpy(), np.arange(6).reshape(2, 3) * 2.0)
    assert got["w"].requires_grad and not got["pending"].requires_grad
    assert got["optimizer"]["state"][0]["leaf0"] is got["w"]       # stored once, shared
    assert got["optimizer"]["param_groups"] == obj["optimizer"]["param_groups"]
    assert isinstance(got["optimizer"]["param_groups"][0]["betas"], tuple)
    assert got["numbers"] == obj["numbers"] and math_copysign(got["numbers"][4]) < 0
    assert [type(x) for x in got["numbers"]] == [type(x) for x in obj["numbers"]]
    assert got["nan"] != got["nan"]
    assert got["strings"] == obj["strings"]
    assert got[(1, "a")] == "tuple key" and got[2.5] == "float key"
    assert got[None] == "none key" and got[True] == "bool key"
    assert got["nested"] == obj["nested"]
    assert isinstance(got["numpy"], np.ndarray) and got["numpy"].dtype == np.int16
    np.testing.assert_array_equal(got["numpy"], obj["numpy"])
    assert got["dtype"] is fl.bfloat16
    assert got["np_scalar"] == 1.5


def math_copysign(x):
    import math
    return math.copysign(1.0, x)


def test_bfloat16_bits_round_trip_exactly(tmp_path):
    special = np.array([0.0, -0.0, 1.0, -2.5, 3.0e38, 1e-40, np.inf, -np.inf, np.nan],
                       np.float32)
    t = fl.tensor(special).to(fl.bfloat16)
    fl.save({"t": t}, tmp_path / "b.fl")
    got = fl.load(tmp_path / "b.fl")["t"]
    assert got.dtype is fl.bfloat16
    np.testing.assert_array_equal(_bits(got.numpy()), _bits(t.numpy()))


def test_64_bit_dtypes_round_trip(tmp_path, x64):
    obj = {"f": fl.tensor(np.array([1 / 3, 1e-300]), dtype=fl.float64),
           "i": fl.tensor(np.array([2 ** 62, -5]), dtype=fl.int64)}
    fl.save(obj, tmp_path / "c.fl")
    got = fl.load(tmp_path / "c.fl")
    assert_tensor_equal(got["f"], [1 / 3, 1e-300], fl.float64)
    assert_tensor_equal(got["i"], [2 ** 62, -5], fl.int64)


def test_file_objects_and_map_location(tmp_path):
    buf = io.BytesIO()
    fl.save({"a": fl.ones(3)}, buf)
    got = fl.load(io.BytesIO(buf.getvalue()), map_location="cpu")
    assert got["a"].device == fl.device("cpu")
    np.testing.assert_array_equal(got["a"].numpy(), np.ones(3, np.float32))
    fl.save([1, 2], str(tmp_path / "s.fl"))               # str paths too
    assert fl.load(str(tmp_path / "s.fl")) == [1, 2]


def test_unsupported_objects_name_their_place(tmp_path):
    with pytest.raises(TypeError, match=r"type object at obj\['a'\]\[1\]"):
        fl.save({"a": [1, object()]}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="unsupported dict key"):
        fl.save({frozenset(): 1}, tmp_path / "x.fl")
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        fl.save(loop, tmp_path / "x.fl")
    assert not os.listdir(tmp_path)     # nothing written, no temp files left


# ---- the documented format ---------------------------------------------------------------------
def craft(tree, data=b"", version=1, magic=b"\x89FLWLT\r\n"):
    """A checkpoint written from the format description in flowlite/formats/serialization.py."""
    header = json.dumps({"tree": tree, "data_bytes": len(data), "alignment": 64},
                        separators=(",", ":")).encode()
    head = struct.pack("<8sIQ", magic, version, len(header)) + header
    head += b"\0" * (-len(head) % 64)
    body = head + data
    return body + hashlib.sha256(body).digest() + b"FLWLTEND"


def test_format_matches_its_documentation(tmp_path):
    data = np.array([1.5, -2.0], "<f4").tobytes()
    raw = craft({"$dict": [["w", {"$tensor": {"dtype": "float32", "shape": [2], "offset": 0,
                                              "nbytes": 8, "requires_grad": False}}],
                           [1, {"$tuple": [1, 2.0, {"$float": "inf"}]}]]}, data)
    (tmp_path / "f.fl").write_bytes(raw)
    got = fl.load(tmp_path / "f.fl")
    np.testing.assert_array_equal(got["w"].numpy(), [1.5, -2.0])
    assert got[1] == (1, 2.0, float("inf"))
    # and save writes exactly this layout
    fl.save({"w": fl.tensor([1.5, -2.0]), 1: (1, 2.0, float("inf"))}, tmp_path / "g.fl")
    assert (tmp_path / "g.fl").read_bytes() == raw


# ---- corrupt, truncated, foreign files -----------------------------------------------------------
@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.fl"
    fl.save({"w": fl.tensor(np.arange(100, dtype=np.float32)), "meta": {"step": 3}}, path)
    return path


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.fl"):
        fl.load(tmp_path / "nope.fl")


@pytest.mark.parametrize("keep", [0, 3, 12, 20, 60, 200, -41, -8, -1])
def test_truncated_file(good_file, keep):
    raw = good_file.read_bytes()
    bad = good_file.with_name("trunc.fl")
    bad.write_bytes(raw[:keep] if keep >= 0 else raw[:len(raw) + keep])
    with pytest.raises(ValueError, match=r"trunc\.fl.*truncated"):
        fl.load(bad)


def test_flipped_bytes_are_detected(good_file):
    raw = good_file.read_bytes()
    bad = good_file.with_name("flip.fl")
    positions = [14, 25, 40, len(raw) // 2, len(raw) - 45, len(raw) - 20]
    for pos in positions:
        b = bytearray(raw)
        b[pos] ^= 0x10
        bad.write_bytes(bytes(b))
        with pytest.raises(ValueError, match=r"flip\.fl.*(checksum mismatch|corrupt|truncated)"):
            fl.load(bad)


def test_wrong_magic_and_version(good_file, tmp_path):
    raw = good_file.read_bytes()
    (tmp_path / "m.fl").write_bytes(b"NOTMAGIC" + raw[8:])
    with pytest.raises(ValueError, match=r"m\.fl: not a flowlite checkpoint"):
        fl.load(tmp_path / "m.fl")
    (tmp_path / "v.fl").write_bytes(craft([1], version=7))
    with pytest.raises(ValueError, match="unsupported checkpoint format version 7"):
        fl.load(tmp_path / "v.fl")
    (tmp_path / "t.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a flowlite checkpoint"):
        fl.load(tmp_path / "t.txt")


@pytest.mark.parametrize("tree,msg", [
    ({"$tensor": {"dtype": "float32", "shape": [100], "offset": 0, "nbytes": 400}},
     "outside the 8-byte data section"),
    ({"$tensor": {"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8}}, "unknown dtype"),
    ({"$ndarray": {"dtype": "O", "shape": [1], "offset": 0, "nbytes": 8}}, "unknown dtype"),
    ({"$tensor": {"dtype": "float32", "shape": [-2], "offset": 0, "nbytes": 8}}, "malformed"),
    ({"$dict": [[[1], 2]]}, "unsupported dict key"),
    ({"$set": [1]}, "unknown header node"),
    ({"a": 1, "b": 2}, "unexpected header node"),
])
def test_validated_header_fields(tmp_path, tree, msg):
    (tmp_path / "h.fl").write_bytes(craft(tree, b"\0" * 8))
    with pytest.raises(ValueError, match=msg):
        fl.load(tmp_path / "h.fl")


# ---- hostile files: every field validated, allocation bounded by the file ------------------------
class _Named(io.BytesIO):
    name = "mem.fl"          # so the error names "the file"


def load_bytes(raw):
    return fl.load(_Named(raw))


def seal(header: bytes, data=b""):
    """A file around arbitrary header bytes, with a correct length and checksum."""
    head = struct.pack("<8sIQ", b"\x89FLWLT\r\n", 1, len(header)) + header
    head += b"\0" * (-len(head) % 64)
    body = head + data
    return body + hashlib.sha256(body).digest() + b"FLWLTEND"


def arr(tag="$ndarray", dtype="float32", shape=(2,), offset=0, nbytes=None):
    itemsize = {"float32": 4, "bfloat16": 2, "bool": 1, "uint8": 1, "int64": 8}.get(dtype, 4)
    entry = {"dtype": dtype, "shape": list(shape), "offset": offset,
             "nbytes": int(np.prod(shape)) * itemsize if nbytes is None else nbytes}
    if tag == "$tensor":
        entry["requires_grad"] = False
    return {tag: entry}


def refused(raw, *patterns):
    with pytest.raises(ValueError) as info:
        load_bytes(raw)
    msg = str(info.value)
    assert msg.startswith("flowlite.load: mem.fl: "), msg
    for p in patterns:
        assert re.search(p, msg), (p, msg)
    return msg


@pytest.mark.parametrize("entry, data_len", [
    (arr(offset=64), 64),                                  # starts at the end of the data
    (arr(offset=0, shape=(20,)), 64),                      # runs past it
    (arr(offset=2 ** 70), 64),                             # far outside
    (arr(offset=64, shape=(0,)), 64),                      # an empty array needs a slot too
])
def test_byte_range_must_lie_inside_the_data_section(entry, data_len):
    refused(craft(entry, b"\0" * data_len), "outside the 64-byte data section")


@pytest.mark.parametrize("tree", [
    [arr(), arr()],                                                    # the same bytes twice
    [arr("$tensor"), arr()],                                           # tensor and array
    [arr("$tensor"), arr("$tensor", shape=(1,))],                      # two tensors at 0
    [arr("$tensor"), arr("$tensor", dtype="bfloat16", shape=(4,))],
    [arr(shape=(32,)), arr(offset=64)],                                # partial overlap
    [arr(offset=64), arr(offset=0)],                                   # out of order
])
def test_overlapping_entries_are_refused(tree):
    refused(craft(tree, b"\0" * 256), "overlaps or precedes|two different tensor entries")


def test_a_shared_tensor_is_the_one_repeated_entry_allowed():
    t = arr("$tensor")
    got = load_bytes(craft([t, t, {"$tuple": [t]}], b"\0" * 64))
    assert got[0] is got[1] is got[2][0]


@pytest.mark.parametrize("entry", [
    arr(shape=(2,), nbytes=4),                # too few bytes for 2 float32
    arr(shape=(2,), nbytes=12),               # too many
    arr(dtype="bfloat16", shape=(4,), nbytes=16),
    arr(dtype="bool", shape=(3, 2), nbytes=3),
    arr(shape=(0, 5), nbytes=4),
])
def test_byte_count_must_equal_shape_times_itemsize(entry):
    refused(craft(entry, b"\0" * 64), r"needs \d+ bytes, its entry says \d+")


@pytest.mark.parametrize("shape", [
    [-1], [2, -3], [1.0], ["2"], [True], [None], [[2]], "2", None, 2, {"0": 2},
    [2 ** 64],                               # not an int numpy could hold
    [0, 2 ** 62, 2 ** 62],                   # zero elements, but no array can span that
    [1] * 65,                                # more dimensions than numpy allows
])
def test_shape_must_be_a_list_of_non_negative_ints(shape):
    entry = {"$ndarray": {"dtype": "float32", "shape": shape, "offset": 0, "nbytes": 0}}
    refused(craft(entry, b"\0" * 64), "malformed shape|too large")


@pytest.mark.parametrize("dtype", ["object", "O", "<f4", "float128", "float", "int", "complex64",
                                   "", None, 4, ["float32"], {"float32": 1}])
def test_dtype_must_be_known(dtype):
    for tag in ("$tensor", "$ndarray"):
        entry = {tag: {"dtype": dtype, "shape": [1], "offset": 0, "nbytes": 4}}
        refused(craft(entry, b"\0" * 64), "unknown dtype")


@pytest.mark.parametrize("field, value", [
    ("offset", -64), ("offset", 1.0), ("offset", "0"), ("offset", None), ("offset", True),
    ("offset", 8), ("nbytes", -8), ("nbytes", 8.0), ("requires_grad", 1),
    ("requires_grad", "yes"),
])
def test_offsets_and_fields_are_checked(field, value):
    entry = arr("$tensor")
    entry["$tensor"][field] = value
    refused(craft(entry, b"\0" * 64), field if field != "offset" or value != 8 else "multiple")


def test_deep_nesting_is_a_value_error_not_a_recursion_error():
    deep = b"[" * 100_000 + b"]" * 100_000
    refused(seal(b'{"tree":' + deep + b',"data_bytes":0}'), "nested too deeply")
    refused(seal(b'{"tree":1,"data_bytes":0,"x":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000
                 + b"}"), "nested too deeply")
    limit = ser._MAX_DEPTH

    def nest(n, wrap):
        x = 1
        for _ in range(n):
            x = wrap(x)
        return x
    for wrap in (lambda x: [x], lambda x: {"$tuple": [x]}, lambda x: {"$dict": [["k", x]]}):
        refused(craft(nest(limit + 1, wrap)), f"nested deeper than {limit} levels")
        assert load_bytes(craft(nest(limit, wrap))) is not None
    # save draws the line at the same depth
    for wrap in (lambda x: [x], lambda x: (x,), lambda x: {"k": x}):
        buf = io.BytesIO()
        fl.save(nest(limit, wrap), buf)
        assert load_bytes(buf.getvalue()) == nest(limit, wrap)
        with pytest.raises(ValueError, match=f"nested deeper than {limit} levels"):
            fl.save(nest(limit + 1, wrap), io.BytesIO())
    # a valid file loaded from an already deep stack: loads, or a ValueError, never a crash
    raw = craft(nest(limit, lambda x: {"$dict": [["k", x]]}))

    def deep_call(n):
        return deep_call(n - 1) if n else load_bytes(raw)
    for n in (100, 500, 800, 900):
        try:
            deep_call(n)
        except ValueError as e:
            assert "nested too deeply" in str(e)


@pytest.mark.parametrize("header, says", [
    (b'{"tree":1,"data_bytes":0', "corrupt checkpoint header"),          # bad JSON
    (b"", "corrupt checkpoint header"),
    (b'\xff\xfe{"tree":1}', "utf-8"),
    (b'{"tree":NaN,"data_bytes":0}', "NaN is not allowed"),
    (b'{"tree":-Infinity,"data_bytes":0}', "Infinity is not allowed"),
    (b'{"tree":1e999,"data_bytes":0}', "out of range"),
    (b'{"tree":1,"tree":2,"data_bytes":0}', "duplicate key"),
    (b'{"tree":' + b"7" * 5000 + b',"data_bytes":0}', "corrupt checkpoint header"),
    (b'[1]', "not an object with a 'tree'"),
    (b'{"data_bytes":0}', "not an object with a 'tree'"),
    (b'{"tree":1}', "data_bytes None"),
    (b'{"tree":1,"data_bytes":-64}', "data_bytes -64"),
    (b'{"tree":1,"data_bytes":"0"}', "data_bytes '0'"),
    (b'{"tree":1,"data_bytes":true}', "data_bytes True"),
    (b'{"tree":1,"data_bytes":0,"alignment":32}', "alignment 32"),
    (b'{"tree":1,"data_bytes":64}', "does not match the file size"),
])
def test_malformed_headers(header, says):
    refused(seal(header), says)


@pytest.mark.parametrize("tree, says", [
    ({"$float": "NaN"}, r"malformed \$float"),
    ({"$float": 1.0}, r"malformed \$float"),
    ({"$dtype": "float128"}, r"malformed \$dtype"),
    ({"$tuple": {"a": 1}}, r"malformed \$tuple"),
    ({"$dict": {"a": 1}}, r"malformed \$dict"),
    ({"$dict": [[1]]}, "malformed dict entry"),
    ({"$dict": [1]}, "malformed dict entry"),
    ({"$dict": [[1, 2], [1, 3]]}, "duplicate dict key 1"),
    ({"$dict": [[{"$dtype": "int8"}, 1]]}, "unsupported dict key"),
    ({"$dict": [[{"$tuple": [[1]]}, 1]]}, "unsupported dict key"),
    ({"$dict": [[arr("$tensor"), 1]]}, "unsupported dict key"),
    ({}, "unexpected header node"),
    ({"$pickle": "gASV"}, "unknown header node"),
])
def test_malformed_tree_nodes(tree, says):
    refused(craft(tree, b"\0" * 64), says)


def test_bool_arrays_hold_only_zeros_and_ones():
    for tag in ("$tensor", "$ndarray"):
        refused(craft(arr(tag, dtype="bool", shape=(3,)), b"\1\2\0" + b"\0" * 61),
                "bytes other than 0 and 1")
        got = load_bytes(craft(arr(tag, dtype="bool", shape=(3,)), b"\1\0\1" + b"\0" * 61))
        np.testing.assert_array_equal(np.asarray(got if tag == "$ndarray" else got.numpy()),
                                      [True, False, True])


def test_truncated_at_every_byte(good_file):
    raw = good_file.read_bytes()
    for keep in range(len(raw)):
        refused(raw[:keep], "truncated")
    refused(raw + b"\0" * 3, "3 unexpected bytes after its end")


def test_a_bit_flip_anywhere_is_detected(good_file):
    raw = good_file.read_bytes()
    for pos in range(len(raw)):
        b = bytearray(raw)
        b[pos] ^= 1 << (pos % 8)
        refused(bytes(b), "checksum mismatch|not a flowlite checkpoint|version|truncated|"
                          "unexpected bytes|exceeds the file")


def _peak_load(path):
    """Bytes allocated at the peak of `fl.load(path)` (reading the file counts)."""
    tracemalloc.start()
    try:
        try:
            fl.load(path)
        except ValueError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


SLACK = 256 * 1024          # Python objects of the header, jax's bookkeeping


def test_the_overlapping_entries_reproduction_allocates_at_most_the_file(tmp_path):
    """The reported file: 500 header entries over the same data, 4.3 MB on disk, made load
    allocate 2.09 GB (one copy per entry). Now the layout is checked before any array is
    allocated: the peak is the file and its parsed header."""
    n = 1 << 20
    path = tmp_path / "overlap.fl"
    path.write_bytes(craft([arr("$ndarray", shape=(n,)) for _ in range(500)], b"\0" * (4 * n)))
    with pytest.raises(ValueError, match=r"overlap\.fl: .*overlaps or precedes"):
        fl.load(path)
    assert _peak_load(path) < 1.2 * path.stat().st_size
    path.write_bytes(craft([arr("$tensor", shape=(n - 16 * i,)) for i in range(500)],
                           b"\0" * (4 * n)))
    with pytest.raises(ValueError, match=r"overlap\.fl: .*two different tensor entries"):
        fl.load(path)
    assert _peak_load(path) < 1.2 * path.stat().st_size


def test_a_valid_checkpoint_loads_in_twice_its_size(tmp_path):
    big = {"w": fl.tensor(np.ones((256, 1024), np.float32)), "m": np.zeros(1 << 18, np.uint8),
           "b": fl.zeros(1024, dtype=fl.bfloat16), "meta": {"step": 3}}
    path = tmp_path / "big.fl"
    fl.save(big, path)
    fl.load(path)                          # warm up jax's caches
    assert _peak_load(path) < 2 * path.stat().st_size + SLACK


def _plain(x):
    """A comparable picture of a loaded object: types, dtypes, shapes and exact bits."""
    if isinstance(x, fl.Tensor):
        return ("T", x.dtype.name, tuple(x.shape), _bits(x.numpy()).tobytes(), x.requires_grad)
    if isinstance(x, np.ndarray):
        return ("A", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, float):
        return ("f", repr(x))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [_plain(v) for v in x])
    if isinstance(x, dict):
        return ("dict", [(_plain(k), _plain(v)) for k, v in x.items()])
    return (type(x).__name__, x)


def _fuzz_base():
    if not hasattr(_fuzz_base, "cache"):
        w = fl.tensor(np.linspace(-1, 1, 1 << 16, dtype=np.float32).reshape(256, 256),
                      requires_grad=True)
        obj = {"model": {"w": w, "b": fl.zeros(0, 3), "mask": fl.tensor(np.arange(6) % 3 == 0),
                         "h": fl.tensor(np.arange(8, dtype=np.float32)).to(fl.bfloat16)},
               "optimizer": {"state": {0: {"leaf0": w}},
                             "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "name": None}]},
               "history": np.arange(50, dtype=np.int16), "nan": float("nan"),
               (1, "k"): "tuple key", "dtype": fl.bfloat16}
        buf = io.BytesIO()
        fl.save(obj, buf)
        raw = buf.getvalue()
        hlen = struct.unpack_from("<Q", raw, 12)[0]
        start = 20 + hlen + (-(20 + hlen) % 64)
        header = raw[20:20 + hlen]
        _fuzz_base.cache = raw, header, raw[start:-40], _plain(load_bytes(raw))
    return _fuzz_base.cache


def _json_paths(node, path=()):
    yield path
    if isinstance(node, list):
        for i, v in enumerate(node):
            yield from _json_paths(v, path + (i,))
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _json_paths(v, path + (k,))


def _replaced(node, path, value):
    if not path:
        return value
    if isinstance(node, list):
        i = path[0]
        return node[:i] + [_replaced(node[i], path[1:], value)] + node[i + 1:]
    return {k: (_replaced(v, path[1:], value) if k == path[0] else v) for k, v in node.items()}


def _mutate(raw, header, data, m):
    """-> (bytes, resealed): resealed mutations carry a valid length and checksum, so they
    reach the header and layout checks; the others must all fail the integrity checks."""
    kind = m[0]
    if kind == "truncate":
        return raw[:m[1] % len(raw)], False
    if kind == "overwrite":
        b = bytearray(raw)
        for pos, byte in m[1]:
            b[pos % len(b)] = byte
        return bytes(b), False
    if kind == "insert":
        pos = m[1] % (len(raw) + 1)
        return raw[:pos] + m[2] + raw[pos:], False
    if kind == "edit":              # one value of the JSON header replaced
        tree = json.loads(header)
        paths = list(_json_paths(tree))
        new = _replaced(tree, paths[m[1] % len(paths)], m[2])
        return seal(json.dumps(new, separators=(",", ":")).encode(), data), True
    if kind == "edit_bytes":        # header bytes overwritten
        b = bytearray(header)
        for pos, byte in m[1]:
            b[pos % len(b)] = byte
        return seal(bytes(b), data), True
    b = bytearray(data)             # "edit_data": a data byte overwritten
    b[m[1] % len(b)] = m[2]
    return seal(header, bytes(b)), True


try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:                 # hypothesis is a test extra
    given = None

if given is not None:
    _positions = st.integers(0, 1 << 30)
    _json = st.recursive(
        st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70)
        | st.sampled_from([0, 1, -1, 2, 64, 128, 1024, 1 << 16, 1 << 18, 1 << 63, 1 << 64])
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.sampled_from(["float32", "bool", "bfloat16", "int16", "uint8", "object", "nan",
                           "inf", "$tensor", "$dict", "$tuple", "leaf0", ""]),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
            st.sampled_from(["$tensor", "$ndarray", "$dict", "$tuple", "$float", "$dtype",
                             "dtype", "shape", "offset", "nbytes", "requires_grad", "tree",
                             "data_bytes"]), inner, max_size=3),
        max_leaves=8)
    _mutations = st.one_of(
        st.tuples(st.just("truncate"), _positions),
        st.tuples(st.just("overwrite"),
                  st.lists(st.tuples(_positions, st.integers(0, 255)), min_size=1, max_size=8)),
        st.tuples(st.just("insert"), _positions, st.binary(min_size=1, max_size=8)),
        st.tuples(st.just("edit"), _positions, _json),
        st.tuples(st.just("edit_bytes"),
                  st.lists(st.tuples(_positions, st.integers(0, 255)), min_size=1, max_size=4)),
        st.tuples(st.just("edit_data"), _positions, st.integers(0, 255)),
    )

    @settings(max_examples=300, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(m=_mutations)
    def test_mutated_checkpoints_load_exactly_or_raise_value_error(tmp_path, m):
        raw, header, data, original = _fuzz_base()
        blob, resealed = _mutate(raw, header, data, m)
        path = tmp_path / "mut.fl"
        path.write_bytes(blob)
        tracemalloc.start()
        try:
            got = fl.load(path)
        except ValueError as e:
            got = e
            assert str(e).startswith(f"flowlite.load: {path}: "), e
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < 2 * len(blob) + SLACK, (peak, len(blob))
        if blob == raw:
            assert _plain(got) == original
        elif not resealed:          # the checksum, length and end marker see every change
            assert isinstance(got, ValueError), m
        if not isinstance(got, ValueError) and resealed:
            _plain(got)             # whatever loaded is a complete, readable object


# ---- loading never executes code -----------------------------------------------------------------
class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_pickle_payloads_are_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Evil(str(marker)))
    (tmp_path / "p.fl").write_bytes(payload)                # a plain pickle file
    with pytest.raises(ValueError, match="not a flowlite checkpoint.*never unpickles"):
        fl.load(tmp_path / "p.fl")
    # a valid container that carries the pickle in its header and as tensor bytes
    tree = {"$dict": [["x", {"$pickle": base64.b64encode(payload).decode()}]]}
    (tmp_path / "q.fl").write_bytes(craft(tree))
    with pytest.raises(ValueError, match="unknown header node"):
        fl.load(tmp_path / "q.fl")
    data = payload + b"\0" * (-len(payload) % 8)
    tree = {"$ndarray": {"dtype": "object", "shape": [len(data) // 8], "offset": 0,
                         "nbytes": len(data)}}
    (tmp_path / "r.fl").write_bytes(craft(tree, data))
    with pytest.raises(ValueError, match="unknown dtype"):
        fl.load(tmp_path / "r.fl")
    # a pickle disguised with flowlite's magic bytes
    (tmp_path / "s.fl").write_bytes(b"\x89FLWLT\r\n" + payload)
    with pytest.raises(ValueError):
        fl.load(tmp_path / "s.fl")
    assert not marker.exists()


# ---- atomic writes -------------------------------------------------------------------------------
def test_failed_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ck.fl"
    fl.save({"v": 1}, path)

    def boom(fd):
        raise OSError("disk on fire")
    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk on fire"):
        fl.save({"v": 2, "w": fl.ones(1000)}, path)
    monkeypatch.undo()
    assert fl.load(path) == {"v": 1}
    assert os.listdir(tmp_path) == ["ck.fl"]        # the temp file was removed


class _FailingFile:
    """Wraps the file `save` writes: the write that would pass `budget` bytes writes part of
    its bytes, then raises (a full disk, a yanked drive, Ctrl-C)."""

    def __init__(self, f, budget, exc):
        self.f, self.budget, self.exc, self.written = f, budget, exc, 0

    def write(self, b):
        b = memoryview(b).cast("B")
        if self.written + len(b) > self.budget:
            keep = self.budget - self.written
            self.f.write(b[:keep])
            self.f.flush()                        # the partial bytes really reach the file
            self.written = self.budget
            raise self.exc
        self.written += len(b)
        return self.f.write(b)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.f.__exit__(*exc)


@pytest.mark.parametrize("budget", [0, 1, 20, 100, 4096, 40_000, 400_000])
@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_save_failing_midway_keeps_the_previous_checkpoint(tmp_path, monkeypatch, budget, exc):
    path = tmp_path / "ck.fl"
    old = {"v": 1, "w": fl.tensor(np.arange(1000, dtype=np.float32))}
    fl.save(old, path)
    before = path.read_bytes()
    real_fdopen = os.fdopen
    opened = []

    def failing_fdopen(fd, *args, **kw):
        opened.append(_FailingFile(real_fdopen(fd, *args, **kw), budget, exc))
        return opened[-1]
    monkeypatch.setattr(os, "fdopen", failing_fdopen)
    new = {"v": 2, "w": fl.tensor(np.ones(100_000, np.float32))}       # ~400 KB
    with pytest.raises(type(exc)):
        fl.save(new, path)
    monkeypatch.undo()
    assert opened and opened[0].written == budget       # the failure came midway, as planned
    assert path.read_bytes() == before
    got = fl.load(path)
    assert got["v"] == 1 and np.array_equal(got["w"].numpy(), np.arange(1000))
    assert os.listdir(tmp_path) == ["ck.fl"]            # the partial temp file was removed
    fl.save(new, path)                                  # and the next save works
    assert fl.load(path)["v"] == 2


def test_a_save_over_a_directory_fails_without_a_trace(tmp_path):
    (tmp_path / "ck.fl").mkdir()
    with pytest.raises(OSError):
        fl.save({"v": 1}, tmp_path / "ck.fl")
    assert os.listdir(tmp_path) == ["ck.fl"] and not os.listdir(tmp_path / "ck.fl")


def test_sigkill_during_save_leaves_a_loadable_checkpoint(tmp_path):
    """A child process saves ~20 MB checkpoints in a loop and is SIGKILLed at a random
    moment; the target must always load as one complete checkpoint."""
    path = tmp_path / "ck.fl"
    n = 5_000_000
    payloads = [np.full(n, float(v), np.float32) for v in (1, 2)]
    fl.save({"v": 0, "w": np.zeros(n, np.float32)}, path)
    rnd = random.Random(0)
    interrupted = 0
    for trial in range(10):
        r, w = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # jax warns about fork(); the child uses no jax
            pid = os.fork()
        if pid == 0:   # child: numpy and file writes only, never returns into pytest
            try:
                os.close(r)
                os.write(w, b"r")
                k = trial
                while True:
                    k += 1
                    ser.save({"v": k % 2 + 1, "w": payloads[k % 2]}, path)
                    os.write(w, b"s")
            finally:
                os._exit(0)
        os.close(w)
        os.read(r, 1)                            # the child starts saving
        t0 = time.perf_counter()
        os.read(r, 1)                            # its first save is complete
        time.sleep(rnd.uniform(0.0, 1.5 * (time.perf_counter() - t0)))   # somewhere in the next
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        ck = fl.load(path)
        v = ck["v"]
        assert v in (1, 2)
        assert ck["w"].shape == (n,) and ck["w"][0] == v and ck["w"][-1] == v
        assert np.all(ck["w"] == v)
        temps = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
        interrupted += bool(temps)
        for f in temps:
            os.unlink(tmp_path / f)
    assert interrupted >= 3, "the kills never landed inside a write"


def test_missing_directory_and_symlinked_target(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fl.save({"a": 1}, tmp_path / "missing" / "x.fl")
    real = tmp_path / "ckpt_100.fl"
    fl.save({"step": 100}, real)
    link = tmp_path / "latest.fl"
    link.symlink_to(real)
    fl.save({"step": 101}, link)             # writes through the link, like open(path, "wb")
    assert link.is_symlink() and fl.load(real) == {"step": 101}


def test_whole_module_saves_as_pickle_and_loads_only_with_weights_only_false(tmp_path):
    # torch.save(model, f) pickles the module; torch.load refuses it unless weights_only=False
    import pickle
    m = fl.nn.Sequential(fl.nn.Linear(3, 4), fl.nn.Tanh())
    x = fl.randn(2, 3)
    path = tmp_path / "model.pt"
    fl.save(m, path)
    with pytest.raises(pickle.UnpicklingError, match="flowlite.nn.containers.Sequential.*"
                       "weights_only=False"):
        fl.load(path)
    with open(path, "rb") as f:
        m2 = fl.load(f, weights_only=False)
    np.testing.assert_array_equal(m2(x).numpy(), m(x).numpy())
    assert m2[0].weight.requires_grad
    # weights-only, with the classes allowed (torch.serialization.safe_globals)
    with fl.serialization.safe_globals([fl.nn.Sequential, fl.nn.Linear, fl.nn.Tanh]):
        m3 = fl.load(path)
    np.testing.assert_array_equal(m3(x).numpy(), m(x).numpy())
    with pytest.raises(pickle.UnpicklingError):
        fl.load(path)                                   # the allowlist was for the block


def test_weights_only_load_never_runs_code_from_a_pickle(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))
    path = tmp_path / "evil.pt"
    fl.save({"x": Evil()}, path)
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system|system"):
        fl.load(path)
    assert not (tmp_path / "pwned").exists()


def test_numpy_arrays_keep_their_dtype_with_x64_off(tmp_path):
    # torch.save(np_float64_array) as generate_sine_wave.py does; loaded back unchanged
    a = np.linspace(0, 1, 7, dtype=np.float64).reshape(7, 1)
    b = np.arange(5, dtype=np.int64)
    fl.save({"a": a, "b": b}, tmp_path / "d.pt")
    out = fl.load(tmp_path / "d.pt")
    assert out["a"].dtype == np.float64 and out["b"].dtype == np.int64
    np.testing.assert_array_equal(out["a"], a)
    np.testing.assert_array_equal(out["b"], b)


def test_pickles_naming_modules_from_before_the_layer_move_still_load():
    # files pickled before flowlite.tensor / flowlite.dtypes moved under frontend/ and engine/
    from flowlite.formats import serialization as S
    payload = pickle.dumps({"t": fl.arange(3.0), "d": fl.float16}, protocol=3)   # GLOBAL: text
    old = (payload.replace(b"cflowlite.frontend.tensor\n", b"cflowlite.tensor\n")
           .replace(b"cflowlite.engine.dtypes\n", b"cflowlite.dtypes\n"))
    assert old != payload and b"frontend" not in old
    for weights_only in (None, False):
        got = S._unpickle("old.pt", old, weights_only)
        assert got["t"].tolist() == [0.0, 1.0, 2.0] and got["d"] is fl.float16
