"""Framework-neutral definitions of the benchmark workloads (NumPy only).

Everything every framework must agree on lives here, so that the JAX reference, the PyTorch
reference and flowlite start from the same arrays: model configurations, parameter initialisers
(PyTorch ``state_dict`` key names, PyTorch weight layouts, PyTorch's default initialisation
distributions), the data batches, the CartPole physics (written once over an array namespace so
NumPy, JAX and PyTorch run the same equations) and the KV-cache generation schedule — and what a
timed workload is (`Options`, `Workload`, `Unsupported`), the vocabulary every framework's
builder (workloads.py's registry, flowlite_workloads.py, flowlite_cartpole.py) speaks.

This module deliberately imports nothing but NumPy: a benchmark child process measuring one
framework's peak RSS must not pay for another framework's import.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

DIGITS_CSV = Path(__file__).resolve().parent.parent / "flowlite" / "data" / "digits.csv.gz"

TRAIN_WORKLOADS = ("mlp", "cnn", "gpt")
ALL_WORKLOADS = ("mlp", "cnn", "gpt", "cartpole", "generate")

# Batch sizes and optimiser settings of the training workloads (issue 5).
MLP_BATCH = 128
CNN_BATCH = 64
GPT_BATCH = 16
ADAM_LR = 1e-3
ADAMW_LR = 3e-4
ADAMW_WEIGHT_DECAY = 0.01
BETAS = (0.9, 0.999)
EPS = 1e-8  # PyTorch's Adam/AdamW default, also optax's


# --------------------------------------------------------------------------------------------
# A timed workload: what every framework's builder returns
# --------------------------------------------------------------------------------------------

class Unsupported(Exception):
    """This framework has no version of this workload here (or is not installed)."""


@dataclass
class Options:
    quick: bool = False           # CI-sized run: fewer steps, shorter generation/rollouts
    seed: int = 0
    n_envs: int = 1024            # cartpole: environments stepped together
    k_steps: int = 200            # cartpole: environment steps fused into one call (compiled)
    policy: str = "random"        # cartpole: "random" or "linear"
    rng_impl: str = "threefry2x32"  # cartpole, JAX-based: jax.random implementation
    batch: int = 1                # generate: sequences decoded together
    prompt_len: int = 8           # generate
    n_new: int = 256              # generate: new tokens per sequence
    temperature: float = 1.0      # generate: 0 means greedy
    top_k: int | None = 20        # generate

    def __post_init__(self):
        if self.quick:
            self.k_steps = min(self.k_steps, 20)
            self.n_new = min(self.n_new, 32)

    def asdict(self) -> dict:
        return asdict(self)


@dataclass
class Workload:
    framework: str
    workload: str
    step: Callable[[], Any]          # one timed call; returns something `wait` blocks on
    wait: Callable[[Any], Any]       # blocks until step's result is computed
    units_per_step: float = 1.0      # work per call (env steps, tokens); 1 for a training step
    unit: str = "step"
    variant: str = ""                # e.g. "N=1024", "B=16": rows compared in the same group
    loss: Callable[[Any], float] | None = None  # training: step result -> float loss
    info: dict = field(default_factory=dict)


def variant_of(workload: str, opts: Options) -> str:
    """The label of the rows one table compares: "N=<envs>" (cartpole), "B=<batch>" (generate)."""
    if workload == "cartpole":
        return f"N={opts.n_envs}"
    if workload == "generate":
        return f"B={opts.batch}"
    return ""


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 128
    context: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    mlp_ratio: int = 4
    ln_eps: float = 1e-5  # nn.LayerNorm default

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


GPT = GPTConfig()


# --------------------------------------------------------------------------------------------
# PyTorch default initialisation, in NumPy
# --------------------------------------------------------------------------------------------

def _uniform(rng: np.random.Generator, bound: float, shape) -> np.ndarray:
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def linear_params(rng, in_features: int, out_features: int, bias: bool = True) -> list:
    """nn.Linear's reset_parameters: kaiming_uniform_(a=sqrt(5)) gives U(±1/sqrt(fan_in)) for
    the weight (layout (out, in)); the bias is U(±1/sqrt(fan_in)) too."""
    bound = 1.0 / math.sqrt(in_features)
    out = [_uniform(rng, bound, (out_features, in_features))]
    if bias:
        out.append(_uniform(rng, bound, (out_features,)))
    return out


def conv2d_params(rng, in_ch: int, out_ch: int, k: int) -> list:
    """nn.Conv2d's reset_parameters: same rule as Linear with fan_in = in_ch*k*k, OIHW layout."""
    bound = 1.0 / math.sqrt(in_ch * k * k)
    return [_uniform(rng, bound, (out_ch, in_ch, k, k)), _uniform(rng, bound, (out_ch,))]


