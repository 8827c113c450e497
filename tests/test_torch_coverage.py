"""tools/torch_coverage.py on small fixtures: names found through import aliases, grouped,
and checked against flowlite (present names covered, absent ones reported with a location)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import torch_coverage as tc  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
SAMPLE = os.path.join(FIX, "torch_coverage_sample.py")


def test_scan_finds_names_through_aliases():
    uses = tc.collect([SAMPLE])
    for name in ["torch.nn.Module", "torch.nn.Linear", "torch.nn.functional.relu",
                 "torch.nn.functional.mse_loss", "torch.optim.Adam",
                 "torch.utils.data.DataLoader", "torch.utils.data.TensorDataset",
                 "torch.zeros", "torch.cuda.is_available", "torch.fft.rfft",
                 "torch.definitely_missing_function", "Tensor.view", "Tensor.size",
                 "Tensor.backward", "Tensor.item", "Tensor.sum", "Module.parameters",
                 "Module.zero_grad", "Optimizer.step"]:
        assert name in uses, name
    assert not any("not_a_tensor_method" in n for n in uses)
    assert uses["torch.fft.rfft"][0] == (SAMPLE, 26)
    assert tc.group_of("torch.nn.functional.relu") == "F"
    assert tc.group_of("torch.optim.lr_scheduler.StepLR") == "optim"


def test_report_marks_exactly_what_flowlite_lacks():
    rep = tc.report(tc.collect([SAMPLE], os.path.join(FIX, "torch_names.txt")))
    missing = {n for g in rep["groups"].values() for n in g["missing"]}
    assert missing == {"torch.fft.rfft", "torch.definitely_missing_function",
                       "torch.nn.NotALayer"}
    assert rep["groups"]["torch"]["missing"]["torch.fft.rfft"]["first_use"].endswith(
        "torch_coverage_sample.py:26")
    assert rep["used"] - rep["covered"] == 3 and 0 < rep["percent"] < 100
    text = tc.format_report(rep)
    assert text.startswith(f"torch names used: {rep['used']}, provided by flowlite: ")
    assert "torch.nn.NotALayer" in text


def test_command_line_json():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "torch_coverage.py"),
                        "--names", os.path.join(FIX, "torch_names.txt"), "--json"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    import json
    rep = json.loads(r.stdout)
    assert rep["used"] == 8 and rep["covered"] == 7
