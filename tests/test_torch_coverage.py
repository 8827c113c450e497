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


# ---- the classified surface (flowlite/frontend/surface.py) ------------------------------------
import pytest  # noqa: E402

import flowlite as fl  # noqa: E402
from flowlite import run  # noqa: E402
from flowlite.frontend import surface  # noqa: E402

_REPORT = {}


def _report():
    if not _REPORT:
        _REPORT.update(tc.surface_report())
    return _REPORT


def test_every_public_pytorch_function_is_provided_or_classified():
    """Every public function of torch, torch.nn.functional, torch.linalg, torch.special,
    torch.fft and every Tensor method of the installed PyTorch (2.13 in CI) is provided by
    flowlite or listed in surface.py with a reason; no entry is stale or unknown to PyTorch."""
    rep = _report()
    assert set(rep) == set(surface.GROUPS)
    problems = {g: {k: r[k] for k in ("unclassified", "stale", "unknown") if r[k]}
                for g, r in rep.items()}
    problems = {g: p for g, p in problems.items() if p}
    assert not problems, problems
    # the categories the task covers are nearly all provided
    assert rep["torch"]["provided"] >= 530 and rep["Tensor"]["provided"] >= 480
    assert rep["torch.linalg"]["provided"] >= 30 and rep["torch.special"]["provided"] >= 35


def _resolved(group, name):
    if group == "Tensor":
        return getattr(fl.Tensor, name)
    return run.resolve(f"{group}.{name}")


def test_not_implemented_names_raise_naming_them():
    """A not-implemented name is callable and raises NotImplementedError with its PyTorch
    name — through flowlite's namespaces and through `python -m flowlite.run`'s mapping."""
    x = fl.ones(2)
    for (group, name), (category, reason) in surface.not_implemented().items():
        fn = _resolved(group, name)
        assert surface.is_stub(fn), (group, name)
        qual = surface.qualified(group, name)
        with pytest.raises(NotImplementedError, match=f"flowlite: {qual} is not implemented"):
            getattr(x, name)(1) if group == "Tensor" else fn(x)
        assert reason in fn.__doc__


def test_out_of_scope_names_stay_absent():
    """Out-of-scope names are not installed: `hasattr(torch, name)` feature tests answer
    False, and flowlite.run's mapping names the missing torch name."""
    for (group, name), _ in surface.out_of_scope().items():
        if group == "Tensor":
            assert not hasattr(fl.Tensor, name), name
            continue
        with pytest.raises(AttributeError, match=f"flowlite has no equivalent of {group}.{name}"):
            run.resolve(f"{group}.{name}")


def test_surface_table_is_well_formed():
    ni, oos = surface.not_implemented(), surface.out_of_scope()
    assert not set(ni) & set(oos)
    for (group, name), (category, reason) in {**ni, **oos}.items():
        assert group in surface.GROUPS and category and reason
    with pytest.raises(ValueError, match="listed twice"):
        surface._table([("torch", "x", "a a", "r")])


def test_the_tutorial_names_that_stopped_makemore_exist():
    # Karpathy's makemore notebooks: loss.log10().item() and torch.histogram
    assert not surface.is_stub(fl.Tensor.log10) and not surface.is_stub(fl.histogram)
    h = fl.histogram(fl.tensor([0.0, 1.0, 1.0, 3.0]), bins=3)
    assert h.hist.tolist() == [1.0, 2.0, 1.0]
    assert abs(fl.tensor(1000.0).log10().item() - 3.0) < 1e-6


def test_surface_command_line():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "torch_coverage.py"),
                        "--surface"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "torch.fft" in r.stdout and "not implemented [spectral]" in r.stdout
