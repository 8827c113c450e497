"""nn.Module, Parameter and the containers: registration, traversal, modes, dtype moves,
state_dict / load_state_dict (PyTorch key names and layouts, errors), repr, deepcopy, hooks."""
from __future__ import annotations

import collections
import copy

import numpy as np
import pytest

import flowlite as fl
import flowlite.nn as nn
from _nn_helpers import executions

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, groups=1)
        self.bn = nn.BatchNorm2d(4)
        self.register_buffer("step", fl.zeros(()))
        self.register_buffer("cache", fl.zeros(2), persistent=False)
        self.scale = nn.Parameter(fl.ones(1))
        self.plain = 3          # ordinary attribute

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.emb = nn.Embedding(10, 4, padding_idx=0)
        self.heads = nn.ModuleList([nn.Linear(4, 2), nn.Linear(4, 2, bias=False)])
        self.tied = self.heads[0]           # the same module twice: counted once


def test_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["block.scale", "block.conv.weight", "block.conv.bias", "block.bn.weight",
                     "block.bn.bias", "emb.weight", "heads.0.weight", "heads.0.bias",
                     "heads.1.weight"]
    assert len(list(net.parameters())) == 9
    assert [n for n, _ in net.named_buffers()] == [
        "block.step", "block.cache", "block.bn.running_mean", "block.bn.running_var",
        "block.bn.num_batches_tracked"]
    # children are deduplicated among direct children only; modules and parameters globally
    assert [n for n, _ in net.named_children()] == ["block", "emb", "heads", "tied"]
    assert [n for n, _ in net.named_modules()] == [
        "", "block", "block.conv", "block.bn", "emb", "heads", "heads.0", "heads.1"]
    assert [n for n, _ in net.block.named_parameters(recurse=False)] == ["scale"]
    assert net.get_submodule("heads.1") is net.heads[1]
    assert net.get_parameter("block.bn.weight") is net.block.bn.weight
    assert net.get_buffer("block.bn.running_var") is net.block.bn.running_var
    assert net.block.plain == 3
    for p in net.parameters():
        assert isinstance(p, nn.Parameter) and isinstance(p, fl.Tensor)
        assert p.is_leaf and p.requires_grad
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        net.missing
    with pytest.raises(AttributeError, match="no submodule"):
        net.get_submodule("block.nope")


def test_attribute_rules():
    m = nn.Module()
    m.w = nn.Parameter(fl.zeros(2))
    with pytest.raises(TypeError, match="parameter 'w'"):
        m.w = fl.zeros(2)                   # a plain tensor can't replace a parameter
    m.w = None
    assert m.w is None and list(m.parameters()) == []
    m.register_buffer("b", fl.zeros(2))
    m.b = fl.ones(2)                         # buffers accept any tensor
    np.testing.assert_array_equal(m.b.numpy(), [1, 1])
    with pytest.raises(TypeError):
        m.register_buffer("c", 3)
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("train", fl.zeros(1))
    m.sub = nn.Linear(2, 2)
    del m.sub
    assert list(m.children()) == []
    with pytest.raises(AttributeError, match="before Module.__init__"):
        class Bad(nn.Module):
            def __init__(self):
                self.p = nn.Parameter(fl.zeros(1))
        Bad()


def test_parameter_basics():
    p = nn.Parameter(fl.zeros(2, 3))
    assert p.requires_grad and p.is_leaf and p.grad_fn is None
    q = nn.Parameter(np.ones(3, np.float32), requires_grad=False)
    assert not q.requires_grad
    assert repr(q).startswith("Parameter containing:\ntensor([1., 1., 1.]")
    # a Parameter made from a computed tensor is a new leaf
    r = nn.Parameter(fl.ones(2, requires_grad=True) * 2)
    assert r.is_leaf and r.grad_fn is None


def test_train_eval_zero_grad_apply_requires_grad():
    net = Net()
    # fixed values, so the syncs below never compile the (lazy, random) initialisation
    net.load_state_dict({k: np.zeros(tuple(v.shape)) for k, v in net.state_dict().items()})
    assert net.training and net.block.bn.training
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    x = fl.from_numpy(np.ones((2, 4), np.float32))
    out = net.heads[0](x).sum() + net.heads[1](x).sum()
    out.backward()
    assert net.heads[0].weight.grad is not None
    net.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(net.heads[0].weight.grad.numpy(), np.zeros((2, 4)))
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Net" and seen[0] == "Conv2d"      # children first, then self
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_to_dtype_keeps_identities(x64):
    m = nn.BatchNorm1d(3)
    w = m.weight
    m.to(fl.float64)
    assert m.weight is w and m.weight.dtype is fl.float64 and m.weight.is_leaf
    assert m.running_mean.dtype is fl.float64
    assert m.num_batches_tracked.dtype is fl.int64      # integer buffers keep their dtype
    m.float()
    assert m.weight.dtype is fl.float32 and m.running_var.dtype is fl.float32
    with pytest.raises(TypeError, match="floating point"):
        m.to(fl.int32)
    assert m.to("cpu") is m


