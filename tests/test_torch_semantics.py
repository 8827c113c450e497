"""Edge semantics checked against PyTorch 2.13: zero gradients of piecewise-constant ops,
lists read as index tuples, varargs dims, dtype-wrapping casts."""
import warnings

import numpy as np
import pytest
import torch

import flowlite as fl


@pytest.mark.parametrize("op", ["sign", "floor", "ceil", "round", "trunc", "pow0"])
def test_piecewise_constant_ops_give_zero_gradients_not_none(op):
    grads = []
    for lib in (torch, fl):
        x = lib.tensor([1.5, -2.0, 0.0, 0.25], requires_grad=True)
        y = x ** 0 if op == "pow0" else getattr(x, op)()
        (y * lib.tensor([1.0, 2.0, 3.0, 4.0]) + x * 0.5).sum().backward()
        grads.append(x.grad.detach().numpy() if lib is torch else x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_sign_alone_leaves_a_zero_gradient():
    x = fl.tensor([1.0, -1.0], requires_grad=True)
    x.sign().sum().backward()
    assert x.grad is not None and x.grad.tolist() == [0.0, 0.0]


INDEXES = {
    "list_of_ints": lambda L: [0, 1],
    "list_holding_a_list": lambda L: [[0, 1]],
    "list_holding_two_lists": lambda L: [[0, 1], [1, 2]],
    "list_holding_a_tensor": lambda L: [L.tensor([1, 0])],
    "list_holding_a_slice": lambda L: [slice(None), [0, 2]],
    "list_holding_none": lambda L: [None, 0],
    "list_holding_ellipsis": lambda L: [Ellipsis, 1],
}


@pytest.mark.parametrize("name", sorted(INDEXES))
def test_a_list_index_holding_sequences_is_a_tuple_as_in_pytorch(name):
    out = []
    for lib in (torch, fl):
        x = lib.arange(24).reshape(2, 3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # PyTorch deprecates the form (still supports it)
            r = x[INDEXES[name](lib)]
            y = lib.zeros(2, 3, 4, dtype=lib.int32 if lib is fl else torch.int32)
            y[INDEXES[name](lib)] = 7
        out.append((np.asarray(r.tolist()), np.asarray(y.tolist())))
    np.testing.assert_array_equal(out[1][0], out[0][0])
    np.testing.assert_array_equal(out[1][1], out[0][1])


def test_flip_takes_varargs_a_list_or_dims_and_rejects_a_repeated_dim():
    for lib in (torch, fl):
        x = lib.arange(6).reshape(2, 3)
        assert x.flip(0, 1).tolist() == [[5, 4, 3], [2, 1, 0]]
        assert lib.flip(x, [1]).tolist() == [[2, 1, 0], [5, 4, 3]]
        assert lib.flip(x, dims=(0,)).tolist() == [[3, 4, 5], [0, 1, 2]]
        with pytest.raises(RuntimeError):
            x.flip(0, 0)


def test_mv_matches_pytorch_and_checks_shapes():
    a, v = np.arange(6.0).reshape(2, 3), np.array([1.0, -1.0, 2.0])
    got = fl.mv(fl.tensor(a), fl.tensor(v)).tolist()
    assert got == torch.mv(torch.tensor(a), torch.tensor(v)).tolist()
    with pytest.raises(RuntimeError, match="mv"):
        fl.mv(fl.tensor(a), fl.tensor([1.0, 2.0]))


def test_ravel_is_a_view_when_contiguous_and_a_copy_otherwise_as_in_pytorch():
    for lib in (torch, fl):
        x = lib.arange(6).reshape(2, 3)
        r = x.ravel()
        r[0] = 9
        assert x.tolist() == [[9, 1, 2], [3, 4, 5]]
        assert lib.ravel(x.t()).tolist() == [9, 3, 1, 4, 2, 5]


def test_optimizers_accept_pytorchs_implementation_flags():
    p = fl.nn.Parameter(fl.ones(2))
    for name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"):
        opt = getattr(fl.optim, name)([p], lr=0.1, foreach=False, fused=False, capturable=False)
        assert opt.param_groups[0]["lr"] == 0.1
    for name in ("Adam", "SGD", "RAdam"):
        with pytest.raises(ValueError, match="differentiable=True is not supported"):
            getattr(fl.optim, name)([p], differentiable=True)


def test_lstm_takes_its_state_as_any_pair_like_pytorch():
    out = []
    for lib in (torch, fl):
        lib.manual_seed(0)
        m = lib.nn.LSTM(3, 4)
        sd = {k: v.detach().numpy() for k, v in m.state_dict().items()} if lib is torch \
            else None
        out.append((m, sd))
    fl_m = out[1][0]
    fl_m.load_state_dict({k: fl.tensor(v) for k, v in out[0][1].items()})
    x = np.linspace(-1, 1, 30, dtype=np.float32).reshape(5, 2, 3)
    h = [np.full((1, 2, 4), 0.1, np.float32), np.full((1, 2, 4), -0.2, np.float32)]
    want = out[0][0](torch.tensor(x), [torch.tensor(a) for a in h])[0].detach().numpy()
    got = fl_m(fl.tensor(x), [fl.tensor(a) for a in h])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_dropout2d_on_a_2d_input_warns_and_drops_elements_as_pytorch_2_13():
    d = fl.nn.Dropout2d(0.5)
    d.train()
    with pytest.warns(UserWarning, match="2-D input to dropout2d"):
        y = d(fl.ones(64, 64))
    vals = set(np.unique(y.numpy()).tolist())
    assert vals == {0.0, 2.0}
    rows_mixed = (y.numpy().min(1) == 0) & (y.numpy().max(1) == 2)
    assert rows_mixed.any()                  # element-wise, not whole rows dropped


def test_normal_forms_shapes_statistics_and_zero_gradients():
    fl.manual_seed(0)
    assert tuple(fl.normal(fl.zeros(2, 1), fl.ones(3)).shape) == (2, 3)
    assert tuple(fl.normal(0.0, 2.0, (2, 3)).shape) == (2, 3)
    x = fl.normal(5.0, 2.0, (20000,)).numpy()
    assert abs(x.mean() - 5.0) < 0.1 and abs(x.std() - 2.0) < 0.1
    for lib in (torch, fl):
        m = lib.zeros(3, requires_grad=True)
        y = lib.normal(m, 1.0)
        y.sum().backward()
        assert y.requires_grad and m.grad.tolist() == [0.0, 0.0, 0.0]


def test_softmax_and_log_softmax_take_a_dtype_as_in_pytorch():
    x = np.array([[1.0, 2.0], [3.0, 0.5]], np.float32)
    for name in ("softmax", "log_softmax"):
        want = getattr(torch.tensor(x), name)(dim=1, dtype=torch.float16)
        for got in (getattr(fl.tensor(x), name)(dim=1, dtype=fl.float16),
                    getattr(fl, name)(fl.tensor(x), 1, dtype=fl.float16),
                    getattr(fl.nn.functional, name)(fl.tensor(x), dim=1, dtype=fl.float16)):
            assert got.dtype is fl.float16
            np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), atol=2e-3)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(-1, 2), (2, -1), (-2, -1), (0, -3), (3, -2, 1, -1)])
