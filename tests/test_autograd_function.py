"""torch.autograd's API in flowlite (flowlite/autograd.py): custom Functions (forward/backward,
the ctx API, non-tensor arguments and outputs, several outputs, double backward), Variable,
inference_mode, autograd.grad/backward — each Function written once and run on PyTorch and on
flowlite, which must agree."""
import numpy as np
import pytest
import torch

import flowlite as fl

LIBS = (torch, fl)


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def both(make, run):
    """run(lib, Fn) on both libraries; returns the two results as numpy trees."""
    out = []
    for lib in LIBS:
        res = run(lib, make(lib))
        out.append([_np(r) if r is not None else None for r in res])
    return out


def assert_same(a, b, tol=1e-6):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
        else:
            np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def make_exp(lib):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y
    return Exp


def test_function_forward_and_backward_match_pytorch():
    def run(lib, Exp):
        x = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = Exp.apply(x)
        (y * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        return [y, x.grad]
    assert_same(*both(make_exp, run))


def test_function_output_has_a_grad_fn_and_requires_grad_only_when_an_input_does():
    Exp = make_exp(fl)
    y = Exp.apply(fl.tensor([1.0], requires_grad=True))
    assert y.requires_grad and y.grad_fn is not None
    z = Exp.apply(fl.tensor([1.0]))
    assert not z.requires_grad and z.grad_fn is None
    with fl.no_grad():
        assert not Exp.apply(fl.tensor([1.0], requires_grad=True)).requires_grad


def make_scaled_clamp(lib):
    class ScaledClamp(lib.autograd.Function):
        """Non-tensor arguments, needs_input_grad, ctx attributes."""
        @staticmethod
        def forward(ctx, x, w, lo, scale=2.0):
            ctx.lo, ctx.scale = lo, scale
            ctx.save_for_backward(x, w)
            ctx.flags = ctx.needs_input_grad
            return (x * w).clamp(min=lo) * scale

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            assert ctx.flags == ctx.needs_input_grad
            mask = ((x * w) > ctx.lo).to(g.dtype) * ctx.scale
            gx = g * mask * w if ctx.needs_input_grad[0] else None
            gw = g * mask * x if ctx.needs_input_grad[1] else None
            return gx, gw, None, None
    return ScaledClamp


@pytest.mark.parametrize("w_grad", [True, False])
def test_function_with_non_tensor_arguments_and_needs_input_grad(w_grad):
    def run(lib, F):
        x = lib.tensor([0.5, -1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([1.0, 2.0, -1.0, 0.5], requires_grad=w_grad)
        y = F.apply(x, w, -0.25, 3.0)
        y.pow(2).sum().backward()
        assert F.apply(x, w, -0.25) is not None
        return [y, x.grad, w.grad]
    assert_same(*both(make_scaled_clamp, run))


def make_split(lib):
    class SplitScale(lib.autograd.Function):
        """Two tensor outputs, one marked non-differentiable, plus a non-tensor output."""
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x)
            return x * 2, x * x, idx, "tag"

        @staticmethod
        def backward(ctx, ga, gb, gidx, gtag=None):
            x, = ctx.saved_tensors
            return ga * 2 + gb * 2 * x
    return SplitScale


def test_function_with_several_outputs_and_a_non_differentiable_one():
    def run(lib, F):
        x = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        a, b, idx, tag = F.apply(x)
        assert tag == "tag" and not idx.requires_grad and a.requires_grad
        b.sum().backward()                  # a's gradient is materialised as zeros
        return [a, b, idx, x.grad]
    assert_same(*both(make_split, run))


def make_no_materialize(lib):
    class Two(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 1.0, x * 3.0

        @staticmethod
        def backward(ctx, ga, gb):
            assert ga is None                 # not materialised: only b was used
            return gb * 3.0
    return Two


def test_set_materialize_grads_false_passes_none_for_unused_outputs():
    def run(lib, F):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        _, b = F.apply(x)
        b.sum().backward()
        return [x.grad]
    assert_same(*both(make_no_materialize, run))


def make_setup_context(lib):
    class Mul(lib.autograd.Function):
        """PyTorch 2's style: forward without ctx, setup_context saves."""
        @staticmethod
        def forward(x, y):
            return x * y

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * y, g * x
    return Mul


def test_setup_context_style():
    def run(lib, F):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = lib.tensor([3.0, -4.0], requires_grad=True)
        F.apply(x, y).sum().backward()
        return [x.grad, y.grad]
    assert_same(*both(make_setup_context, run))


def make_cube(lib):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * x ** 2                # differentiable: double backward works
    return Cube


def test_double_backward_through_a_differentiable_backward():
    def run(lib, F):
        x = lib.tensor([0.5, -1.5, 2.0], requires_grad=True)
        g, = lib.autograd.grad(F.apply(x).sum(), x, create_graph=True)
        gg, = lib.autograd.grad(g.sum(), x)
        return [g, gg]                         # 3x^2 and 6x
    a, b = both(make_cube, run)
    assert_same(a, b)
    np.testing.assert_allclose(b[1], 6 * np.array([0.5, -1.5, 2.0]), rtol=1e-6)


def test_once_differentiable_backward_runs_without_recording():
    class Cube(fl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @fl.autograd.function.once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            assert not fl.is_grad_enabled()
            return g * 3 * x ** 2
    x = fl.tensor([2.0], requires_grad=True)
    g, = fl.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert g.tolist() == [12.0] and not g.requires_grad


def test_backward_returning_the_wrong_number_of_gradients_raises_like_pytorch():
    for lib in LIBS:
        class Bad(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x + y

            @staticmethod
            def backward(ctx, g):
                return g
        x = lib.tensor([1.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="incorrect number of gradients"):
            Bad.apply(x, lib.tensor([2.0])).sum().backward()


def test_backward_returning_a_wrongly_shaped_gradient_raises():
    class Bad(fl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g.sum()
    with pytest.raises(RuntimeError, match="invalid gradient at index 0"):
        Bad.apply(fl.tensor([1.0, 2.0], requires_grad=True)).sum().backward()


def test_a_training_loop_with_a_custom_function_compiles_once():
    Exp = make_exp(fl)
    w = fl.nn.Parameter(fl.tensor([0.1, -0.2, 0.3]))
    opt = fl.optim.SGD([w], lr=0.1)
    x = fl.tensor([1.0, 2.0, 3.0])
    losses = []
    for _ in range(4):
        opt.zero_grad()
        loss = Exp.apply(w * x).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    c0 = fl.metrics.counters()["compiles"]
    for _ in range(3):
        opt.zero_grad()
        loss = Exp.apply(w * x).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert fl.metrics.counters()["compiles"] == c0
    # the same loop in PyTorch
    TExp = make_exp(torch)
    tw = torch.nn.Parameter(torch.tensor([0.1, -0.2, 0.3]))
    topt = torch.optim.SGD([tw], lr=0.1)
    tx = torch.tensor([1.0, 2.0, 3.0])
    for i in range(7):
        topt.zero_grad()
        tl = TExp.apply(tw * tx).sum()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(losses[i], tl.item(), rtol=1e-5)


# ---- Variable, inference_mode, grad/backward ---------------------------------------------------
def test_variable_is_a_new_leaf_sharing_the_value_like_pytorch():
    for lib in LIBS:
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        v = lib.autograd.Variable(x)
        assert v is not x and not v.requires_grad and v.is_leaf
        v2 = lib.autograd.Variable(x * 2, requires_grad=True)
        assert v2.requires_grad and v2.is_leaf
        assert v2.tolist() == [2.0, 4.0]
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        fl.autograd.Variable([1.0])


def test_inference_mode_as_context_decorator_and_switch():
    x = fl.tensor([1.0], requires_grad=True)
    with fl.inference_mode():
        assert fl.is_inference_mode_enabled() and not (x * 2).requires_grad
    assert not fl.is_inference_mode_enabled() and (x * 2).requires_grad

    @fl.inference_mode()
    def f(t):
        return t * 2

    @fl.inference_mode
    def g(t):
        return t * 3

    @fl.inference_mode(False)
    def h(t):
        return t * 4
    assert not f(x).requires_grad and not g(x).requires_grad and h(x).requires_grad
    with fl.inference_mode(mode=False):
        assert (x * 2).requires_grad
    assert fl.is_grad_enabled()


def test_autograd_backward_over_several_roots_and_grad_match_pytorch():
    res = []
    for lib in LIBS:
        x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        a, b = (x * x).sum(), (x * 3).sum()
        lib.autograd.backward([a, b])
        g, = lib.autograd.grad((x ** 3).sum(), [x])
        y = x * 2
        lib.autograd.backward(y, grad_tensors=lib.tensor([1.0, 0.0, 2.0]), inputs=[x])
        res.append([_np(x.grad), _np(g)])
    assert_same(*res)


def test_dtype_shorthands_match_pytorch_including_wrapping_casts():
    v = [1.5, -2.0, 300.0, -129.7, 70000.0, 255.9, -0.5]
    for name in ("byte", "char", "short", "int", "long", "half", "bfloat16", "double", "bool"):
        got = getattr(fl.tensor(v), name)()
        want = getattr(torch.tensor(v), name)()
        if name not in ("long", "double"):   # 64-bit dtypes need JAX x64 mode in flowlite
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], name
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy(), err_msg=name)


def test_torch_autocast_names_exist():
    assert fl.autocast is fl.amp.autocast
    assert callable(fl.autograd.grad) and fl.autograd.no_grad is fl.no_grad
