"""Transformer, TransformerEncoder(Layer), TransformerDecoder(Layer): PyTorch's structure,
constructor and forward signatures, and state_dict key names (so weights copy across).

Masks follow `nn.MultiheadAttention`: bool True = not allowed to attend, float = added.
`is_causal` is PyTorch's hint that the given mask is causal; the mask itself is always
applied, so the hint changes nothing but is checked as PyTorch checks it.  PyTorch's
automatic detection of a causal mask (`is_causal=None`) only picks a faster kernel and would
need a host read, so it is skipped.  One deliberate emulation: PyTorch's encoder in eval mode
without autograd runs its nested-tensor fast path when given a left-aligned
`src_key_padding_mask`, which zeroes the padded positions of the output; flowlite computes the
same zeros inside the graph (no sync), so outputs agree in both modes.
"""
from __future__ import annotations

import copy
import warnings

from ...extend import dtypes as D, is_grad_enabled, ops as F
from .. import functional as Fn
from .. import init
from ..containers import ModuleList
from ..module import Module
from .activation import GELU, ReLU
from .attention import MultiheadAttention
from .dropout import Dropout
from .linear import Linear
from .normalization import LayerNorm

_CAUSAL_HINT = ("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                "module method `generate_square_subsequent_mask` to create this mask.")


def _get_activation_fn(activation):
    if activation == "relu":
        return Fn.relu
    if activation == "gelu":
        return Fn.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _relu_or_gelu(activation) -> int:
    """PyTorch's `activation_relu_or_gelu` flag (1 relu, 2 gelu, 0 other)."""
    if activation is Fn.relu or isinstance(activation, ReLU):
        return 1
    if activation is Fn.gelu or isinstance(activation, GELU):
        return 2
    return 0


def _generate_square_subsequent_mask(sz, device=None, dtype=None):
    """(sz, sz) float mask: 0 on and below the diagonal, -inf above (PyTorch's)."""
    d = D.canonical(D.from_any(dtype)) if dtype is not None else D.default_float()
    return F.triu(F.full((sz, sz), float("-inf"), dtype=d, device=device), 1)


def _check_causal_hint(is_causal, mask):
    if is_causal and mask is None:
        raise RuntimeError(_CAUSAL_HINT)


def _set_activation(layer, activation):
    if isinstance(activation, str):
        activation = _get_activation_fn(activation)
    layer.activation_relu_or_gelu = _relu_or_gelu(activation)
    layer.activation = activation   # a Module is registered as a sub-module


class TransformerEncoderLayer(Module):
    """Self-attention + feed-forward block; post-norm by default, pre-norm with
    norm_first=True.  Sub-modules (and state_dict keys) as PyTorch: self_attn, linear1,
    dropout, linear2, norm1, norm2, dropout1, dropout2."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=Fn.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        _set_activation(self, activation)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        _check_causal_hint(is_causal, src_mask)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over `memory`, feed-forward.  Sub-modules (and
    state_dict keys) as PyTorch: self_attn, multihead_attn, linear1, dropout, linear2,
    norm1..3, dropout1..3."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=Fn.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        _set_activation(self, activation)

    def __deepcopy__(self, memo):
        new = super().__deepcopy__(memo)
        if "activation" not in self.__dict__:
            # PyTorch's TransformerDecoderLayer.__setstate__ (run by the deepcopy in
            # TransformerDecoder/_get_clones) finds no `activation` in the instance dict when
            # it is a Module, and sets F.relu there, which shadows the module: every copy
            # computes relu.  Reproduced so weights copied from PyTorch give its results.
            warnings.warn("TransformerDecoderLayer: a copy of a layer whose activation is a "
                          "Module computes F.relu instead (PyTorch's behaviour, reproduced); "
                          "pass the activation as a function or a string to keep it",
                          stacklevel=2)
            new.__dict__["activation"] = Fn.relu
        return new

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):
        _check_causal_hint(tgt_is_causal, tgt_mask)
        _check_causal_hint(memory_is_causal, memory_mask)
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask,
                                   tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask,
                                              tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask,
                                               memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x


def _nested_fast_path_blocker(layer) -> str:
    """Why PyTorch's encoder could never take its nested-tensor path ('' if it could)."""
    if not isinstance(layer, TransformerEncoderLayer):
        return "encoder_layer was not TransformerEncoderLayer"
    if layer.norm_first:
        return "encoder_layer.norm_first was True"
    sa = layer.self_attn
    if not sa.batch_first:
        return ("encoder_layer.self_attn.batch_first was not True(use batch_first for better "
                "inference performance)")
    if not sa._qkv_same_embed_dim:
        return "encoder_layer.self_attn._qkv_same_embed_dim was not True"
    if sa.in_proj_bias is None:
        return "encoder_layer.self_attn was passed bias=False"
    if not layer.activation_relu_or_gelu:
        return "encoder_layer.activation_relu_or_gelu was not True"
    if layer.norm1.eps != layer.norm2.eps:
        return "encoder_layer.norm1.eps was not equal to encoder_layer.norm2.eps"
    if sa.num_heads % 2 == 1:
        return "encoder_layer.self_attn.num_heads is odd"
    return ""


class TransformerEncoder(Module):
    """A stack of `num_layers` copies of `encoder_layer` (keys layers.0., layers.1., ...),
    followed by an optional final norm."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why_not = _nested_fast_path_blocker(encoder_layer)
        if enable_nested_tensor and why_not:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False "
                          f"because {why_not}", stacklevel=2)
            self.use_nested_tensor = False

    def _takes_nested_path(self, src, mask, src_key_padding_mask) -> bool:
        """PyTorch's static conditions for its nested-tensor inference path."""
        first = self.layers[0]
        if not self.use_nested_tensor or first.training or src.ndim != 3:
            return False
        if src_key_padding_mask is None or mask is not None:
            return False
        if is_grad_enabled():
            sa = first.self_attn
            args = [src, sa.in_proj_weight, sa.in_proj_bias, sa.out_proj.weight,
                    sa.out_proj.bias, first.norm1.weight, first.norm1.bias, first.norm2.weight,
                    first.norm2.bias, first.linear1.weight, first.linear1.bias,
                    first.linear2.weight, first.linear2.bias]
            if any(t is not None and t.requires_grad for t in args):
                return False
        return True

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        nested = self._takes_nested_path(src, mask, src_key_padding_mask)
        kpm = src_key_padding_mask
        if nested:
            # PyTorch keeps the first sum(~kpm) tokens of each row (after checking, with
            # mask_check, that the kept tokens are left-aligned — else it runs densely) and
            # pads the output with zeros.  Both decisions are data, so they stay in the graph.
            keep = F.logical_not(kpm) if kpm.dtype is D.bool_ else kpm == 0
            lengths = F.sum(keep.to(D.int32), 1, keepdim=True)
            nested_pad = F.arange(src.shape[1], device=src.device) >= lengths
            use = F.all(F.logical_not(keep[:, 1:] & F.logical_not(keep[:, :-1]))) \
                if self.mask_check else None
            pad = nested_pad if use is None else nested_pad & use
            if use is not None:
                as_mask = nested_pad if kpm.dtype is D.bool_ else F.where(
                    nested_pad, F.full((), float("-inf"), dtype=kpm.dtype, device=kpm.device),
                    F.zeros((), dtype=kpm.dtype, device=kpm.device))
                kpm = F.where(use, as_mask, kpm)
            else:
                kpm = nested_pad
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=kpm, is_causal=bool(is_causal))
        if nested:
            x = F.where(pad.unsqueeze(-1), F.zeros((), dtype=x.dtype, device=x.device), x)
        if self.norm is not None:
            x = self.norm(x)
        return x