def test_negative_padding_in_every_mode_as_pytorch(mode, pad):
    x = np.arange(2 * 4 * 6, dtype=np.float32).reshape((1, 2, 4, 6) if len(pad) == 4
                                                       else (2, 4, 6)) / 10
    w = np.cos(np.arange(200, dtype=np.float32))
    out, grads = [], []
    for lib in (torch, fl):
        t = lib.tensor(x, requires_grad=True)
        y = lib.nn.functional.pad(t, pad, mode=mode)
        n = int(np.prod(tuple(y.shape)))
        (y * lib.tensor(w[:n]).reshape(tuple(y.shape))).sum().backward()
        out.append(y.detach().numpy() if lib is torch else y.numpy())
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-6)
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,size", [((1, 1, 4, 4), (6, 5)), ((2, 3, 5, 7), (9, 4)),
                                        ((1, 3, 16, 9), (7, 21)), ((2, 2, 9, 9), (3, 3))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear_resize_of_uint8_images_is_bit_exact_with_pytorch(shape, size, align_corners):
    x = np.random.default_rng(1).integers(0, 256, size=shape).astype(np.uint8)
    want = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode="bilinear",
                                           align_corners=align_corners).numpy()
    got = fl.nn.functional.interpolate(fl.tensor(x), size=size, mode="bilinear",
                                       align_corners=align_corners)
    assert got.dtype is fl.uint8
    np.testing.assert_array_equal(got.numpy(), want)


