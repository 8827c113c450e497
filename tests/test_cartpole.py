"""models/cartpole.py: the batched CartPole against hand-computed steps and gym's equations,
termination / truncation / automatic reset, one executable per A2C update with a constant
number of compiles, replay == tracing, and a short training run that learns."""
from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import flowlite as fl
from flowlite import optim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from models import cartpole as cp  # noqa: E402
import specs  # noqa: E402  (bench/specs.py: the NumPy reference shared by every framework)


def _state(x, x_dot, theta, theta_dot, t=0):
    """A CartPoleState of len(x) environments from Python lists."""
    f = lambda v: fl.tensor(np.asarray(v, np.float32))  # noqa: E731
    return cp.CartPoleState(f(x), f(x_dot), f(theta), f(theta_dot),
                            fl.tensor(np.broadcast_to(np.asarray(t, np.int32), (len(x),)).copy()))


def _np(s):
    return np.stack([v.numpy() for v in s[:4]], axis=1), s.t.numpy()


NO_RESET = np.zeros((1, 4), np.float32)


# ---- physics ----------------------------------------------------------------------------------

def test_one_step_from_rest_pushing_right_hand_computed():
    # all zero state, force +10:  cos = 1, sin = 0
    #   temp     = (10 + 0.05·0²·0) / 1.1                       =   9.090909090909
    #   thetaacc = (9.8·0 − 1·temp) / (0.5·(4/3 − 0.1·1/1.1))   = −14.634146341463
    #   xacc     = temp − 0.05·thetaacc·1 / 1.1                 =   9.756097560976
    # Euler (positions move with the OLD velocities):
    #   x = 0,  x_dot = 0.02·xacc = 0.195121951220,  theta = 0,  theta_dot = −0.292682926829
    s, info = cp.transition(_state([0.0], [0.0], [0.0], [0.0]), fl.tensor([True]),
                            fl.tensor(NO_RESET))
    state, t = _np(s)
    np.testing.assert_allclose(state[0], [0.0, 0.1951219512195122, 0.0, -0.2926829268292683],
                               rtol=1e-6, atol=1e-7)
    assert t.tolist() == [1]
    assert info.reward.numpy().tolist() == [1.0]
    assert not info.done.numpy().any() and info.length.numpy().tolist() == [0]


def test_one_step_leaning_pushing_left_hand_computed():
    # x = 0.1, x_dot = −0.2, theta = 0.05, theta_dot = 0.3, force −10:
    #   cos = 0.998750260395, sin = 0.049979169271
    #   temp     = (−10 + 0.05·0.09·sin) / 1.1                  =  −9.090704630671
    #   thetaacc = (9.8·sin − cos·temp) / (0.5·(4/3 − 0.1·cos²/1.1)) = 15.401165680308
    #   xacc     = temp − 0.05·thetaacc·cos / 1.1               =  −9.789882732198
    #   x = 0.1 + 0.02·(−0.2) = 0.096          x_dot = −0.2 + 0.02·xacc = −0.395797654644
    #   theta = 0.05 + 0.02·0.3 = 0.056        theta_dot = 0.3 + 0.02·thetaacc = 0.608023313606
    s, _ = cp.transition(_state([0.1], [-0.2], [0.05], [0.3]), fl.tensor([False]),
                         fl.tensor(NO_RESET))
    state, _ = _np(s)
    np.testing.assert_allclose(state[0], [0.096, -0.3957976546439626, 0.056, 0.6080233136061515],
                               rtol=1e-6, atol=1e-7)


def test_batched_step_matches_gyms_scalar_step():
    rng = np.random.default_rng(5)
    s0 = rng.uniform(-0.2, 0.2, (32, 4)).astype(np.float32)
    a = rng.random(32) < 0.5
    s, info = cp.transition(_state(*s0.T), fl.tensor(a), fl.tensor(np.zeros((32, 4), np.float32)))
    got = info.final_obs.numpy()
    for row, ai, g in zip(s0.astype(np.float64), a, got):
        ref, terminated = specs.cartpole_step_scalar(tuple(row), int(ai))
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)