class TransformerDecoder(Module):
    """A stack of `num_layers` copies of `decoder_layer`, then an optional final norm."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        if self.norm is not None:
            x = self.norm(x)
        return x


class Transformer(Module):
    """Encoder-decoder transformer (Vaswani et al.), PyTorch's `nn.Transformer`: keys
    encoder.layers.i.*, encoder.norm.*, decoder.layers.i.*, decoder.norm.*; every parameter
    with more than one dimension is xavier-uniform initialised."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation=Fn.relu, custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)

        def stack(layer_cls, stack_cls, n):
            layer = layer_cls(d_model, nhead, dim_feedforward, dropout, activation,
                              layer_norm_eps, batch_first, norm_first, bias, **kw)
            return stack_cls(layer, n, LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.encoder = custom_encoder if custom_encoder is not None else stack(
            TransformerEncoderLayer, TransformerEncoder, num_encoder_layers)
        self.decoder = custom_decoder if custom_decoder is not None else stack(
            TransformerDecoderLayer, TransformerDecoder, num_decoder_layers)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batched = src.ndim == 3
        bdim = 0 if self.batch_first else 1
        if batched and (tgt.ndim != 3 or src.shape[bdim] != tgt.shape[bdim]):
            raise RuntimeError(f"the batch number of src and tgt must be equal (src "
                               f"{tuple(src.shape)}, tgt {tuple(tgt.shape)}, "
                               f"batch_first={self.batch_first})")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"the feature number of src and tgt must be equal to d_model "
                               f"({self.d_model}); got src {tuple(src.shape)}, tgt "
                               f"{tuple(tgt.shape)}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        return _generate_square_subsequent_mask(sz, device=device, dtype=dtype)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
