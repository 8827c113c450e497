"""flowlite's side of the `cartpole` workload: K environment steps fused into one call.

The environment code is models/cartpole.py's — the one the A2C agent trains on — and the policy
is bench/specs.py's (`random`: push right when u < 0.5; `linear`: when w·state > 0), so the
three columns step the same equations with the same policy:

    NumPy / PyTorch eager : one call = one step of N environments (one dispatch per op)
    JAX reference         : one call = K steps in a hand-written lax.scan under jax.jit
    flowlite              : one call = K steps written as a flowlite `fl.scan` over
                            `models.cartpole.transition`, the whole call under `fl.compile`,
                            so after two traced calls it is a replay of ONE cached executable

Like the JAX reference, the randomness of all K steps is drawn on device (`fl.rand`) in one
go before the loop — an RNG call inside a scan body would see the same key on every iteration —
but only as much of it as K steps can use (see `FlowliteCartPoleRunner`'s "economical"
scheme): the restart states and coin flips are distributed exactly as the references' (every
restart gets its own fresh U(-0.05, 0.05)^4 state), at a fraction of the threefry cost.
`randomness="per_step"` draws what the references draw (5 uniforms per environment per step).

Why a scan and not a Python loop under `fl.compile`: a loop of K plain steps is unrolled into
the program, and XLA:CPU's fusion of K chained copies of the step grows superlinearly (measured
at N = 1024: K = 10 → 50 s compile and 0.5 ms per step; pure jax.jit shows the same growth, K =
25 → 38 s and 2.9 ms per step; flowlite's cuts of long elementwise chains, README, brought an
unrolled K = 30 to 20.5 s and 0.47 ms per step), while the scan is one loop node: ~1 s to
compile whatever K.
"""
from __future__ import annotations

import os
import sys

import specs
from specs import Workload

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import():
    """flowlite and models/ from this checkout, imported when a runner is made."""
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    import flowlite as fl
    from models import cartpole
    return fl, cartpole


def policy_push_right(state, u, policy: str):
    """specs.cartpole_policy on a models.cartpole.CartPoleState: (N,) bool."""
    if policy == "random":
        return u < 0.5
    if policy == "linear":
        w = specs.LINEAR_POLICY_W
        return (w[0] * state.x + w[1] * state.x_dot + w[2] * state.theta
                + w[3] * state.theta_dot) > 0
    raise ValueError(f"unknown policy {policy!r}")


# the shortest possible CartPole episode: from a corner of the U(-0.05, 0.05) start box,
# pushing the same way every step tips the pole past 12° at step 8 (the cart cannot leave the
# track sooner); so an environment finishes at most K // 8 + 1 episodes in K steps
MIN_EPISODE_STEPS = 8

# a float32 U[0,1) from fl.rand is m · 2^-23 with m uniform on 23 bits, so one uniform holds
# 23 independent fair coin flips: floor(u · 2^(j+1)) mod 2 for j = 0..22
BITS_PER_UNIFORM = 23


