"""The PyTorch surface flowlite does not provide, in one classified table.

Layer: frontend — imports nothing of flowlite.

Every public function of `torch`, `torch.nn.functional`, `torch.linalg`, `torch.special`,
`torch.fft` and every public method of `torch.Tensor` in PyTorch 2.13 is either provided by
flowlite or listed here, in one of two tables:

* NOT_IMPLEMENTED — in scope, not (yet) provided: each name is installed in its flowlite
  namespace as a stub that raises `NotImplementedError("flowlite: torch.fft.rfft is not
  implemented (<reason>)")` when called, so a ported program stops at the call that needs
  it, with the name, never with a bare AttributeError or a silently different result;
* OUT_OF_SCOPE — what flowlite deliberately has no equivalent of (CUDA/cuDNN/MKL-DNN kernels,
  sparse and quantized tensors, TorchScript and FX internals, ...): not installed, so
  `hasattr(torch, name)` feature tests keep answering False, and `python -m flowlite.run`
  reports the name when a program reaches it.

Each entry: (group, category, names, reason); the category is PyTorch's documentation section.
tests/test_torch_coverage.py enumerates PyTorch's names and fails on any name that is neither
provided nor listed, on a listed name flowlite now provides (a stale entry), and on a
NOT_IMPLEMENTED name whose stub does not raise NotImplementedError naming it;
`python tools/torch_coverage.py --surface` prints the classification.
"""
from __future__ import annotations

GROUPS = ("torch", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft",
          "Tensor")

_SHAPE = "in-place changes of a tensor's shape or layout (a flowlite tensor keeps its shape)"
_LU = "LU, LDL and Householder (QR-by-reflectors) factorizations"
_COMPLEX = "complex tensors: flowlite has no complex dtypes"

