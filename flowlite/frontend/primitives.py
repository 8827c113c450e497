"""The primitive table: every primitive by its table name (`flowlite.extend.prims`).

Layer: frontend — imports ops._core, ops.creation, ops.decomposition, ops.elementwise,
ops.elementwise_math, ops.histogram, ops.indexing, ops.indexing_more, ops.linalg,
ops.nn_kernels, ops.reduction, ops.shape, ops.sorting, ops.special. Each primitive is declared
in its family's module of `flowlite.frontend.ops` (as `<name>_p`, beside the front end that
records it, with its lowering, gradient rule, elementwise kind and bucketing rule); this module
only gathers them under their table names, for the layers and users built on flowlite.extend.
"""
# flake8: noqa: F401
from .ops._core import (_FLOAT_BITS, _convert_lower, _convert_vjp, _expand_back, _st,
                        _tuple_get_vjp, broadcast_to_p as broadcast_to, convert_p as convert,
                        full_p as full, nondiff, pointwise, pointwise_nondiff, prim,
                        reduce_sum_p as reduce_sum, reshape_p as reshape,
                        stop_gradient_p as stop_gradient, tuple_get_p as tuple_get)
from .ops.elementwise import (_LN2, _TWO_OVER_SQRT_PI, _atan2_vjp, _ipow_vjp, _minmax_vjp,
                              _pow_vjp, _where_vjp, abs_p as abs_, acos_p as acos,
                              acosh_p as acosh, add_p as add, asin_p as asin, asinh_p as asinh,
                              atan2_p as atan2, atan_p as atan, atanh_p as atanh,
                              bit_and_p as bit_and, bit_or_p as bit_or, bit_xor_p as bit_xor,
                              ceil_p as ceil, cos_p as cos, cosh_p as cosh, div_p as div,
                              eq_p as eq, erf_p as erf, exp2_p as exp2, exp_p as exp,
                              expm1_p as expm1, floor_divide_p as floor_divide, floor_p as floor,
                              fmod_p as fmod, ge_p as ge, gt_p as gt, integer_pow_p as integer_pow,
                              isfinite_p as isfinite, isinf_p as isinf, isnan_p as isnan,
                              le_p as le, log1p_p as log1p, log2_p as log2, log_p as log,
                              logical_not_p as logical_not, lt_p as lt, maximum_p as maximum,
                              minimum_p as minimum, mul_p as mul, ne_p as ne, neg_p as neg,
                              pow_p as pow_, relu_p as relu, remainder_p as remainder,
                              round_p as round_, rsqrt_p as rsqrt, shift_left_p as shift_left,
                              shift_right_p as shift_right, sigmoid_p as sigmoid, sign_p as sign,
                              sin_p as sin, sinh_p as sinh, sqrt_p as sqrt, sub_p as sub,
                              tan_p as tan, tanh_p as tanh, trunc_p as trunc, where_p as where)
from .ops.creation import (_GOLD, _M1, _M2, _M3, _bits, _iota, _multinomial, _normal, _permutation,
                           _randint, _trunc_normal, _uniform, _unit, eye_p as eye, iota_p as iota,
                           linspace_p as linspace, rng_multinomial_p as rng_multinomial,
                           rng_normal_p as rng_normal, rng_permutation_p as rng_permutation,
                           rng_randint_p as rng_randint, rng_trunc_normal_p as rng_trunc_normal,
                           rng_uniform_p as rng_uniform)
from .ops.shape import (_along, _concat_vjp, _dyn_pad_vjp, _dyn_slice_vjp, _flat_index,
                        _inverse_perm, _pad_vjp, _scatter_add_vjp, _slice_vjp, _src_grad,
                        _take_along_vjp, _view_read_lower, _view_read_vjp, _view_write_lower,
                        _view_write_vjp, concatenate_p as concatenate, dyn_pad_p as dyn_pad,
                        dyn_slice_p as dyn_slice, pad_p as pad, rev_p as rev,
                        scatter_add_p as scatter_add, slice_p as slice_,
                        take_along_p as take_along, transpose_p as transpose, tril_p as tril,
                        triu_p as triu, view_read_p as view_read, view_write_p as view_write)