class FlowliteCartPoleRunner:
    """`step()` advances `n_envs` environments by `k_steps` steps in one executable and returns
    the (episodes, summed episode lengths) counters so far as a (2,) int32 tensor.

    randomness:
      "economical" (default) — draws only the random numbers the K steps can use, from the
          device RNG (`fl.rand`), before the loop:
          * the random policy's action is a fair coin (u < 0.5 with u ~ U[0,1)): one uniform
            gives 23 of them (BITS_PER_UNIFORM), so K steps need ceil(K/23) uniforms per
            environment instead of K;
          * restart states: an environment restarts at most K // 8 + 1 times in K steps
            (MIN_EPISODE_STEPS), so each draws that many U(-0.05,0.05)^4 states, and its r-th
            restart of the call uses its r-th state — every restart gets a fresh state, as in
            the references, without drawing 4 uniforms per environment per step (which on
            XLA:CPU, threefry costing ~10 ns per number, is 4× the physics at N = 1024).
          Episode counters are per-environment sums reduced once per call.
      "per_step" — the references' scheme: an action uniform and a restart state for every
          environment at every step ((K,N) + (K,N,4) uniforms), two counter reductions per
          step. Kept to measure what the economical scheme saves.
    """

    def __init__(self, n_envs: int, k_steps: int = 200, policy: str = "random", seed: int = 0,
                 randomness: str = "economical"):
        fl, cp = _import()
        import numpy as np
        self.fl, self.cp = fl, cp
        self.n_envs, self.k_steps, self.policy = int(n_envs), int(k_steps), policy
        if policy not in ("random", "linear"):
            raise ValueError(f"unknown policy {policy!r}")
        if randomness not in ("economical", "per_step"):
            raise ValueError(f"unknown randomness scheme {randomness!r}")
        self.randomness = randomness
        fl.manual_seed(seed)
        N, K = self.n_envs, self.k_steps
        self.env = cp.CartPole(N)
        # start from specs' initial states, as the NumPy / PyTorch / JAX runners do
        s0, _ = specs.cartpole_initial(N, seed)
        self.env.load_state_(cp.CartPoleState(*[fl.from_numpy(s0[:, i].copy()) for i in range(4)],
                                              fl.zeros(N, dtype=fl.int32)))
        self.episodes = fl.zeros((), dtype=fl.int32)
        self.length_sum = fl.zeros((), dtype=fl.int32)
        # constants of the economical scheme (data, uploaded once)
        k = np.arange(K)
        self.n_restarts = K // MIN_EPISODE_STEPS + 1
        self.coin_row = fl.from_numpy((k // BITS_PER_UNIFORM).astype(np.int32))
        self.coin_scale = fl.from_numpy((2.0 ** (k % BITS_PER_UNIFORM + 1))
                                        .astype(np.float32)[:, None])
        self.env_index = fl.arange(N, dtype=fl.int32)
        fl.sync()
        self.step = fl.compile(self._rollout_economical if randomness == "economical"
                               else self._rollout_per_step)

    def _coins(self):
        """(K, N) bool fair coins from ceil(K/23) uniforms per environment."""
        fl, K = self.fl, self.k_steps
        u = fl.rand(-(-K // BITS_PER_UNIFORM), self.n_envs)
        rows = u.index_select(0, self.coin_row)               # (K, N): step k reads row k // 23
        return (fl.floor(rows * self.coin_scale) % 2) == 1    # ... and its bit k % 23

    def _rollout_economical(self):
        fl, cp, env = self.fl, self.cp, self.env
        M, policy, env_index = self.n_restarts, self.policy, self.env_index
        restart_states = env.random_states(M)                 # (M, N, 4)
        xs = self._coins() if policy == "random" else None

        def body(carry, coin):
            state, restarts, lengths = carry
            push_right = coin if policy == "random" else policy_push_right(state, None, policy)
            # this environment's next unused restart state (min(): never out of range)
            reset = restart_states[fl.minimum(restarts, M - 1), env_index]
            state, info = cp.transition(state, push_right, reset)
            return (state, restarts + info.done.int(), lengths + info.length), None

        zeros = fl.zeros(self.n_envs, dtype=fl.int32)
        (state, restarts, lengths), _ = fl.scan(body, (env.state, zeros, zeros), xs,
                                                length=self.k_steps)
        return self._finish(state, restarts.sum(dtype=fl.int32), lengths.sum(dtype=fl.int32))

    def _rollout_per_step(self):
        fl, cp, env, K = self.fl, self.cp, self.env, self.k_steps
        action_u = fl.rand(K, env.n_envs)
        reset_states = env.random_states(K)
        policy = self.policy

        def body(carry, noise):
            state, episodes, length_sum = carry
            u, reset = noise
            state, info = cp.transition(state, policy_push_right(state, u, policy), reset)
            return (state, episodes + info.done.sum(dtype=fl.int32),
                    length_sum + info.length.sum(dtype=fl.int32)), None

        zero = fl.zeros((), dtype=fl.int32)
        (state, episodes, length_sum), _ = fl.scan(body, (env.state, zero, zero),
                                                   (action_u, reset_states))
        return self._finish(state, episodes, length_sum)

    def _finish(self, state, episodes, length_sum):
        fl = self.fl
        self.env.load_state_(state)
        self.episodes.add_(episodes)
        self.length_sum.add_(length_sum)
        # a fresh tensor for the caller to wait on (not the state: its buffers are donated
        # to the next call), recorded BEFORE the sync so the call stays one executable
        out = fl.stack([self.episodes, self.length_sum])
        fl.sync()
        return out

    def counters(self):
        return int(self.episodes.item()), int(self.length_sum.item())


def wait(x):
    return x.numpy()


def build_flowlite_cartpole(opts) -> Workload:
    """The Workload for `bench/workloads.py` (framework "flowlite", workload "cartpole")."""
    r = FlowliteCartPoleRunner(opts.n_envs, opts.k_steps, opts.policy, opts.seed)
    return Workload("flowlite", "cartpole", r.step, wait, opts.k_steps * opts.n_envs,
                    "env_step", f"N={opts.n_envs}",
                    info={"fused_steps_per_call": opts.k_steps, "fused_with": "fl.scan + fl.compile",
                          "randomness": r.randomness})
