"""dtypes: PyTorch's type-promotion rules (categories, 0-d tensors, weakly typed Python
scalars), conversions (.to/.float/.half/.bfloat16/.long/.int/.bool/.double), the documented
int64 -> int32 mapping without x64, float64 under x64, and ops in reduced precision."""

import numpy as np
import pytest
import torch

import flowlite as fl
from conftest import check_values, x64_mode

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

B, U8, I8, I16, I32 = fl.bool, fl.uint8, fl.int8, fl.int16, fl.int32
F16, BF16, F32 = fl.float16, fl.bfloat16, fl.float32

# torch.promote_types for dimensioned tensors (from PyTorch's documented lattice)
PROMOTION = [
    (B, B, B), (B, U8, U8), (B, I32, I32), (B, F16, F16), (B, BF16, BF16), (B, F32, F32),
    (U8, I8, I16), (U8, I32, I32), (I8, I16, I16), (I16, I32, I32), (U8, F16, F16),
    (I32, F16, F16), (I32, BF16, BF16), (I32, F32, F32), (F16, BF16, F32), (F16, F32, F32),
    (BF16, F32, F32), (F16, F16, F16), (BF16, BF16, BF16),
]


def _t(dtype, shape=(2,)):
    return fl.ones(*shape, dtype=dtype)


def test_tensor_tensor_promotion_matches_pytorch_table():
    for a, b, want in PROMOTION:
        for x, y in ((a, b), (b, a)):
            for op in (lambda u, v: u + v, lambda u, v: u * v, fl.maximum,
                       lambda u, v: fl.where(fl.ones(2, dtype=fl.bool), u, v)):
                got = op(_t(x), _t(y)).dtype
                assert got is want, f"{x} with {y}: {got}, expected {want}"
    assert fl.cat([_t(F16), _t(I32)]).dtype is F16
    assert (_t(I32) @ fl.ones(2, 2, dtype=F16)).dtype is F16


def test_zero_dim_tensors_promote_only_across_categories():
    cases = [
        (F16, F32, F16),     # same category: the dimensioned operand wins
        (I32, I16, I32),
        (BF16, F16, BF16),
        (I32, F16, F16),     # a higher category: the 0-d operand's dtype
        (B, I32, I32),
        (F16, I32, F16),     # a lower category: the dimensioned operand wins
        (U8, B, U8),
    ]
    for dim_dt, zero_dt, want in cases:
        d, z = _t(dim_dt), fl.ones((), dtype=zero_dt)
        for got in ((d + z).dtype, (z * d).dtype, fl.where(fl.tensor([True, False]), d, z).dtype):
            assert got is want, f"{dim_dt} (dims) with 0-d {zero_dt}: {got}, expected {want}"
    # two 0-d tensors promote normally
    assert (fl.ones((), dtype=F16) + fl.ones((), dtype=F32)).dtype is F32