def init_mlp(seed: int = 0) -> dict:
    """Sequential(Linear(64,256), ReLU, Linear(256,256), ReLU, Linear(256,10)) as `net`."""
    rng = np.random.default_rng(seed)
    p = {}
    for idx, (i, o) in zip((0, 2, 4), ((64, 256), (256, 256), (256, 10))):
        p[f"net.{idx}.weight"], p[f"net.{idx}.bias"] = linear_params(rng, i, o)
    return p


def init_cnn(seed: int = 0) -> dict:
    """LeNet-style: conv1 1→16 3×3, pool, conv2 16→32 3×3, pool, fc1 800→128, fc2 128→10."""
    rng = np.random.default_rng(seed)
    p = {}
    p["conv1.weight"], p["conv1.bias"] = conv2d_params(rng, 1, 16, 3)
    p["conv2.weight"], p["conv2.bias"] = conv2d_params(rng, 16, 32, 3)
    p["fc1.weight"], p["fc1.bias"] = linear_params(rng, 800, 128)
    p["fc2.weight"], p["fc2.bias"] = linear_params(rng, 128, 10)
    return p


def init_gpt(seed: int = 0, cfg: GPTConfig = GPT) -> dict:
    """Character-level pre-LN GPT. Embeddings N(0,1) (nn.Embedding), Linear as PyTorch's
    default, LayerNorm ones/zeros, head without bias. Keys in registration order."""
    rng = np.random.default_rng(seed)
    C, V, T = cfg.d_model, cfg.vocab_size, cfg.context
    p = {
        "tok_emb.weight": rng.standard_normal((V, C)).astype(np.float32),
        "pos_emb.weight": rng.standard_normal((T, C)).astype(np.float32),
    }
    for i in range(cfg.n_layer):
        b = f"blocks.{i}."
        p[b + "ln1.weight"], p[b + "ln1.bias"] = np.ones(C, np.float32), np.zeros(C, np.float32)
        p[b + "attn.qkv.weight"], p[b + "attn.qkv.bias"] = linear_params(rng, C, 3 * C)
        p[b + "attn.proj.weight"], p[b + "attn.proj.bias"] = linear_params(rng, C, C)
        p[b + "ln2.weight"], p[b + "ln2.bias"] = np.ones(C, np.float32), np.zeros(C, np.float32)
        p[b + "mlp.fc.weight"], p[b + "mlp.fc.bias"] = linear_params(rng, C, cfg.mlp_ratio * C)
        p[b + "mlp.proj.weight"], p[b + "mlp.proj.bias"] = linear_params(rng, cfg.mlp_ratio * C, C)
    p["ln_f.weight"], p["ln_f.bias"] = np.ones(C, np.float32), np.zeros(C, np.float32)
    (p["head.weight"],) = linear_params(rng, C, V, bias=False)
    return p


def init_params(workload: str, seed: int = 0) -> dict:
    """Initial parameters of a model workload ("generate" uses the GPT's)."""
    if workload == "mlp":
        return init_mlp(seed)
    if workload == "cnn":
        return init_cnn(seed)
    if workload in ("gpt", "generate"):
        return init_gpt(seed)
    raise ValueError(f"workload {workload!r} has no parameters")


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

def load_digits() -> tuple:
    """The 8×8 digits bundled with flowlite (1797 rows: 64 pixels 0..16, then the label).
    Falls back to deterministic random digits-like data when the file is missing."""
    if DIGITS_CSV.exists():
        with gzip.open(DIGITS_CSV, "rt") as f:
            a = np.loadtxt(f, delimiter=",", dtype=np.float32)
        return a[:, :64] / 16.0, a[:, 64].astype(np.int32)
    rng = np.random.default_rng(1234)
    return (rng.integers(0, 17, (1797, 64)) / 16.0).astype(np.float32), rng.integers(
        0, 10, 1797).astype(np.int32)


def _gpt_corpus(n_chars: int = 40_000, seed: int = 7) -> np.ndarray:
    """Deterministic ASCII text (random sentences over a fixed vocabulary): learnable structure,
    no file or download needed."""
    words = ("the a lazy tensor graph is compiled once and cached step after step while "
             "python records every op flowlite jax xla kernel fusion runs on device host "
             "gradient flows backward through layers of attention with heads keys values "
             "queries cart pole balances for five hundred steps").split()
    rng = np.random.default_rng(seed)
    parts, n = [], 0
    while n < n_chars:
        s = " ".join(rng.choice(words, size=int(rng.integers(4, 12)))).capitalize() + ". "
        parts.append(s)
        n += len(s)
    return np.frombuffer("".join(parts)[:n_chars].encode("ascii"), dtype=np.uint8).astype(np.int32)