# (group, category, "name name ...", reason)
NOT_IMPLEMENTED = [
    # torch
    ("torch", "random sampling", "binomial poisson",
     "sampling the binomial and Poisson distributions"),
    ("torch", "BLAS and LAPACK", "lu lu_solve lu_unpack geqrf orgqr ormqr", _LU),
    ("torch", "BLAS and LAPACK", "lobpcg pca_lowrank svd_lowrank",
     "LOBPCG and randomized low-rank SVD/PCA"),
    ("torch", "other operations", "hash_tensor", "hashing a tensor's contents"),
    ("torch", "indexing, slicing, joining", "as_strided_ resize_as_", _SHAPE),
    ("torch", "creation", "from_file", "tensors backed by a file's storage"),
    ("torch", "neural network", "ctc_loss", "the CTC loss"),
    ("torch", "neural network", "embedding_bag embedding_renorm_",
     "EmbeddingBag and max_norm renormalisation of embeddings"),
    ("torch", "neural network", "conv_tbc", "time-batch-channel convolution"),
    ("torch", "utilities", "set_default_tensor_type",
     "legacy default tensor types (use torch.set_default_dtype)"),
    ("torch", "utilities", "set_flush_denormal", "flushing denormals (XLA decides)"),
    ("torch", "utilities", "is_anomaly_enabled is_anomaly_check_nan_enabled set_anomaly_enabled",
     "autograd anomaly mode switches (flowlite.detect_anomaly is flowlite's)"),
    ("torch", "utilities", "vmap", "vectorising maps (torch.func)"),
    ("torch", "control flow", "cond while_loop",
     "torch.cond and torch.while_loop (flowlite.scan runs a traced loop)"),
    ("torch", "tensors", "is_inference", "inference tensors (inference_mode's tensor flag)"),
    # torch.nn.functional
    ("torch.nn.functional", "pooling",
     "fractional_max_pool2d fractional_max_pool2d_with_indices fractional_max_pool3d "
     "fractional_max_pool3d_with_indices", "fractional max pooling"),
    ("torch.nn.functional", "loss", "ctc_loss", "the CTC loss"),
    ("torch.nn.functional", "loss", "linear_cross_entropy",
     "the fused linear + cross-entropy loss"),
    ("torch.nn.functional", "sparse", "embedding_bag", "EmbeddingBag"),
    ("torch.nn.functional", "convolution", "conv_tbc", "time-batch-channel convolution"),
    # torch.linalg
    ("torch.linalg", "decompositions",
     "lu lu_factor lu_factor_ex lu_solve ldl_factor ldl_factor_ex ldl_solve "
     "householder_product", _LU),
    # torch.special
    ("torch.special", "special functions",
     "airy_ai bessel_j0 bessel_j1 bessel_y0 bessel_y1 modified_bessel_k0 modified_bessel_k1 "
     "scaled_modified_bessel_k0 scaled_modified_bessel_k1",
     "the Airy function and the Bessel functions J, Y and K"),
    ("torch.special", "special functions",
     "chebyshev_polynomial_t chebyshev_polynomial_u chebyshev_polynomial_v "
     "chebyshev_polynomial_w shifted_chebyshev_polynomial_t shifted_chebyshev_polynomial_u "
     "shifted_chebyshev_polynomial_v shifted_chebyshev_polynomial_w hermite_polynomial_h "
     "hermite_polynomial_he laguerre_polynomial_l legendre_polynomial_p",
     "orthogonal polynomials"),
    # torch.fft: every transform has a complex input or output
    ("torch.fft", "spectral",
     "fft fft2 fftn ifft ifft2 ifftn rfft rfft2 rfftn irfft irfft2 irfftn hfft hfft2 hfftn "
     "ihfft ihfft2 ihfftn", _COMPLEX),
    # Tensor methods
    ("Tensor", "indexing, slicing, joining",
     "as_strided_ resize resize_ resize_as resize_as_ set_ squeeze_ unsqueeze_ t_ "
     "transpose_ swapaxes_ swapdims_", _SHAPE),
    ("Tensor", "BLAS and LAPACK", "lu lu_solve geqrf orgqr ormqr", _LU),
    ("Tensor", "other operations", "hash_tensor", "hashing a tensor's contents"),
    ("Tensor", "other operations", "apply_ map_ map2_", "element-wise Python callbacks"),
    ("Tensor", "autograd", "register_hook register_post_accumulate_grad_hook",
     "autograd hooks on tensors"),
    ("Tensor", "tensors", "is_inference", "inference tensors (inference_mode's tensor flag)"),
    ("Tensor", "tensors", "as_subclass", "tensor subclasses"),
]

_SPARSE = "sparse tensors (flowlite's tensors are dense)"
_QUANTIZED = "quantized tensors"
_BACKENDS = "CUDA/cuDNN, ROCm/MIOpen, oneDNN and FBGEMM kernel entry points"
_ATEN = "ATen kernels behind the documented API (flowlite implements the documented API)"
_JIT = "TorchScript, FX and symbolic-shape machinery"
_INTERNAL = "internal helpers"
_MEMORY = "raw storage, memory and stream handles (flowlite's values live in XLA buffers)"

