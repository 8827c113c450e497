"""MultiheadAttention with PyTorch's parameters, key names and masking conventions."""
from __future__ import annotations

from ...extend import ArgumentError, DTypeError, LayerArgumentError
from ...extend import dtypes as D
from .. import functional as Fn
from .. import init
from ..module import Module
from .linear import NonDynamicallyQuantizableLinear
from ._util import new_param


class MultiheadAttention(Module):
    """Multi-head attention (PyTorch's `nn.MultiheadAttention`).

    Parameters: `in_proj_weight` (3E, E) ~ xavier_uniform and `in_proj_bias` (3E,) = 0 — or
    `q_proj_weight`/`k_proj_weight`/`v_proj_weight` when kdim/vdim differ from embed_dim — and
    `out_proj` (a Linear with bias 0).  Inputs are (L, N, E), or (N, L, E) with
    batch_first=True, or unbatched (L, E).  `attn_mask` (L, S) or (N·num_heads, L, S):
    bool True = NOT allowed to attend, float = added; `key_padding_mask` (N, S): bool True =
    padding.  Returns (output, weights averaged over heads — or per head with
    average_attn_weights=False — or None when need_weights=False)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ArgumentError(f"embed_dim and num_heads must be greater than 0, got "
                                f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise LayerArgumentError(f"MultiheadAttention: embed_dim ({embed_dim}) must be "
                                     f"divisible by num_heads ({num_heads})")
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = new_param((embed_dim, embed_dim), dtype, device)
            self.k_proj_weight = new_param((embed_dim, self.kdim), dtype, device)
            self.v_proj_weight = new_param((embed_dim, self.vdim), dtype, device)
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = new_param((3 * embed_dim, embed_dim), dtype, device)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = new_param((3 * embed_dim,), dtype, device)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k = new_param((1, 1, embed_dim), dtype, device)
            self.bias_v = new_param((1, 1, embed_dim), dtype, device)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        for name, m in (("key_padding_mask", key_padding_mask), ("attn_mask", attn_mask)):
            if m is not None and m.dtype is not D.bool_ and not m.dtype.is_floating_point:
                raise DTypeError(f"MultiheadAttention: only bool and floating types of {name} "
                                 f"are supported, got {m.dtype}")
        return Fn.multi_head_attention_forward(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias,
            self.bias_k, self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight,
            self.out_proj.bias, training=self.training, key_padding_mask=key_padding_mask,
            need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights,
            is_causal=is_causal, batch_first=self.batch_first)
