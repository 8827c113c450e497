"""nanoGPT-style `generate()` — crop to block_size, logits[:, -1, :] / temperature, top-k
masking with -inf, softmax, multinomial, cat — runs unchanged with `import flowlite as torch`
(the model in bench/torchstyle_gpt.py is ordinary PyTorch code, run on both frameworks).

Checked: the same weights give PyTorch's tokens (greedy: top_k=1 makes multinomial exact);
sampling with top-k draws only among the k most likely tokens; one executable per token;
and the measured compile behaviour (documented in the README): the growing context is one
length family (flowlite/engine/buckets.py) — a few compiles while it is recognised, then one per
bucket of lengths, none when the same generation runs again — with PyTorch's tokens."""
import os
import sys

import numpy as np
import pytest
import torch as pt

import flowlite as fl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from bench.torchstyle_gpt import GPTConfig, build, copy_weights  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")

CFG = GPTConfig(block_size=8, vocab_size=23, n_layer=1, n_head=2, n_embd=16)


@pytest.fixture(scope="module")
def models():
    fl.manual_seed(0)
    ours = build(fl)(CFG)
    ours.eval()
    theirs = build(pt)(CFG)
    theirs.eval()
    copy_weights(ours, theirs, pt.from_numpy)
    fl.sync()
    return ours, theirs


def test_greedy_generation_matches_pytorch_across_the_block_size(models):
    ours, theirs = models
    prompt = np.array([[1, 5, 7, 2, 9, 3, 4], [4, 4, 0, 11, 8, 6, 1]], np.int64)
    got = ours.generate(fl.from_numpy(prompt), 3, temperature=0.7, top_k=1)
    ref = theirs.generate(pt.from_numpy(prompt), 3, temperature=0.7, top_k=1)
    assert tuple(got.shape) == (2, 10)        # the last step crops the context to block_size
    np.testing.assert_array_equal(got.numpy(), ref.numpy())


def test_top_k_sampling_stays_in_the_top_k_and_is_reproducible(models):
    ours, theirs = models
    prompt = np.array([[3, 1, 4, 1, 5, 9, 2]], np.int64)
    fl.manual_seed(11)
    a = ours.generate(fl.from_numpy(prompt), 3, temperature=1.3, top_k=4).numpy()
    fl.manual_seed(11)
    b = ours.generate(fl.from_numpy(prompt), 3, temperature=1.3, top_k=4).numpy()
    np.testing.assert_array_equal(a, b)
    seq = a[0]
    with pt.no_grad():
        for t in range(prompt.shape[1], seq.shape[0]):
            ctx = pt.from_numpy(seq[max(0, t - CFG.block_size):t][None].copy())
            top = pt.topk(theirs(ctx)[0, -1], 4).indices.tolist()
            assert seq[t] in top


def test_one_executable_per_token_and_no_recompiles_when_run_again(models):
    ours, _ = models
    prompt = fl.from_numpy(np.array([[2, 7, 1, 8, 2, 8, 1]], np.int64))
    fl.sync()
    n_new = 3
    c0 = fl.metrics.counters()
    out = ours.generate(prompt, n_new, temperature=0.9, top_k=4)
    out.numpy()
    c1 = fl.metrics.counters()
    # one executable per token, plus the final read of the result
    assert c1["executions"] - c0["executions"] <= n_new + 1
    out = ours.generate(prompt, n_new, temperature=0.9, top_k=4)
    out.numpy()
    c2 = fl.metrics.counters()
    assert c2["compiles"] == c1["compiles"]            # same lengths again: all cache hits
    assert c2["executions"] - c1["executions"] <= n_new + 1


def test_long_generation_compiles_per_bucket_not_per_length_with_pytorchs_tokens(models):
    from flowlite.engine import buckets
    ours, theirs = models
    fl.clear_cache()
    buckets.set_buckets(True)
    prompt = np.array([[3], [5]], np.int64)
    n_new = 24                  # lengths 1..8 grow, 9..24 are cropped to block_size
    c0 = fl.metrics.counters()
    got = ours.generate(fl.from_numpy(prompt), n_new, temperature=0.8, top_k=1).numpy()
    c1 = fl.metrics.counters()
    ref = theirs.generate(pt.from_numpy(prompt), n_new, temperature=0.8, top_k=1).numpy()
    np.testing.assert_array_equal(got, ref)
    # exact per length: 24 compiles.  Here: the first token's graph, then two families of
    # lengths (growing; cropped, where only idx grows), each two exact graphs to recognise it
    # and one executable per bucket (16, then 32 once idx passes 16 tokens)
    assert c1["compiles"] - c0["compiles"] <= 9
    assert c1["executions"] - c0["executions"] <= n_new + 1
