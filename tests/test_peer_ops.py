"""tools/peer_ops.py on a small file in test_ops.py's form (tests/fixtures/peer_ops_sample.py):
what passes, fails and is not applicable, with flowlite, PyTorch and a skewed PyTorch as the
candidate."""
import os
import sys
import types

import torch

import flowlite as fl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import peer_ops  # noqa: E402

SAMPLE = os.path.join(ROOT, "tests", "fixtures", "peer_ops_sample.py")


def _run(candidate):
    source, desc = peer_ops.read_test_ops(SAMPLE, None)
    return {r["test"].split(".")[1]: r for r in peer_ops.run_suite(source, desc, candidate)}


def _statuses(results):
    return {name: r["status"] for name, r in results.items()}


EXPECTED = {"test_exp": "PASS", "test_sum_axis": "PASS", "test_int_vals": "PASS",
            "test_cumsum_bad_dim": "PASS", "test_raises_inside_assert": "PASS",
            "test_body_random_draw": "PASS", "test_tinygrad_statements": "PASS",
            "test_partly_not_applicable": "PASS", "test_not_applicable": "N/A"}


def test_flowlite_and_pytorch_pass_what_they_compute_alike():
    for candidate in (fl, torch):
        res = _run(candidate)
        assert _statuses(res) == EXPECTED, {n: r["error"] for n, r in res.items()}
        assert len(res["test_partly_not_applicable"]["skipped_statements"]) == 1
        assert "PyTorch fails every check" in res["test_not_applicable"]["error"]


def test_a_different_value_or_exception_class_fails():
    class Skewed(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    def cumsum(x, dim):
        if dim >= x.ndim:
            raise ValueError("wrong class")
        return torch.cumsum(x, dim)

    skewed = Skewed("torch")
    skewed.exp = lambda x: torch.exp(x) * 1.01
    skewed.cumsum = cumsum
    res = _run(skewed)
    assert _statuses(res) == {**EXPECTED, "test_exp": "FAIL", "test_cumsum_bad_dim": "FAIL"}
    assert "forward: values differ" in res["test_exp"]["error"]
    assert "raised ValueError" in res["test_cumsum_bad_dim"]["error"]
    assert "PyTorch raises IndexError" in res["test_cumsum_bad_dim"]["error"]