def test_python_scalars_are_weakly_typed():
    cases = [
        (I32, 2.5, F32), (I32, 2, I32), (I32, True, I32), (B, 2, fl.tensor([1]).dtype),
        (B, True, B), (B, 0.5, F32), (F16, 2.5, F16), (BF16, 1000, BF16), (U8, 3, U8),
        (I8, 1000, I8), (F16, np.float64(2.5), F16), (I32, np.int64(3), I32),
    ]
    for dt, scalar, want in cases:
        t = _t(dt)
        for got in ((t + scalar).dtype, (scalar * t).dtype, (t - scalar).dtype):
            assert got is want, f"{dt} with {scalar!r}: {got}, expected {want}"
    # true division and float-only functions give the default float for integers
    assert (_t(I32) / 2).dtype is F32 and (2 / _t(I32)).dtype is F32
    assert (_t(I32) / _t(I32)).dtype is F32 and (_t(F16) / 2).dtype is F16
    assert _t(I32).exp().dtype is F32 and _t(F16).sqrt().dtype is F16
    assert (_t(I32) // 2).dtype is I32 and (_t(I32) > 2.5).dtype is B
    assert fl.where(fl.tensor([True, False]), 1.0, 0.0).dtype is F32
    assert fl.where(fl.tensor([True, False]), 1, 0).dtype.kind == "i"


def test_promotion_against_torch():
    names = ["bool", "uint8", "int8", "int16", "int32", "float16", "bfloat16", "float32"]
    for a in names:
        for b in names:
            ta = torch.ones(2, dtype=getattr(torch, a))
            tb = torch.ones(2, dtype=getattr(torch, b))
            want = str(torch.promote_types(ta.dtype, tb.dtype)).replace("torch.", "")
            got = (_t(getattr(fl, a)) + _t(getattr(fl, b))).dtype.name
            assert got == want, f"{a}+{b}: flowlite {got}, torch {want}"
            want0 = str((ta + torch.ones((), dtype=tb.dtype)).dtype).replace("torch.", "")
            got0 = (_t(getattr(fl, a)) + fl.ones((), dtype=getattr(fl, b))).dtype.name
            assert got0 == want0, f"{a}+0-d {b}: flowlite {got0}, torch {want0}"


def test_conversions_methods_and_values():
    a = np.array([-2.7, -0.5, 0.0, 0.4, 1.5, 300.7], np.float32)
    x = fl.from_numpy(a)
    outs = [x.to(fl.float16), x.half(), x.bfloat16(), x.int(), x.long(), x.bool(), x.float(),
            x.to(dtype=fl.int32), x.to("cpu"), x.to("cpu", fl.float16), x.type_as(_t(I32)),
            x.to(_t(F16)), fl.tensor([0, 3, -1]).bool(), fl.tensor([True, False]).float(),
            fl.tensor([True, False]).int(), fl.tensor([1, 2]).half(), x.to(fl.uint8)[2:5]]
    dts = [F16, F16, BF16, I32, fl.tensor([1]).dtype, B, F32, I32, F32, F16, I32, F16, B, F32,
           I32, F16, U8]
    assert [o.dtype for o in outs] == dts
    refs = [a.astype(np.float16), a.astype(np.float16), a, np.trunc(a).astype(int),
            np.trunc(a).astype(int), a != 0, a, np.trunc(a).astype(int), a, a.astype(np.float16),
            np.trunc(a).astype(int), a.astype(np.float16), [False, True, True], [1.0, 0.0],
            [1, 0], np.array([1, 2], np.float16), np.array([0, 0, 1], np.uint8)]
    check_values(outs, refs, rtol=1e-2, atol=1e-3)   # bfloat16 keeps ~3 significant digits
    assert x.to(fl.float32) is x and x.float() is x      # a no-op conversion is the same tensor
    assert fl.tensor([1.0]).to("float16").dtype is F16
    bf = fl.tensor([1.0 + 2 ** -9, 256.0 + 1.0]).bfloat16().float().tolist()
    assert bf == [1.0, 256.0]                            # rounded to bfloat16's 8-bit mantissa


def test_int64_maps_to_int32_without_x64_and_float64_to_float32():
    assert fl.tensor([1, 2]).dtype is I32
    assert fl.tensor([1, 2], dtype=fl.int64).dtype is I32
    assert fl.zeros(2, dtype=fl.int64).dtype is I32 and fl.ones(2).long().dtype is I32
    assert fl.ones(2).double().dtype is F32 and fl.ones(2, dtype=fl.float64).dtype is F32
    assert fl.arange(3).dtype is I32 and fl.tensor([True]).sum().dtype is I32
    assert fl.ones(2).argmax().dtype is I32 and fl.randint(0, 3, (2,)).dtype is I32
    assert fl.from_numpy(np.array([1, 2], np.int64)).numpy().dtype == np.int32


def test_float64_and_int64_under_x64(x64):
    f = fl.tensor([1.0, 2.0], dtype=fl.float64)
    i = fl.tensor([1, 2])
    assert f.dtype is fl.float64 and i.dtype is fl.int64
    assert (f + 1.5).dtype is fl.float64 and (f * fl.ones(2)).dtype is fl.float64
    assert (fl.ones(2) + fl.ones((), dtype=fl.float64)).dtype is F32    # 0-d, same category
    assert (i + fl.ones(2, dtype=I32)).dtype is fl.int64 and (i / 2).dtype is F32
    assert fl.ones(2).double().dtype is fl.float64 and fl.ones(2).long().dtype is fl.int64
    assert f.sum().dtype is fl.float64 and f.argmax().dtype is fl.int64
    big = fl.tensor([2 ** 40 + 1])
    assert big.dtype is fl.int64 and big.tolist() == [2 ** 40 + 1]
    v = (f * (1 + 1e-12)).numpy()
    assert v.dtype == np.float64 and v[0] != 1.0                     # float64 precision kept
    x = fl.tensor([0.5, 1.5], dtype=fl.float64, requires_grad=True)
    (x.float() * x.float()).sum().backward()
    assert x.grad.dtype is fl.float64
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 3.0])


