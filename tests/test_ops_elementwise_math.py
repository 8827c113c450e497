"""flowlite/frontend/ops/elementwise_math.py and ops/special.py against PyTorch: values and
gradients (float64 and float32), integer inputs where PyTorch takes them, methods, in-place
forms and aliases. Many ops share one check (one compiled program)."""
import math

import numpy as np
import pytest
import torch

import flowlite as fl
from conftest import check_fd
from _torch_oracle import compare

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

WIDE = np.array([[-3.0, -1.5, -0.25, 0.0], [0.3, 1.0, 2.5, 4.0]])
POS = np.array([[0.2, 0.7, 1.0, 1.6], [2.5, 3.0, 5.5, 9.0]])
UNIT = np.array([[-0.9, -0.5, -0.1, 0.05], [0.2, 0.4, 0.6, 0.85]])
PROB = np.array([[0.05, 0.2, 0.35, 0.5], [0.6, 0.75, 0.9, 0.97]])
OTHER = np.array([[0.5, -2.0, 1.5, 0.7], [-0.4, 1.0, -3.0, 2.0]])

# (name, input): torch.<name>(x) and fl.<name>(x), values and gradients
UNARY = [("log10", POS), ("log2", POS), ("log1p", POS), ("expm1", WIDE), ("exp2", WIDE),
         ("sinc", WIDE), ("frac", WIDE * 1.3), ("logit", PROB), ("deg2rad", WIDE),
         ("rad2deg", WIDE), ("sgn", WIDE), ("fix", WIDE * 1.3), ("absolute", WIDE),
         ("negative", WIDE), ("positive", WIDE), ("angle", WIDE),
         ("lgamma", POS), ("digamma", POS), ("erfc", WIDE), ("erfinv", UNIT), ("i0", WIDE)]
# torch.special.<name>
SPECIAL = [("i0e", WIDE), ("i1", WIDE), ("i1e", WIDE), ("ndtr", WIDE), ("ndtri", PROB),
           ("log_ndtr", WIDE), ("erfcx", WIDE), ("entr", POS), ("expit", WIDE),
           ("gammaln", POS), ("psi", POS), ("spherical_bessel_j0", WIDE),
           ("xlog1py", None), ("exp2", WIDE), ("logit", PROB), ("sinc", WIDE)]
# (name, x, other): torch.<name>(x, other)
BINARY = [("logaddexp", WIDE, OTHER), ("logaddexp2", WIDE, OTHER), ("xlogy", WIDE, POS),
          ("copysign", WIDE, OTHER), ("ldexp", WIDE, np.array([[1.0, -2.0, 0, 3, 1, 2, -1, 0]
                                                                ]).reshape(2, 4)),
          ("fmax", WIDE, OTHER), ("fmin", WIDE, OTHER), ("hypot", WIDE, OTHER),
          ("float_power", POS, OTHER), ("arctan2", WIDE, OTHER), ("true_divide", WIDE, POS),
          ("multiply", WIDE, OTHER), ("subtract", WIDE, OTHER), ("divide", WIDE, POS)]


def _unary(m):
    return lambda *xs: tuple(getattr(m, n)(x) for (n, _), x in zip(UNARY, xs))


def test_unary_values_and_grads_vs_pytorch(x64):
    # XLA's polygamma (digamma's gradient) is good to ~1e-9 relative
    compare(_unary(fl), _unary(torch), *[a for _, a in UNARY], rtol=1e-8, atol=1e-10)


def test_unary_float32_methods_and_inplace():
    arrays = [a.astype(np.float32) for _, a in UNARY]
    meth = [n for n, _ in UNARY]
    compare(lambda *xs: tuple(getattr(x, n)() for n, x in zip(meth, xs)),
            lambda *xs: tuple(getattr(x, n)() for n, x in zip(meth, xs)), *arrays,
            rtol=1e-5, atol=2e-6)
    inplace = [n for n in meth if hasattr(torch.Tensor, n + "_")]
    for n in inplace:
        src = dict(UNARY)[n].astype(np.float32)
        a, t = fl.tensor(src), torch.tensor(src)
        assert getattr(a, n + "_")() is a
        getattr(t, n + "_")()
        np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-5, atol=2e-6, err_msg=n)


def test_unary_integer_inputs_become_float():
    ints = np.array([[1, 2, 3], [5, 8, 13]], np.int64)
    names = ["log10", "sinc", "deg2rad", "rad2deg", "lgamma", "digamma", "erfc", "i0",
             "angle", "sgn", "positive", "absolute"]
    compare(lambda x: tuple(getattr(fl, n)(x) for n in names),
            lambda x: tuple(getattr(torch, n)(x) for n in names), ints, rtol=1e-6, atol=1e-6)


def _special(m):
    def f(*xs):
        out = []
        for (n, _), x in zip(SPECIAL, xs):
            out.append(m.special.xlog1py(x, x * x) if n == "xlog1py" else
                       getattr(m.special, n)(x))
        return tuple(out)
    return f


