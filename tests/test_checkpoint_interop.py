"""Checkpoints the ecosystem reads: safetensors both ways, torch.save files, malicious pickles.

PyTorch 2.13 (torch, safetensors.torch) is the oracle: a file flowlite writes must load in
PyTorch with the same keys, shapes, dtypes and bits, and files PyTorch writes must load in
flowlite with the same values.
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import zipfile

import numpy as np
import pytest
import safetensors
import safetensors.numpy
import safetensors.torch
import torch

import flowlite as fl
from flowlite import nn

from conftest import x64_mode

TORCH_DTYPES = {fl.float32: torch.float32, fl.float16: torch.float16,
                fl.bfloat16: torch.bfloat16, fl.int8: torch.int8, fl.int16: torch.int16,
                fl.int32: torch.int32, fl.uint8: torch.uint8, fl.uint32: torch.uint32,
                fl.bool: torch.bool}


def bits(a):
    """A numpy array's raw bits (so -0.0, NaN payloads and bf16 compare exactly)."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a


def torch_bits(t):
    t = t.contiguous()
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return bits(t.numpy())


def sample_state():
    g = np.random.default_rng(0)
    sd = {}
    for i, (dt, tdt) in enumerate(TORCH_DTYPES.items()):
        if dt is fl.bool:
            a = g.random((3, 4)) > 0.5
        elif dt.is_floating_point:
            a = (g.standard_normal((3, 4)) * 10).astype(np.float32)
            a[0, 0], a[0, 1] = -0.0, np.inf
        else:
            info = np.iinfo(dt.np)
            a = g.integers(info.min, info.max, (3, 4), endpoint=True, dtype=dt.np)
        sd[f"layer{i}.{dt.name}"] = fl.tensor(a, dtype=dt)
    sd["scalar"] = fl.tensor(2.5)
    sd["empty"] = fl.zeros(0, 3)
    sd["pending"] = fl.ones(2, 2) * 3          # a lazy value: save materialises it
    return sd


def test_safetensors_round_trip_through_pytorch_is_bit_exact(tmp_path):
    sd = sample_state()
    fl.save(sd, tmp_path / "a.safetensors")
    theirs = safetensors.torch.load_file(tmp_path / "a.safetensors")
    assert list(theirs) == list(sd) or sorted(theirs) == sorted(sd)
    for k, t in sd.items():
        assert theirs[k].dtype is TORCH_DTYPES[t.dtype], k
        assert tuple(theirs[k].shape) == tuple(t.shape), k
        np.testing.assert_array_equal(torch_bits(theirs[k]), bits(t.numpy()), err_msg=k)
    safetensors.torch.save_file(theirs, tmp_path / "b.safetensors")   # PyTorch writes it back
    back = fl.load(tmp_path / "b.safetensors")
    assert sorted(back) == sorted(sd)
    for k, t in sd.items():
        assert back[k].dtype is t.dtype and tuple(back[k].shape) == tuple(t.shape), k
        np.testing.assert_array_equal(bits(back[k].numpy()), bits(t.numpy()), err_msg=k)
    assert list(fl.load(tmp_path / "a.safetensors")) == list(sd)     # flowlite keeps order


def test_pytorch_model_weights_load_into_the_flowlite_model(tmp_path):
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                             torch.nn.Linear(8, 3)).eval()
    tm[1].running_mean.normal_()
    safetensors.torch.save_file(tm.state_dict(), tmp_path / "m.safetensors")
    torch.save(tm.state_dict(), tmp_path / "m.pt")
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    want = tm(torch.from_numpy(x)).detach().numpy()
    for path in ("m.safetensors", "m.pt"):
        fm = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
        fm.load_state_dict(fl.load(tmp_path / path))
        fm.eval()
        np.testing.assert_allclose(fm(fl.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    # and back: flowlite's weights load into the PyTorch model
    fl.save(fm.state_dict(), tmp_path / "f.safetensors")
    tm2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 3)).eval()
    tm2.load_state_dict(safetensors.torch.load_file(tmp_path / "f.safetensors"))
    np.testing.assert_allclose(tm2(torch.from_numpy(x)).detach().numpy(), want, rtol=1e-6)