OUT_OF_SCOPE = [
    # torch
    ("torch", "backends",
     "cudnn_affine_grid_generator cudnn_batch_norm cudnn_convolution cudnn_convolution_add_relu "
     "cudnn_convolution_relu cudnn_convolution_transpose cudnn_grid_sampler cudnn_is_acceptable "
     "miopen_batch_norm miopen_convolution miopen_convolution_add_relu miopen_convolution_relu "
     "miopen_convolution_transpose miopen_ctc_loss miopen_depthwise_convolution miopen_rnn "
     "mkldnn_adaptive_avg_pool2d mkldnn_convolution mkldnn_linear_backward_weights "
     "mkldnn_max_pool2d mkldnn_max_pool3d mkldnn_rnn_layer fbgemm_linear_fp16_weight "
     "fbgemm_linear_fp16_weight_fp32_activation fbgemm_linear_int8_weight "
     "fbgemm_linear_int8_weight_fp32_activation fbgemm_linear_quantize_weight "
     "fbgemm_pack_gemm_matrix_fp16 fbgemm_pack_quantized_matrix", _BACKENDS),
    ("torch", "quantized",
     "choose_qparams_optimized dequantize empty_quantized fake_quantize_per_channel_affine "
     "fake_quantize_per_tensor_affine fused_moving_avg_obs_fake_quant int_repr "
     "q_per_channel_axis q_per_channel_scales q_per_channel_zero_points q_scale q_zero_point "
     "quantize_per_channel quantize_per_tensor quantize_per_tensor_dynamic "
     "quantized_batch_norm quantized_gru quantized_gru_cell quantized_lstm quantized_lstm_cell "
     "quantized_max_pool1d quantized_max_pool2d quantized_max_pool3d quantized_rnn_relu_cell "
     "quantized_rnn_tanh_cell", _QUANTIZED),
    ("torch", "sparse",
     "sparse_bsc_tensor sparse_bsr_tensor sparse_compressed_tensor sparse_coo_tensor "
     "sparse_csc_tensor sparse_csr_tensor ccol_indices_copy col_indices_copy "
     "crow_indices_copy row_indices_copy indices_copy values_copy dsmm hsmm hspmm saddmm smm "
     "spmm sspaddmm resize_as_sparse_", _SPARSE),
    ("torch", "complex", "complex polar view_as_complex view_as_complex_copy view_as_real "
     "view_as_real_copy stft istft", _COMPLEX),
    ("torch", "internal",
     "native_batch_norm native_dropout native_group_norm native_layer_norm native_norm "
     "batch_norm_backward_elemt batch_norm_backward_reduce batch_norm_elemt "
     "batch_norm_gather_stats batch_norm_gather_stats_with_counts batch_norm_stats "
     "batch_norm_update_stats affine_grid_generator grid_sampler grid_sampler_2d "
     "grid_sampler_3d lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
     "segment_reduce slice_inverse", _ATEN),
    ("torch", "internal",
     "fork wait import_ir_module import_ir_module_from_buffer parse_ir parse_schema "
     "parse_type_comment merge_type_from_type_comment unify_type_list classproperty "
     "sym_constrain_range sym_constrain_range_for_size sym_float sym_fresh_size sym_int sym_ite "
     "sym_max sym_min sym_not sym_sqrt sym_sum", _JIT),
    ("torch", "internal",
     "autocast_decrement_nesting autocast_increment_nesting clear_autocast_cache "
     "get_autocast_cpu_dtype get_autocast_gpu_dtype get_autocast_ipu_dtype "
     "get_autocast_xla_dtype is_autocast_cache_enabled is_autocast_cpu_enabled "
     "is_autocast_ipu_enabled is_autocast_xla_enabled set_autocast_cache_enabled "
     "set_autocast_cpu_dtype set_autocast_cpu_enabled set_autocast_dtype "
     "set_autocast_enabled set_autocast_gpu_dtype set_autocast_ipu_dtype "
     "set_autocast_ipu_enabled set_autocast_xla_dtype set_autocast_xla_enabled",
     "autocast internals (torch.autocast / torch.amp are flowlite's)"),
    ("torch", "internal",
     "compiled_with_cxx11_abi get_file_path init_num_threads is_vulkan_available "
     "prepare_multiprocessing_environment profiler_allow_cudagraph_cupti_lazy_reinit_cuda12 "
     "thread_safe_generator get_device_module is_distributed",
     "build, device-module and process internals"),
    # torch.nn.functional
    ("torch.nn.functional", "internal",
     "Optional assert_int_or_pair boolean_dispatch handle_torch_function has_torch_function "
     "has_torch_function_unary has_torch_function_variadic",
     "internal helpers (typing, __torch_function__ dispatch)"),
    ("torch.nn.functional", "backends", "grouped_mm scaled_mm scaled_grouped_mm",
     "low-precision and grouped GEMM kernels for CUDA"),
    # torch.linalg
    ("torch.linalg", "complex", "eig eigvals",
     "eigen-decomposition of general matrices (complex results: " + _COMPLEX + ")"),
    # Tensor methods
    ("Tensor", "sparse",
     "ccol_indices col_indices crow_indices row_indices indices values coalesce is_coalesced "
     "dense_dim sparse_dim sparse_mask sparse_resize_ sparse_resize_and_clear_ to_sparse "
     "to_sparse_bsc to_sparse_bsr to_sparse_coo to_sparse_csc to_sparse_csr smm sspaddmm "
     "resize_as_sparse_", _SPARSE),
    ("Tensor", "complex", "cdouble cfloat chalf stft istft", _COMPLEX),
    ("Tensor", "quantized",
     "dequantize int_repr q_per_channel_axis q_per_channel_scales q_per_channel_zero_points "
     "q_scale q_zero_point qscheme", _QUANTIZED),
    ("Tensor", "memory",
     "const_data_ptr data_ptr storage untyped_storage storage_type record_stream share_memory_ "
     "is_shared is_set_to module_load", _MEMORY),
    ("Tensor", "backends", "ipu mtia xpu to_mkldnn",
     "IPU, MTIA and XPU devices and oneDNN tensors"),
    ("Tensor", "internal", "to_padded_tensor", "nested tensors"),
    ("Tensor", "internal", "index slice_inverse is_distributed reinforce",
     "internal or removed methods"),
]