def test_linear_resize_of_integers_other_than_bilinear_uint8_is_not_implemented_as_in_pytorch():
    x = np.zeros((1, 2, 6), np.uint8)
    for lib in (torch, fl):
        with pytest.raises(NotImplementedError):
            lib.nn.functional.interpolate(lib.tensor(x), size=(4,), mode="linear")


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((3, 3, 3, 3), (-1, 2, 2, -1)), ((1, 1, 5, 5), (3, -5, 1, -5)),
                                       ((1, 1, 5, 5), (3, -3, 0, -3)), ((2, 4, 6), (-4, 5))])
def test_reflect_and_replicate_index_the_uncropped_input_as_pytorch(mode, shape, pad):
    # PyTorch's kernels reflect/replicate into the part a negative pad drops: (-1, 2) of
    # [a, b, c] reflects to [b, c, b, a] (cropping first could not reach a)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out, grads = [], []
    for lib in (torch, fl):
        t = lib.tensor(x, requires_grad=True)
        y = lib.nn.functional.pad(t, pad, mode=mode)
        ((y + 1) ** 2).mean().backward()
        out.append(y.detach().numpy())
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-6)
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)


def test_reductions_take_numpys_axis_and_keepdims_names_as_pytorch():
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    for call in (lambda L, t: t.sum(axis=1), lambda L, t: t.mean(axis=0, keepdims=True),
                 lambda L, t: t.max(axis=1).values, lambda L, t: L.std_mean(t, axis=1)[0],
                 lambda L, t: t.var(axis=0), lambda L, t: (t > 0.5).any(axis=1),
                 lambda L, t: t.argmax(axis=1, keepdims=True), lambda L, t: L.cumsum(t, axis=1)):
        want, got = call(torch, torch.tensor(x)), call(fl, fl.tensor(x))
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy().astype(np.float64),
                                   want.numpy().astype(np.float64), rtol=1e-6)
    with pytest.raises(TypeError):
        fl.tensor(x).sum(1, axis=1)


def test_bitwise_functions_and_isposinf_isneginf_as_pytorch():
    a, b = [5, 0, -3, 7], [3, 1, -1, 0]
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        for lhs, rhs in ((a, b), ([True, False, True], [True, True, False])):
            want = getattr(torch, name)(torch.tensor(lhs), torch.tensor(rhs))
            got = getattr(fl, name)(fl.tensor(lhs), fl.tensor(rhs))
            assert got.tolist() == want.tolist()
            assert (got.dtype is fl.bool) == (want.dtype is torch.bool)
        assert getattr(fl.tensor(a), name)(2).tolist() == \
            getattr(torch.tensor(a), name)(2).tolist()
    v = [float("inf"), -float("inf"), 0.0, float("nan")]
    for name in ("isposinf", "isneginf"):
        assert getattr(fl, name)(fl.tensor(v)).tolist() == \
            getattr(torch, name)(torch.tensor(v)).tolist()
        assert getattr(fl.tensor([1, 2]), name)().tolist() == [False, False]


def test_randint_takes_high_and_size_by_keyword_and_requires_grad_false():
    for lib in (torch, fl):
        x = lib.randint(high=1, size=(1, 3, 1), dtype=lib.int64, requires_grad=False)
        assert tuple(x.shape) == (1, 3, 1) and x.tolist() == [[[0], [0], [0]]]
        y = lib.randint(low=-5, high=-4, size=(2,))
        assert y.tolist() == [-5, -5]
        assert lib.randperm(3, requires_grad=False).sort().values.tolist() == [0, 1, 2]


@pytest.mark.parametrize("name", ["Softmax", "LogSoftmax"])
def test_softmax_of_a_0d_tensor_keeps_the_graph_as_pytorch(name):
    outs = []
    for lib in (torch, fl):
        x = lib.tensor(0.75, requires_grad=True)
        y = getattr(lib.nn, name)(dim=-1)(x)
        ((y + 1) ** 2).mean().backward()
        outs.append((y.item(), x.grad.item()))
    assert outs[1] == outs[0]