from .ops.reduction import (_cum_extreme_lower, _cumprod_vjp, _extreme_vjp, _logcumsumexp_vjp,
                            _order_key, _prod_vjp, argmax_p as argmax, argmin_p as argmin,
                            cum_extreme_indices_p as cum_extreme_indices, cummax_p as cummax,
                            cumprod_p as cumprod, cumsum_p as cumsum,
                            logcumsumexp_p as logcumsumexp, reduce_all_p as reduce_all,
                            reduce_any_p as reduce_any, reduce_max_p as reduce_max,
                            reduce_min_p as reduce_min, reduce_prod_p as reduce_prod)
from .ops.indexing import (_build_index, _index_add_vjp, _index_set_vjp, _index_vjp,
                           _scatter_mul_vjp, _scatter_vjp, index_add_p as index_add,
                           index_p as index, index_set_p as index_set,
                           scatter_mul_p as scatter_mul, scatter_p as scatter)
from .ops.linalg import _einsum_vjp, _matmul_vjp, einsum_p as einsum, matmul_p as matmul
from .ops.nn_kernels import (_MAX_TAPS, _conv, _conv_input_grad_lower, _conv_taps,
                             _conv_transpose_kwargs, _conv_vjp, _conv_weight_grad_lower,
                             _cpu_materialized, _layer_norm_lower, _layer_norm_vjp, _linear_lower,
                             _linear_vjp, _max_window_grad_lower, _max_window_grad_vjp,
                             _max_window_select_lower, _nll_lower, _nll_t_lower, _nll_t_vjp,
                             _nll_vjp, _reduce_window, _sum_window_transpose_lower, _tap,
                             _taps_pay, _unpadded, _window, _window_choice, _window_out,
                             _window_slices, _window_vjp, conv_input_grad_p as conv_input_grad,
                             conv_p as conv, conv_weight_grad_p as conv_weight_grad,
                             layer_norm_p as layer_norm, linear_p as linear,
                             log_softmax_p as log_softmax, max_window_grad_p as max_window_grad,
                             max_window_select_p as max_window_select, nll_p as nll,
                             nll_t_p as nll_t, reduce_window_p as reduce_window,
                             softmax_p as softmax, sum_window_transpose_p as sum_window_transpose)
from .ops.sorting import (_argsort_lower, _distribute_vjp, _mode_lower, _searchsorted_lower,
                          _topk_lower, argsort_p as argsort, distribute_grad_p as distribute_grad,
                          mode_index_p as mode_index, searchsorted_p as searchsorted,
                          topk_indices_p as topk_indices)
from .ops.elementwise_math import (frexp_exponent_p as frexp_exponent,
                                   frexp_mantissa_p as frexp_mantissa, gcd_p as gcd,
                                   lcm_p as lcm, log10_p as log10, logaddexp2_p as logaddexp2,
                                   logaddexp_p as logaddexp, nextafter_p as nextafter,
                                   signbit_p as signbit, underivable_p as underivable,
                                   xlog1py_p as xlog1py, xlogy_p as xlogy)
from .ops.special import (digamma_p as digamma, entr_p as entr, erfc_p as erfc,
                          erfcx_p as erfcx, erfinv_p as erfinv, i0_p as i0, i0e_p as i0e,
                          i1_p as i1, i1e_p as i1e, igamma_p as igamma, igammac_p as igammac,
                          lgamma_p as lgamma, log_ndtr_p as log_ndtr, ndtr_p as ndtr,
                          ndtri_p as ndtri, polygamma_p as polygamma, zeta_p as zeta)
from .ops.histogram import exact_div_p as exact_div
from .ops.indexing_more import scatter_reduce_p as scatter_reduce
from .ops.decomposition import (cholesky_info_p as cholesky_info, cholesky_p as cholesky,
                                det_p as det, eigh_vals_p as eigh_values,
                                eigh_vecs_p as eigh_vectors, inv_p as inv,
                                logabsdet_p as logabsdet, lu_info_p as lu_info,
                                matrix_exp_p as matrix_exp, qr_q_p as qr_q, qr_r_p as qr_r,
                                slogdet_sign_p as slogdet_sign, solve_p as solve,
                                svd_s_p as svd_s, svd_u_p as svd_u, svd_vh_p as svd_vh,
                                tri_solve_p as solve_triangular)
