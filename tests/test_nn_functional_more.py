"""flowlite/nn/functional_more.py, the additions at the end of nn/functional.py and
nn/torch_level.py (torch.conv2d & co.) against PyTorch: margin/embedding/likelihood losses,
pdist, channel_shuffle, shrink/threshold activations and their in-place forms, lp pooling,
local_response_norm, 3-d adaptive pooling, the upsample aliases — values and gradients."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flowlite as fl
import flowlite.nn.functional as F
from _torch_oracle import compare

pytestmark = [pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning"),
              pytest.mark.filterwarnings("ignore:.*deprecated.*")]

RNG = np.random.default_rng(0)
X1, X2, X3 = (RNG.standard_normal((4, 5)) for _ in range(3))
Y = np.array([1.0, -1.0, -1.0, 1.0])
CLS = np.array([0, 3, 4, 1])
ML = np.array([[3, 0, -1, 1, 2], [1, -1, 0, 0, 0], [4, 2, 1, -1, 0], [0, 1, 2, 3, 4]])
POS = RNG.uniform(0.5, 3.0, (4, 5))


def _losses(m, f):
    return lambda a, b, c, pos: (
        f.margin_ranking_loss(a[:, 0], b[:, 0], m.tensor(Y, dtype=a.dtype), margin=0.3),
        f.hinge_embedding_loss(a, m.tensor(np.sign(X3), dtype=a.dtype), reduction="none"),
        f.soft_margin_loss(a, m.tensor(np.sign(X3), dtype=a.dtype)),
        f.multilabel_soft_margin_loss(a, m.tensor(X3 > 0, dtype=a.dtype)),
        f.multilabel_soft_margin_loss(a, m.tensor(X3 > 0, dtype=a.dtype), weight=pos[0],
                                      reduction="sum"),
        f.cosine_embedding_loss(a, b, m.tensor(Y, dtype=a.dtype), margin=0.1),
        f.cosine_embedding_loss(a[0], b[0], m.tensor(-1.0, dtype=a.dtype)),
        f.triplet_margin_loss(a, b, c), f.triplet_margin_loss(a, b, c, p=1, swap=True),
        f.triplet_margin_with_distance_loss(a, b, c, margin=0.5, swap=True),
        f.poisson_nll_loss(a, pos), f.poisson_nll_loss(pos, pos * 2, log_input=False,
                                                        full=True, reduction="sum"),
        f.gaussian_nll_loss(a, b, pos), f.gaussian_nll_loss(a, b, pos[:, :1], full=True),
        f.multi_margin_loss(a, m.tensor(CLS)), f.multi_margin_loss(a, m.tensor(CLS), p=2,
                                                                   margin=0.5,
                                                                   weight=pos[0].detach()),
        f.multilabel_margin_loss(a, m.tensor(ML)), f.multilabel_margin_loss(a[0],
                                                                           m.tensor(ML[0])),
        f.pdist(a), f.pdist(a, 1.5), f.channel_shuffle(a.reshape(2, 2, 5, 1), 2),
        f.hardshrink(a), f.softshrink(a, 0.3), f.threshold(a, 0.1, -2.0),
        f.rrelu(a), f.lp_pool1d(pos.reshape(2, 2, 5), 2, 2),
        f.lp_pool2d(pos.reshape(1, 1, 4, 5), 3, (2, 2), 1),
        f.local_response_norm(a.reshape(2, 2, 5), 3),
        f.local_response_norm(pos.reshape(1, 4, 5, 1), 2, alpha=0.1, beta=0.5, k=2.0),
        f.adaptive_avg_pool3d(a.reshape(1, 1, 4, 5, 1), (2, 3, 1)),
        f.adaptive_max_pool3d(a.reshape(1, 1, 4, 5, 1), (2, 5, 1)),
        f.upsample_nearest(a.reshape(1, 1, 4, 5), scale_factor=2),
        f.upsample_bilinear(a.reshape(1, 1, 4, 5), size=(3, 7)),
        a.hardshrink(0.2), a.prelu(m.tensor([0.25], dtype=a.dtype)))


def test_losses_and_functions_vs_pytorch(x64):
    compare(_losses(fl, F), _losses(torch, TF), X1, X2, X3, POS, rtol=1e-10, atol=1e-10)


def test_fold_is_unfolds_adjoint(x64):
    cols = RNG.standard_normal((2, 12, 16))
    img = RNG.standard_normal((1, 2, 5, 6))
    compare(lambda c, x: (F.fold(c, (5, 6), (2, 3)), F.fold(c[0], (5, 6), (2, 3)),
                          F.fold(F.unfold(x, 2, padding=1, stride=2), (5, 6), 2, padding=1,
                                 stride=2),
                          F.fold(F.unfold(x, 3, (2, 1), 1, (1, 2)), (5, 6), 3, (2, 1), 1,
                                 (1, 2))),
            lambda c, x: (TF.fold(c, (5, 6), (2, 3)), TF.fold(c[0], (5, 6), (2, 3)),
                          TF.fold(TF.unfold(x, 2, padding=1, stride=2), (5, 6), 2, padding=1,
                                  stride=2),
                          TF.fold(TF.unfold(x, 3, (2, 1), 1, (1, 2)), (5, 6), 3, (2, 1), 1,
                                  (1, 2))), cols, img, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="sliding blocks"):
        F.fold(fl.zeros(1, 12, 3), (5, 6), (2, 3))


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_and_grid_sample(align_corners, x64):
    theta, theta3 = RNG.standard_normal((2, 2, 3)) * 0.6, RNG.standard_normal((1, 3, 4)) * 0.5
    img, grid = RNG.standard_normal((2, 3, 5, 6)), RNG.uniform(-1.3, 1.3, (2, 4, 7, 2))
    ac = align_corners
    modes = [(m, p) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection")]
    compare(lambda t, t3, x, g: (F.affine_grid(t, (2, 3, 4, 5), align_corners=ac),
                                 F.affine_grid(t3, (1, 1, 2, 3, 4), align_corners=ac),
                                 *(F.grid_sample(x, g, m, p, ac) for m, p in modes),
                                 F.grid_sample(x, F.affine_grid(t, (2, 3, 4, 4), ac),
                                               align_corners=ac)),
            lambda t, t3, x, g: (TF.affine_grid(t, (2, 3, 4, 5), align_corners=ac),
                                 TF.affine_grid(t3, (1, 1, 2, 3, 4), align_corners=ac),
                                 *(TF.grid_sample(x, g, m, p, ac) for m, p in modes),
                                 TF.grid_sample(x, TF.affine_grid(t, (2, 3, 4, 4), ac),
                                                align_corners=ac)),
            theta, theta3, img, grid, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k, s, p, d, ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, False),
                                              (3, 2, 1, 2, True), (2, 1, 0, 1, True)])
def test_max_pool_indices_and_unpool(k, s, p, d, ceil, x64):
    x2, x1 = RNG.standard_normal((2, 3, 7, 8)), RNG.standard_normal((2, 3, 9))
    x3 = RNG.standard_normal((1, 2, 5, 6, 4))
    if d != 1:          # unpooling knows no dilation: PyTorch rejects the output size then
        compare(lambda a: F.max_pool2d(a, k, s, p, d, ceil, True),
                lambda a: TF.max_pool2d(a, k, s, p, d, ceil, True), x2)
        return
    compare(lambda a, b, e: (*F.max_pool2d(a, k, s, p, d, ceil, True),
                             *F.max_pool1d_with_indices(b, k, s, p, d, ceil),
                             *F.max_pool3d(e, 2, None, 0, 1, ceil, True),
                             F.max_unpool2d(*F.max_pool2d(a, k, s, p, d, ceil, True), k, s, p,
                                            output_size=a.shape),
                             F.max_unpool1d(*F.max_pool1d(b, k, s, p, d, ceil, True), k, s, p,
                                            output_size=b.shape)),
            lambda a, b, e: (*TF.max_pool2d(a, k, s, p, d, ceil, True),
                             *TF.max_pool1d_with_indices(b, k, s, p, d, ceil),
                             *TF.max_pool3d(e, 2, None, 0, 1, ceil, True),
                             TF.max_unpool2d(*TF.max_pool2d(a, k, s, p, d, ceil, True), k, s, p,
                                             output_size=a.shape),
                             TF.max_unpool1d(*TF.max_pool1d(b, k, s, p, d, ceil, True), k, s, p,
                                             output_size=b.shape)), x2, x1, x3)


def test_in_place_forms_and_torch_level_entry_points(x64):
    for name, args in (("relu_", ()), ("elu_", (0.5,)), ("leaky_relu_", (0.2,)),
                       ("hardtanh_", (-0.5, 0.5)), ("celu_", (1.5,)), ("selu_", ()),
                       ("threshold_", (0.0, 9.0)), ("rrelu_", ())):
        x, t = fl.tensor(X1), torch.tensor(X1)
        assert getattr(F, name)(x, *args) is x
        getattr(TF, name)(t, *args)
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-12, err_msg=name)
    w = RNG.standard_normal((3, 2, 3, 3))
    img = RNG.standard_normal((1, 2, 6, 6))
    compare(lambda x, k, a: (fl.conv2d(x, k, None, 1, 1), fl.max_pool2d(x, 2),
                             fl.avg_pool1d(a.reshape(1, 4, 5), 2), fl.max_pool1d(a[None], 2, 1),
                             fl.layer_norm(a, (5,)), fl.group_norm(x, 2),
                             fl.dropout(a, 0.5, False), fl.feature_dropout(a, 0.5, False),
                             fl.pixel_shuffle(x.reshape(1, 8, 3, 3)[:, :4], 2),
                             fl.convolution(x, k, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
                             fl.batch_norm(x, None, None, fl.zeros(2, dtype=x.dtype),
                                           fl.ones(2, dtype=x.dtype), False, 0.1, 1e-5, True),
                             fl.embedding(a, fl.tensor([[0, 3], [2, 2]])),
                             fl.kl_div(fl.log_softmax(a, 1), fl.softmax(a * 2, 1), 2),
                             fl.binary_cross_entropy_with_logits(a, fl.sigmoid(a * 3), None,
                                                                 None, 0),
                             fl.pdist(a), fl.hardshrink(a, 0.4), fl.celu(a), fl.threshold(a, 0,
                                                                                          1)),
            lambda x, k, a: (torch.conv2d(x, k, None, 1, 1), torch.max_pool2d(x, 2),
                             torch.avg_pool1d(a.reshape(1, 4, 5), 2),
                             torch.max_pool1d(a[None], 2, 1), torch.layer_norm(a, (5,)),
                             torch.group_norm(x, 2), torch.dropout(a, 0.5, False),
                             torch.feature_dropout(a, 0.5, False),
                             torch.pixel_shuffle(x.reshape(1, 8, 3, 3)[:, :4], 2),
                             torch.convolution(x, k, None, [1, 1], [0, 0], [1, 1], False,
                                               [0, 0], 1),
                             torch.batch_norm(x, None, None, torch.zeros(2, dtype=x.dtype),
                                              torch.ones(2, dtype=x.dtype), False, 0.1, 1e-5,
                                              True),
                             torch.embedding(a, torch.tensor([[0, 3], [2, 2]])),
                             torch.kl_div(torch.log_softmax(a, 1), torch.softmax(a * 2, 1), 2),
                             torch.binary_cross_entropy_with_logits(a, torch.sigmoid(a * 3),
                                                                    None, None, 0),
                             torch.pdist(a), torch.hardshrink(a, 0.4), torch.celu(a),
                             torch.threshold(a, 0, 1)),
            img, w, X1, rtol=1e-10, atol=1e-10)


def test_random_forms_are_well_formed():
    x = fl.tensor(X1.astype(np.float32))
    y = F.rrelu(x, 0.1, 0.3, training=True)
    neg = X1 < 0
    ratio = y.numpy()[neg] / X1[neg]
    assert ((ratio >= 0.1 - 1e-6) & (ratio <= 0.3 + 1e-6)).all()
    np.testing.assert_array_equal(y.numpy()[~neg], X1.astype(np.float32)[~neg])
    g = F.gumbel_softmax(x, tau=0.5)
    np.testing.assert_allclose(g.numpy().sum(1), 1.0, rtol=1e-5)
    h = F.gumbel_softmax(x, hard=True)
    assert set(np.unique(h.numpy())) <= {0.0, 1.0} and (h.numpy().sum(1) == 1).all()
    d = F.dropout3d(fl.ones(2, 3, 4, 4, 4), 0.5)
    per_channel = d.numpy().reshape(2, 3, -1)
    assert ((per_channel == 0).all(-1) | (per_channel == 2).all(-1)).all()
    fa = F.feature_alpha_dropout(fl.ones(4, 6, 5), 0.5, training=True).numpy()
    assert np.allclose(fa, fa[:, :, :1])        # one value per channel


def test_errors_and_not_implemented():
    with pytest.raises(ValueError, match="negative"):
        F.gaussian_nll_loss(fl.zeros(2), fl.zeros(2), fl.tensor([1.0, -1.0]))
    with pytest.raises(RuntimeError, match="divisible by groups"):
        F.channel_shuffle(fl.zeros(1, 3, 2), 2)
    with pytest.raises(NotImplementedError, match="flowlite: torch.nn.functional."
                       "fractional_max_pool2d is not implemented"):
        F.fractional_max_pool2d(fl.zeros(1, 1, 2, 2), 1)


def test_adaptive_max_pool_indices(x64):
    x2, x1 = RNG.standard_normal((2, 3, 7, 8)), RNG.standard_normal((2, 3, 9))
    x3 = RNG.standard_normal((1, 2, 5, 6, 4))
    compare(lambda a, b, e: (*F.adaptive_max_pool2d(a, (3, 5), True),
                             *F.adaptive_max_pool2d(a, (7, 4), True),
                             *F.adaptive_max_pool1d(b, 4, True),
                             *F.adaptive_max_pool3d_with_indices(e, (2, 3, 3)),
                             *fl.adaptive_max_pool1d(b, 5)),
            lambda a, b, e: (*TF.adaptive_max_pool2d(a, (3, 5), True),
                             *TF.adaptive_max_pool2d(a, (7, 4), True),
                             *TF.adaptive_max_pool1d(b, 4, True),
                             *TF.adaptive_max_pool3d_with_indices(e, (2, 3, 3)),
                             *torch.adaptive_max_pool1d(b, 5)), x2, x1, x3)


def test_max_pool_module_returns_indices():
    x = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    v, i = fl.nn.MaxPool2d(2, return_indices=True)(fl.tensor(x))
    tv, ti = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
