"""PyTorch eager versions of the benchmark workloads (optional: skipped when torch is missing).

The modules use the same state_dict keys and layouts as specs' initialisers, so they load the
very arrays JAX and flowlite start from; a mismatch of key or shape fails `load_state_dict`.

    python bench/torch_reference.py --selfcheck   # agreement with the JAX reference
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import specs

GPT = specs.GPT


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                 nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3)
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.fc1 = nn.Linear(800, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        B, T, C = x.shape
        H = self.cfg.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (a.view(B, T, H, C // H).transpose(1, 2) for a in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def decode(self, x, cache_k, cache_v, pos):
        """One token per sequence (x (B,C)); writes keys/values at pos of the layer's caches
        (B,H,T,Dh) and attends to positions 0..pos (eager code slices instead of masking)."""
        B, C = x.shape
        H = self.cfg.n_head
        q, k, v = (a.view(B, H, 1, C // H) for a in self.qkv(x).split(C, dim=1))
        cache_k[:, :, pos:pos + 1] = k
        cache_v[:, :, pos:pos + 1] = v
        y = F.scaled_dot_product_attention(q, cache_k[:, :, :pos + 1], cache_v[:, :, :pos + 1])
        return self.proj(y.reshape(B, C))


class MLPBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLPBlock(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def decode(self, x, cache_k, cache_v, pos):
        x = x + self.attn.decode(self.ln1(x), cache_k, cache_v, pos)
        return x + self.mlp(self.ln2(x))


class GPTModel(nn.Module):
    def __init__(self, cfg=GPT):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx):
        x = self.tok_emb(idx) + self.pos_emb.weight[: idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))

    def decode(self, tok, pos, cache_k, cache_v):
        x = self.tok_emb(tok) + self.pos_emb.weight[pos]
        for i, b in enumerate(self.blocks):
            x = b.decode(x, cache_k[i], cache_v[i], pos)
        return self.head(self.ln_f(x))


MODELS = {"mlp": MLP, "cnn": CNN, "gpt": GPTModel, "generate": GPTModel}


def load_model(workload: str, seed: int = 0) -> nn.Module:
    model = MODELS[workload]()
    sd = {k: torch.from_numpy(v.copy()) for k, v in specs.init_params(workload, seed).items()}
    model.load_state_dict(sd, strict=True)
    return model


def make_optimizer(workload: str, params):
    if workload == "gpt":
        return torch.optim.AdamW(params, lr=specs.ADAMW_LR, betas=specs.BETAS, eps=specs.EPS,
                                 weight_decay=specs.ADAMW_WEIGHT_DECAY)
    return torch.optim.Adam(params, lr=specs.ADAM_LR, betas=specs.BETAS, eps=specs.EPS)


class Trainer:
    """`step()` runs one eager training step (zero_grad, forward, backward, optimiser step) on
    the next batch of the pool and returns the detached loss."""

    def __init__(self, workload: str, seed: int = 0, n_batches: int = 4):
        self.workload = workload
        self.model = load_model(workload, seed)
        self.opt = make_optimizer(workload, self.model.parameters())
        self.batches = [(torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)))
                        for x, y in specs.make_batches(workload, n_batches, seed)]
        self.i = 0

    def step(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        self.opt.step()
        return loss.detach()


class TorchCartPole:
    """The batched environment stepped one step per call in eager PyTorch, running the same
    specs.cartpole_step code as NumPy and JAX."""

    def __init__(self, n_envs: int, policy: str = "random", seed: int = 0, device="cpu"):
        self.n, self.policy, self.device = n_envs, policy, device
        self.gen = torch.Generator(device=device).manual_seed(seed)
        s, t = specs.cartpole_initial(n_envs, seed)
        self.state, self.t = torch.from_numpy(s).to(device), torch.from_numpy(t).to(device)
        self.episodes = torch.zeros((), dtype=torch.int64, device=device)
        self.length_sum = torch.zeros((), dtype=torch.int64, device=device)

    @torch.inference_mode()
    def step(self):
        u = torch.rand(self.n, generator=self.gen, device=self.device)
        reset = torch.empty(self.n, 4, device=self.device).uniform_(
            specs.RESET_LOW, specs.RESET_HIGH, generator=self.gen)
        a = specs.cartpole_policy(torch, self.state, u, self.policy)
        self.state, self.t, done, flen = specs.cartpole_step(torch, self.state, self.t, a, reset)
        self.episodes += done.sum()
        self.length_sum += flen.sum()
        return self.state


def cartpole_rollout_torch(state, t, reset_noise, action_noise, policy="random"):
    """The torch twin of specs.cartpole_rollout_numpy (for equality checks)."""
    state, t = torch.from_numpy(state), torch.from_numpy(t)
    states, dones = [], []
    for k in range(reset_noise.shape[0]):
        a = specs.cartpole_policy(torch, state, torch.from_numpy(action_noise[k]), policy)
        state, t, done, _ = specs.cartpole_step(torch, state, t, a, torch.from_numpy(reset_noise[k]))
        states.append(state)
        dones.append(done)
    return state.numpy(), t.numpy(), torch.stack(states).numpy(), torch.stack(dones).numpy()


def sample_logits(logits, gen, temperature: float, top_k):
    if temperature == 0:
        return logits.argmax(-1).to(torch.int32)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=gen)[:, 0].to(torch.int32)


class Generator:
    """`step()` generates n_new tokens per prompt in eager PyTorch with a KV cache, following
    specs.generation_schedule exactly (the same decode steps as the JAX scan)."""

    def __init__(self, batch: int, prompt_len: int = 8, n_new: int = 256, temperature=1.0,
                 top_k=20, seed: int = 0):
        self.model = load_model("generate", seed).eval()
        self.prompt = torch.from_numpy(specs.make_prompt(batch, prompt_len, seed))
        sched = specs.generation_schedule(prompt_len, n_new, GPT.context)
        self.schedule = list(zip(*(sched[k].tolist() for k in ("src", "pos", "dst", "sample"))))
        self.batch, self.prompt_len, self.n_new = batch, prompt_len, n_new
        self.temperature, self.top_k = temperature, top_k
        self.gen = torch.Generator().manual_seed(seed)

    @torch.inference_mode()
    def step(self):
        cfg, B = GPT, self.batch
        hist = torch.zeros(B, self.prompt_len + self.n_new, dtype=torch.int64)
        hist[:, : self.prompt_len] = self.prompt
        shape = (cfg.n_layer, B, cfg.n_head, cfg.context, cfg.head_dim)
        ck, cv = torch.zeros(shape), torch.zeros(shape)
        for src, pos, dst, flag in self.schedule:
            logits = self.model.decode(hist[:, src], pos, ck, cv)
            if flag:
                hist[:, dst] = sample_logits(logits, self.gen, self.temperature, self.top_k)
        return hist


# --------------------------------------------------------------------------------------------


def selfcheck(verbose: bool = True) -> bool:
    """PyTorch against the JAX reference: same initial loss, close losses over 5 optimiser
    steps, same CartPole trajectory, same greedy generation."""
    import jax_reference as jr
    import jax
    import jax.numpy as jnp

    ok = True

    def report(name, good, detail):
        nonlocal ok
        ok &= bool(good)
        if verbose:
            print(f"{'ok  ' if good else 'FAIL'} {name}: {detail}")

    for w in specs.TRAIN_WORKLOADS:
        jt, tt = jr.Trainer(w, n_batches=2), Trainer(w, n_batches=2)
        jl = [float(jt.step()) for _ in range(5)]
        tl = [float(tt.step()) for _ in range(5)]
        err = max(abs(a - b) for a, b in zip(jl, tl))
        report(f"{w} torch == jax losses", err < 1e-4 * max(1.0, abs(jl[0])),
               f"max |Δloss| over 5 steps {err:.2e} (jax {jl[0]:.5f}→{jl[-1]:.5f})")

    s0, t0 = specs.cartpole_initial(64, seed=1)
    reset, act = specs.cartpole_noise(20, 64, seed=2)
    _, nt, nS, nD = specs.cartpole_rollout_numpy(s0, t0, reset, act)
    _, tt_, tS, tD = cartpole_rollout_torch(s0, t0, reset, act)
    err = float(np.abs(nS - tS).max())
    report("cartpole torch == numpy", err < 1e-5 and np.array_equal(nD, tD),
           f"max |Δstate| {err:.2e}")

    B, P, N = 2, 8, 70
    g = Generator(B, P, N, temperature=0.0, seed=0)
    t_out = g.step().numpy()
    params = {k: jnp.asarray(v) for k, v in specs.init_params("generate", 0).items()}
    j_out = np.asarray(jr.make_generate(B, P, N, temperature=0.0)(
        params, jnp.asarray(g.prompt.numpy()), jax.random.key(0)))
    agree = int((t_out == j_out).sum())
    report("greedy generation torch == jax", agree == t_out.size,
           f"{agree}/{t_out.size} tokens agree")
    return ok


if __name__ == "__main__":
    if "--selfcheck" in sys.argv:
        sys.exit(0 if selfcheck() else 1)
    print(__doc__)
