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
names; each missing one is shown with where it is first used.  A name flowlite lists as not
implemented (a stub raising NotImplementedError) counts as missing.

    python tools/torch_coverage.py --surface [--json]

classifies every public function of torch, torch.nn.functional, torch.linalg, torch.special,
torch.fft and every method of torch.Tensor of the installed PyTorch: provided by flowlite, or
listed in flowlite/frontend/surface.py as not implemented or out of scope (with its reason).
It exits 1 on a name that is neither (or on a stale entry); tests/test_torch_coverage.py
runs the same check.
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
    """Whether flowlite provides the torch name (a NotImplementedError stub does not count)."""
    import flowlite as fl
    from flowlite import run
    from flowlite.frontend.surface import is_stub
    head, _, attr = name.partition(".")
    if head in ("Tensor", "Module", "Optimizer"):
        cls = {"Tensor": fl.Tensor, "Module": fl.nn.Module, "Optimizer": fl.optim.Optimizer}
        return hasattr(cls[head], attr) and not is_stub(getattr(cls[head], attr))
    try:
        return not is_stub(run.resolve(name))
    except (AttributeError, ImportError):
        return False


# ---- the classified surface: every public PyTorch function, provided or listed -----------------
def torch_surface_names() -> dict:
    """{group: sorted public function names} from the installed PyTorch: the callables (not
    classes, not modules, no leading underscore) of torch, torch.nn.functional, torch.linalg,
    torch.special, torch.fft, and the callable attributes of torch.Tensor."""
    import inspect
    import types

    import torch
    import torch.nn.functional  # noqa: F401
    from flowlite.frontend.surface import GROUPS

    def public(obj):
        out = []
        for n in dir(obj):
            if n.startswith("_"):
                continue
            v = getattr(obj, n, None)
            if v is None or isinstance(v, types.ModuleType) or inspect.isclass(v):
                continue
            if callable(v):
                out.append(n)
        return sorted(out)
    mods = {"torch": torch, "torch.nn.functional": torch.nn.functional,
            "torch.linalg": torch.linalg, "torch.special": torch.special,
            "torch.fft": torch.fft, "Tensor": torch.Tensor}
    return {g: public(mods[g]) for g in GROUPS}


def provided(group: str, name: str) -> bool:
    return covered(f"Tensor.{name}" if group == "Tensor" else f"{group}.{name}")


def surface_report(names=None) -> dict:
    """Per group: how many names flowlite provides, the classified ones (not implemented /
    out of scope, with category and reason), and the two kinds of error — names neither
    provided nor classified, and classified names flowlite now provides (stale entries) or
    PyTorch does not have."""
    from flowlite.frontend import surface
    names = torch_surface_names() if names is None else names
    ni, oos = surface.not_implemented(), surface.out_of_scope()
    rep = {}
    for group, ns in names.items():
        g = {"total": len(ns), "provided": 0, "not_implemented": {}, "out_of_scope": {},
             "unclassified": [], "stale": [], "unknown": []}
        present = set(ns)
        for n in ns:
            key = (group, n)
            if provided(group, n):
                g["provided"] += 1
                if key in ni or key in oos:
                    g["stale"].append(n)
            elif key in ni:
                g["not_implemented"][n] = ni[key]
            elif key in oos:
                g["out_of_scope"][n] = oos[key]
            else:
                g["unclassified"].append(n)
        g["unknown"] = sorted(n for (gg, n) in list(ni) + list(oos)
                              if gg == group and n not in present)
        rep[group] = g
    return rep


def format_surface(rep) -> str:
    lines = []
    for group, g in rep.items():
        lines.append(f"{group:<20} {g['total']:>4} public functions: {g['provided']} provided, "
                     f"{len(g['not_implemented'])} not implemented, "
                     f"{len(g['out_of_scope'])} out of scope, "
                     f"{len(g['unclassified'])} unclassified")
        by_reason = defaultdict(list)
        for kind in ("not_implemented", "out_of_scope"):
            for n, (cat, reason) in g[kind].items():
                by_reason[(kind, cat, reason)].append(n)
        for (kind, cat, reason), ns in sorted(by_reason.items()):
            lines.append(f"  {kind.replace('_', ' ')} [{cat}] {reason}: {' '.join(ns)}")
        for key in ("unclassified", "stale", "unknown"):
            if g[key]:
                lines.append(f"  {key.upper()}: {' '.join(g[key])}")
    return "\n".join(lines)


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
    ap.add_argument("--surface", action="store_true",
                    help="classify every public PyTorch function (needs torch installed)")
    args = ap.parse_args(argv)
    if args.surface:
        rep = surface_report()
        print(json.dumps(rep, indent=1) if args.json else format_surface(rep))
        return 1 if any(g["unclassified"] or g["stale"] or g["unknown"]
                        for g in rep.values()) else 0
    if not args.paths and not args.names:
        ap.error("give files/directories to scan or --names FILE")
    rep = report(collect(args.paths, args.names))
    print(json.dumps(rep, indent=1) if args.json else format_report(rep, args.missing_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