def test_state_dict_keys_and_pytorch_layouts():
    model = nn.Sequential(collections.OrderedDict([
        ("conv", nn.Conv2d(4, 6, (3, 2), groups=2)),
        ("bn", nn.BatchNorm2d(6)),
        ("up", nn.ConvTranspose2d(6, 4, 3, groups=2)),
        ("flat", nn.Flatten()),
        ("fc", nn.Linear(12, 5)),
        ("ln", nn.LayerNorm(5)),
        ("emb", nn.Embedding(7, 5)),
        ("attn", nn.MultiheadAttention(8, 2)),
    ]))
    sd = model.state_dict()
    assert [(k, tuple(v.shape)) for k, v in sd.items()] == [
        ("conv.weight", (6, 2, 3, 2)), ("conv.bias", (6,)),
        ("bn.weight", (6,)), ("bn.bias", (6,)), ("bn.running_mean", (6,)),
        ("bn.running_var", (6,)), ("bn.num_batches_tracked", ()),
        ("up.weight", (6, 2, 3, 3)), ("up.bias", (4,)),
        ("fc.weight", (5, 12)), ("fc.bias", (5,)),
        ("ln.weight", (5,)), ("ln.bias", (5,)),
        ("emb.weight", (7, 5)),
        ("attn.in_proj_weight", (24, 8)), ("attn.in_proj_bias", (24,)),
        ("attn.out_proj.weight", (8, 8)), ("attn.out_proj.bias", (8,)),
    ]
    # int64 (stored as int32 while JAX's x64 mode is off, like every flowlite int64)
    assert sd["bn.num_batches_tracked"].dtype is fl.tensor([0]).dtype
    assert all(not v.requires_grad for v in sd.values())
    assert model.state_dict(keep_vars=True)["fc.weight"] is model.fc.weight
    assert "block.cache" not in Net().state_dict() and "block.step" in Net().state_dict()


def test_load_state_dict_roundtrip_is_lazy_and_copies():
    src, dst = Block(), Block()
    arrays = {k: np.random.default_rng(0).standard_normal(tuple(v.shape)).astype(np.float64)
              for k, v in src.state_dict().items()}
    arrays["bn.num_batches_tracked"] = np.array(5)
    ids = {n: id(p) for n, p in dst.named_parameters()}
    e0 = executions()
    result = dst.load_state_dict(arrays)
    assert executions() == e0                      # loading never syncs
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert {n: id(p) for n, p in dst.named_parameters()} == ids
    assert all(p.is_leaf and p.requires_grad for p in dst.parameters())
    assert dst.conv.weight.dtype is fl.float32     # cast to the parameter's dtype
    expected = arrays["conv.weight"].astype(np.float32)
    arrays["conv.weight"][...] = 0                 # the caller's array is not aliased
    np.testing.assert_allclose(dst.conv.weight.numpy(), expected)
    assert dst.bn.num_batches_tracked.item() == 5
    # flowlite tensors load too (a state_dict from another model)
    src.load_state_dict(dst.state_dict())
    np.testing.assert_array_equal(src.bn.running_var.numpy(), dst.bn.running_var.numpy())


def test_state_dict_is_a_snapshot():
    m = nn.Linear(2, 2)
    m.load_state_dict({"weight": np.ones((2, 2)), "bias": np.zeros(2)})
    sd = m.state_dict()
    with fl.no_grad():
        m.weight.mul_(3.0)
    np.testing.assert_array_equal(sd["weight"].numpy(), np.ones((2, 2)))
    np.testing.assert_array_equal(m.weight.numpy(), np.full((2, 2), 3.0))


def test_load_state_dict_errors_name_keys_and_shapes():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    good = {k: np.zeros(tuple(v.shape)) for k, v in m.state_dict().items()}
    bad = dict(good)
    bad["0.weight"] = np.zeros((4, 3))
    with pytest.raises(RuntimeError, match=r"size mismatch for 0\.weight: copying a param with "
                                           r"shape \(4, 3\) from checkpoint, the shape in "
                                           r"current model is \(2, 3\)"):
        m.load_state_dict(bad)
    missing = {k: v for k, v in good.items() if k != "1.running_var"}
    with pytest.raises(RuntimeError, match=r'Missing key\(s\).*"1\.running_var" \(shape \(2,\)'):
        m.load_state_dict(missing)
    extra = dict(good, **{"1.extra": np.zeros((5, 1)), "2.weight": np.zeros(3)})
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\).*"1\.extra" \(shape \(5, 1\) in '
                                           r'checkpoint\), "2\.weight" \(shape \(3,\)'):
        m.load_state_dict(extra)
    r = m.load_state_dict(dict(missing, **{"1.extra": np.zeros(1)}), strict=False)
    assert r.missing_keys == ["1.running_var"] and r.unexpected_keys == ["1.extra"]
    with pytest.raises(RuntimeError, match="size mismatch"):      # shapes are checked even
        m.load_state_dict(bad, strict=False)                      # when strict=False


