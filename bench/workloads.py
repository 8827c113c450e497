"""Registry: framework name -> builder of a timed `Workload`.

A builder is `build(workload: str, opts: Options) -> Workload`. It imports its framework lazily
(a child process measuring one framework's peak RSS must not import the others) and raises
`Unsupported` when it has no version of the workload or its framework is not installed.

To add flowlite (another engineer's task): write `build_flowlite(workload, opts)` returning a
Workload whose `step()` runs one step written the way a user writes it with `models/` (for
training: zero_grad, forward, loss, backward, optimiser step — the step ends in a sync — and
return the loss tensor), whose `wait` blocks until that result is on the host or device
(e.g. `lambda loss: loss.numpy()` or the device array's block_until_ready), with parameters
from `specs.init_params(workload, opts.seed)` loaded via `load_state_dict` and data from
`specs.make_batches(workload, 4, opts.seed)`; for cartpole `units_per_step = k_steps * n_envs`,
for generate `batch * n_new`. Then register it in BUILDERS below (marked FLOWLITE).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

try:
    from . import specs
except ImportError:  # run as a script: bench/ is on sys.path
    import specs


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


def _variant(workload: str, opts: Options) -> str:
    if workload == "cartpole":
        return f"N={opts.n_envs}"
    if workload == "generate":
        return f"B={opts.batch}"
    return ""


def _no_wait(_x):
    return None


def build_jax(workload: str, opts: Options) -> Workload:
    try:
        from . import jax_reference as jr
    except ImportError:
        import jax_reference as jr
    v = _variant(workload, opts)
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
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise Unsupported(f"torch is not importable ({e})") from None
    try:
        from . import torch_reference as tr_
    except ImportError:
        import torch_reference as tr_
    v = _variant(workload, opts)
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
                    _variant(workload, opts))


BUILDERS: dict[str, Callable[[str, Options], Workload]] = {
    "jax": build_jax,
    "torch": build_torch,
    "numpy": build_numpy,
}


def _flowlite_builder(replay, checks=True):
    def build(workload, opts):
        try:
            from . import flowlite_workloads as fw
        except ImportError:
            import flowlite_workloads as fw
        return fw.build_flowlite(workload, opts, replay=replay, checks=checks)
    return build


BUILDERS["flowlite"] = _flowlite_builder(False)
BUILDERS["flowlite-replay"] = _flowlite_builder(True)
# the same step with checked execution off: the checks' cost is flowlite / this
BUILDERS["flowlite-nochecks"] = _flowlite_builder(False, checks=False)


def build(framework: str, workload: str, opts: Options | None = None) -> Workload:
    if framework not in BUILDERS:
        raise Unsupported(f"unknown framework {framework!r} (known: {', '.join(BUILDERS)})")
    if workload not in specs.ALL_WORKLOADS:
        raise ValueError(f"unknown workload {workload!r} (known: {', '.join(specs.ALL_WORKLOADS)})")
    return BUILDERS[framework](workload, opts or Options())
