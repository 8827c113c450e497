"""bench/kernel_table.py: the optimised HLO's dots are found, put in torch.mm/bmm form
without changing what they compute, and the two-process table runs end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import kernel_table as KT  # noqa: E402


def _program():
    def f(x, w, q, k):
        y = jnp.tanh(x @ w.T)                       # a 2-D dot (x Wᵀ), then elementwise
        s = jnp.einsum("bhtd,bhsd->bhts", q, k)     # a batched dot
        return y, s
    args = (jnp.ones((8, 16)), jnp.ones((24, 16)), jnp.ones((2, 3, 5, 4)),
            jnp.ones((2, 3, 6, 4)))
    return jax.jit(f).lower(*args).compile().as_text()


def test_every_dot_of_a_compiled_program_is_found_with_its_form():
    kinds = KT.classify(_program())
    dots = [sig for kind, sigs, _ in kinds.values() if kind == "dot" for sig in sigs]
    forms = sorted((c["b"], c["m"], c["k"], c["n"]) for c in map(KT.canonical, dots))
    # XLA may swap a 2-D dot's operands (computing (W xᵀ)ᵀ): M and N then trade places
    assert forms in ([(1, 8, 16, 24), (6, 5, 4, 6)], [(1, 24, 16, 8), (6, 5, 4, 6)]), forms
    assert all(sig[0] == "f32" for sig in dots)
    others = [what for kind, _, what in kinds.values() if kind == "other"]
    assert any("tanh" in w for w in others), others


def test_canonical_form_says_which_operand_is_stored_transposed():
    # x Wᵀ: W (N, K) contracts its last dim -> stored transposed for torch.mm's (K, N)
    c = KT.canonical(("f32", (8, 16), (24, 16), (((1,), (1,)), ((), ()))))
    assert (c["b"], c["m"], c["k"], c["n"], c["lhs_t"], c["rhs_t"]) == (1, 8, 16, 24, False,
                                                                       True)
    # Xᵀ G (a weight gradient): X (K, M) contracts dim 0
    c = KT.canonical(("f32", (16, 8), (16, 24), (((0,), (0,)), ((), ()))))
    assert (c["m"], c["k"], c["n"], c["lhs_t"], c["rhs_t"]) == (8, 16, 24, True, False)
    # leading batch dims, several free dims
    c = KT.canonical(("f32", (2, 3, 5, 4), (2, 3, 4, 6), (((3,), (2,)), ((0, 1), (0, 1)))))
    assert (c["b"], c["m"], c["k"], c["n"], c["lhs_t"], c["rhs_t"]) == (6, 5, 4, 6, False,
                                                                       False)


def test_the_bmm_form_computes_what_the_dot_computes():
    rng = np.random.default_rng(0)
    sigs = [("f32", (8, 16), (24, 16), (((1,), (1,)), ((), ()))),
            ("f32", (16, 8), (16, 24), (((0,), (0,)), ((), ()))),
            ("f32", (4, 2, 16), (16, 3), (((2,), (0,)), ((), ()))),         # free dims merged
            ("f32", (2, 3, 5, 4), (2, 3, 6, 4), (((3,), (3,)), ((0, 1), (0, 1)))),
            ("f32", (5, 2, 4), (2, 4, 6), (((2,), (1,)), ((1,), (0,))))]     # batch not first
    for sig in sigs:
        x = rng.standard_normal(sig[1]).astype(np.float32)
        w = rng.standard_normal(sig[2]).astype(np.float32)
        want = np.asarray(lax.dot_general(x, w, sig[3]))
        a, b = KT.as_bmm(sig, x, w)
        c = KT.canonical(sig)
        assert a.shape == (c["b"], c["m"], c["k"]) and b.shape == (c["b"], c["k"], c["n"])
        assert a.flags.c_contiguous != c["lhs_t"] and b.flags.c_contiguous != c["rhs_t"]
        got = np.matmul(a, b).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


_MODEL = '''
from dataclasses import dataclass
import torch
import torch.nn as nn
import torch.nn.functional as F

@dataclass
class GPTConfig:
    block_size: int = 8
    vocab_size: int = 65
    n_layer: int = 1
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = False

class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.emb = nn.Embedding(c.vocab_size, 16)
        self.qk = nn.Linear(16, 32, bias=False)
        self.head = nn.Linear(16, c.vocab_size, bias=False)

    def forward(self, idx, targets):
        x = self.emb(idx)
        q, k = self.qk(x).split(16, dim=2)
        att = F.softmax(q @ k.transpose(1, 2), dim=-1)
        logits = self.head(att @ x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas)
'''


def test_the_table_runs_end_to_end_on_a_model_file(tmp_path):
    """Both children (flowlite's profile and PyTorch's) on a stand-in for nanoGPT's
    model.py: every dot of the step is timed in both, and the table is printed."""
    (tmp_path / "model.py").write_text(_MODEL)
    out = tmp_path / "kt.json"
    r = subprocess.run([sys.executable, "bench/kernel_table.py", "--nanogpt", str(tmp_path),
                        "--steps", "3", "--json", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dot (as XLA has it)" in r.stdout and "costliest other kernels" in r.stdout
    res = json.loads(out.read_text())
    dots = res["torch"]["dots"]
    assert len(dots) >= 3 and any(d["b"] > 1 for d in dots)        # the batched q kᵀ, att x
    assert all(d["count"] >= 1 and d["xla_us"] > 0 and d["torch_us"] > 0 for d in dots)
    assert res["flowlite"]["by_kind"]["dot"] > 0 and res["torch"]["by_kind"]["mm/bmm"] > 0
    assert res["flowlite"]["step_ms"] > 0 and res["torch"]["step_ms"] > 0
