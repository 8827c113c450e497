"""Which PyTorch names a body of code uses, and which of them flowlite lacks.

    python tools/torch_coverage.py FILE_OR_DIR... [--names FILE] [--json] [--missing-only]

Each Python file is parsed (never run).  Names are collected in five groups:

* `torch`    — `torch.X` (and deeper: `torch.cuda.is_available`, `torch.utils.data.X`),
* `nn`       — `torch.nn.X` (layers, containers, `nn.init.*`, `nn.utils.*`),
* `F`        — `torch.nn.functional.X`,
* `optim`    — `torch.optim.X` (and `torch.optim.lr_scheduler.X`),
* `Tensor`, `Module`, `Optimizer` — attributes used on any object (`x.view(...)`,
  `model.parameters()`) whose name is an attribute of `torch.Tensor` (or, failing that,
  of `nn.Module` / `optim.Optimizer`) in PyTorch 2.13 — a heuristic: attributes of
  other imported modules (`re.compile`, `np.sort`) are skipped, but `d.values()` on a
  dict still counts as `Tensor.values`, so a few reported names are not tensor uses.

Module aliases are followed through imports (`import torch.nn.functional as F`,
`from torch import nn, optim`, `from torch.utils.data import DataLoader`).  A name is
covered when `flowlite.run.resolve` finds it (the mapping `python -m flowlite.run` uses)
or, for the attribute groups, when `flowlite.Tensor` / `flowlite.nn.Module` /
`flowlite.optim.Optimizer` has the attribute.

`--names FILE` adds names listed one per line (`torch.nn.Linear`, `Tensor.view`; `#`
comments) — a fixed list to measure without the sources.  The report counts distinct
names; each missing one is shown with where it is first used.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

GROUPS = ("torch", "nn", "F", "optim", "Tensor", "Module", "Optimizer")
# Attribute names of the classes, from the shipped list (generated from PyTorch 2.13)
NAMES_FILE = os.path.join(HERE, "torch_attribute_names.txt")


def load_attribute_names(path: str = NAMES_FILE) -> dict:
    out = defaultdict(set)
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                cls, name = line.split()
                out[cls].add(name)
    return out


def group_of(dotted: str) -> str:
    if dotted.startswith("torch.nn.functional."):
        return "F"
    if dotted.startswith("torch.nn."):
        return "nn"
    if dotted.startswith("torch.optim."):
        return "optim"
    if "." not in dotted:
        return dotted
    head = dotted.split(".")[0]
    return head if head in ("Tensor", "Module", "Optimizer") else "torch"


def _dotted(node):
    """`a.b.c` -> ("a", ["b", "c"]), or None when the chain does not start at a Name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, parts[::-1]
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, path, attrs, record):
        self.path, self.attrs, self.record = path, attrs, record
        self.aliases = {}            # local name -> dotted torch path
        self.other_modules = set()   # names bound to other modules (`re`, `np`, `os`)

    def _import_alias(self, name, asname):
        if name == "torch" or name.startswith("torch."):
            if asname:
                self.aliases[asname] = name
            else:
                self.aliases["torch"] = "torch"
        else:
            self.other_modules.add(asname or name.split(".")[0])

    def visit_Import(self, node):
        for a in node.names:
            self._import_alias(a.name, a.asname)

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        if node.level == 0 and (mod == "torch" or mod.startswith("torch.")):
            for a in node.names:
                if a.name == "*":
                    continue
                full = f"{mod}.{a.name}"
                self.aliases[a.asname or a.name] = full
                self.record(full, self.path, node.lineno)

    def visit_Attribute(self, node):
        chain = _dotted(node)
        if chain is not None and chain[0] in self.aliases:
            self.record(".".join([self.aliases[chain[0]], *chain[1]]), self.path, node.lineno)
            return                   # the maximal chain only, not its prefixes
        if chain is not None and chain[0] in self.other_modules:
            return                   # re.compile, np.sort, os.path.join: not torch objects
        name = node.attr
        for cls in ("Tensor", "Module", "Optimizer"):
            if name in self.attrs.get(cls, ()):
                self.record(f"{cls}.{name}", self.path, node.lineno)
                break
        self.generic_visit(node)


def scan_source(source: str, path: str, attrs, record) -> None:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        print(f"torch_coverage: skipping {path}: {e}", file=sys.stderr)
        return
    _Scanner(path, attrs, record).visit(tree)


def python_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                for f in sorted(files):
                    if f.endswith(".py"):
                        yield os.path.join(root, f)
        else:
            yield p


def covered(name: str) -> bool:
    import flowlite as fl
    from flowlite import run
    head, _, attr = name.partition(".")
    if head in ("Tensor", "Module", "Optimizer"):
        cls = {"Tensor": fl.Tensor, "Module": fl.nn.Module, "Optimizer": fl.optim.Optimizer}
        return hasattr(cls[head], attr)
    try:
        run.resolve(name)
        return True
    except (AttributeError, ImportError):
        return False


def collect(paths, names_file=None, attrs=None):
    """{name: [(path, line), ...]} for every torch name used."""
    attrs = attrs if attrs is not None else load_attribute_names()
    uses = defaultdict(list)

    def record(name, path, line):
        uses[name].append((path, line))

    for path in python_files(paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            scan_source(f.read(), path, attrs, record)
    if names_file:
        with open(names_file, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                line = line.split("#")[0].strip()
                if line:
                    record(line, names_file, i)
    return dict(uses)


def report(uses) -> dict:
    groups = {g: {"used": 0, "covered": 0, "missing": {}} for g in GROUPS}
    for name in sorted(uses):
        g = groups[group_of(name)]
        g["used"] += 1
        if covered(name):
            g["covered"] += 1
        else:
            path, line = uses[name][0]
            g["missing"][name] = {"first_use": f"{path}:{line}", "uses": len(uses[name])}
    used = sum(g["used"] for g in groups.values())
    cov = sum(g["covered"] for g in groups.values())
    return {"used": used, "covered": cov,
            "percent": round(100.0 * cov / used, 1) if used else 100.0, "groups": groups}


def format_report(rep, missing_only=False) -> str:
    head = [f"torch names used: {rep['used']}, provided by flowlite: {rep['covered']} "
            f"({rep['percent']}%)"]
    for g, r in rep["groups"].items():
        if r["used"]:
            pct = 100.0 * r["covered"] / r["used"]
            head.append(f"  {g:<10} {r['covered']:>4}/{r['used']:<4} ({pct:.0f}%)")
    missing = ["missing (first use, number of uses):"]
    for r in rep["groups"].values():
        for name, info in r["missing"].items():
            missing.append(f"  {name}  {info['first_use']}  x{info['uses']}")
    return "\n".join(missing if missing_only else head + missing)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="Python files or directories to scan")
    ap.add_argument("--names", help="a file of torch names, one per line")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--missing-only", action="store_true")
    args = ap.parse_args(argv)
    if not args.paths and not args.names:
        ap.error("give files/directories to scan or --names FILE")
    rep = report(collect(args.paths, args.names))
    print(json.dumps(rep, indent=1) if args.json else format_report(rep, args.missing_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
