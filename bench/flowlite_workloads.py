"""The flowlite side of the benchmark: the same models, written the way a user writes them
(models/), loaded from the same numpy initialisation, trained on the same batches with the
same optimizer.  `replay=True` wraps the step in `flowlite.compile` (trace-once replay).

`generate` is the tutorial GPT (models/gpt.py) with its fixed-size KV cache, from the same
initialisation and prompts as the JAX and PyTorch references; CartPole's fused rollout is in
flowlite_cartpole.py."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)     # flowlite and models/ from this checkout

import specs  # noqa: E402
from specs import Unsupported, Workload, variant_of  # noqa: E402


def _model(workload):
    if workload == "mlp":
        from models.mlp import MLP
        return MLP()
    if workload == "cnn":
        from models.lenet import LeNet
        return LeNet()
    from models.gpt import GPT, GPTConfig
    c = specs.GPT
    return GPT(GPTConfig(vocab_size=c.vocab_size, context=c.context, n_layer=c.n_layer,
                         n_head=c.n_head, d_model=c.d_model))


class Trainer:
    def __init__(self, workload, seed=0, replay=False):
        import flowlite as fl
        from flowlite import nn, optim
        fl.manual_seed(seed)
        self.model = _model(workload)
        self.model.load_state_dict({k: fl.from_numpy(v)
                                    for k, v in specs.init_params(workload, seed).items()})
        if workload == "gpt":
            self.opt = optim.AdamW(self.model.parameters(), lr=specs.ADAMW_LR,
                                   betas=specs.BETAS, eps=specs.EPS,
                                   weight_decay=specs.ADAMW_WEIGHT_DECAY)
        else:
            self.opt = optim.Adam(self.model.parameters(), lr=specs.ADAM_LR, betas=specs.BETAS,
                                  eps=specs.EPS)
        self.batches = [(fl.from_numpy(x), fl.from_numpy(y))
                        for x, y in specs.make_batches(workload, 4, seed)]
        self.i = 0
        model, opt, F = self.model, self.opt, nn.functional

        def train_step(x, y):
            opt.zero_grad()
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        self._step = fl.compile(train_step) if replay else train_step

    def step(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        return self._step(x, y)


def wait(loss):
    return loss.numpy()


def build_flowlite(workload, opts, replay=False, checks=True):
    import flowlite as fl
    v = variant_of(workload, opts)
    name = "flowlite-replay" if replay else "flowlite" if checks else "flowlite-nochecks"
    if workload in specs.TRAIN_WORKLOADS:
        tr = Trainer(workload, seed=opts.seed, replay=replay)

        def step():
            fl.set_checks(checks)    # process-wide: every arm sets its own (on by default)
            return tr.step()
        return Workload(name, workload, step, wait, variant=v, loss=lambda l: l.item())
    if not checks:
        raise Unsupported("the checks-off variant is only for training workloads")
    if replay:
        raise Unsupported("replay variant only for training workloads")
    if workload == "cartpole":
        from flowlite_cartpole import build_flowlite_cartpole
        return build_flowlite_cartpole(opts)
    if workload == "generate":
        return build_flowlite_generate(opts)
    raise Unsupported(f"flowlite has no workload {workload!r}")


def build_flowlite_replay(workload, opts):
    return build_flowlite(workload, opts, replay=True)


def build_flowlite_generate(opts, fused=True):
    """fused=True runs the whole generation as one executable (`mode="scan"`); fused=False
    traces every token lazily (`mode="lazy"`, each decode step a cache hit)."""
    import flowlite as fl
    fl.manual_seed(opts.seed)
    model = _model("gpt")
    model.load_state_dict({k: fl.from_numpy(v)
                           for k, v in specs.init_params("generate", opts.seed).items()})
    model.eval()
    prompt = fl.from_numpy(specs.make_prompt(opts.batch, opts.prompt_len, opts.seed))
    fl.sync()
    mode = "scan" if fused else "lazy"

    def step():
        return model.generate(prompt, opts.n_new, temperature=opts.temperature, top_k=opts.top_k,
                              mode=mode)

    return Workload("flowlite" if fused else "flowlite-lazy", "generate", step,
                    lambda out: out.numpy(), opts.batch * opts.n_new, "token",
                    variant_of("generate", opts))