def test_nested_checkpoint_in_safetensors(tmp_path):
    model = nn.Linear(3, 2)
    opt = fl.optim.Adam(model.parameters(), lr=1e-3)
    model(fl.ones(4, 3)).sum().backward()
    opt.step()
    shared = fl.arange(4.0)
    ck = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 7,
          "rng": fl.get_rng_state(), "tied": [shared, shared], "note": ("a", None, 1.5),
          "arr": np.arange(3, dtype=np.int16), "w": fl.zeros(2, requires_grad=True)}
    fl.save(ck, tmp_path / "ck.safetensors")
    flat = safetensors.torch.load_file(tmp_path / "ck.safetensors")   # other readers: flat
    assert "model.weight" in flat and "epoch" not in flat
    assert any(k.startswith("optimizer.state.0.") for k in flat)
    got = fl.load(tmp_path / "ck.safetensors")
    assert got["epoch"] == 7 and got["note"] == ("a", None, 1.5)
    assert got["tied"][0] is got["tied"][1]
    assert got["w"].requires_grad and got["arr"].dtype == np.int16
    np.testing.assert_array_equal(got["model"]["weight"].numpy(), model.weight.numpy())
    np.testing.assert_array_equal(got["rng"].numpy(), ck["rng"].numpy())
    opt2 = fl.optim.Adam(nn.Linear(3, 2).parameters(), lr=1e-3)
    opt2.load_state_dict(got["optimizer"])
    assert opt2.state_dict()["param_groups"] == opt.state_dict()["param_groups"]
    # the flowlite format itself is unchanged, and format= overrides the extension
    fl.save(ck["model"], tmp_path / "plain.bin", format="safetensors")
    assert sorted(safetensors.torch.load_file(tmp_path / "plain.bin")) == ["bias", "weight"]
    fl.save(ck["model"], tmp_path / "own.safetensors", format="flowlite")
    assert (tmp_path / "own.safetensors").read_bytes()[:6] == b"\x89FLWLT"
    with pytest.raises(ValueError, match="unknown format"):
        fl.save({}, tmp_path / "x", format="onnx")