def make_batches(workload: str, n_batches: int = 4, seed: int = 0) -> list:
    """A pool of host batches, cycled through by every framework's training loop.

    mlp: (x float32 (128,64), y int32 (128,)) from the bundled digits;
    cnn: (x float32 (64,1,28,28) NCHW, y int32 (64,)): the digits upscaled 3× and padded to 28×28;
    gpt: (x int32 (16,64), y int32 (16,64)) next-character pairs of a synthetic corpus.
    """
    rng = np.random.default_rng(seed)
    if workload in ("mlp", "cnn"):
        X, Y = load_digits()
        bs = MLP_BATCH if workload == "mlp" else CNN_BATCH
        order = rng.permutation(len(X))
        out = []
        for i in range(n_batches):
            idx = order[np.arange(i * bs, (i + 1) * bs) % len(X)]
            x, y = X[idx], Y[idx]
            if workload == "cnn":
                img = np.kron(x.reshape(bs, 8, 8), np.ones((3, 3), np.float32))  # 24×24
                x = np.pad(img, ((0, 0), (2, 2), (2, 2)))[:, None].astype(np.float32)
            out.append((np.ascontiguousarray(x, np.float32), y.astype(np.int32)))
        return out
    if workload == "gpt":
        text = _gpt_corpus()
        T = GPT.context
        out = []
        for _ in range(n_batches):
            starts = rng.integers(0, len(text) - T - 1, GPT_BATCH)
            x = np.stack([text[s:s + T] for s in starts]).astype(np.int32)
            y = np.stack([text[s + 1:s + T + 1] for s in starts]).astype(np.int32)
            out.append((x, y))
        return out
    raise ValueError(f"workload {workload!r} has no training batches")


def make_prompt(batch: int, prompt_len: int = 8, seed: int = 0) -> np.ndarray:
    """Prompts for the generate workload: int32 (batch, prompt_len) slices of the corpus."""
    text = _gpt_corpus()
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(text) - prompt_len, batch)
    return np.stack([text[s:s + prompt_len] for s in starts]).astype(np.int32)


# --------------------------------------------------------------------------------------------
# CartPole (gym CartPole-v1 equations, batched)
# --------------------------------------------------------------------------------------------

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_EPISODE_STEPS = 500
RESET_LOW, RESET_HIGH = -0.05, 0.05
LINEAR_POLICY_W = (0.0, 0.5, 1.0, 1.0)  # a fixed, decent balancing policy: push toward the lean


def cartpole_step_scalar(state, action):
    """gym's CartPole-v1 `step` verbatim for one environment (Python floats, float64): the
    reference the batched versions are checked against. Returns (new_state, terminated)."""
    x, x_dot, theta, theta_dot = state
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    costheta, sintheta = math.cos(theta), math.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot**2 * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / TOTAL_MASS))
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    terminated = (x < -X_THRESHOLD or x > X_THRESHOLD
                  or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD)
    return (x, x_dot, theta, theta_dot), terminated


def cartpole_policy(xp, state, action_u, policy: str):
    """Actions (bool, (N,)) for state (N,4). 'random': action_u < 0.5 with action_u ~ U[0,1);
    'linear': w·state > 0 with LINEAR_POLICY_W (action_u unused)."""
    if policy == "random":
        return action_u < 0.5
    if policy == "linear":
        w = LINEAR_POLICY_W
        s = state
        return (w[0] * s[:, 0] + w[1] * s[:, 1] + w[2] * s[:, 2] + w[3] * s[:, 3]) > 0
    raise ValueError(f"unknown policy {policy!r}")


def cartpole_step(xp, state, t, action, reset_state):
    """One batched CartPole-v1 step with automatic reset, over an array namespace `xp` (numpy,
    jax.numpy or torch: only where, cos, sin, stack are used).

    state (N,4) float32 [x, x_dot, theta, theta_dot]; t (N,) int32 steps taken in the current
    episode; action (N,) bool (True pushes right); reset_state (N,4) the states finished
    environments restart from (drawn from U(-0.05, 0.05)).
    Returns (state, t, done, finished_len): done marks episodes that ended at this step
    (terminated, or truncated at 500 steps), finished_len is their length (0 where not done).
    """
    x, x_dot, theta, theta_dot = state[:, 0], state[:, 1], state[:, 2], state[:, 3]
    force = xp.where(action, FORCE_MAG, -FORCE_MAG)
    if xp is np:  # np.where of two Python floats is float64; keep the state's precision
        force = force.astype(theta.dtype, copy=False)
    costheta, sintheta = xp.cos(theta), xp.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot * theta_dot * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta * costheta / TOTAL_MASS))
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    terminated = ((x < -X_THRESHOLD) | (x > X_THRESHOLD)
                  | (theta < -THETA_THRESHOLD) | (theta > THETA_THRESHOLD))
    t = t + 1
    done = terminated | (t >= MAX_EPISODE_STEPS)
    new_state = xp.stack([x, x_dot, theta, theta_dot], axis=1)
    new_state = xp.where(done[:, None], reset_state, new_state)
    finished_len = xp.where(done, t, 0)
    t = xp.where(done, 0, t)
    return new_state, t, done, finished_len


