"""A character-level GPT: a decoder-only transformer that predicts the next character.

The architecture is GPT-2's, shrunk: token + learned position embeddings, `n_layer` pre-LN
blocks (LayerNorm → causal self-attention → residual, LayerNorm → 4× MLP with GELU →
residual), a final LayerNorm and a bias-free linear head. Parameter names match
bench/jax_reference.py, so the benchmark loads the same NumPy initialisation into all of them.

Training (`model(idx)`) is an ordinary forward pass over a whole window. Generation is where a
lazy, compiling framework needs care: the naive loop (run the model on the growing text,
take the last logits) changes the input shape at every token, and every new shape is a new XLA
program to compile. `generate()` instead keeps a fixed-size KV cache — for every layer a key
and a value buffer of shape (B, n_head, context, head_dim) — and feeds ONE token per step at a
position given as a tensor. Every decode step then has identical shapes and identical graph
structure, so it is compiled once and replayed; the position, the token history and the
random numbers are data, never baked into the program. Sampling (temperature, top-k, a
multinomial draw via the Gumbel-max trick) happens on device too: tokens never visit the host
until generation ends.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import flowlite as fl
from flowlite import nn
from flowlite.nn import functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 128
    context: int = 64          # maximum sequence length (the size of pos_emb and the KV cache)
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    mlp_ratio: int = 4
    dropout: float = 0.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.d_model % cfg.n_head:
            raise ValueError(f"d_model={cfg.d_model} is not divisible by n_head={cfg.n_head}")
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)   # queries, keys, values at once
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def _heads(self, x):
        """(B, T, 3C) → q, k, v of shape (B, H, T, C/H)."""
        B, T, C3 = x.shape
        q, k, v = x.split(C3 // 3, dim=-1)
        shape = (B, T, self.n_head, C3 // 3 // self.n_head)
        return [a.reshape(shape).transpose(1, 2) for a in (q, k, v)]

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self._heads(self.qkv(x))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def decode(self, x, cache_k, cache_v, pos, visible):
        """One new token per sequence. x: (B, C) at position `pos` (a 0-d int tensor).

        Its key and value are written into the cache at `pos` (functional setitem: the cache
        tensors are rebound to updated values), and the query attends to every cache position
        that is `visible` (≤ pos): later positions hold stale or zero entries and are masked.
        Returns (y, cache_k, cache_v).
        """
        B, C = x.shape
        q, k, v = self._heads(self.qkv(x).unsqueeze(1))      # each (B, H, 1, Dh)
        cache_k = cache_k.clone()
        cache_v = cache_v.clone()
        cache_k[:, :, pos] = k[:, :, 0]
        cache_v[:, :, pos] = v[:, :, 0]
        y = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=visible)
        return self.proj(y.reshape(B, C)), cache_k, cache_v


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.act = nn.GELU()     # exact (erf) GELU, PyTorch's default
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block: normalise *before* each sublayer, add its output back."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def decode(self, x, cache_k, cache_v, pos, visible):
        y, cache_k, cache_v = self.attn.decode(self.ln1(x), cache_k, cache_v, pos, visible)
        x = x + y
        return x + self.mlp(self.ln2(x)), cache_k, cache_v


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig | None = None, **overrides):
        super().__init__()
        cfg = cfg or GPTConfig()
        if overrides:
            cfg = GPTConfig(**{**cfg.__dict__, **overrides})
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx):
        """Logits (B, T, vocab) for token ids idx (B, T), T ≤ context."""
        B, T = idx.shape
        if T > self.cfg.context:
            raise ValueError(f"GPT: sequence length {T} exceeds the context {self.cfg.context}")
        # A slice of the position table (not an embedding lookup of arange(T)): the same rows,
        # and its gradient is a pad instead of a scatter.
        x = self.tok_emb(idx) + self.pos_emb.weight[:T]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    # ------------------------------------------------------------------ generation

    def new_cache(self, batch: int) -> list:
        """[k_0, v_0, k_1, v_1, ...]: one zero (B, H, context, Dh) buffer per layer and kind
        (separate buffers, so each is updated in place rather than one big stacked copy)."""
        c = self.cfg
        dtype = self.head.weight.dtype
        device = self.head.weight.device
        return [fl.zeros((batch, c.n_head, c.context, c.head_dim), dtype=dtype, device=device)
                for _ in range(2 * c.n_layer)]

    def decode_step(self, tok, pos, cache):
        """Feed tok (B,) at position pos (0-d int tensor) through the cached model.
        Returns (logits (B, vocab), new cache list)."""
        visible = fl.arange(self.cfg.context, device=tok.device) <= pos
        x = self.tok_emb(tok) + self.pos_emb.weight[pos]
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, k, v = block.decode(x, cache[2 * i], cache[2 * i + 1], pos, visible)
            new_cache += [k, v]
        return self.head(self.ln_f(x)), new_cache

    def _generation_step(self, hist, cache, row, noise, temperature, top_k):
        """One step of the generation schedule: feed hist[:, src] at pos, and if the step
        samples, write the sampled token into hist[:, dst]. row = (src, pos, dst, sample)."""
        src, pos, dst, flag = row[0], row[1], row[2], row[3]
        logits, cache = self.decode_step(hist[:, src], pos, cache)
        new = sample_next_token(logits, noise, temperature, top_k)
        hist = hist.clone()
        hist[:, dst] = fl.where(flag == 1, new, hist[:, dst])
        return hist, cache

    @fl.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k=None,
                 mode: str = "scan", keep: int | None = None):
        """Sample max_new_tokens tokens after each prompt row of idx (B, P) and return the
        whole sequences (B, P + max_new_tokens) as an int32 tensor.

        temperature: divides the logits (0 means greedy argmax); top_k: sample only among the
        k most likely tokens (ties with the k-th kept). Prompts longer than the context keep
        their last `context` tokens. When the cache fills up, its last `keep` (default
        context // 2) tokens are re-fed at positions 0..keep-1 and decoding continues (the same
        schedule as bench/specs.generation_schedule).

        mode — how the identical decode steps are executed; all give the same tokens:
          "scan":    the whole generation is ONE executable (a device-side loop, flowlite.scan);
          "compile": one executable per token, replayed by flowlite.compile without re-running
                     the Python body;
          "lazy":    plain lazy tracing of every token (the executable comes from the cache).
        The random numbers are drawn once, up front, from the device RNG (flowlite.rand), so
        every mode consumes the RNG identically and the result depends only on the seed.
        """
        if mode not in ("scan", "compile", "lazy"):
            raise ValueError(f"generate: mode must be 'scan', 'compile' or 'lazy', got {mode!r}")
        if temperature < 0:
            raise ValueError(f"generate: temperature must be >= 0, got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"generate: top_k must be >= 1 (or None), got {top_k}")
        if max_new_tokens < 1:
            return idx.to(fl.int32)
        was_training = self.training
        self.eval()
        try:
            return self._generate(idx, int(max_new_tokens), float(temperature), top_k, mode,
                                  keep)
        finally:
            self.train(was_training)

    def _generate(self, idx, n_new, temperature, top_k, mode, keep):
        T, V = self.cfg.context, self.cfg.vocab_size
        if idx.shape[1] > T:
            idx = idx[:, -T:]
        B, P = idx.shape
        top_k = None if top_k is None or top_k >= V else int(top_k)
        sched = fl.from_numpy(generation_schedule(P, n_new, T, keep), device=idx.device)
        n_steps = sched.shape[0]
        noise = fl.rand(n_steps, B, V, device=idx.device)
        hist = fl.zeros((B, P + n_new), dtype=fl.int32, device=idx.device)
        hist[:, :P] = idx.to(fl.int32)
        cache = self.new_cache(B)
        step_index = fl.zeros((), dtype=fl.int32, device=idx.device)
        fl.sync()   # set-up in its own small program: the decode steps stay identical

        if mode == "scan":
            def body(carry, xs):
                hist, cache = carry
                row, u = xs
                return self._generation_step(hist, cache, row, u, temperature, top_k), None
            (hist, _), _ = fl.scan(body, (hist, cache), (sched, noise))
            fl.sync()
            return hist

        # Per-token modes: the step counter lives on the device too, so that the schedule row
        # and the noise of step s are gathered inside the graph: every step is the same graph.
        state = _DecodeState(hist, cache, step_index)
        step = self._compiled_step() if mode == "compile" else self._token_step
        for _ in range(n_steps):
            step(state, sched, noise, temperature, top_k)
        return state.hist

    def _token_step(self, state, sched, noise, temperature, top_k):
        s = state.s
        hist, cache = self._generation_step(state.hist, state.cache, sched[s], noise[s],
                                            temperature, top_k)
        # Rebind the SAME tensor objects in place (copy_), so flowlite.compile sees them as
        # state carried from step to step and their old buffers can be donated.
        state.hist.copy_(hist)
        for buf, new in zip(state.cache, cache):
            buf.copy_(new)
        state.s.copy_(s + 1)
        fl.sync()   # one executable per token (and a graph that does not grow)

    def _compiled_step(self):
        # Built once per model: flowlite.compile remembers the executable of a step and the
        # tensors it reads and rebinds, and replays it on later calls with the same shapes.
        step = self.__dict__.get("_compiled_token_step")
        if step is None:
            step = fl.compile(self._token_step)
            object.__setattr__(self, "_compiled_token_step", step)
        return step


class _DecodeState:
    """The tensors a per-token decode step rebinds: token history, KV cache, step counter."""

    def __init__(self, hist, cache, s):
        self.hist, self.cache, self.s = hist, cache, s


def sample_next_token(logits, noise, temperature: float = 1.0, top_k=None):
    """Next token ids (B,) int32 from logits (B, V), on device.

    temperature == 0: argmax. Otherwise a draw from softmax(logits / temperature), restricted
    to the top_k largest logits, by the Gumbel-max trick: argmax(logits + g) with
    g = -log(-log(u)) and u ~ U(0, 1) (`noise`, same shape as logits) is an exact sample from
    the softmax — no cumulative sums or host round trips.
    """
    if temperature == 0:
        return logits.argmax(-1).to(fl.int32)
    logits = logits / temperature
    if top_k is not None:
        # A logit is among the top k (ties with the k-th included, as PyTorch's
        # `logits < topk(...)[..., -1:]` idiom) iff fewer than k logits are strictly larger.
        larger = (logits.unsqueeze(-2) > logits.unsqueeze(-1)).sum(-1)
        logits = logits.masked_fill(larger >= top_k, float("-inf"))
    gumbel = -fl.log(-fl.log(noise.clamp(min=1e-20)))
    return (logits + gumbel).argmax(-1).to(fl.int32)


def generation_schedule(prompt_len: int, n_new: int, context: int, keep: int | None = None):
    """The decode steps that generate n_new tokens after a prompt with a KV cache of `context`
    positions, as an int32 array (steps, 4) of rows (src, pos, dst, sample): step s feeds
    token hist[:, src] at cache position pos; if sample is 1 the next token is drawn from its
    logits and written to hist[:, dst]. When the cache is full, the last `keep` tokens
    (default context // 2) are re-fed at positions 0..keep-1 without sampling, so every token
    keeps the position embedding it would have in a window of the training context.
    (Identical to bench/specs.generation_schedule.)"""
    keep = context // 2 if keep is None else keep
    if not (1 <= prompt_len <= context and 0 < keep < context and n_new >= 1):
        raise ValueError("generation_schedule: need 1 <= prompt_len <= context, "
                         f"0 < keep < context, n_new >= 1 (got prompt_len={prompt_len}, "
                         f"context={context}, keep={keep}, n_new={n_new})")
    rows = []
    p = 0
    for i in range(prompt_len):
        last = i == prompt_len - 1
        rows.append((i, p, prompt_len if last else i, int(last)))
        p += 1
    for g in range(1, n_new):
        latest = prompt_len + g - 1      # newest sampled token: feed it, sample the next one
        if p == context:
            for j in range(keep):
                src = latest - keep + j
                rows.append((src, j, src, 0))
            p = keep
        rows.append((latest, p, latest + 1, 1))
        p += 1
    return np.asarray(rows, dtype=np.int32)
