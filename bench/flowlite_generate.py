"""flowlite side of the `generate` workload: the tutorial GPT (models/gpt.py) with its
fixed-size KV cache, loaded from the same numpy initialisation and prompts as the JAX and
PyTorch references.  fused=True runs the whole generation as one executable (`mode="scan"`);
fused=False traces every token lazily (`mode="lazy"`, each decode step a cache hit)."""
from __future__ import annotations

try:
    from . import specs
    from .workloads import Workload, _variant
    from .flowlite_workloads import _model
except ImportError:
    import specs
    from workloads import Workload, _variant
    from flowlite_workloads import _model


def build_flowlite_generate(opts, fused=True):
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
                    _variant("generate", opts))