def test_rollout_matches_the_numpy_reference_with_the_same_noise():
    """20 steps of 64 environments (some near the 500-step cap), the bench's reference noise:
    the same trajectories and the same resets as specs.cartpole_rollout_numpy."""
    s0, t0 = specs.cartpole_initial(64, seed=1)
    t0 = t0 + np.arange(64, dtype=np.int32) * 8
    reset, act = specs.cartpole_noise(20, 64, seed=2)
    _, nt, n_states, n_dones = specs.cartpole_rollout_numpy(s0, t0, reset, act)

    def body(state, noise):
        u, r = noise
        state, info = cp.transition(state, u < 0.5, r)
        return state, (cp.observation(state), info.done)

    final, (states, dones) = fl.scan(body, _state(*s0.T, t=t0),
                                     (fl.tensor(act), fl.tensor(reset)))
    np.testing.assert_allclose(states.numpy(), n_states, atol=1e-5)
    np.testing.assert_array_equal(dones.numpy(), n_dones)
    np.testing.assert_array_equal(final.t.numpy(), nt)
    assert n_dones.sum() > 10   # the check covered terminations and truncations


# ---- termination, truncation, reset -----------------------------------------------------------

def test_termination_truncation_and_reset():
    reset = np.array([[0.01, 0.02, 0.03, 0.04]] * 5, np.float32)
    s = _state(x=[2.39, 0.0, 0.0, 0.0, 2.39],
               x_dot=[1.0, 0.0, 0.0, 0.0, 1.0],          # env 0: x 2.39 → 2.41 > 2.4
               theta=[0.0, 0.205, 0.0, 0.0, 0.0],
               theta_dot=[0.0, 0.5, 0.0, 0.0, 0.0],      # env 1: theta 0.205 → 0.215 > 12°
               t=[10, 20, 499, 100, 499])                # env 2: the 500th step; env 3: nothing
    new, info = cp.transition(s, fl.tensor([True, False, True, True, True]), fl.tensor(reset))
    assert info.terminated.numpy().tolist() == [True, True, False, False, True]
    # env 4 both falls and reaches 500 on the same step: a termination, not a truncation
    assert info.truncated.numpy().tolist() == [False, False, True, False, False]
    assert info.done.numpy().tolist() == [True, True, True, False, True]
    assert info.length.numpy().tolist() == [11, 21, 500, 0, 500]
    state, t = _np(new)
    assert t.tolist() == [0, 0, 0, 101, 0]
    for i in (0, 1, 2, 4):
        np.testing.assert_array_equal(state[i], reset[i])   # restarted from the given state
    final = info.final_obs.numpy()
    assert final[0, 0] == pytest.approx(2.41, abs=1e-6)       # where the episode ended
    assert final[1, 2] == pytest.approx(0.215, abs=1e-6)
    assert state[3, 1] != 0.0                                  # still running: physics applied


def test_environment_resets_from_the_device_rng():
    fl.manual_seed(3)
    env = cp.CartPole(256)
    start, t = _np(env.state)
    assert (np.abs(start) <= 0.05).all() and (t == 0).all()
    assert len(np.unique(start[:, 2])) == 256            # every environment its own start
    # always pushing right topples every pole within a few dozen steps; each restart state is
    # a fresh draw in U(-0.05, 0.05)^4
    push = fl.ones(256, dtype=fl.bool)
    restarts = []
    for _ in range(40):
        obs, reward, done = env.step(push)
        d = done.numpy()
        if d.any():
            restarts.append(obs.numpy()[d])
    restarts = np.concatenate(restarts)
    assert len(restarts) >= 256
    assert (np.abs(restarts) <= 0.05).all()
    assert len(np.unique(restarts[:, 0])) == len(restarts)
    assert not np.array_equal(restarts[:256], start)