def test_special_namespace_values_and_grads(x64):
    arrays = [WIDE if a is None else a for _, a in SPECIAL]
    compare(_special(fl), _special(torch), *arrays, rtol=1e-9, atol=1e-10)


def _binary(m):
    return lambda *xs: tuple(getattr(m, n)(xs[2 * k], xs[2 * k + 1])
                             for k, (n, _, _) in enumerate(BINARY))


def test_binary_values_and_grads_vs_pytorch(x64):
    arrays = [a for _, x, y in BINARY for a in (x, y)]
    compare(_binary(fl), _binary(torch), *arrays, rtol=1e-10, atol=1e-10)


def test_binary_float32_methods_scalars_and_broadcasting():
    x, y = WIDE.astype(np.float32), OTHER.astype(np.float32)[:1]
    compare(lambda a, b: (a.logaddexp(b), a.logaddexp2(b), a.xlogy(2.0), a.copysign(b),
                          a.fmax(b), a.fmin(b), fl.xlogy(3, b.abs()), a.ldexp(b),
                          a.float_power(2), fl.copysign(a, -1.0)),
            lambda a, b: (a.logaddexp(b), a.logaddexp2(b), a.xlogy(2.0), a.copysign(b),
                          a.fmax(b), a.fmin(b), torch.xlogy(3, b.abs()), a.ldexp(b),
                          a.float_power(2), torch.copysign(a, -1.0)),
            x, y, rtol=1e-5, atol=1e-6, check_dtype=False)


def test_special_points_follow_pytorch():
    # infinities, NaN, zeros and signed zeros: the edges where compositions go wrong
    v = np.array([-np.inf, -2.0, -0.0, 0.0, 1.5, np.inf, np.nan], np.float32)
    w = np.array([-np.inf, np.inf, 1.0, -1.0, np.nan, np.inf, 2.0], np.float32)
    names2 = ["logaddexp", "logaddexp2", "xlogy", "copysign", "fmax", "fmin", "hypot"]
    names1 = ["sinc", "signbit", "frac", "sgn", "angle", "nan_to_num", "log10", "rad2deg"]
    compare(lambda a, b: tuple(getattr(fl, n)(a, b) for n in names2) +
            tuple(getattr(fl, n)(a) for n in names1),
            lambda a, b: tuple(getattr(torch, n)(a, b) for n in names2) +
            tuple(getattr(torch, n)(a) for n in names1), v, w, grad=False)


def test_nan_to_num_and_heaviside_and_nextafter():
    v = np.array([np.nan, np.inf, -np.inf, -1.5, 0.0, 2.0], np.float64)
    compare(lambda a: (fl.nan_to_num(a), fl.nan_to_num(a, nan=1.0, posinf=9.0, neginf=-9.0),
                       a.nan_to_num(posinf=3.0)),
            lambda a: (torch.nan_to_num(a), torch.nan_to_num(a, nan=1.0, posinf=9.0,
                                                             neginf=-9.0),
                       a.nan_to_num(posinf=3.0)), v.astype(np.float32), rtol=0, atol=0)
    ints = np.array([-2, 0, 3], np.int64)
    compare(lambda a: (fl.nan_to_num(a), fl.heaviside(a, fl.tensor([7, 8, 9]))),
            lambda a: (torch.nan_to_num(a), torch.heaviside(a, torch.tensor([7, 8, 9]))), ints)
    x = np.array([-1.0, 0.0, 2.0, np.nan], np.float32)
    vals = np.array([0.5, 0.25, 0.75, 0.1], np.float32)
    compare(fl.heaviside, torch.heaviside, x, vals, grad=False)
    a = np.array([1.0, 0.0, -1.0, 1e-30], np.float32)
    b = np.array([2.0, 1.0, -2.0, 0.0], np.float32)
    compare(fl.nextafter, torch.nextafter, a, b, grad=False, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="different dtypes"):
        fl.heaviside(fl.tensor([1.0]), fl.tensor([1]))


def test_nextafter_float64_and_igamma(x64):
    a = np.array([1.0, 0.0, -1.0, 1e-300])
    b = np.array([2.0, 1.0, -2.0, 0.0])
    compare(fl.nextafter, torch.nextafter, a, b, grad=False, rtol=0, atol=0)
    # igamma / igammac: PyTorch differentiates only with respect to the second argument
    compare(lambda s, x: (fl.igamma(s.detach(), x), fl.igammac(s.detach(), x),
                          fl.special.gammainc(s.detach(), x)),
            lambda s, x: (torch.igamma(s.detach(), x), torch.igammac(s.detach(), x),
                          torch.special.gammainc(s.detach(), x)), POS, POS[::-1],
            rtol=1e-9, atol=1e-10)