def _table(entries):
    out = {}
    for group, category, names, reason in entries:
        if group not in GROUPS:
            raise ValueError(f"surface: unknown group {group!r}")
        for name in names.split():
            key = (group, name)
            if key in out:
                raise ValueError(f"surface: {group}.{name} is listed twice")
            out[key] = (category, reason)
    return out


def not_implemented() -> dict:
    """{(group, name): (category, reason)} of the names installed as NotImplementedError stubs."""
    return _table(NOT_IMPLEMENTED)


def out_of_scope() -> dict:
    """{(group, name): (category, reason)} of the names flowlite deliberately lacks."""
    return _table(OUT_OF_SCOPE)


def qualified(group: str, name: str) -> str:
    return f"torch.Tensor.{name}" if group == "Tensor" else f"{group}.{name}"


def stub(group: str, name: str, reason: str):
    """A function that raises NotImplementedError naming `torch.<...>.name` and why."""
    qual = qualified(group, name)
    message = f"flowlite: {qual} is not implemented ({reason})"

    def not_implemented_stub(*args, **kwargs):
        raise NotImplementedError(message)
    not_implemented_stub.__name__ = not_implemented_stub.__qualname__ = name
    not_implemented_stub.__doc__ = message
    not_implemented_stub.__flowlite_not_implemented__ = reason
    return not_implemented_stub


def is_stub(obj) -> bool:
    """Whether obj is one of this table's NotImplementedError stubs."""
    return getattr(obj, "__flowlite_not_implemented__", None) is not None


def install(group: str, namespace: dict) -> None:
    """Add the group's NOT_IMPLEMENTED stubs to a module namespace (names it lacks only)."""
    for (g, name), (_, reason) in _table(NOT_IMPLEMENTED).items():
        if g == group and name not in namespace:
            namespace[name] = stub(g, name, reason)


def install_methods(cls) -> None:
    """Add the Tensor group's NOT_IMPLEMENTED stubs as methods of cls (names it lacks only)."""
    for (g, name), (_, reason) in _table(NOT_IMPLEMENTED).items():
        if g == "Tensor" and not hasattr(cls, name):
            setattr(cls, name, stub(g, name, reason))      # takes (self, ...) and raises
