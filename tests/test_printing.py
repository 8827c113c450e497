"""Printed forms, compared with PyTorch's strings character for character: tensor `repr`/`str`
(flowlite.frontend.printing: element format, wrapping, summarising, suffixes), the print options,
autograd node names (`grad_fn=<MulBackward0>`: engine.node_names and the front ends' labels),
devices, and `torch.Size`/`torch.float32` under `python -m flowlite.run`.

Each value is built from the same numpy array in both frameworks; flowlite's dtypes print with
the `torch.` prefix here (engine.namespace, as under flowlite.run) so the strings compare whole.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flowlite as fl
import flowlite.nn.functional as FF
from flowlite.engine import namespace
from conftest import x64_mode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _torch_names_and_default_options():
    """flowlite prints torch.* names (as under flowlite.run); both start and end with the
    default print options."""
    namespace.set_prefix("torch")
    fl.set_printoptions(profile="default")
    torch.set_printoptions(profile="default")
    try:
        yield
    finally:
        namespace.set_prefix("flowlite")
        fl.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _arrays():
    r = _rng()
    return {
        "randn_4x100": r.standard_normal((4, 100)).astype(np.float32),   # the lecture's case
        "ints_27x27": r.integers(0, 5000, (27, 27)),
        "big_floats": (r.standard_normal((3, 4)) * 1e9).astype(np.float32),
        "small_floats": (r.standard_normal(5) * 1e-6).astype(np.float32),
        "wide_ratio": np.array([1e-3, 2.0, 5000.0], np.float32),
        "whole_floats": np.array([1.0, 2.0, -30.0, 0.0], np.float32),
        "whole_big_floats": np.array([1e10, 3.0], np.float32),
        "bool": r.standard_normal((3, 4)) > 0,
        "scalar_float": np.array(3.14159, np.float32),
        "scalar_int": np.array(-7),
        "scalar_bool": np.array(True),
        "empty": np.zeros((0,), np.float32),
        "empty_2d": np.zeros((2, 0, 3), np.float32),
        "empty_int": np.zeros((0,), np.int64),
        "empty_bool": np.zeros((0, 2), bool),
        "summarised_2d": r.standard_normal((40, 50)).astype(np.float32),
        "summarised_1d_int": np.arange(2000),
        "summarised_3d": r.standard_normal((20, 10, 10)).astype(np.float32),
        "summarised_short_rows": r.standard_normal((500, 3)).astype(np.float32),
        "three_d": r.standard_normal((2, 3, 4)).astype(np.float32),
        "four_d": r.standard_normal((2, 1, 2, 3)).astype(np.float32),
        "float64": r.standard_normal((3, 3)),
        "float16": r.standard_normal((3, 3)).astype(np.float16),
        "nan_inf": np.array([1.5, np.nan, np.inf, -np.inf, 0.0], np.float32),
        "only_nonfinite": np.array([np.nan, np.inf, -np.inf], np.float32),
        "zeros": np.zeros((2, 3), np.float32),
        "negative_zero": np.array([-0.0, 1.0], np.float32),
        "int32": np.arange(-3, 4, dtype=np.int32),
        "uint8": np.arange(250, 256, dtype=np.uint8),
        "int8": np.arange(-5, 5, dtype=np.int8),
        "long_vector": r.standard_normal(200).astype(np.float32),
        "long_int_vector": r.integers(-10**12, 10**12, 60),
        "column": r.standard_normal((6, 1)).astype(np.float32),
    }


ARRAYS = _arrays()


def _pair(a, requires_grad=False):
    t = torch.from_numpy(np.array(a, copy=True))
    f = fl.from_numpy(np.array(a, copy=True))
    if requires_grad:
        t.requires_grad_()
        f.requires_grad_()
    return t, f


@pytest.mark.parametrize("name", list(ARRAYS))
def test_repr_matches_pytorch(name, x64):
    t, f = _pair(ARRAYS[name])
    assert repr(f) == repr(t)
    assert str(f) == str(t)


def test_bfloat16_and_float16_conversions_match(x64):
    a = _rng(1).standard_normal((2, 5)).astype(np.float32) * 100
    t, f = _pair(a)
    assert repr(f.to(fl.bfloat16)) == repr(t.to(torch.bfloat16))
    assert repr(f.half()) == repr(t.half())


def test_without_x64_int_tensors_print_as_the_default_integer():
    # x64 off (flowlite's default outside flowlite.run): int64 is stored as int32, which is then
    # the default integer and prints no dtype, as PyTorch's int64 tensors do
    assert repr(fl.tensor([1, 2, 3])) == repr(torch.tensor([1, 2, 3]))


def test_requires_grad_and_grad_fn_suffixes(x64):
    a = ARRAYS["randn_4x100"][:2, :6]
    t, f = _pair(a, requires_grad=True)
    assert repr(f) == repr(t)                                   # requires_grad=True
    assert repr(f * 2) == repr(t * 2)                           # grad_fn=<MulBackward0>
    assert repr((f * 2).sum()) == repr((t * 2).sum())           # 0-d with grad_fn
    with fl.no_grad(), torch.no_grad():
        assert repr(f * 2) == repr(t * 2)
    d = _pair(np.arange(4.0))
    assert repr(d[1].requires_grad_()) == repr(d[0].requires_grad_())     # float64 + suffix


def test_suffix_that_passes_the_line_width_starts_a_new_line(x64):
    # the lecture's (4, 100) tensor with a grad_fn, and rows that end just short of the width
    t, f = _pair(ARRAYS["randn_4x100"], requires_grad=True)
    assert repr(f.tanh()) == repr(t.tanh())
    for n in range(6, 12):
        v = _pair(np.linspace(-1, 1, n).astype(np.float32) * 1000, requires_grad=True)
        assert repr(v[1] * 1.5) == repr(v[0] * 1.5), n
        w = _pair(np.linspace(-1, 1, n), requires_grad=True)     # + dtype=torch.float64
        assert repr(w[1] + 1) == repr(w[0] + 1), n


def test_parameter_repr():
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    assert repr(fl.nn.Parameter(fl.from_numpy(w))) == \
        repr(torch.nn.Parameter(torch.from_numpy(w)))


@pytest.mark.parametrize("options", [
    dict(precision=2), dict(precision=8), dict(threshold=5), dict(edgeitems=1, threshold=10),
    dict(edgeitems=0, threshold=10), dict(linewidth=40), dict(linewidth=200),
    dict(sci_mode=True), dict(sci_mode=False), dict(profile="short"), dict(profile="full"),
    dict(profile="short", precision=6)])
def test_print_options_match_pytorch(options, x64):
    fl.set_printoptions(**options)
    torch.set_printoptions(**options)
    assert fl.get_printoptions() == torch._tensor_str.get_printoptions()
    for name in ("randn_4x100", "ints_27x27", "small_floats", "whole_floats", "summarised_2d",
                 "summarised_3d", "scalar_float", "bool", "only_nonfinite", "zeros"):
        t, f = _pair(ARRAYS[name])
        assert repr(f) == repr(t), name


def test_printoptions_context_manager_restores_and_sci_mode_resets():
    fl.set_printoptions(precision=3, sci_mode=True)
    with fl.printoptions(precision=1):
        assert fl.get_printoptions()["precision"] == 1
        assert fl.get_printoptions()["sci_mode"] is None       # a call without sci_mode resets it
        assert repr(fl.tensor([0.25, 1.5])) == "tensor([0.2, 1.5])"
    assert fl.get_printoptions()["precision"] == 3 and fl.get_printoptions()["sci_mode"] is True
    with pytest.raises(ValueError, match="profile"):
        fl.set_printoptions(profile="long")


def test_format_of_a_0d_tensor_is_its_number():
    t, f = _pair(np.array(2.302585, np.float32), requires_grad=True)
    assert f"{f}" == f"{t}" and f"{f:.3f}" == f"{t:.3f}"
    assert f"loss {f * 1}" == f"loss {t * 1}"
    assert f"{fl.tensor([1.0, 2.0])}" == f"{torch.tensor([1.0, 2.0])}"
    with pytest.raises(TypeError, match="format"):
        f"{fl.tensor([1.0, 2.0]):.2f}"


def test_devices_print_as_pytorch():
    x = fl.zeros(2)
    assert str(x.device) == "cpu" and repr(x.device) == "device(type='cpu')"
    assert str(fl.device("cpu")) == str(torch.device("cpu"))
    assert repr(fl.device("cpu")) == repr(torch.device("cpu"))


# ---- autograd node names ------------------------------------------------------------------------
# user calls, written once for both frameworks: L is the library (torch / flowlite), F its
# nn.functional; x, y (4, 5), x3 (2, 4, 5), x4 (2, 3, 4, 5), v (5,), w (3, 5), b (3,), m (5, 3),
# e (10, 5) and the 0-d s are leaves that require grad
NODE_CALLS = """
-x | x + y | x + 2 | 2 + x | x * 2 | x * y | x - y | x - 1 | 1 - x | x / y | x / 2 | 2 / x
x / s | x.neg() | x.add(y, alpha=2) | x.sub(1)
x @ m | L.mm(x, m) | x.mm(m) | L.matmul(x, m) | x3 @ m | x3 @ x3.transpose(1, 2)
x4 @ x4.transpose(-1, -2) | x3 @ v | v @ x.t() | v @ v | x @ v | L.bmm(x3, x3.transpose(1, 2))
x.mv(v) | v.dot(v)
x.sum() | x.sum(1) | x.sum(1, keepdim=True) | v.sum(0) | x.mean() | x.mean(1)
x.mean(0, keepdim=True) | x3.mean(-1, keepdim=True) | x.prod() | x.prod(1) | x.var() | x.std(1)
x.norm() | x.logsumexp(1) | x.max() | x.min() | x.max(1)[0] | x.max(1).values | x.min(1)[0]
x.amax(1) | L.maximum(x, y) | x.cumsum(0)
x.tanh() | L.tanh(x) | x.exp() | x.log() | x.sqrt() | x.abs() | x.sin() | x.cos() | x.log1p()
x.exp2() | x.rsqrt() | x.reciprocal() | x.relu() | F.relu(x) | x.sigmoid() | L.sigmoid(x)
x.square() | x.clamp(min=0) | x.clamp(-1, 1) | x.tril()
x ** 2 | x ** 2.0 | x ** 0.5 | x ** y | x ** s | 2 ** x | L.pow(2, x)
x.view(20) | x.view(-1, 2) | x.reshape(20) | x.t().reshape(20) | x3.flatten(1)
x3.transpose(1, 2).flatten() | x.unflatten(1, (5, 1)) | x.unsqueeze(0) | x[None].squeeze()
x[None].squeeze(0) | x[None].squeeze((0,)) | x3.permute(2, 0, 1) | x3.transpose(1, 2)
x3.swapaxes(0, 1) | x3.movedim(0, 2) | x.t() | x.T | x.mT | v.expand(4, 5)
v.broadcast_to((4, 5)) | x.narrow(1, 1, 2) | x.select(1, 2) | x.split(2) | x.split([1, 3])
x.chunk(2, 1) | x.unbind(1) | x.diagonal() | x.unfold(1, 2, 1) | x.flip(0) | x.repeat(2, 1)
x.clone()
x[0] | x[:, 1] | x[1:3] | x[:, 1:3] | x[0, 1:3] | x[1:3, 0] | x[None, 0] | x[0, None]
x[:, None] | x[..., 0] | x[::2] | x[0, 0] | x[-1] | x3[:, -1, :] | x[L.tensor([0, 2])]
x[[0, 1]] | x[0, [0, 1]] | x[1:3, [0, 1]] | x[x > 0] | x[L.tensor(1)] | e[L.tensor([[1, 2]])]
F.embedding(L.tensor([1, 2]), e) | L.nn.Embedding(4, 5)(L.tensor([1, 2]))
L.cat([x, y]) | L.cat([x, y], 1) | L.stack([x, y]) | L.stack([x, y], 1)
x.masked_fill(x > 0, 0.0) | L.where(x > 0, x, y) | x.gather(1, L.tensor([[0], [1], [2], [3]]))
x.index_select(0, L.tensor([0, 1])) | x.topk(2)[0] | x.sort()[0]
F.softmax(x, dim=1) | x.softmax(-1) | F.log_softmax(x, dim=1)
F.cross_entropy(x, L.tensor([0, 1, 2, 3])) | F.cross_entropy(x3, L.zeros(2, 5, dtype=L.long))
F.nll_loss(x, L.tensor([0, 1, 2, 3])) | F.mse_loss(x, y.detach()) | F.l1_loss(x, y)
F.binary_cross_entropy_with_logits(x, y.detach().sigmoid())
F.binary_cross_entropy(x.sigmoid(), y.detach().sigmoid())
F.linear(x, w, b) | F.linear(x, w) | F.linear(x3, w, b) | F.linear(x3, w) | F.linear(v, w, b)
F.linear(v, w) | L.nn.Linear(5, 3)(x) | L.nn.Linear(5, 3)(x3)
L.nn.Linear(5, 3, bias=False)(x) | F.gelu(x) | F.silu(x) | F.leaky_relu(x) | F.dropout(x, 0.5)
F.layer_norm(x, (5,)) | L.nn.LayerNorm(5)(x) | F.normalize(x)
L.einsum("ij,jk->ik", x, m) | L.einsum("ij->ji", x) | x.double() | x.to(L.float16)
x.clone().tanh_() | x.clone().add_(1)
L.nn.Conv2d(3, 2, 3)(x4) | L.nn.Conv1d(4, 3, 2)(x3) | F.max_pool2d(x4, 2) | F.max_pool1d(x3, 2)
F.avg_pool2d(x4, 2) | F.adaptive_avg_pool2d(x4, 1) | F.adaptive_avg_pool2d(x4, (2, 2))
F.adaptive_max_pool2d(x4, 2) | L.nn.BatchNorm2d(3)(x4) | L.nn.BatchNorm2d(3).eval()(x4)
L.nn.BatchNorm1d(5)(x) | L.nn.GroupNorm(1, 3)(x4) | L.nn.Flatten()(x4) | F.pad(x, (1, 1))
F.softplus(x) | F.elu(x) | F.selu(x) | F.mish(x) | F.hardtanh(x) | F.relu6(x) | F.hardswish(x)
F.hardsigmoid(x) | F.logsigmoid(x) | F.glu(x, 0) | F.smooth_l1_loss(x, y.detach())
F.huber_loss(x, y.detach()) | F.scaled_dot_product_attention(x3, x3, x3)
"""
NODE_CALLS = [c.strip() for line in NODE_CALLS.strip().splitlines() for c in line.split("|")]
_SHAPES = dict(x=(4, 5), y=(4, 5), x3=(2, 4, 5), x4=(2, 3, 4, 5), v=(5,), w=(3, 5), b=(3,),
               m=(5, 3), e=(10, 5), s=())


def _node_names(lib, fn_lib, calls):
    r = _rng(3)
    arrays = {k: r.standard_normal(s).astype(np.float32) for k, s in _SHAPES.items()}
    names = []
    for call in calls:
        env = {k: lib.tensor(a).requires_grad_() for k, a in arrays.items()}
        env.update(L=lib, F=fn_lib)
        out = eval(call, env)
        if isinstance(out, (tuple, list)):
            out = out[0]
        g = out.grad_fn
        names.append(type(g).__name__ if lib is torch else g.name())
    if lib is fl:
        fl.sync()        # the index checks recorded above run while x64 is still on
    return names


def test_grad_fn_names_match_pytorch(x64):
    want = _node_names(torch, TF, NODE_CALLS)
    got = _node_names(fl, FF, NODE_CALLS)
    bad = [f"{c}: {g} (PyTorch {w})" for c, g, w in zip(NODE_CALLS, got, want) if g != w]
    assert not bad, "\n".join(bad)


INPLACE_CALLS = ["y[0] = 5.0", "y[:, 1].zero_()", "y[0] += x[1]", "y[L.tensor([0, 1])] = 0.0",
                 "y += 1", "y.mul_(2)", "y.relu_()", "y.masked_fill_(y > 0, 0.0)", "y.clamp_(0, 1)",
                 "y.fill_(1.0)", "y.zero_()"]


@pytest.mark.parametrize("code", INPLACE_CALLS)
def test_in_place_writes_name_their_nodes_as_pytorch(code):
    names = []
    for lib in (torch, fl):
        env = dict(L=lib, x=lib.tensor(np.ones((3, 4), np.float32)).requires_grad_())
        exec("y = x.clone()\n" + code, env)               # noqa: S102
        g = env["y"].grad_fn
        names.append(type(g).__name__ if lib is torch else g.name())
    assert names[1] == names[0]


def test_grad_fn_objects_print_as_pytorch_nodes():
    x = fl.tensor([1.0, 2.0], requires_grad=True)
    y = -x
    assert y.grad_fn.name() == "NegBackward0"
    assert re.fullmatch(r"<NegBackward0 object at 0x[0-9a-f]+>", repr(y.grad_fn))
    assert str(y.grad_fn) == repr(y.grad_fn)
    (acc, k), = y.grad_fn.next_functions
    assert k == 0 and acc.name() == "torch::autograd::AccumulateGrad"
    assert re.fullmatch(r"<AccumulateGrad object at 0x[0-9a-f]+>", repr(acc))
    assert acc.variable is x
    z = x * 2 + 1
    assert [type(e).__name__ if e is None else e.name()
            for e, _ in z.grad_fn.next_functions] == ["MulBackward0", "NoneType"]


def test_names_survive_backward_and_custom_functions():
    class Exp(fl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    x = fl.tensor([0.5, 1.0], requires_grad=True)
    y = Exp.apply(x)
    assert repr(y) == "tensor([1.6487, 2.7183], grad_fn=<ExpBackward>)"
    loss = 1 - (x @ x)              # rsub and dot: names that look at the inputs
    loss.backward()                 # frees the saved inputs
    assert loss.grad_fn.name() == "RsubBackward1"
    assert repr(loss) == "tensor(-0.2500, grad_fn=<RsubBackward1>)"


# ---- under python -m flowlite.run ---------------------------------------------------------------
_SCRIPT = """
import torch
import torch.nn.functional as F
x = torch.tensor([[0.5, -1.25, 3.0], [2.0, 0.0, 1e-5]])
w = torch.tensor([[0.1, 0.2, 0.3]], requires_grad=True)
print(x.shape, x.dtype, x.device, x.size(), x[0].shape)
print(repr(x.shape), repr(x.dtype), repr(x.device), torch.float32, torch.long, torch.double)
print(x)
print(x.long(), x.double(), x > 0, x.to(torch.bfloat16))
y = F.linear(x, w)
print(y, y.grad_fn.name(), y.sum(), w)
print(torch.arange(3000).view(30, 100).float())
torch.set_printoptions(precision=2, linewidth=60)
print(torch.arange(40.0).view(2, 20) / 3)
torch.set_printoptions(profile="default")
print(torch.zeros(2, 0), torch.tensor([], dtype=torch.long), torch.tensor(True))
print(f"{(w * 2).sum()} {torch.tensor(7)}")
"""


def test_flowlite_run_prints_what_pytorch_prints(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    env = dict(os.environ, PYTHONPATH=ROOT)
    want = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    got = subprocess.run([sys.executable, "-m", "flowlite.run", str(script)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=240)
    assert want.returncode == 0, want.stderr
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


def test_outside_flowlite_run_names_are_flowlites():
    namespace.set_prefix("flowlite")
    x = fl.zeros(2, 3, dtype=fl.float16)
    assert repr(x.dtype) == str(x.dtype) == "flowlite.float16"
    assert repr(x.shape) == "flowlite.Size([2, 3])"
    assert repr(x) == "tensor([[0., 0., 0.],\n        [0., 0., 0.]], dtype=flowlite.float16)"
    with x64_mode(True):
        assert repr(fl.tensor([], dtype=fl.int64)) == "tensor([], dtype=flowlite.int64)"


def test_random_tensors_and_options_print_as_pytorch(x64):
    """Seeded shapes, dtypes, magnitudes, non-finite values and print options."""
    r = _rng(7)
    dtypes = (np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, bool)
    for case in range(150):
        nd = int(r.integers(0, 5))
        shape = tuple(int(r.integers(0, 7 if nd > 2 else 40)) for _ in range(nd))
        if nd and r.random() < 0.1:
            shape = (int(r.integers(0, 1500)),) + shape[1:]
        a = np.asarray(r.standard_normal(shape) * 10.0 ** r.integers(-9, 12))
        if r.random() < 0.3:
            a = np.round(a)
        if a.size and r.random() < 0.2:
            a.flat[r.integers(0, a.size)] = r.choice([np.nan, np.inf, -np.inf, -0.0])
        dt = dtypes[r.integers(0, len(dtypes))]
        with np.errstate(all="ignore"):
            a = a > 0 if dt is bool else a.astype(dt) if np.dtype(dt).kind == "f" else \
                np.nan_to_num(a, posinf=0, neginf=0).clip(-1e15, 1e15).astype(dt)
        opts = {}
        if r.random() < 0.4:
            opts = dict(precision=int(r.integers(0, 9)), threshold=int(r.integers(0, 2000)),
                        edgeitems=int(r.integers(0, 5)), linewidth=int(r.integers(10, 150)),
                        sci_mode=[None, True, False][r.integers(0, 3)])
        fl.set_printoptions(**opts)
        torch.set_printoptions(**opts)
        t, f = _pair(a)
        assert repr(f) == repr(t), (case, a.dtype, shape, opts)
        fl.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