def test_frexp_gcd_lcm_and_integer_rules():
    x = np.array([8.0, -0.375, 0.0, 3.5e-5, 1e6], np.float32)
    compare(lambda a: tuple(fl.frexp(a)) + tuple(a.frexp()),
            lambda a: tuple(torch.frexp(a)) + tuple(a.frexp()), x)
    m, e = fl.frexp(fl.tensor([5.0]))
    assert e.dtype is fl.int32 and m.item() == 0.625
    a = np.array([12, -18, 0, 7, 0], np.int64)
    b = np.array([8, 12, 5, 0, 0], np.int64)
    compare(lambda p, q: (fl.gcd(p, q), fl.lcm(p, q), p.gcd(q)),
            lambda p, q: (torch.gcd(p, q), torch.lcm(p, q), p.gcd(q)), a, b)
    with pytest.raises(RuntimeError, match="integer"):
        fl.gcd(fl.tensor([1.0]), fl.tensor([2.0]))
    for name in ("frac", "logaddexp", "igamma"):
        with pytest.raises(NotImplementedError):
            fn = getattr(fl, name)
            fn(fl.tensor([1, 2])) if name == "frac" else fn(fl.tensor([1]), fl.tensor([2]))
    # the poles and exact points PyTorch's (C's) functions have
    assert fl.digamma(fl.tensor([0.0, -0.0])).tolist() == [-math.inf, math.inf]
    assert fl.lgamma(fl.tensor([1.0, 2.0])).tolist() == [0.0, 0.0]


def test_addcmul_addcdiv_clamp_min_max_and_comparison_aliases(x64):
    x, a, b = WIDE, OTHER, POS
    compare(lambda x, a, b: (fl.addcmul(x, a, b), fl.addcmul(x, a, b, value=0.5),
                             x.addcdiv(a, b, value=-2), fl.clamp_min(x, 0.2),
                             x.clamp_max(1.0), fl.greater(x, a), fl.less_equal(x, a),
                             x.not_equal(a), fl.greater_equal(x, 0.0), x.less(a)),
            lambda x, a, b: (torch.addcmul(x, a, b), torch.addcmul(x, a, b, value=0.5),
                             x.addcdiv(a, b, value=-2), torch.clamp_min(x, 0.2),
                             x.clamp_max(1.0), torch.greater(x, a), torch.less_equal(x, a),
                             x.not_equal(a), torch.greater_equal(x, 0.0), x.less(a)),
            x, a, b, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="Integer division"):
        fl.addcdiv(fl.tensor([1]), fl.tensor([1]), fl.tensor([2]))
    t = fl.tensor([1.0, 5.0])
    t.clamp_min_(2.0)
    t.addcmul_(fl.tensor([1.0, 1.0]), fl.tensor([2.0, 3.0]))
    assert t.tolist() == [4.0, 8.0]


def test_polygamma_mvlgamma_and_second_order(x64):
    compare(lambda x: (fl.polygamma(1, x), fl.polygamma(3, x), x.polygamma(2),
                       fl.mvlgamma(x + 1, 3), fl.special.multigammaln(x + 2, 2),
                       fl.special.polygamma(0, x)),
            lambda x: (torch.polygamma(1, x), torch.polygamma(3, x), x.polygamma(2),
                       torch.mvlgamma(x + 1, 3), torch.special.multigammaln(x + 2, 2),
                       torch.special.polygamma(0, x)), POS, rtol=1e-9, atol=1e-9)
    with pytest.raises(RuntimeError, match=r"greater than \(p-1\)/2"):
        fl.mvlgamma(fl.tensor([0.2]), 3)
    check_fd(lambda a: fl.lgamma(a).sum() + fl.logaddexp(a, a * 2).sum() +
             fl.xlogy(a, a + 1).sum() + fl.logit(a / 10).sum(), POS[0])


def test_no_derivative_where_pytorch_has_none():
    a = fl.tensor([1.0, 2.0], requires_grad=True)
    x = fl.tensor([0.5, 1.5], requires_grad=True)
    out = fl.igamma(a, x)
    gx, = fl.grad(out.sum(), [x], retain_graph=True)
    assert gx.shape == (2,)
    with pytest.raises(RuntimeError, match="igamma with respect to its first argument"):
        out.sum().backward()
    with pytest.raises(RuntimeError, match="derivative of nextafter"):
        fl.nextafter(a, fl.tensor([0.0, 0.0])).sum().backward()


def test_real_tensor_identities_and_predicates():
    x = fl.tensor([1.0, -2.0])
    for name in ("conj", "conj_physical", "resolve_conj", "resolve_neg", "real"):
        assert getattr(fl, name)(x) is x
    assert x.real is x and x.conj() is x
    with pytest.raises(RuntimeError, match="imag is not implemented"):
        x.imag
    assert fl.isreal(fl.tensor([1.0, math.nan])).tolist() == [True, True]
    assert not fl.is_complex(x) and not x.is_complex() and not x.is_conj() and not x.is_neg()
    assert fl.is_floating_point(x) and x.is_signed() and not fl.tensor([True]).is_signed()
    assert fl.is_nonzero(fl.tensor([2])) and not fl.tensor(0.0).is_nonzero()
    with pytest.raises(RuntimeError, match="more than one value"):
        fl.is_nonzero(x)
    assert fl.is_same_size(x, fl.zeros(2)) and not x.is_same_size(fl.zeros(3))
    with pytest.raises(TypeError, match="bool"):
        fl.positive(fl.tensor([True]))