def test_safetensors_errors_are_clear_and_saves_atomic(tmp_path):
    (tmp_path / "u16.safetensors").write_bytes(
        safetensors.numpy.save({"k": np.zeros(2, np.uint16)}))
    with pytest.raises(ValueError, match="tensor 'k' has dtype U16"):
        fl.load(tmp_path / "u16.safetensors")
    raw = safetensors.numpy.save({"k": np.zeros(4, np.float32)})
    (tmp_path / "cut.safetensors").write_bytes(raw[:-3])
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        fl.load(tmp_path / "cut.safetensors")
    (tmp_path / "big.safetensors").write_bytes(
        safetensors.numpy.save({"k": np.array([2 ** 40], np.int64)}))
    with pytest.raises(ValueError, match="outside int32"):
        fl.load(tmp_path / "big.safetensors")
    with x64_mode(True):
        assert fl.load(tmp_path / "big.safetensors")["k"].numpy().tolist() == [2 ** 40]
    # a save that fails (unsupported object, or the disk) leaves the old file intact
    path = tmp_path / "keep.safetensors"
    fl.save({"w": fl.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="cannot save an object of type object"):
        fl.save({"w": fl.ones(2), "x": {"y": object()}}, path)
    real_fsync = os.fsync
    try:
        os.fsync = lambda fd: (_ for _ in ()).throw(OSError("disk on fire"))
        with pytest.raises(OSError, match="disk on fire"):
            fl.save({"w": fl.zeros(3)}, path)
    finally:
        os.fsync = real_fsync
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)).count("keep.safetensors") == 1
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_torch_save_files_load_with_equal_values(tmp_path):
    torch.manual_seed(0)
    base = torch.arange(12.0)
    sd = collections.OrderedDict(
        w=torch.randn(3, 4), bf=torch.randn(5).to(torch.bfloat16), h=torch.randn(2).half(),
        i64=torch.arange(6).reshape(2, 3), b=torch.tensor([True, False]),
        u8=torch.arange(250, 256, dtype=torch.uint8), scalar=torch.tensor(1.5),
        view=base[2:10:3], t=base.reshape(3, 4).t(), empty=torch.zeros(0, 2))
    sd._metadata = {"": {"version": 1}}
    ck = {"model": sd, "epoch": 4, "param": torch.nn.Parameter(torch.ones(2)),
          "again": sd["w"], "bytes": b"\x00\xff", "set": {1, 2}, "dtype": torch.float16,
          "size": torch.Size([2, 3]), "lst": [1.5, None, "s"]}
    torch.save(ck, tmp_path / "ck.pt")
    got = fl.load(tmp_path / "ck.pt", map_location="cpu", weights_only=True)
    assert isinstance(got["model"], collections.OrderedDict)
    assert list(got["model"]) == list(sd) and got["model"]._metadata == sd._metadata
    for k, t in sd.items():
        g = got["model"][k]
        assert tuple(g.shape) == tuple(t.shape), k
        want = t.to(torch.int32) if t.dtype is torch.int64 else t   # x64 off: int64 is int32
        np.testing.assert_array_equal(bits(g.numpy()), torch_bits(want), err_msg=k)
    assert got["model"]["bf"].dtype is fl.bfloat16 and got["model"]["h"].dtype is fl.float16
    assert got["again"] is got["model"]["w"]                 # one tensor saved twice
    assert got["param"].requires_grad and not got["model"]["w"].requires_grad
    assert got["epoch"] == 4 and got["bytes"] == b"\x00\xff" and got["set"] == {1, 2}
    assert got["dtype"] is fl.float16 and tuple(got["size"]) == (2, 3)
    assert got["lst"] == [1.5, None, "s"]
    with x64_mode(True):
        assert fl.load(tmp_path / "ck.pt")["model"]["i64"].dtype is fl.int64
    torch.save(sd["w"], tmp_path / "t.pt")                    # a bare tensor
    np.testing.assert_array_equal(fl.load(io.BytesIO((tmp_path / "t.pt").read_bytes())).numpy(),
                                  sd["w"].numpy())
    moved = fl.load(tmp_path / "t.pt", map_location={"cuda:0": "cpu"})
    assert moved.device.type == "cpu"


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _torch_zip(path, pickle_bytes, storages=()):
    """A torch.save-shaped archive around arbitrary pickle bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
        for key, data in storages:
            z.writestr(f"archive/data/{key}", data)


# a pickle that sets __defaults__ on torch._utils._rebuild_tensor_v2 (an allowlisted function)
BUILD_ON_A_FUNCTION = (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n}X\x0c\x00\x00\x00"
                       b"__defaults__)sb.")


def test_malicious_pickles_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"w": _Evil(marker)}, protocol=2)
    _torch_zip(tmp_path / "evil.pt", evil)
    with pytest.raises(ValueError, match=r"refusing to load the global posix\.system"):
        fl.load(tmp_path / "evil.pt")
    # the real torch.save of the same object, and torch's own weights_only check agree
    torch.save({"w": _Evil(marker)}, tmp_path / "evil2.pt")
    with pytest.raises(ValueError, match="refusing to load the global posix.system"):
        fl.load(tmp_path / "evil2.pt")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "evil2.pt", weights_only=True)
    # builtins.eval through a GLOBAL + REDUCE written by hand
    _torch_zip(tmp_path / "eval.pt", b"\x80\x02c__builtin__\neval\nX\x0b\x00\x00\x00print('hi')"
                                     b"\x85R.")
    with pytest.raises(ValueError, match="refusing to load the global __builtin__.eval"):
        fl.load(tmp_path / "eval.pt")
    # BUILD on an allowlisted function (would rewrite its defaults) is refused
    _torch_zip(tmp_path / "build.pt", BUILD_ON_A_FUNCTION)
    with pytest.raises(ValueError, match="refusing to set the state of a function"):
        fl.load(tmp_path / "build.pt")
    assert not marker.exists()


NUMPY_GLOBALS = [np._core.multiarray._reconstruct, np.ndarray, np.dtype,
                 np.dtypes.Float64DType]


class Trusted:
    """A plain class a trusted torch.save file may hold (weights_only=False loads it)."""

    def __init__(self, a):
        self.a = a


def test_torch_save_of_numpy_and_objects_loads_with_weights_only_false_as_in_pytorch(tmp_path):
    data = np.sin(np.arange(12.0)).reshape(3, 4)
    torch.save({"data": data, "obj": Trusted([1, 2]), "w": torch.arange(3.0)}, tmp_path / "o.pt")
    want = torch.load(tmp_path / "o.pt", weights_only=False)
    got = fl.load(tmp_path / "o.pt", weights_only=False)
    np.testing.assert_array_equal(got["data"], want["data"])
    assert type(got["obj"]) is Trusted and got["obj"].a == [1, 2]
    np.testing.assert_array_equal(got["w"].numpy(), want["w"].numpy())


def test_torch_s_load_environment_variables_set_weights_only_as_in_pytorch(tmp_path,
                                                                         monkeypatch):
    # pytorch/examples' time_sequence_prediction is run with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
    data = np.arange(6.0).reshape(2, 3)
    torch.save(data, tmp_path / "d.pt")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    np.testing.assert_array_equal(fl.load(tmp_path / "d.pt"), torch.load(tmp_path / "d.pt"))
    with pytest.raises(pickle.UnpicklingError):       # an explicit True stays True
        torch.load(tmp_path / "d.pt", weights_only=True)
    with pytest.raises(ValueError, match="refusing to load the global"):
        fl.load(tmp_path / "d.pt", weights_only=True)
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(pickle.UnpicklingError):       # forced: even an explicit False
        torch.load(tmp_path / "d.pt", weights_only=False)
    with pytest.raises(ValueError, match="refusing to load the global"):
        fl.load(tmp_path / "d.pt", weights_only=False)


def test_torch_save_of_numpy_needs_the_allowlist_as_in_pytorch(tmp_path):
    # pytorch/examples' time_sequence_prediction torch.save's a numpy array; torch 2.13's
    # weights-only load refuses it unless its globals are allowlisted, and so does flowlite
    data = np.sin(np.arange(12.0)).reshape(3, 4)
    torch.save({"data": data, "w": torch.arange(3.0)}, tmp_path / "np.pt")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "np.pt")
    with pytest.raises(ValueError, match=r"refusing to load the global numpy\._core\."
                                         r"multiarray\._reconstruct.*add_safe_globals"):
        fl.load(tmp_path / "np.pt")
    with torch.serialization.safe_globals(NUMPY_GLOBALS):
        want = torch.load(tmp_path / "np.pt")
    with fl.serialization.safe_globals(NUMPY_GLOBALS):
        got = fl.load(tmp_path / "np.pt")
    assert type(got["data"]) is np.ndarray and got["data"].dtype == np.float64
    np.testing.assert_array_equal(got["data"], want["data"])
    np.testing.assert_array_equal(got["w"].numpy(), want["w"].numpy())
    with pytest.raises(ValueError, match="refusing"):       # the block's allowlist is gone
        fl.load(tmp_path / "np.pt")


def test_allowlisted_numpy_still_refuses_code(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"a": np.ones(2), "w": _Evil(marker)}, tmp_path / "evil.pt")
    with fl.serialization.safe_globals(NUMPY_GLOBALS):
        with pytest.raises(ValueError, match="refusing to load the global posix.system"):
            fl.load(tmp_path / "evil.pt")
        # BUILD on a non-allowlisted object stays refused with numpy allowed
        _torch_zip(tmp_path / "build.pt", BUILD_ON_A_FUNCTION)
        with pytest.raises(ValueError, match="refusing to set the state of a function"):
            fl.load(tmp_path / "build.pt")
    assert not marker.exists()


def test_crafted_storages_are_checked_before_use(tmp_path):
    good = io.BytesIO()
    torch.save(torch.arange(4.0), good)
    with zipfile.ZipFile(io.BytesIO(good.getvalue())) as z:
        pkl = next(n for n in z.namelist() if n.endswith("data.pkl"))
        pkl_bytes = z.read(pkl)
        key = next(n for n in z.namelist() if "/data/" in n).rsplit("/", 1)[1]
    _torch_zip(tmp_path / "short.pt", pkl_bytes, [(key, b"\0" * 12)])   # 3 floats, not 4
    with pytest.raises(ValueError, match="should hold 4 float32 elements"):
        fl.load(tmp_path / "short.pt")
    _torch_zip(tmp_path / "missing.pt", pkl_bytes)
    with pytest.raises(ValueError, match="missing from the archive"):
        fl.load(tmp_path / "missing.pt")
    oob = pkl_bytes.replace(b"K\x04\x85", b"K\x09\x85")      # size (4,) -> (9,)
    assert oob != pkl_bytes
    _torch_zip(tmp_path / "oob.pt", oob, [(key, b"\0" * 16)])
    with pytest.raises(ValueError, match="reaches element 8 of a 4-element storage"):
        fl.load(tmp_path / "oob.pt")
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(ValueError, match="torch.save"):
        fl.load(tmp_path / "junk.pt")