def test_step_validates_actions():
    env = cp.CartPole(4)
    with pytest.raises(ValueError, match=r"CartPole.step: expected actions of shape \(4,\)"):
        env.step(fl.zeros(3, dtype=fl.bool))
    obs, reward, done = env.step([0, 1, 1, 0])              # 0/1 ints work too
    assert tuple(obs.shape) == (4, 4)


# ---- the agent ----------------------------------------------------------------------------------

def _agent(seed=0):
    """The agent `run()` trains (its default sizes), so every test here shares one compile."""
    d = cp.DEFAULTS
    fl.manual_seed(seed)
    env = cp.CartPole(d["n_envs"])
    model = cp.ActorCritic(hidden=d["hidden"])
    opt = optim.Adam(model.parameters(), lr=d["lr"])
    return cp.A2C(env, model, opt, k_steps=d["k_steps"]), model


def test_one_update_is_one_execution_and_compiles_stay_constant():
    agent, _ = _agent()
    agent.update().tolist()
    agent.update().tolist()            # two traced calls; from the third on, replays
    before = fl.metrics.counters()
    for _ in range(5):
        stats = agent.update()
        n_done, len_sum, loss, entropy = stats.tolist()   # the one host read per update
        assert np.isfinite(loss) and 0 < entropy <= np.log(2) + 1e-6
    after = fl.metrics.counters()
    assert after["executions"] - before["executions"] == 5
    assert after["compiles"] == before["compiles"]
    assert agent.update.replays >= 5


def test_replayed_updates_equal_traced_updates():
    """fl.compile's replay must reproduce the traced update exactly (parameters, optimizer
    state, environment state, RNG). (A compiled function draws from the device stream; the
    eager run draws there too inside device_draws, not PyTorch's CPU numbers.)"""
    with fl.random.device_draws():
        _replayed_equal_traced()


def _replayed_equal_traced():
    results = []
    for compiled in (True, False):
        agent, model = _agent(seed=7)
        step = agent.update if compiled else agent._update
        stats = [step().tolist() for _ in range(5)]
        results.append((stats, [p.numpy() for p in model.parameters()],
                        _np(agent.env.state)[0]))
    (s1, p1, e1), (s2, p2, e2) = results
    assert s1 == s2
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(e1, e2)


def test_short_training_run_improves_the_average_episode_length(tmp_path):
    out = tmp_path / "metrics.json"
    args = SimpleNamespace(steps=30, seconds=60, seed=0, quiet=True, metrics_json=str(out))
    m = cp.run(args)
    assert set(m) >= {"episodes", "avg_episode_length", "seconds", "env_steps_per_s",
                      "compiles", "executions"}
    # a random policy lasts ≈ 22 steps; 30 updates of 64 × 128 steps learn well beyond that
    assert m["avg_episode_length"] > 60, m
    assert m["updates"] == 30 and m["executions"] <= 30 + 2
    assert m["compiles"] <= 3
    assert out.exists()


# ---- the bench's fused rollout (bench/flowlite_cartpole.py) ------------------------------------

def test_bench_rollout_statistics_match_random_and_linear_play():
    import flowlite_cartpole as fc
    r = fc.FlowliteCartPoleRunner(256, 200, "random", seed=0)
    coins = r._coins().numpy()                       # the random policy's fair coin flips
    assert abs(coins.mean() - 0.5) < 0.01
    assert abs(np.corrcoef(coins[:-1].ravel(), coins[1:].ravel())[0, 1]) < 0.02
    for _ in range(3):
        r.step()
    episodes, length_sum = r.counters()
    assert 18 < length_sum / episodes < 27            # random play lasts ≈ 22 steps
    assert r.step.replays >= 1
    lin = fc.FlowliteCartPoleRunner(8, 200, "linear", seed=0)
    for _ in range(3):
        lin.step()
    assert lin.counters() == (8, 8 * 500)            # the balancing policy reaches the cap