def cartpole_noise(k_steps: int, n_envs: int, seed: int = 0) -> tuple:
    """Pre-generated randomness for a K-step rollout: reset states (K,N,4) ~ U(-0.05,0.05) and
    action uniforms (K,N) ~ U[0,1), both float32. Feeding the same arrays to the NumPy and JAX
    rollouts gives the same trajectory."""
    rng = np.random.default_rng(seed)
    reset = rng.uniform(RESET_LOW, RESET_HIGH, (k_steps, n_envs, 4)).astype(np.float32)
    act = rng.random((k_steps, n_envs), dtype=np.float32)
    return reset, act


def cartpole_initial(n_envs: int, seed: int = 0) -> tuple:
    """Initial (state (N,4) float32, t (N,) int32)."""
    rng = np.random.default_rng(seed + 10_000)
    return (rng.uniform(RESET_LOW, RESET_HIGH, (n_envs, 4)).astype(np.float32),
            np.zeros(n_envs, np.int32))


def cartpole_rollout_numpy(state, t, reset_noise, action_noise, policy: str = "random"):
    """K NumPy steps driven by pre-generated noise. Returns (state, t, states (K,N,4),
    dones (K,N)) — the per-step trajectory is for equality checks."""
    states, dones = [], []
    for k in range(reset_noise.shape[0]):
        a = cartpole_policy(np, state, action_noise[k], policy)
        state, t, done, _ = cartpole_step(np, state, t, a, reset_noise[k])
        states.append(state)
        dones.append(done)
    return state, t, np.stack(states), np.stack(dones)


class NumpyCartPole:
    """The batched environment stepped one step per call in NumPy (the NumPy benchmark column)."""

    def __init__(self, n_envs: int, policy: str = "random", seed: int = 0):
        self.n = n_envs
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        self.state, self.t = cartpole_initial(n_envs, seed)
        self.episodes = 0
        self.length_sum = 0

    def step(self):
        u = self.rng.random(self.n, dtype=np.float32)
        reset = self.rng.uniform(RESET_LOW, RESET_HIGH, (self.n, 4)).astype(np.float32)
        a = cartpole_policy(np, self.state, u, self.policy)
        self.state, self.t, done, flen = cartpole_step(np, self.state, self.t, a, reset)
        self.episodes += int(done.sum())
        self.length_sum += int(flen.sum())
        return self.state


# --------------------------------------------------------------------------------------------
# Generation schedule (fixed-shape KV-cache decoding past the context length)
# --------------------------------------------------------------------------------------------

def generation_schedule(prompt_len: int, n_new: int, context: int = GPT.context,
                        keep: int | None = None) -> dict:
    """The exact sequence of single-token decode steps every framework runs to generate `n_new`
    tokens after a prompt, with a KV cache of `context` positions and identical shapes at every
    step.

    The token history is a buffer `hist` of length prompt_len + n_new (prompt first). Decode step
    s feeds token hist[:, src[s]] at cache position pos[s] (its key/value are written there and
    it attends to positions 0..pos[s]); if sample[s] is 1, the next token is sampled from its
    logits and written to hist[:, dst[s]] (dst[s] is a harmless in-range index otherwise).
    When the cache is full, it is refilled by re-feeding the last `keep` tokens (default
    context // 2) at positions 0..keep-1 without sampling (nanoGPT crops its context the same
    way; re-feeding keeps each token's learned positional embedding consistent), then decoding
    continues. Stale cache entries beyond pos are masked, never read. Arrays are int32.
    """
    if keep is None:
        keep = context // 2
    if not (1 <= prompt_len <= context and 0 < keep < context and n_new >= 1):
        raise ValueError("need 1 <= prompt_len <= context, 0 < keep < context, n_new >= 1")
    src, pos, dst, sample = [], [], [], []

    def feed(s, p, d=None):
        src.append(s)
        pos.append(p)
        dst.append(s if d is None else d)
        sample.append(0 if d is None else 1)

    p = 0
    for i in range(prompt_len):
        feed(i, p, prompt_len if i == prompt_len - 1 else None)
        p += 1
    for g in range(1, n_new):
        latest = prompt_len + g - 1  # newest sampled token: feed it, sample the one after
        if p == context:
            for j in range(keep):
                feed(latest - keep + j, j)
            p = keep
        feed(latest, p, latest + 1)
        p += 1
    return {k: np.asarray(v, np.int32) for k, v in
            (("src", src), ("pos", pos), ("dst", dst), ("sample", sample))}
