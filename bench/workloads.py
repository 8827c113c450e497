"""Registry: framework name -> builder of a timed `specs.Workload`.

A builder is `build(workload: str, opts: specs.Options) -> specs.Workload`. It imports its
framework lazily (a child process measuring one framework's peak RSS must not import the others)
and raises `specs.Unsupported` when it has no version of the workload or its framework is not
installed.

A builder's Workload has a `step()` that runs one step written the way a user writes it (for
training: zero_grad, forward, loss, backward, optimiser step — the step ends in a sync — and
return the loss tensor), a `wait` that blocks until that result is on the host or device (e.g.
`lambda loss: loss.numpy()` or the device array's block_until_ready), parameters from
`specs.init_params(workload, opts.seed)` loaded via `load_state_dict` and data from
`specs.make_batches(workload, 4, opts.seed)`; for cartpole `units_per_step = k_steps * n_envs`,
for generate `batch * n_new`. flowlite's builders live in flowlite_workloads.py (CartPole's fused
rollout in flowlite_cartpole.py), JAX's in jax_reference.py, PyTorch's in torch_reference.py.
"""

from __future__ import annotations

import importlib.util
from typing import Callable

import specs
from specs import Options, Unsupported, Workload, variant_of


def torch_installed() -> bool:
    """PyTorch is optional: without it the bench runs the JAX, NumPy and flowlite columns.
    (Found without importing it: a child process timing another framework must not pay for
    torch's import.)"""
    return importlib.util.find_spec("torch") is not None


def _no_wait(_x):
    return None


def build_jax(workload: str, opts: Options) -> Workload:
    import jax_reference as jr
    v = variant_of(workload, opts)
    if workload in specs.TRAIN_WORKLOADS:
        tr = jr.Trainer(workload, seed=opts.seed)
        return Workload("jax", workload, tr.step, jr.wait, variant=v, loss=float)
    if workload == "cartpole":
        r = jr.CartPoleRunner(opts.n_envs, opts.k_steps, opts.policy, opts.seed, opts.rng_impl)
        return Workload("jax", workload, r.step, jr.wait, opts.k_steps * opts.n_envs,
                        "env_step", v, info={"fused_steps_per_call": opts.k_steps})
    if workload == "generate":
        g = jr.Generator(opts.batch, opts.prompt_len, opts.n_new, opts.temperature, opts.top_k,
                         opts.seed)
        return Workload("jax", workload, g.step, jr.wait, opts.batch * opts.n_new, "token", v)
    raise Unsupported(f"jax has no workload {workload!r}")


def build_torch(workload: str, opts: Options) -> Workload:
    if not torch_installed():
        raise Unsupported("torch is not installed")
    import torch_reference as tr_
    v = variant_of(workload, opts)
    if workload in specs.TRAIN_WORKLOADS:
        tr = tr_.Trainer(workload, seed=opts.seed)
        return Workload("torch", workload, tr.step, _no_wait, variant=v, loss=float)
    if workload == "cartpole":
        env = tr_.TorchCartPole(opts.n_envs, opts.policy, opts.seed)
        return Workload("torch", workload, env.step, _no_wait, opts.n_envs, "env_step", v)
    if workload == "generate":
        g = tr_.Generator(opts.batch, opts.prompt_len, opts.n_new, opts.temperature, opts.top_k,
                          opts.seed)
        return Workload("torch", workload, g.step, _no_wait, opts.batch * opts.n_new, "token", v)
    raise Unsupported(f"torch has no workload {workload!r}")


def build_numpy(workload: str, opts: Options) -> Workload:
    if workload != "cartpole":
        raise Unsupported("numpy only runs the cartpole workload")
    env = specs.NumpyCartPole(opts.n_envs, opts.policy, opts.seed)
    return Workload("numpy", workload, env.step, _no_wait, opts.n_envs, "env_step",
                    variant_of(workload, opts))


def _flowlite_builder(replay, checks=True):
    def build(workload, opts):
        import flowlite_workloads as fw
        return fw.build_flowlite(workload, opts, replay=replay, checks=checks)
    return build


BUILDERS: dict[str, Callable[[str, Options], Workload]] = {
    "jax": build_jax,
    "torch": build_torch,
    "numpy": build_numpy,
    "flowlite": _flowlite_builder(False),
    "flowlite-replay": _flowlite_builder(True),
    # the same step with checked execution off: the checks' cost is flowlite / this
    "flowlite-nochecks": _flowlite_builder(False, checks=False),
}


def build(framework: str, workload: str, opts: Options | None = None) -> Workload:
    if framework not in BUILDERS:
        raise Unsupported(f"unknown framework {framework!r} (known: {', '.join(BUILDERS)})")
    if workload not in specs.ALL_WORKLOADS:
        raise ValueError(f"unknown workload {workload!r} (known: {', '.join(specs.ALL_WORKLOADS)})")
    return BUILDERS[framework](workload, opts or Options())
