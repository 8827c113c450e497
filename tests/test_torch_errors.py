"""PyTorch's exception classes for bad calls: each case runs on PyTorch 2.13 and on flowlite, and
flowlite's error must be an instance of the class PyTorch raises (flowlite's own classes,
flowlite.engine.errors, are also ValueError/TypeError: code written for either catches them).

Deliberate differences, not in the table: `where` accepts a non-bool condition (flowlite casts
it, an older PyTorch behaviour its tests rely on); `.numpy()` of a tensor that requires grad
works (flowlite's values are never aliased by a host array); `multinomial` with negative
weights is not checked (a value check would cost a host read); 64-bit dtypes follow JAX's x64
switch (see docs/porting.md).
"""
import warnings

import pytest
import torch

import flowlite as fl


def T(lib, *shape, dtype=None):
    return lib.ones(*shape) if dtype is None else lib.ones(*shape, dtype=getattr(lib, dtype))


def I(lib, data):  # noqa: E743
    return lib.tensor(data)


CASES = {
    "matmul_mismatch": lambda L: L.matmul(T(L,2,3), T(L,4,5)),
    "mm_mismatch": lambda L: L.mm(T(L,2,3), T(L,4,5)),
    "bmm_mismatch": lambda L: L.bmm(T(L,2,2,3), T(L,2,4,5)),
    "dot_mismatch": lambda L: L.dot(T(L,3), T(L,4)),
    "dot_2d": lambda L: L.dot(T(L,3,3), T(L,3)),
    "mv_mismatch": lambda L: L.mv(T(L,2,3), T(L,4)),
    "add_broadcast": lambda L: T(L,2,3) + T(L,4,3),
    "mul_broadcast": lambda L: L.mul(T(L,2,3), T(L,2)),
    "cat_mismatch": lambda L: L.cat([T(L,2,3), T(L,2,4)], 0),
    "cat_dim_oob": lambda L: L.cat([T(L,2,3), T(L,2,3)], 5),
    "cat_empty": lambda L: L.cat([], 0),
    "stack_mismatch": lambda L: L.stack([T(L,2,3), T(L,3,3)]),
    "permute_wrong_n": lambda L: T(L,2,3).permute(0),
    "permute_repeat": lambda L: T(L,2,3).permute(0, 0),
    "transpose_oob": lambda L: T(L,2,3).transpose(0, 2),
    "sum_dim_oob": lambda L: T(L,2,3).sum(2),
    "sum_dim_neg_oob": lambda L: T(L,2,3).sum(-3),
    "mean_int": lambda L: I(L,[1,2]).mean(),
    "softmax_dim_oob": lambda L: L.softmax(T(L,2,3), dim=3),
    "squeeze_oob": lambda L: T(L,2,1).squeeze(3),
    "unsqueeze_oob": lambda L: T(L,2,1).unsqueeze(4),
    "flip_repeat": lambda L: T(L,2,3).flip(0, 0),
    "flip_oob": lambda L: T(L,2,3).flip(2),
    "view_bad": lambda L: T(L,2,3).view(4, 2),
    "reshape_bad": lambda L: T(L,2,3).reshape(4, 2),
    "reshape_two_minus1": lambda L: T(L,2,3).reshape(-1, -1),
    "expand_bad": lambda L: T(L,2,3).expand(4, 3),
    "expand_fewer": lambda L: T(L,2,3).expand(3),
    "gather_index_dims": lambda L: L.gather(T(L,2,3), 1, I(L,[0,1])),
    "gather_index_float": lambda L: L.gather(T(L,2,3), 1, T(L,2,1)),
    "gather_dim_oob": lambda L: L.gather(T(L,2,3), 2, I(L,[[0],[1]])),
    "scatter_index_dims": lambda L: T(L,2,3).scatter(1, I(L,[0,1]), T(L,2,1)),
    "index_select_2d_index": lambda L: L.index_select(T(L,2,3), 0, I(L,[[0]])),
    "index_select_float": lambda L: L.index_select(T(L,2,3), 0, T(L,1)),
    "getitem_too_many": lambda L: T(L,2,3)[0, 0, 0],
    "getitem_oob": lambda L: T(L,2,3)[5],
    "getitem_float": lambda L: T(L,2,3)[1.5],
    "narrow_oob": lambda L: T(L,2,3).narrow(1, 2, 5),
    "split_bad": lambda L: T(L,2,3).split(0, 1),
    "chunk_zero": lambda L: T(L,2,3).chunk(0),
    "conv2d_small_input": lambda L: L.nn.functional.conv2d(T(L,1,1,2,2), T(L,1,1,3,3)),
    "conv2d_channels": lambda L: L.nn.functional.conv2d(T(L,1,2,5,5), T(L,1,3,3,3)),
    "conv2d_rank": lambda L: L.nn.functional.conv2d(T(L,5,5), T(L,1,1,3,3)),
    "conv1d_rank": lambda L: L.nn.functional.conv1d(T(L,1,2,3,5), T(L,1,2,3)),
    "linear_mismatch": lambda L: L.nn.functional.linear(T(L,2,3), T(L,4,5)),
    "pad_bad_mode": lambda L: L.nn.functional.pad(T(L,1,2,3), (1,1), mode="nope"),
    "pad_reflect_rank": lambda L: L.nn.functional.pad(T(L,1,2,3,4), (1,1), mode="reflect"),
    "pad_odd": lambda L: L.nn.functional.pad(T(L,1,2,3), (1,)),
    "pad_reflect_too_big": lambda L: L.nn.functional.pad(T(L,1,2,3), (3,3), mode="reflect"),
    "meshgrid_indexing": lambda L: L.meshgrid(T(L,2), T(L,3), indexing="zz"),
    "cross_entropy_shape": lambda L: L.nn.functional.cross_entropy(T(L,2,3), I(L,[0,1,2])),
    "cross_entropy_float_target_shape":
        lambda L: L.nn.functional.cross_entropy(T(L,2,3), T(L,2,4)),
    "nll_target_oob_shape": lambda L: L.nn.functional.nll_loss(T(L,2,3), I(L,[[0],[1]])),
    "embedding_float_index": lambda L: L.nn.functional.embedding(T(L,2), T(L,5,3)),
    "layer_norm_shape": lambda L: L.nn.functional.layer_norm(T(L,2,3), (4,)),
    "max_pool_too_big": lambda L: L.nn.functional.max_pool2d(T(L,1,1,2,2), 3),
    "avg_pool_rank": lambda L: L.nn.functional.avg_pool2d(T(L,2), 2),
    "interpolate_no_size": lambda L: L.nn.functional.interpolate(T(L,1,1,2,2)),
    "clamp_none_none": lambda L: T(L,2).clamp(None, None),
    "and_float": lambda L: T(L,2) & T(L,2),
    "or_float": lambda L: T(L,2) | T(L,2),
    "xor_float": lambda L: T(L,2) ^ T(L,2),
    "invert_float": lambda L: ~T(L,2),
    "lshift_float": lambda L: T(L,2) << 1,
    "where_shapes": lambda L: L.where(T(L,2,dtype="bool"), T(L,3), T(L,2)),
    "masked_fill_mask_float": lambda L: T(L,2).masked_fill(T(L,2), 0.0),
    "masked_fill_shape": lambda L: T(L,2).masked_fill(T(L,3,dtype="bool"), 0.0),
    "arange_zero_step": lambda L: L.arange(0, 5, 0),
    "arange_wrong_sign": lambda L: L.arange(0, 5, -1),
    "zeros_negative": lambda L: L.zeros(-1),
    "randn_negative": lambda L: L.randn(-2),
    "full_bad_shape": lambda L: L.full((2, -1), 1.0),
    "eye_negative": lambda L: L.eye(-1),
    "linspace_negative": lambda L: L.linspace(0, 1, -1),
    "topk_too_big": lambda L: T(L,3).topk(5),
    "kthvalue_oob": lambda L: T(L,3).kthvalue(5),
    "sort_dim_oob": lambda L: T(L,3).sort(dim=2),
    "argmax_dim_oob": lambda L: T(L,3).argmax(dim=2),
    "cumsum_dim_oob": lambda L: T(L,3).cumsum(dim=2),
    "repeat_fewer": lambda L: T(L,2,3).repeat(2),
    "tril_1d": lambda L: T(L,3).tril(),
    "diag_3d": lambda L: L.diag(T(L,2,2,2)),
    "outer_2d": lambda L: L.outer(T(L,2,2), T(L,2)),
    "einsum_bad": lambda L: L.einsum("ij,jk->ik", T(L,2,3), T(L,4,5)),
    "item_multi": lambda L: T(L,2).item(),
    "bool_multi": lambda L: bool(T(L,2)),
    "float_multi": lambda L: float(T(L,2)),
    "int_multi": lambda L: int(T(L,2)),
    "backward_nonscalar": lambda L: (L.ones(2, requires_grad=True) * 2).backward(),
    "backward_no_grad": lambda L: L.ones(2).sum().backward(),
    "inplace_leaf": lambda L: L.ones(2, requires_grad=True).add_(1),
    "requires_grad_int": lambda L: I(L,[1,2]).requires_grad_(),
    "tensor_ragged": lambda L: L.tensor([[1,2],[3]]),
    "to_bad_dtype": lambda L: T(L,2).to("nope"),
    "view_as_mismatch": lambda L: T(L,2,3).view_as(T(L,4)),
    "unflatten_bad": lambda L: T(L,6).unflatten(0, (4, 2)),
    "movedim_repeat": lambda L: T(L,2,3).movedim((0,0),(0,1)),
    "select_oob": lambda L: T(L,2,3).select(1, 5),
    "unbind_oob": lambda L: T(L,2,3).unbind(2),
    "roll_mismatch": lambda L: T(L,2,3).roll((1,2), (0,)),
    "norm_bad_p": lambda L: T(L,2).norm(p="nope"),
    "log_softmax_no_dim": lambda L: L.nn.functional.log_softmax(T(L,2,3), dim=5),
    "dropout_p": lambda L: L.nn.functional.dropout(T(L,2), p=1.5),
    "lstm_input_size": lambda L: L.nn.LSTM(3, 4)(T(L,5,1,2)),
    "linear_module_mismatch": lambda L: L.nn.Linear(3, 4)(T(L,2,5)),
    "conv_module_channels": lambda L: L.nn.Conv2d(3, 4, 3)(T(L,1,2,5,5)),
    "batchnorm_channels": lambda L: L.nn.BatchNorm1d(3)(T(L,2,4)),
    "embedding_oob": lambda L: L.nn.Embedding(3, 2)(I(L,[5])).sum().item(),
    "cross_entropy_target_oob":
        lambda L: L.nn.functional.cross_entropy(T(L,2,3), I(L,[0,7])).item(),
    "index_oob_tensor": lambda L: T(L,3)[I(L,[5])].sum().item(),
    "gather_oob_value": lambda L: L.gather(T(L,2,3), 1, I(L,[[0],[7]])).sum().item(),
    "sgd_bad_lr": lambda L: L.optim.SGD([L.nn.Parameter(T(L,2))], lr=-1),
    "adam_bad_beta": lambda L: L.optim.Adam([L.nn.Parameter(T(L,2))], betas=(1.5, 0.9)),
    "load_state_dict_missing": lambda L: L.nn.Linear(2,2).load_state_dict({}),
    "load_state_dict_shape":
        lambda L: L.nn.Linear(2,2).load_state_dict({"weight": T(L,3,3), "bias": T(L,2)}),
    "sequential_index_oob": lambda L: L.nn.Sequential(L.nn.ReLU())[3],
    "modulelist_index_oob": lambda L: L.nn.ModuleList([L.nn.ReLU()])[3],
    "parameter_list_oob": lambda L: L.nn.ParameterList([L.nn.Parameter(T(L,2))])[3],
    "module_getattr": lambda L: L.nn.Linear(2,2).nope,
    "register_buffer_bad": lambda L: L.nn.Module().register_buffer("a.b", T(L,2)),
    "pixel_shuffle_bad": lambda L: L.nn.functional.pixel_shuffle(T(L,1,3,2,2), 2),
    "unfold_bad": lambda L: T(L,5).unfold(0, 7, 1),
    "normal_neg_std": lambda L: L.normal(0.0, -1.0, (2,)),
    "randint_bad": lambda L: L.randint(5, 2, (3,)),
    "randperm_neg": lambda L: L.randperm(-1),
    "searchsorted_dims": lambda L: L.searchsorted(T(L,2,3), T(L,3,1)),
    "bucketize_2d_boundaries": lambda L: L.bucketize(T(L,3), T(L,2,2)),
    "cosine_sim_mismatch": lambda L: L.nn.functional.cosine_similarity(T(L,2,3), T(L,2,4)),
    "pairwise_mismatch": lambda L: L.nn.functional.pairwise_distance(T(L,2,3), T(L,2,4)),
    "kl_div_mismatch": lambda L: L.nn.functional.kl_div(T(L,2,3), T(L,2,4)),
    "bce_mismatch": lambda L: L.nn.functional.binary_cross_entropy(T(L,2,3)*0.5, T(L,2,4)),
    "bce_logits_mismatch":
        lambda L: L.nn.functional.binary_cross_entropy_with_logits(T(L,2,3), T(L,2,4)),
    "l1_mismatch": lambda L: L.nn.functional.l1_loss(T(L,2,3), T(L,2,4)),
    "smooth_l1_mismatch": lambda L: L.nn.functional.smooth_l1_loss(T(L,2,3), T(L,2,4)),
    "group_norm_groups": lambda L: L.nn.functional.group_norm(T(L,2,6,3), 4),
    "instance_norm_rank": lambda L: L.nn.functional.instance_norm(T(L,3)),
    "adaptive_pool_rank": lambda L: L.nn.functional.adaptive_avg_pool2d(T(L,3), 2),
    "mha_dims": lambda L: L.nn.MultiheadAttention(6, 4),
    "transformer_dims": lambda L: L.nn.TransformerEncoderLayer(6, 4),
    "clip_grad_bad_type":
        lambda L: L.nn.utils.clip_grad_norm_([L.nn.Parameter(T(L,2))], 1.0, norm_type="x"),
    "std_int": lambda L: I(L,[1,2]).std(),
    "var_int": lambda L: I(L,[1,2]).var(),
    "exp_int_ok_then_bad": lambda L: I(L,[1,2]).exp_(),
    "div_int_floor_by_zero": lambda L: (I(L,[1,2]) // I(L,[0,1])).sum().item(),
    "remainder_int_zero": lambda L: (I(L,[1,2]) % I(L,[0,1])).sum().item(),
    "squeeze_0d_oob": lambda L: L.squeeze(L.tensor(1.0), 1),
    "squeeze_0d_neg_oob": lambda L: L.tensor(1.0).squeeze(-2),
    "softmax_0d_dim_oob": lambda L: L.nn.Softmax(dim=1)(L.tensor(1.0)),
    "linspace_bool": lambda L: L.linspace(5, 10, 3, dtype=L.bool),
    "linspace_neg_steps": lambda L: L.linspace(1, 2, -1),
    "arange_bool": lambda L: L.arange(0, 3, dtype=L.bool),
    "randint_int_requires_grad": lambda L: L.randint(3, (2,), requires_grad=True),
    "bitwise_xor_float": lambda L: L.bitwise_xor(T(L,4), T(L,4)),
    "bitwise_and_float": lambda L: T(L,4).bitwise_and(T(L,4)),
    "bitwise_or_float": lambda L: L.bitwise_or(T(L,4), T(L,4)),
    "pad_reflect_too_big_neg_other": lambda L: L.nn.functional.pad(T(L,1,1,5,5), (-1,5), mode="reflect"),
}


def _raised(lib, case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            case(lib)
        except Exception as e:  # noqa: BLE001  (the class is what is compared)
            return e
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_flowlite_raises_pytorchs_exception_class(name):
    want = _raised(torch, CASES[name])
    assert want is not None, f"{name}: PyTorch raises nothing (the case is wrong)"
    got = _raised(fl, CASES[name])
    assert got is not None, f"{name}: flowlite raised nothing where PyTorch raised {want!r}"
    assert isinstance(got, type(want)), (
        f"{name}: PyTorch raises {type(want).__name__}, flowlite {type(got).__mro__}: {got}")
