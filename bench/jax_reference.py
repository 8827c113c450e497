"""Hand-written JAX + optax versions of the benchmark workloads: the baseline flowlite is held to.

Parameters are plain dicts keyed by PyTorch ``state_dict`` names with PyTorch layouts (Linear
weight (out, in), Conv2d weight OIHW, activations NCHW), initialised by `specs` from NumPy, so
the very same arrays can be loaded into a flowlite or PyTorch module with `load_state_dict`.
Each training step is ONE `jax.jit` with the parameters and optimiser state donated.

    python bench/jax_reference.py --selfcheck     # losses fall, CartPole NumPy == JAX, KV cache ok
    python bench/jax_reference.py --time          # steady median step time of each workload
"""

from __future__ import annotations

import math
import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

import specs

GPT, GPTConfig = specs.GPT, specs.GPTConfig

init_params = specs.init_params
make_batches = specs.make_batches

# --------------------------------------------------------------------------------------------
# Layers (PyTorch layouts)
# --------------------------------------------------------------------------------------------


def linear(p, name, x):
    y = x @ p[name + ".weight"].T
    b = p.get(name + ".bias")
    return y if b is None else y + b


def conv2d(p, name, x):
    y = lax.conv_general_dilated(x, p[name + ".weight"], window_strides=(1, 1), padding="VALID",
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + p[name + ".bias"][None, :, None, None]


def max_pool2d(x, k=2):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, k, k), (1, 1, k, k), "VALID")


def layer_norm(p, name, x, eps=GPT.ln_eps):
    mu = x.mean(-1, keepdims=True)
    var = jnp.square(x - mu).mean(-1, keepdims=True)  # biased, as nn.LayerNorm
    return (x - mu) * lax.rsqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def gelu(x):
    return jax.nn.gelu(x, approximate=False)  # nn.GELU() default: exact erf form


def cross_entropy(logits, labels):
    """Mean over rows of -log softmax(logits)[label] (F.cross_entropy, reduction='mean')."""
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return (logz - picked).mean()


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def mlp_forward(p, x):
    h = jax.nn.relu(linear(p, "net.0", x))
    h = jax.nn.relu(linear(p, "net.2", h))
    return linear(p, "net.4", h)


def cnn_forward(p, x):
    h = max_pool2d(jax.nn.relu(conv2d(p, "conv1", x)))   # (B,16,13,13)
    h = max_pool2d(jax.nn.relu(conv2d(p, "conv2", h)))   # (B,32,5,5)
    h = h.reshape(h.shape[0], -1)                        # NCHW flatten, as torch.flatten(h, 1)
    h = jax.nn.relu(linear(p, "fc1", h))
    return linear(p, "fc2", h)


def _attention(p, name, x, cfg: GPTConfig):
    B, T, C = x.shape
    H, Dh = cfg.n_head, cfg.head_dim
    q, k, v = jnp.split(linear(p, name + ".qkv", x), 3, axis=-1)
    q, k, v = (a.reshape(B, T, H, Dh).transpose(0, 2, 1, 3) for a in (q, k, v))
    att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(Dh))
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))
    att = jax.nn.softmax(jnp.where(causal, att, -jnp.inf), axis=-1)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return linear(p, name + ".proj", y)


def gpt_forward(p, idx, cfg: GPTConfig = GPT):
    """Logits (B,T,V) for token ids idx (B,T)."""
    T = idx.shape[1]
    x = p["tok_emb.weight"][idx] + p["pos_emb.weight"][:T]
    for i in range(cfg.n_layer):
        b = f"blocks.{i}."
        x = x + _attention(p, b + "attn", layer_norm(p, b + "ln1", x), cfg)
        h = gelu(linear(p, b + "mlp.fc", layer_norm(p, b + "ln2", x)))
        x = x + linear(p, b + "mlp.proj", h)
    return linear(p, "head", layer_norm(p, "ln_f", x))


def mlp_loss(p, x, y):
    return cross_entropy(mlp_forward(p, x), y)


def cnn_loss(p, x, y):
    return cross_entropy(cnn_forward(p, x), y)


def gpt_loss(p, x, y):
    logits = gpt_forward(p, x)
    return cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