def test_repr_matches_pytorch_format():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                          nn.ReLU(), nn.Flatten(), nn.Linear(8, 10),
                          nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2), nn.Tanh()]))
    assert repr(model) == """Sequential(
  (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
  (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
  (2): ReLU()
  (3): Flatten(start_dim=1, end_dim=-1)
  (4): Linear(in_features=8, out_features=10, bias=True)
  (5): ModuleList(
    (0-1): 2 x Linear(in_features=2, out_features=2, bias=True)
    (2): Tanh()
  )
)"""
    assert repr(nn.ParameterList([nn.Parameter(fl.zeros(2, 3))])) == \
        "ParameterList(  (0): Parameter containing: [flowlite.float32 of size 2x3])"


def test_deepcopy_is_lazy_and_independent():
    m = Block()
    m.load_state_dict({k: np.ones(tuple(v.shape)) for k, v in m.state_dict().items()})
    e0 = executions()
    c = copy.deepcopy(m)
    assert executions() == e0
    assert isinstance(c.conv.weight, nn.Parameter) and c.conv.weight is not m.conv.weight
    assert c.conv.weight.requires_grad and c.conv.weight.is_leaf
    assert c.cache is not m.cache and c.plain == 3
    with fl.no_grad():
        c.conv.weight.mul_(2.0)
    np.testing.assert_array_equal(m.conv.weight.numpy(), np.ones((4, 3, 3, 3)))
    np.testing.assert_array_equal(c.conv.weight.numpy(), np.full((4, 3, 3, 3), 2.0))


def test_forward_hooks():
    m = nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre"))
    h2 = m.register_forward_hook(lambda mod, args, out: out * 0)
    y = m(fl.zeros(1, 2))
    assert calls == ["pre"]
    np.testing.assert_array_equal(y.numpy(), np.zeros((1, 2)))
    h1.remove()
    h2.remove()
    m(fl.zeros(1, 2))
    assert calls == ["pre"]


def test_sequential():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    s = nn.Sequential(a, b, c)
    assert len(s) == 3 and s[0] is a and s[-1] is c and list(s) == [a, b, c]
    assert isinstance(s[1:], nn.Sequential) and list(s[1:]) == [b, c]
    assert [n for n, _ in s[1:].named_children()] == ["1", "2"]
    x = fl.from_numpy(np.ones((4, 2), np.float32))
    assert tuple(s(x).shape) == (4, 1)
    s.append(nn.Sigmoid())
    s.insert(0, nn.Identity())
    assert [type(m).__name__ for m in s] == ["Identity", "Linear", "ReLU", "Linear", "Sigmoid"]
    del s[0]
    assert s[0] is a and [n for n, _ in s.named_children()] == ["0", "1", "2", "3"]
    assert s.pop() .__class__ is nn.Sigmoid and len(s) == 3
    s2 = s + nn.Sequential(nn.Tanh())
    assert len(s2) == 4
    named = nn.Sequential(collections.OrderedDict([("fc", a), ("act", b)]))
    assert named.fc is a and list(named.state_dict()) == ["fc.weight", "fc.bias"]
    with pytest.raises(IndexError):
        s[5]


def test_module_list_and_dict():
    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.append(nn.ReLU())
    ml.extend([nn.Tanh()])
    ml += [nn.Sigmoid()]
    ml.insert(1, nn.Identity())
    assert [type(m).__name__ for m in ml] == ["Linear", "Identity", "ReLU", "Tanh", "Sigmoid"]
    assert len(ml[1:3]) == 2 and ml[-1].__class__ is nn.Sigmoid
    del ml[1]
    assert [n for n, _ in ml.named_children()] == ["0", "1", "2", "3"]
    with pytest.raises(NotImplementedError):
        ml(fl.zeros(1))
    md = nn.ModuleDict({"a": nn.Linear(1, 2), "b": nn.ReLU()})
    md["c"] = nn.Tanh()
    assert list(md.keys()) == ["a", "b", "c"] and "b" in md and len(md) == 3
    assert list(md.state_dict()) == ["a.weight", "a.bias"]
    assert isinstance(md.pop("b"), nn.ReLU) and list(md) == ["a", "c"]


def test_parameter_list_and_dict():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.plist = nn.ParameterList([nn.Parameter(fl.zeros(2)), fl.ones(3)])
            self.pdict = nn.ParameterDict({"w": nn.Parameter(fl.zeros(1, 2))})
    m = M()
    assert [n for n, _ in m.named_parameters()] == ["plist.0", "plist.1", "pdict.w"]
    assert isinstance(m.plist[1], nn.Parameter) and len(m.plist) == 2
    m.plist.append(fl.zeros(4))
    m.pdict["v"] = fl.zeros(5)
    assert list(m.state_dict()) == ["plist.0", "plist.1", "plist.2", "pdict.w", "pdict.v"]
    assert list(m.pdict.keys()) == ["w", "v"]


def test_construction_and_forward_are_lazy():
    e0 = executions()
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 2))
    y = model(fl.zeros(2, 3, 6, 6))
    y.sum().backward()
    # (the initialisation is host data — PyTorch's draws — and the forward pass is pending)
    assert executions() == e0 and y.is_pending and not model[0].weight.is_pending
