"""Reinforcement learning on a batched CartPole, simulator and learner in ONE executable.

The environment is gym's CartPole-v1 written with flowlite tensor ops, for N environments
at once: a pole hinged on a cart, the agent pushes the cart left or right every 20 ms, the
episode ends when the pole leans past 12° or the cart leaves the track (|x| > 2.4), and is
cut at 500 steps. Every step survived earns a reward of 1, so an episode's length IS its
return; CartPole-v1 counts as solved at an average length of 475.

The agent is an advantage actor-critic (A2C: policy gradient with a learned value baseline
and generalised advantage estimation). One *update* is:

    rollout:  K environment steps for N environments (policy forward, action sampling,
              physics, automatic resets)                 — one `fl.scan` node
    returns:  advantages by a backward recursion over the K steps — another `fl.scan`
    loss:     policy-gradient + value + entropy terms over all K·N samples, backward, Adam

and `fl.compile` turns the whole update into ONE cached XLA executable that is replayed
without re-running this Python: the simulator never hands control back to Python between
steps, which is where a define-by-run framework normally loses (one dispatch per op per
step).

Why `fl.scan` for the rollout rather than a plain `for` loop of K `env.step` calls under
`fl.compile`: the loop would be unrolled into the program, K copies of the step, and XLA's
compile time and even its run time grow faster than K on such chains (tens of seconds to
compile 10 CartPole steps on a CPU); a scan is one loop node, compiled once whatever K is.
The loop body must then be a pure function of its carry, which is why the physics is written
as `transition(state, action, reset_state) -> (state, info)` and `CartPole.step` is a thin
stateful wrapper around it.

    python -m models.cartpole                      # train until the average length ≥ 475
    python -m models.cartpole --seed 3 --metrics-json out.json

`run(args)` is what `python train.py --model cartpole` calls; the fields it reads from
`args` are listed in `DEFAULTS` (missing ones take those defaults).
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import time
from typing import NamedTuple

import flowlite as fl
from flowlite import nn, optim

# ----------------------------------------------------------------------------------------------
# The environment
# ----------------------------------------------------------------------------------------------

# gym's CartPole-v1 constants (classic_control/cartpole.py)
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5                      # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02                        # seconds between state updates (explicit Euler)
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_EPISODE_STEPS = 500           # CartPole-v1's TimeLimit
RESET_LOW, RESET_HIGH = -0.05, 0.05


class CartPoleState(NamedTuple):
    """The state of N environments: one (N,) tensor per variable.

    A NamedTuple of tensors is a pytree, so it can be the carry of `fl.scan` as it is."""
    x: fl.Tensor            # cart position
    x_dot: fl.Tensor        # cart velocity
    theta: fl.Tensor        # pole angle (0 = upright)
    theta_dot: fl.Tensor    # pole angular velocity
    t: fl.Tensor            # int32: steps taken in the current episode


class Transition(NamedTuple):
    """What one step of N environments reports besides the next state."""
    reward: fl.Tensor       # (N,) float32: 1 for every step taken (the last one included)
    terminated: fl.Tensor   # (N,) bool: the pole fell or the cart left the track
    truncated: fl.Tensor    # (N,) bool: the 500-step limit ended a still-balanced episode
    done: fl.Tensor         # terminated | truncated: the environment was reset
    final_obs: fl.Tensor    # (N,4) the state reached by this step, BEFORE any reset
    length: fl.Tensor       # (N,) int32: length of the episode that ended here, else 0


def observation(s: CartPoleState) -> fl.Tensor:
    """(N, 4) observations [x, x_dot, theta, theta_dot], as gym returns them."""
    return fl.stack([s.x, s.x_dot, s.theta, s.theta_dot], dim=1)


def physics(s: CartPoleState, push_right: fl.Tensor) -> CartPoleState:
    """One Euler step of the cart-pole equations of motion (gym's `step`, batched).

    push_right: (N,) bool. The expressions are gym's, term for term and in the same order, so
    the float32 results match the NumPy / JAX / PyTorch references of bench/specs.py."""
    force = fl.where(push_right, FORCE_MAG, -FORCE_MAG)
    costheta, sintheta = fl.cos(s.theta), fl.sin(s.theta)
    temp = (force + POLEMASS_LENGTH * s.theta_dot * s.theta_dot * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta * costheta / TOTAL_MASS))
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    # explicit Euler: positions advance with the OLD velocities, as in gym
    return CartPoleState(x=s.x + TAU * s.x_dot,
                         x_dot=s.x_dot + TAU * xacc,
                         theta=s.theta + TAU * s.theta_dot,
                         theta_dot=s.theta_dot + TAU * thetaacc,
                         t=s.t + 1)


def transition(s: CartPoleState, push_right: fl.Tensor, reset_state: fl.Tensor):
    """One step of N environments with automatic reset: (next_state, Transition).

    A pure function of tensors (no Python state is touched), so it can run inside an
    `fl.scan` body. reset_state (N, 4) holds the states that finished environments restart
    from; the caller draws it (see `CartPole.random_states`): inside a scan the device RNG
    cannot advance between iterations, so the randomness of all steps is drawn beforehand.
    """
    nxt = physics(s, push_right)
    terminated = ((nxt.x < -X_THRESHOLD) | (nxt.x > X_THRESHOLD)
                  | (nxt.theta < -THETA_THRESHOLD) | (nxt.theta > THETA_THRESHOLD))
    truncated = (nxt.t >= MAX_EPISODE_STEPS) & ~terminated
    done = terminated | truncated
    # finished environments restart: a select per variable, no Python branching, so every
    # step has the same graph whatever happens in it
    new = CartPoleState(x=fl.where(done, reset_state[:, 0], nxt.x),
                        x_dot=fl.where(done, reset_state[:, 1], nxt.x_dot),
                        theta=fl.where(done, reset_state[:, 2], nxt.theta),
                        theta_dot=fl.where(done, reset_state[:, 3], nxt.theta_dot),
                        t=fl.where(done, 0, nxt.t))
    info = Transition(reward=fl.ones_like(nxt.x), terminated=terminated, truncated=truncated,
                      done=done, final_obs=observation(nxt), length=fl.where(done, nxt.t, 0))
    return new, info


class CartPole:
    """N CartPole-v1 environments stepped together on the device.

        env = CartPole(1024)
        obs, reward, done = env.step(actions)      # actions: (N,) bool or 0/1 ints

    The state lives in five (N,) tensors that `step` updates IN PLACE (`copy_`), as a
    PyTorch user would update a buffer. That matters for `fl.compile`: a replayed step
    rebinds the same tensor objects, so the environment state carries over between calls
    without any Python running.
    """

    def __init__(self, n_envs: int, device=None):
        self.n_envs = int(n_envs)
        self.device = device
        x, x_dot, theta, theta_dot = self.random_states().unbind(1)
        self.state = CartPoleState(x, x_dot, theta, theta_dot,
                                   fl.zeros(self.n_envs, dtype=fl.int32, device=device))
        self.last = None   # the Transition of the latest step (terminated/truncated/...)

    def random_states(self, *leading) -> fl.Tensor:
        """(*leading, N, 4) start states ~ U(-0.05, 0.05), from the device RNG."""
        u = fl.rand(*leading, self.n_envs, 4, device=self.device)
        return RESET_LOW + (RESET_HIGH - RESET_LOW) * u

    def observation(self) -> fl.Tensor:
        return observation(self.state)

    def load_state_(self, s: CartPoleState) -> None:
        """Make `s` the current state, in place (the same tensor objects keep the state)."""
        for mine, new in zip(self.state, s):
            mine.copy_(new)

    def reset(self) -> fl.Tensor:
        x, x_dot, theta, theta_dot = self.random_states().unbind(1)
        self.load_state_(CartPoleState(x, x_dot, theta, theta_dot, fl.zeros_like(self.state.t)))
        return self.observation()

    def step(self, action, reset_state=None):
        """Advance every environment by one step: (obs, reward, done).

        action: (N,) — True / 1 pushes right. Environments whose episode ended (done) are
        reset, and obs is already their first observation of the new episode; the state
        the episode ended in is `self.last.final_obs`. reset_state: optional (N, 4) restart
        states (drawn from the device RNG when None)."""
        if not isinstance(action, fl.Tensor):
            action = fl.tensor(action, device=self.device)
        if tuple(action.shape) != (self.n_envs,):
            raise ValueError(f"CartPole.step: expected actions of shape ({self.n_envs},), got "
                             f"{tuple(action.shape)}")
        push_right = action if action.dtype is fl.bool else action != 0
        if reset_state is None:
            reset_state = self.random_states()
        new, info = transition(self.state, push_right, reset_state)
        self.load_state_(new)
        self.last = info
        return self.observation(), info.reward, info.done


# ----------------------------------------------------------------------------------------------
# The agent
# ----------------------------------------------------------------------------------------------


def mlp(sizes, activation=nn.Tanh):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Two small MLPs on the 4 observations: policy logits (2 actions) and a value V(s).

    Separate networks (no shared trunk) keep the value regression — targets up to ~100 —
    from disturbing the policy's features; both are tiny, so this costs nothing."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.policy = mlp([4, hidden, hidden, 2])
        self.value = mlp([4, hidden, hidden, 1])
        # small last layers: start from a near-uniform policy and a near-zero value
        with fl.no_grad():
            self.policy[-1].weight.mul_(0.01)
            self.value[-1].weight.mul_(0.1)

    def forward(self, obs):
        return self.policy(obs), self.value(obs).squeeze(-1)


def sample_push_right(logits: fl.Tensor, u: fl.Tensor) -> fl.Tensor:
    """Sample from the 2-way categorical of `logits` (N, 2) with uniforms u (N,).

    P(right) = softmax(logits)[1] = sigmoid(l1 - l0); u < P(right) has exactly that law."""
    return u < fl.sigmoid(logits[:, 1] - logits[:, 0])


class A2C:
    """Advantage actor-critic over a CartPole, one compiled executable per update.

    k_steps: environment steps per update and environment; the update learns from the
    k_steps · n_envs transitions of its own rollout. gamma / lam: discount and GAE λ.
    """

    def __init__(self, env: CartPole, model: ActorCritic, opt, k_steps: int = 128,
                 gamma: float = 0.99, lam: float = 0.95, ent_coef: float = 0.01,
                 vf_coef: float = 0.5):
        self.env, self.model, self.opt = env, model, opt
        self.k_steps = int(k_steps)
        self.gamma, self.lam = float(gamma), float(lam)
        self.ent_coef, self.vf_coef = float(ent_coef), float(vf_coef)
        # trace-once replay of the whole update: after two traced calls, later calls run
        # the cached executable directly (no Python, no graph building). The coefficients
        # above are read when the update is traced: change them by building a new A2C
        # (fl.compile does not watch attributes of `self`).
        self.update = fl.compile(self._update)

    def rollout(self):
        """K steps of N environments as ONE scan node; returns the stacked trajectory."""
        env, K, N = self.env, self.k_steps, self.env.n_envs
        # all the randomness of the rollout, drawn up front: an RNG call inside the scan
        # body would see the same key on every iteration
        action_u = fl.rand(K, N, device=env.device)
        reset_states = env.random_states(K)

        def body(state, noise):
            u, reset = noise
            obs = observation(state)
            logits = self.model.policy(obs)
            push_right = sample_push_right(logits, u)
            state, info = transition(state, push_right, reset)
            return state, (obs, push_right, info.reward, info.terminated, info.done,
                           info.final_obs, info.length)

        with fl.no_grad():
            final, traj = fl.scan(body, env.state, (action_u, reset_states))
        env.load_state_(final)
        return traj

    def advantages(self, values, next_values, rewards, terminated, done):
        """GAE(λ), computed backwards over the K steps (a reverse scan).

        next_values are V of the state each step reached *before* a reset, so a step cut by
        the 500-step limit or by the end of the rollout is bootstrapped from the value of
        where it actually got to, and only a real termination has no future."""
        g, lam = self.gamma, self.lam
        not_term = (~terminated).float()
        not_done = (~done).float()
        deltas = rewards + g * not_term * next_values - values

        def body(adv_next, x):
            delta, nd = x
            adv = delta + g * lam * nd * adv_next
            return adv, adv

        _, adv = fl.scan(body, fl.zeros_like(values[0]), (deltas, not_done), reverse=True)
        return adv

    def _update(self):
        K, N = self.k_steps, self.env.n_envs
        obs, push_right, rewards, terminated, done, final_obs, length = self.rollout()

        logits, values = self.model(obs.reshape(K * N, 4))
        values = values.reshape(K, N)
        with fl.no_grad():
            next_values = self.model.value(final_obs.reshape(K * N, 4)).reshape(K, N)
            adv = self.advantages(values.detach(), next_values, rewards, terminated, done)
            returns = adv + values.detach()
            # normalised advantages: the policy step size no longer depends on the return scale
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)

        logp_all = fl.log_softmax(logits, dim=-1)
        a = push_right.reshape(K * N)
        logp = fl.where(a, logp_all[:, 1], logp_all[:, 0])
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        policy_loss = -(logp * adv.reshape(K * N)).mean()
        value_loss = ((values - returns) ** 2).mean()
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy

        # episode statistics of this rollout, for the host to read once per update; recorded
        # BEFORE opt.step() so that they are outputs of the same executable (a tensor built
        # after the step's sync would need a second, tiny one)
        stats = fl.stack([done.sum().float(), length.sum().float(), loss.detach(),
                          entropy.detach()])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()          # records the Adam update, then the ONE sync of this update
        return stats


# ----------------------------------------------------------------------------------------------
# Training: what `python train.py --model cartpole` runs
# ----------------------------------------------------------------------------------------------

DEFAULTS = dict(
    steps=2000,          # maximum number of updates
    seconds=600.0,       # wall-clock budget (the 10 minutes of the acceptance test)
    seed=0,
    lr=3e-3,             # Adam learning rate (flowlite.optim.Adam)
    n_envs=64,           # environments stepped together
    k_steps=128,         # environment steps per environment per update
    target=475.0,        # stop when the average episode length reaches this
    window=100,          # ... averaged over (at least) this many most recent episodes
    hidden=64,
    gamma=0.99, lam=0.95, ent_coef=0.01, vf_coef=0.5,
    log_every=10,        # print every this many updates
    quiet=False,
    metrics_json=None,   # path: write the metrics dict there as JSON
    device=None,
)


def _opt(args, name):
    v = getattr(args, name, None)
    return DEFAULTS[name] if v is None else v


def run(args) -> dict:
    """Train an A2C agent on CartPole until the average episode length reaches `target`.

    `args`: any object with (some of) the attributes of DEFAULTS (an argparse Namespace).
    Returns the metrics dict: episodes, avg_episode_length, seconds, env_steps_per_s,
    compiles, executions, updates, env_steps, solved (+ compile_s)."""
    o = {k: _opt(args, k) for k in DEFAULTS}
    say = (lambda *a: None) if o["quiet"] else (lambda *a: print(*a, flush=True))
    fl.manual_seed(int(o["seed"]))
    device = fl.device(o["device"]) if o["device"] else None

    before = fl.metrics.counters()
    t0 = time.perf_counter()
    env = CartPole(o["n_envs"], device=device)
    model = ActorCritic(o["hidden"])
    if device is not None:
        model.to(device)
    opt = optim.Adam(model.parameters(), lr=float(o["lr"]))
    agent = A2C(env, model, opt, k_steps=o["k_steps"], gamma=o["gamma"], lam=o["lam"],
                ent_coef=o["ent_coef"], vf_coef=o["vf_coef"])

    # (episodes, summed lengths) of the recent updates: the average over the last
    # `window` finished episodes (at update granularity), gym's "solved" statistic
    recent = collections.deque()
    episodes = 0
    avg = 0.0
    updates = 0
    solved = False
    steps_per_update = o["k_steps"] * o["n_envs"]
    say(f"cartpole A2C: {o['n_envs']} envs × {o['k_steps']} steps per update, lr {o['lr']}, "
        f"seed {o['seed']}; target average episode length {o['target']}")
    t_log = time.perf_counter()
    u_log = 0
    while updates < int(o["steps"]) and time.perf_counter() - t0 < float(o["seconds"]):
        stats = agent.update()
        updates += 1
        # the one host read of the update (its executable already ran: no extra work)
        n_done, len_sum, loss, ent = stats.tolist()
        n_done = int(n_done)
        episodes += n_done
        if n_done:
            recent.append((n_done, len_sum))
            while len(recent) > 1 and sum(n for n, _ in recent) - recent[0][0] >= o["window"]:
                recent.popleft()
        n_recent = sum(n for n, _ in recent)
        avg = sum(s for _, s in recent) / n_recent if n_recent else 0.0
        solved = n_recent >= o["window"] and avg >= o["target"]
        if solved or updates % int(o["log_every"]) == 0 or updates == 1:
            now = time.perf_counter()
            rate = (updates - u_log) * steps_per_update / max(now - t_log, 1e-9)
            c = fl.metrics.counters()
            say(f"update {updates:5d}  avg episode length {avg:6.1f} ({n_recent} episodes)  "
                f"episodes {episodes:7d}  {rate:9.0f} env steps/s  loss {loss:8.3f}  "
                f"entropy {ent:.3f}  compiles {c['compiles'] - before['compiles']}  "
                f"[{now - t0:6.1f}s]")
            t_log, u_log = now, updates
        if solved:
            break
    seconds = time.perf_counter() - t0
    c = fl.metrics.counters()
    metrics = {
        "episodes": episodes,
        "avg_episode_length": avg,
        "seconds": seconds,
        "env_steps_per_s": updates * steps_per_update / seconds,
        "compiles": c["compiles"] - before["compiles"],
        "executions": c["executions"] - before["executions"],
        "updates": updates,
        "env_steps": updates * steps_per_update,
        "solved": bool(solved),
        "compile_s": c["compile_s"] - before["compile_s"],
    }
    say(("solved" if solved else "NOT solved") + f" after {updates} updates, {episodes} "
        f"episodes, {seconds:.1f}s: average episode length {avg:.1f}; "
        f"{metrics['compiles']} compiles, {metrics['executions']} executions")
    if o["metrics_json"]:
        with open(o["metrics_json"], "w") as f:
            json.dump(metrics, f, indent=2)
    return metrics


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command-line options of `run` (train.py may add these to its own parser)."""
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="maximum updates")
    p.add_argument("--seconds", type=float, default=DEFAULTS["seconds"],
                   help="wall-clock budget in seconds")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    p.add_argument("--n-envs", type=int, default=DEFAULTS["n_envs"])
    p.add_argument("--k-steps", type=int, default=DEFAULTS["k_steps"])
    p.add_argument("--target", type=float, default=DEFAULTS["target"])
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--metrics-json", default=None)
    p.add_argument("--device", default=None)
    return p


def main(argv=None) -> dict:
    p = add_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    return run(p.parse_args(argv))


if __name__ == "__main__":
    main()