LOSSES = {"mlp": mlp_loss, "cnn": cnn_loss, "gpt": gpt_loss}


def make_optimizer(workload: str) -> optax.GradientTransformation:
    """Adam(1e-3) for mlp/cnn; AdamW(3e-4, wd 0.01) decaying every parameter (as PyTorch's AdamW
    decays every parameter given to it) for gpt. PyTorch defaults betas (0.9,0.999), eps 1e-8."""
    b1, b2 = specs.BETAS
    if workload in ("mlp", "cnn"):
        return optax.adam(specs.ADAM_LR, b1=b1, b2=b2, eps=specs.EPS)
    if workload == "gpt":
        return optax.adamw(specs.ADAMW_LR, b1=b1, b2=b2, eps=specs.EPS,
                           weight_decay=specs.ADAMW_WEIGHT_DECAY)
    raise ValueError(f"{workload!r} is not a training workload")


def make_train_step(workload: str):
    """(step, tx): step(params, opt_state, x, y) -> (new_params, new_opt_state, loss), ONE jit
    with params and opt_state donated."""
    loss_fn, tx = LOSSES[workload], make_optimizer(workload)

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1)), tx


class Trainer:
    """Stateful wrapper the harness times: `step()` runs one training step on the next batch of
    a pre-transferred pool and returns the (not yet waited on) loss."""

    def __init__(self, workload: str, seed: int = 0, n_batches: int = 4):
        self.workload = workload
        self.params = {k: jnp.asarray(v) for k, v in init_params(workload, seed).items()}
        self._step, tx = make_train_step(workload)
        self.opt_state = tx.init(self.params)
        self.batches = [tuple(jax.device_put(a) for a in b)
                        for b in make_batches(workload, n_batches, seed)]
        self.i = 0

    def step(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.params, self.opt_state, loss = self._step(self.params, self.opt_state, x, y)
        return loss


def wait(x):
    return jax.block_until_ready(x)


# --------------------------------------------------------------------------------------------
# CartPole
# --------------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("policy",))
def cartpole_rollout_from_noise(state, t, reset_noise, action_noise, policy="random"):
    """K steps in one scan driven by pre-generated noise ((K,N,4), (K,N)); the JAX twin of
    specs.cartpole_rollout_numpy. Returns (state, t, states (K,N,4), dones (K,N))."""
    def body(carry, noise):
        s, tt = carry
        reset, u = noise
        a = specs.cartpole_policy(jnp, s, u, policy)
        s, tt, done, _ = specs.cartpole_step(jnp, s, tt, a, reset)
        return (s, tt), (s, done)

    (state, t), (states, dones) = lax.scan(body, (state, t), (reset_noise, action_noise))
    return state, t, states, dones


def make_cartpole_rollout(n_envs: int, k_steps: int, policy: str = "random"):
    """A jitted fn(carry) -> carry running K steps for N environments fused in one lax.scan.
    carry = (state (N,4) f32, t (N,) i32, key, episodes i32, length_sum i32), donated.

    The randomness of all K steps (an action uniform and a reset state per environment per
    step) is drawn on device in one call before the scan: the same draws made inside the scan
    body cost 1.6× more on XLA:CPU."""
    low, high = specs.RESET_LOW, specs.RESET_HIGH

    def body(carry, noise):
        s, t, episodes, length_sum = carry
        u, reset = noise[:, 0], low + (high - low) * noise[:, 1:]
        a = specs.cartpole_policy(jnp, s, u, policy)
        s, t, done, flen = specs.cartpole_step(jnp, s, t, a, reset)
        return (s, t, episodes + done.sum(dtype=jnp.int32),
                length_sum + flen.sum(dtype=jnp.int32)), None

    def rollout(carry):
        s, t, key, episodes, length_sum = carry
        key, sub = jax.random.split(key)
        noise = jax.random.uniform(sub, (k_steps, n_envs, 5), jnp.float32)
        s, t, episodes, length_sum = lax.scan(body, (s, t, episodes, length_sum), noise)[0]
        return s, t, key, episodes, length_sum

    return jax.jit(rollout, donate_argnums=(0,))


def cartpole_initial_carry(n_envs: int, seed: int = 0, rng_impl: str = "threefry2x32"):
    """rng_impl: a jax.random implementation. Drawing 5 uniforms per environment per step
    dominates the fused step at large N on XLA:CPU (threefry ≈ 3× the physics at N=1024;
    "rbg" is cheaper)."""
    s, t = specs.cartpole_initial(n_envs, seed)
    return (jnp.asarray(s), jnp.asarray(t), jax.random.key(seed, dtype=rng_impl), jnp.int32(0),
            jnp.int32(0))


class CartPoleRunner:
    """`step()` runs K fused environment steps (one executable) and returns the new state."""

    def __init__(self, n_envs: int, k_steps: int = 200, policy: str = "random", seed: int = 0,
                 rng_impl: str = "threefry2x32"):
        self.rollout = make_cartpole_rollout(n_envs, k_steps, policy)
        self.carry = cartpole_initial_carry(n_envs, seed, rng_impl)

    def step(self):
        self.carry = self.rollout(self.carry)
        return self.carry[0]


# --------------------------------------------------------------------------------------------
# KV-cache generation
# --------------------------------------------------------------------------------------------


def init_kv_cache(batch: int, cfg: GPTConfig = GPT) -> tuple:
    """(k_0, v_0, k_1, v_1, …): one (B,H,T,Dh) float32 array per layer and kind. Separate
    arrays, not one stacked (L,…) array: XLA:CPU then updates each in place in the loop."""
    shape = (batch, cfg.n_head, cfg.context, cfg.head_dim)
    return tuple(jnp.zeros(shape, jnp.float32) for _ in range(2 * cfg.n_layer))


def transpose_linear_weights(p) -> dict:
    """The same parameters with every Linear weight as (in, out). Decoding multiplies a few rows
    by each weight; with PyTorch's (out, in) layout XLA:CPU copies a transposed weight on every
    decode step (3.5× slower at batch 1), so the generation transposes once, before its loop."""
    return {k: (v.T if v.ndim == 2 and not k.endswith("emb.weight") else v) for k, v in p.items()}


def _linear_t(pt, name, x):
    y = x @ pt[name + ".weight"]
    b = pt.get(name + ".bias")
    return y if b is None else y + b


def gpt_decode_step(pt, caches, tok, pos, cfg: GPTConfig = GPT):
    """Feed one token per sequence (tok (B,) at scalar position pos): write its keys/values at
    cache position pos, attend to positions 0..pos. pt: transpose_linear_weights(params);
    caches: init_kv_cache's tuple. Returns (logits (B,V), caches)."""
    B = tok.shape[0]
    H, Dh, C, T = cfg.n_head, cfg.head_dim, cfg.d_model, cfg.context
    x = pt["tok_emb.weight"][tok] + pt["pos_emb.weight"][pos]
    visible = jnp.arange(T) <= pos
    new_caches = []
    for i in range(cfg.n_layer):
        b = f"blocks.{i}."
        qkv = _linear_t(pt, b + "attn.qkv", layer_norm(pt, b + "ln1", x))
        q, k, v = (a.reshape(B, H, 1, Dh) for a in jnp.split(qkv, 3, axis=-1))
        ck = lax.dynamic_update_slice(caches[2 * i], k, (0, 0, pos, 0))
        cv = lax.dynamic_update_slice(caches[2 * i + 1], v, (0, 0, pos, 0))
        new_caches += [ck, cv]
        att = jnp.einsum("bhqd,bhtd->bhqt", q, ck) * (1.0 / math.sqrt(Dh))
        att = jax.nn.softmax(jnp.where(visible, att, -jnp.inf), axis=-1)
        y = jnp.einsum("bhqt,bhtd->bhqd", att, cv).reshape(B, C)
        x = x + _linear_t(pt, b + "attn.proj", y)
        h = gelu(_linear_t(pt, b + "mlp.fc", layer_norm(pt, b + "ln2", x)))
        x = x + _linear_t(pt, b + "mlp.proj", h)
    return _linear_t(pt, "head", layer_norm(pt, "ln_f", x)), tuple(new_caches)


def sample_logits(logits, u, temperature: float, top_k: int | None):
    """Next tokens (B,) int32: argmax when temperature == 0; else a draw from
    softmax(logits / temperature) restricted to the top_k largest logits (all when None; ties
    with the k-th are kept, as PyTorch's `logits < kth -> -inf` idiom does), made by inverting
    the CDF with u (B,1) ~ U[0,1), one uniform per row as torch.multinomial uses."""
    if temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / temperature
    if top_k is not None:
        kth = lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    cdf = jnp.cumsum(jax.nn.softmax(logits, axis=-1), axis=-1)
    idx = jnp.sum(cdf <= u * cdf[:, -1:], axis=-1)
    return jnp.minimum(idx, logits.shape[-1] - 1).astype(jnp.int32)


def make_generate(batch: int, prompt_len: int = 8, n_new: int = 256, temperature: float = 1.0,
                  top_k: int | None = 20, cfg: GPTConfig = GPT, keep: int | None = None):
    """A jitted fn(params, prompt (B,P) int32, key) -> tokens (B, P+n_new) int32 running the
    whole of specs.generation_schedule as one lax.scan of single-token decode steps (one
    executable per generation).

    The uniforms of every decode step, (S,B,1), are drawn from `key` in one call before the
    loop: a jax.random draw inside the scan body costs ~35 µs per step on XLA:CPU (half the
    whole decode step at batch 1), drawn up front it is free."""
    sched = specs.generation_schedule(prompt_len, n_new, cfg.context, keep)
    xs = tuple(jnp.asarray(sched[k]) for k in ("src", "pos", "dst", "sample"))
    n_steps = len(sched["src"])

    def generate(params, prompt, key):
        pt = transpose_linear_weights(params)
        hist = jnp.zeros((batch, prompt_len + n_new), jnp.int32).at[:, :prompt_len].set(prompt)
        us = jax.random.uniform(key, (n_steps, batch, 1), jnp.float32)

        def body(carry, s):
            hist, caches = carry
            src, pos, dst, flag, u = s
            tok = lax.dynamic_index_in_dim(hist, src, axis=1, keepdims=False)
            logits, caches = gpt_decode_step(pt, caches, tok, pos, cfg)
            new = sample_logits(logits, u, temperature, top_k)
            old = lax.dynamic_index_in_dim(hist, dst, axis=1, keepdims=False)
            hist = lax.dynamic_update_slice(hist, jnp.where(flag == 1, new, old)[:, None], (0, dst))
            return (hist, caches), None

        return lax.scan(body, (hist, init_kv_cache(batch, cfg)), xs + (us,))[0][0]

    return jax.jit(generate)


class Generator:
    """`step()` generates n_new tokens for every prompt of the batch (one executable)."""

    def __init__(self, batch: int, prompt_len: int = 8, n_new: int = 256, temperature=1.0,
                 top_k=20, seed: int = 0):
        self.params = {k: jnp.asarray(v) for k, v in init_params("generate", seed).items()}
        self.prompt = jnp.asarray(specs.make_prompt(batch, prompt_len, seed))
        self.fn = make_generate(batch, prompt_len, n_new, temperature, top_k)
        self.key = jax.random.key(seed)

    def step(self):
        self.key, sub = jax.random.split(self.key)
        return self.fn(self.params, self.prompt, sub)


# --------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------


def _check_generation_against_full_forward(n_new=70, batch=2, prompt_len=8, top_k=None):
    """Greedy KV-cache generation (top_k None) must pick, at every sampled step, the argmax of a
    full (uncached) forward over the tokens the schedule has fed since the last refill; sampled
    generation (temperature 1, top_k k) must pick one of that forward's k largest logits.
    Returns (mismatches, checked)."""
    params = {k: jnp.asarray(v) for k, v in init_params("generate").items()}
    prompt = jnp.asarray(specs.make_prompt(batch, prompt_len, seed=3))
    temperature = 0.0 if top_k is None else 1.0
    out = np.asarray(make_generate(batch, prompt_len, n_new, temperature, top_k)(
        params, prompt, jax.random.key(0)))
    sched = specs.generation_schedule(prompt_len, n_new)
    fwd = jax.jit(gpt_forward)
    window, mismatches, checked = [], 0, 0
    for src, pos, dst, flag in zip(sched["src"], sched["pos"], sched["dst"], sched["sample"]):
        window = window[:pos] + [src]
        if flag:  # causal, so padding the window to the context length changes nothing
            padded = out[:, window + [0] * (GPT.context - len(window))]
            logits = np.asarray(fwd(params, jnp.asarray(padded)))[:, len(window) - 1]
            picked = out[:, dst]
            if top_k is None:
                mismatches += int((logits.argmax(-1) != picked).sum())
            else:
                kth = np.sort(logits, axis=-1)[:, -top_k]
                mismatches += int((logits[np.arange(batch), picked] < kth - 1e-4).sum())
            checked += batch
    return mismatches, checked


def selfcheck(verbose: bool = True) -> bool:
    ok = True

    def report(name, good, detail):
        nonlocal ok
        ok &= bool(good)
        if verbose:
            print(f"{'ok  ' if good else 'FAIL'} {name}: {detail}")

    for w in specs.TRAIN_WORKLOADS:
        tr = Trainer(w, n_batches=1)  # one batch, so the loss must fall
        losses = [float(tr.step()) for _ in range(5)]
        report(f"{w} loss decreases", losses[-1] < losses[0] and all(np.isfinite(losses)),
               " ".join(f"{l:.4f}" for l in losses))

    for policy in ("random", "linear"):
        s0, t0 = specs.cartpole_initial(64, seed=1)
        t0 = t0 + np.arange(64, dtype=np.int32) * 8  # some environments near the 500-step cap
        reset, act = specs.cartpole_noise(20, 64, seed=2)
        ns, nt, nS, nD = specs.cartpole_rollout_numpy(s0, t0, reset, act, policy)
        js, jt, jS, jD = map(np.asarray, cartpole_rollout_from_noise(s0, t0, reset, act, policy))
        err = float(np.abs(nS - jS).max())
        good = err < 1e-5 and np.array_equal(nD, jD) and np.array_equal(nt, jt)
        report(f"cartpole numpy == jax ({policy})", good,
               f"20 steps × 64 envs, max |Δstate| {err:.2e}, {int(nD.sum())} resets agree")

    # The batched equations against gym's scalar step, in float64.
    rng = np.random.default_rng(5)
    s = rng.uniform(-0.2, 0.2, (16, 4))
    a = rng.random(16) < 0.5
    bs, _, _, _ = specs.cartpole_step(np, s, np.zeros(16, np.int32), a, np.zeros((16, 4)))
    ref = np.array([specs.cartpole_step_scalar(tuple(r), int(ai))[0] for r, ai in zip(s, a)])
    err = float(np.abs(bs - ref).max())
    report("cartpole batched == gym scalar step", err < 1e-12, f"max |Δ| {err:.1e}")

    runner = CartPoleRunner(1024, 200, "random", seed=0)
    for _ in range(2):
        runner.step()
    episodes, length_sum = int(runner.carry[3]), int(runner.carry[4])
    mean_len = length_sum / max(episodes, 1)
    report("fused cartpole, random policy", 18 < mean_len < 27,
           f"{episodes} episodes, mean length {mean_len:.1f} (random play averages ≈ 22)")

    mism, checked = _check_generation_against_full_forward()
    report("KV-cache greedy generation == full forward", mism == 0,
           f"{checked - mism}/{checked} tokens agree (crosses one cache refill)")
    mism, checked = _check_generation_against_full_forward(top_k=5)
    report("KV-cache top-5 sampling within full forward's top 5", mism == 0,
           f"{checked - mism}/{checked} tokens")
    return ok


def _time_all(n_steps=100):
    import harness
    for w in specs.TRAIN_WORKLOADS:
        tr = Trainer(w)
        r = harness.time_alternating({w: tr.step}, n_steps=n_steps, warmup=5, wait=wait)
        print(f"{w}: {r[w]:.3f} ms/step")


if __name__ == "__main__":
    if "--selfcheck" in sys.argv:
        sys.exit(0 if selfcheck() else 1)
    elif "--time" in sys.argv:
        _time_all()
    else:
        print(__doc__)
