"""A small GPT written the way PyTorch users write one (nanoGPT's idioms: a config dataclass,
causal self-attention through scaled_dot_product_attention, weight tying, and the classic
`generate` loop that re-runs the model on the growing context), parameterised by the `torch`
module it is given: the same source runs on PyTorch and, with `import flowlite as torch`, on
flowlite.  Used by tests/test_generate_torchstyle.py and bench/generate_torchstyle.py.

This is our own code (no file of nanoGPT is copied); the generate loop follows the idiom
every such tutorial uses: crop to block_size, logits[:, -1, :] / temperature, top-k masking
with -inf, softmax, multinomial, cat.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 29
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32


def build(torch):
    """The model classes for one framework (`torch` is PyTorch or flowlite)."""
    nn = torch.nn
    F = torch.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            self.n_head = config.n_head
            self.n_embd = config.n_embd

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                               is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.wte = nn.Embedding(config.vocab_size, config.n_embd)
            self.wpe = nn.Embedding(config.block_size, config.n_embd)
            self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
            self.ln_f = nn.LayerNorm(config.n_embd)
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.wte.weight = self.lm_head.weight      # weight tying
            for p in self.parameters():
                torch.nn.init.normal_(p, mean=0.0, std=0.2 / math.sqrt(config.n_embd) * 4)

        def forward(self, idx):
            b, t = idx.size()
            assert t <= self.config.block_size
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                bs = self.config.block_size
                idx_cond = idx if idx.size(1) <= bs else idx[:, -bs:]
                logits = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float('Inf')
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    return GPT


def copy_weights(src_model, dst_model, to_dst):
    """Load src's parameters into dst (same class, other framework) through numpy."""
    import numpy as np
    state = {k: to_dst(np.array(v.detach().cpu().numpy()))
             for k, v in src_model.state_dict().items()}
    dst_model.load_state_dict(state)