def test_default_dtype_switch(x64):
    fl.set_default_dtype(fl.float64)
    assert fl.get_default_dtype() is fl.float64
    assert fl.tensor([1.5]).dtype is fl.float64 and fl.zeros(2).dtype is fl.float64
    assert (fl.tensor([1, 2]) / 2).dtype is fl.float64
    assert fl.rand(2).dtype is fl.float64 and fl.arange(0, 1, 0.5).dtype is fl.float64
    with pytest.raises(TypeError):
        fl.set_default_dtype(fl.int32)
    # (the autouse fixture restores float32 afterwards)


def test_gradients_flow_through_dtype_conversions():
    x = fl.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = (x.half() * 2).bfloat16().float()
    z = (x.to(fl.int32).float() * x).sum()            # the int cast itself is not differentiable
    (y.sum() + z).backward()
    assert x.grad.dtype is F32
    np.testing.assert_allclose(x.grad.numpy(), [2 + 1, 2 - 2, 2 + 3])
    h = fl.tensor([1.0, 2.0], dtype=F16, requires_grad=True)
    (h * h).sum().backward()
    assert h.grad.dtype is F16 and h.grad.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("dt,np_dt,tol", [(F16, np.float16, 2e-3), (BF16, None, 2e-2)])
def test_ops_in_reduced_precision(dt, np_dt, tol):
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, (4,)).astype(np.float32)
    x, y = fl.from_numpy(a).to(dt), fl.from_numpy(b).to(dt)
    a, b = x.float().numpy(), y.float().numpy()          # the exactly representable inputs
    outs = [x + y, x * y, x / 2, x.exp(), x.log(), x.sqrt(), x.tanh(), x.sigmoid(), x ** 2,
            x.sum(1), x.mean(), x.amax(0), x.softmax(1), x @ y, x.cumsum(1), x.var(1),
            fl.where(y > 0, x, -x), x.reshape(4, 3).T, fl.cat([x, x], 0)[2:4]]
    for o in outs:
        assert o.dtype is dt, (o.dtype, dt)
    refs = [a + b, a * b, a / 2, np.exp(a), np.log(a), np.sqrt(a), np.tanh(a),
            1 / (1 + np.exp(-a)), a ** 2, a.sum(1), a.mean(), a.max(0),
            np.exp(a) / np.exp(a).sum(1, keepdims=True), a @ b, np.cumsum(a, 1), a.var(1, ddof=1),
            np.where(b > 0, a, -a), a.reshape(4, 3).T, np.concatenate([a, a])[2:4]]
    check_values([o.float() for o in outs], refs, rtol=4 * tol, atol=4 * tol)


def test_integer_ops_keep_integer_dtypes():
    for dt in (I32, I8, U8, I16):
        x = fl.tensor([1, 2, 3], dtype=dt)
        for o in (x + 1, x * x, x // 2, x % 2, -x if dt is not U8 else x, x.abs(), x.clamp(0, 2),
                  x.flip(0), x[1:], fl.maximum(x, x)):
            assert o.dtype is dt, (o.dtype, dt)
        assert x.sum().dtype is I32 and x.cumsum(0).dtype is I32   # int64, narrowed


def test_in_place_results_cannot_cross_down_a_category():
    i = fl.tensor([5, 7])
    for fn in (lambda: i.__itruediv__(2), lambda: i.add_(2.5), lambda: i.clamp_(0.5, 2.5),
               lambda: i.exp_(), lambda: i.mul_(fl.tensor([1.5, 1.0]))):
        with pytest.raises(RuntimeError, match="can't be cast"):
            fn()
    b = fl.tensor([True, False])
    with pytest.raises(RuntimeError, match="can't be cast"):
        b |= fl.tensor([2, 0])
    i += 2                                  # same category: fine, dtype kept
    i //= 2
    f = fl.tensor([1.5, 2.5], dtype=F16)
    f += fl.tensor([1, 2])                  # integer into float: fine
    f *= fl.ones((), dtype=F32)             # same category, narrowed back to float16
    b &= fl.tensor([True, True])
    assert i.dtype is I32 and f.dtype is F16 and b.dtype is B
    assert i.tolist() == [3, 4] and f.tolist() == [2.5, 4.5] and b.tolist() == [True, False]


def test_promotion_follows_the_x64_switch():
    """dtypes.promote caches canonical() results, which depend on the x64 switch: uint32 + int32
    is int64, narrowed to int32 without x64 — the cached narrow answer must not outlive it."""
    u, i = fl.ones(2, dtype=fl.uint32), fl.ones(2, dtype=fl.int32)
    assert (u + i).dtype is fl.int32
    with x64_mode(True):
        assert (fl.ones(2, dtype=fl.uint32) + fl.ones(2, dtype=fl.int32)).dtype is fl.int64
