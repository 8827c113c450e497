"""The package's import layering, checked statically (``ast``) and in fresh interpreters.

Rules (each is one test below; the checker functions are self-tested on synthetic sources first
so that a bug in them cannot make the real checks pass vacuously):

* no import cycle among flowlite's own modules, counting in-function (lazy) imports too and
  modelling that importing ``a.b.c`` first imports the packages ``a`` and ``a.b``;
* no import of a private ``_src`` module (``jax._src`` and the like) anywhere in flowlite/;
* no module except ``flowlite/__init__.py`` imports the top-level package ``flowlite`` itself;
* the subpackages layered on top of the core (``LAYERED_SUBPACKAGES``) import nothing of flowlite
  outside their own subpackage except the public extension API (``LAYERED_MAY_IMPORT``);
* every flowlite module imports on its own in a fresh interpreter.

How imports are modelled.  ``import a.b.c`` / ``from a.b.c import x`` import ``a.b.c`` explicitly
and its parent packages implicitly; ``from a.b import c`` imports the module ``a.b.c`` if there is
one, else the attribute ``c`` of the package ``a.b`` (an explicit import of ``a.b``, i.e. of its
``__init__``).  An implicit import of one of the importer's OWN enclosing packages is a no-op in
Python (those packages are always initialised before any module inside them runs), so it is no
dependency: ``flowlite/nn/layers/conv.py`` doing ``from .. import functional`` depends on
``flowlite.nn.functional`` only.  An explicit import of an enclosing package (``import flowlite``
in ``flowlite/nn/rnn.py``, ``from .. import Module`` in a layer) does depend on that package's
``__init__``, which imports the importer back: a cycle.  Imports under ``if TYPE_CHECKING:`` never
run and are left out of the cycle graph (they still count for every other rule).
"""
from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
import textwrap
import time
from collections import deque
from pathlib import Path

import pytest

# ---- the policy: adjust here ---------------------------------------------------------------------
PACKAGE = "flowlite"
# Subpackages layered on top of the core.  Their modules may import their own subpackage and the
# modules in LAYERED_MAY_IMPORT (and those modules' submodules) — no other flowlite module.
LAYERED_SUBPACKAGES = ("flowlite.nn", "flowlite.optim", "flowlite.data")
LAYERED_MAY_IMPORT = frozenset({"flowlite.extend"})
# A dotted-name component that marks a library's private implementation (jax._src, jaxlib._src).
PRIVATE_COMPONENT = "_src"
# The import-alone check's time limit (one interpreter imports every module in turn).
IMPORT_TIMEOUT_S = 300

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO_ROOT / PACKAGE


# ---- the package's modules -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Module:
    name: str            # "flowlite.nn.functional"; a package is named for its __init__.py
    is_package: bool
    source: str
    path: str            # for messages


def load_package(package_dir: Path = PACKAGE_DIR, package: str = PACKAGE) -> dict[str, Module]:
    """Every .py file under `package_dir` (packages = directories with an __init__.py)."""
    mods: dict[str, Module] = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir)
        # a .py file inside a directory without __init__.py is not importable as part of the
        # package; still parse it (namespace-package semantics) so nothing escapes the checks
        parts = [package, *rel.parts[:-1]]
        is_pkg = path.name == "__init__.py"
        if not is_pkg:
            parts.append(path.stem)
        name = ".".join(parts)
        mods[name] = Module(name, is_pkg, path.read_text(encoding="utf-8"),
                            str(path.relative_to(package_dir.parent)))
    return mods


def synthetic(sources: dict[str, str]) -> dict[str, Module]:
    """In-memory modules for the self-tests: {"flowlite.nn/": src} is a package (its __init__)."""
    mods = {}
    for key, src in sources.items():
        is_pkg = key.endswith("/")
        name = key.rstrip("/")
        path = name.replace(".", "/") + ("/__init__.py" if is_pkg else ".py")
        mods[name] = Module(name, is_pkg, textwrap.dedent(src), path)
    return mods


# ---- collecting imports --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Import:
    importer: str
    target: str          # absolute dotted module name (flowlite's or anybody's)
    line: int
    explicit: bool       # False: a parent package pulled in by importing one of its submodules
    in_function: bool
    type_checking: bool  # under `if TYPE_CHECKING:` (never runs)
    stmt: str            # the statement's source, for messages
    path: str

    def where(self) -> str:
        tags = [t for t, on in (("in function", self.in_function),
                                ("TYPE_CHECKING", self.type_checking),
                                ("implicit parent", not self.explicit)) if on]
        return f"{self.path}:{self.line}{' (' + ', '.join(tags) + ')' if tags else ''}  {self.stmt}"


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _walk(tree: ast.AST):
    """(node, in_function, type_checking) for every node of a module."""
    stack = [(tree, False, False)]
    while stack:
        node, in_fn, tc = stack.pop()
        yield node, in_fn, tc
        child_fn = in_fn or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend((c, child_fn, True) for c in node.body)
            stack.extend((c, child_fn, tc) for c in node.orelse)
            stack.append((node.test, child_fn, tc))
            continue
        stack.extend((c, child_fn, tc) for c in ast.iter_child_nodes(node))


def _parents(name: str):
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


class UnresolvableImport(Exception):
    pass


def resolve_from(importer: Module, level: int, module: str | None) -> str:
    """The absolute module of `from <level dots><module> import ...` inside `importer`."""
    if level == 0:
        return module or ""
    pkg = importer.name.split(".") if importer.is_package else importer.name.split(".")[:-1]
    if level - 1 >= len(pkg):
        raise UnresolvableImport(f"{importer.path}: relative import beyond the top-level package")
    base = pkg[:len(pkg) - (level - 1)]
    return ".".join(base + ([module] if module else []))


_DYNAMIC_IMPORTERS = {"import_module", "__import__"}


def _dynamic_import_name(node: ast.AST) -> str | None:
    """`importlib.import_module("x.y")` / `__import__("x.y")` with a literal absolute name."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    f = node.func
    fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    arg = node.args[0]
    if (fname in _DYNAMIC_IMPORTERS and isinstance(arg, ast.Constant)
            and isinstance(arg.value, str) and arg.value and not arg.value.startswith(".")):
        return arg.value
    return None


def collect_imports(mod: Module, known: dict[str, Module]) -> tuple[list[Import], list[str]]:
    """All imports of one module (see the module docstring), plus problems found on the way:
    unresolvable relative imports and imports of flowlite modules that do not exist."""
    tree = ast.parse(mod.source, filename=mod.path)
    out: list[Import] = []
    problems: list[str] = []
    root = mod.name.split(".")[0]

    def add(target, node, explicit, in_fn, tc, stmt):
        out.append(Import(mod.name, target, node.lineno, explicit, in_fn, tc, stmt, mod.path))
        if explicit:
            for p in _parents(target):
                out.append(Import(mod.name, p, node.lineno, False, in_fn, tc, stmt, mod.path))
            if target.split(".")[0] == root and target not in known:
                problems.append(f"{mod.path}:{node.lineno}: no module {target!r}  ({stmt})")

    for node, in_fn, tc in _walk(tree):
        if isinstance(node, ast.Import):
            stmt = ast.get_source_segment(mod.source, node) or ast.unparse(node)
            for alias in node.names:
                add(alias.name, node, True, in_fn, tc, stmt)
        elif isinstance(node, ast.ImportFrom):
            stmt = ast.get_source_segment(mod.source, node) or ast.unparse(node)
            if node.module == "__future__":
                continue
            try:
                base = resolve_from(mod, node.level, node.module)
            except UnresolvableImport as e:
                problems.append(f"{e}:{node.lineno}  ({stmt})")
                continue
            attribute_import = False
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if alias.name != "*" and sub in known:
                    add(sub, node, True, in_fn, tc, stmt)
                else:
                    attribute_import = True
            if attribute_import:
                add(base, node, True, in_fn, tc, stmt)
        else:
            name = _dynamic_import_name(node)
            if name is not None:
                stmt = ast.get_source_segment(mod.source, node) or ast.unparse(node)
                add(name, node, True, in_fn, tc, stmt)
    return out, problems


def collect_all(mods: dict[str, Module]) -> tuple[list[Import], list[str]]:
    imports, problems = [], []
    for m in mods.values():
        i, p = collect_imports(m, mods)
        imports += i
        problems += p
    return imports, problems


# ---- rule: no cycles -----------------------------------------------------------------------------
def import_graph(imports: list[Import], mods: dict[str, Module]) -> dict[str, dict[str, list]]:
    """importer -> {imported flowlite module -> [the Imports behind that edge]}."""
    graph: dict[str, dict[str, list]] = {m: {} for m in mods}
    for imp in imports:
        if imp.target not in mods or imp.target == imp.importer or imp.type_checking:
            continue
        if not imp.explicit and imp.target in _parents(imp.importer):
            continue   # an enclosing package: initialised before the importer, no dependency
        graph[imp.importer].setdefault(imp.target, []).append(imp)
    return graph


def strongly_connected(graph: dict[str, dict]) -> list[list[str]]:
    """Tarjan's SCCs (iterative), each sorted, only those with more than one module."""
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        sccs.append(sorted(comp))
    return sorted(sccs)


def _shortest_path(graph, src, dst, allowed) -> list[str] | None:
    prev, q = {src: None}, deque([src])
    while q:
        v = q.popleft()
        if v == dst:
            path = []
            while v is not None:
                path.append(v)
                v = prev[v]
            return path[::-1]
        for w in sorted(graph[v]):
            if w in allowed and w not in prev:
                prev[w] = v
                q.append(w)
    return None


def find_cycles(graph: dict[str, dict]) -> list[list[str]]:
    """For every import edge that lies on a cycle, the shortest cycle through it, deduplicated;
    each cycle is [m0, m1, ..., m0] rotated to start at its smallest module."""
    cycles, seen = [], set()
    for comp in strongly_connected(graph):
        members = set(comp)
        for u in comp:
            for v in sorted(graph[u]):
                if v not in members:
                    continue
                back = _shortest_path(graph, v, u, members)
                ring = [u, *back[:-1]]
                k = ring.index(min(ring))
                ring = ring[k:] + ring[:k]
                if tuple(ring) not in seen:
                    seen.add(tuple(ring))
                    cycles.append(ring + [ring[0]])
    return sorted(cycles, key=lambda c: (len(c), c))


def format_cycles(cycles: list[list[str]], graph: dict[str, dict]) -> str:
    lines = []
    for c in cycles:
        lines.append(" -> ".join(c))
        for u, v in zip(c, c[1:]):
            lines.append(f"      {graph[u][v][0].where()}")
    return "\n".join(lines)


# ---- rule: no private `_src` modules -------------------------------------------------------------
def private_imports(mods: dict[str, Module]) -> list[str]:
    """Imports (static or importlib with a literal name) naming a `_src` module, and attribute
    access `<imported module>._src` (`import jax; jax._src.x`)."""
    bad = []
    for mod in mods.values():
        tree = ast.parse(mod.source, filename=mod.path)
        module_aliases = set()        # names bound by `import x` / `import x as y`
        named = []                    # (line, dotted name, statement)
        for node, _, _ in _walk(tree):
            seg = lambda n: ast.get_source_segment(mod.source, n) or ast.unparse(n)  # noqa: E731
            if isinstance(node, ast.Import):
                for a in node.names:
                    module_aliases.add(a.asname or a.name.split(".")[0])
                    named.append((node.lineno, a.name, seg(node)))
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                named.append((node.lineno, base, seg(node)))
                named += [(node.lineno, f"{base}.{a.name}", seg(node)) for a in node.names]
            elif (name := _dynamic_import_name(node)) is not None:
                named.append((node.lineno, name, seg(node)))
        for node, _, _ in _walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == PRIVATE_COMPONENT
                    and isinstance(node.value, ast.Name) and node.value.id in module_aliases):
                named.append((node.lineno, f"{node.value.id}.{node.attr}",
                              ast.get_source_segment(mod.source, node) or ast.unparse(node)))
        for line, name, stmt in named:
            if PRIVATE_COMPONENT in name.split("."):
                bad.append(f"{mod.path}:{line}  {stmt}")
    return sorted(set(bad))


# ---- rule: nobody but flowlite/__init__.py imports `flowlite` itself -----------------------------
def top_level_package_imports(imports: list[Import], package: str = PACKAGE) -> list[str]:
    return sorted({i.where() for i in imports
                   if i.explicit and i.target == package and i.importer != package})


# ---- rule: nn / optim / data sit on the public extension API only --------------------------------
def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layering_violations(imports: list[Import], mods: dict[str, Module],
                        layered=LAYERED_SUBPACKAGES, may_import=LAYERED_MAY_IMPORT) -> list[str]:
    bad = set()
    for i in imports:
        own = next((p for p in layered if _within(i.importer, p)), None)
        if own is None or not i.explicit or i.target.split(".")[0] != PACKAGE:
            continue
        if _within(i.target, own) or any(_within(i.target, ok) for ok in may_import):
            continue
        bad.add(f"{i.importer} -> {i.target}    {i.where()}")
    return sorted(bad)


# ==== self-tests of the checkers on synthetic packages ============================================
def _cycles_of(sources):
    mods = synthetic(sources)
    imports, problems = collect_all(mods)
    assert not problems, problems
    return [" -> ".join(c) for c in find_cycles(import_graph(imports, mods))]


def test_checker_finds_a_two_module_cycle():
    assert _cycles_of({"flowlite/": "", "flowlite.a": "from . import b",
                       "flowlite.b": "from .a import x"}) == [
        "flowlite.a -> flowlite.b -> flowlite.a"]
    assert _cycles_of({"flowlite/": "", "flowlite.a": "import flowlite.b",
                       "flowlite.b": "from flowlite.a import x"}) == [
        "flowlite.a -> flowlite.b -> flowlite.a"]


def test_checker_finds_in_function_and_longer_cycles():
    assert _cycles_of({
        "flowlite/": "", "flowlite.a": "from .b import y",
        "flowlite.b": "def f():\n    if 1:\n        from .c import z\n",
        "flowlite.c": "class K:\n    def m(self):\n        import flowlite.a\n"}) == [
        "flowlite.a -> flowlite.b -> flowlite.c -> flowlite.a"]
    assert _cycles_of({"flowlite/": "", "flowlite.a": "import importlib\n"
                       "def f(): importlib.import_module('flowlite.b')",
                       "flowlite.b": "from . import a"}) == [
        "flowlite.a -> flowlite.b -> flowlite.a"]


def test_checker_finds_no_cycle_in_a_clean_package():
    clean = {
        "flowlite/": "from . import core, nn\nfrom .core import T",
        "flowlite.core": "import numpy\nfrom jax import numpy as jnp\n"
                         "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from .nn.layers.conv import Conv\n",
        "flowlite.extend": "from .core import T",
        # a subpackage importing its own package's __init__ for a sibling SUBMODULE is normal
        "flowlite.nn/": "from . import functional, layers\nfrom .layers import *",
        "flowlite.nn.functional": "from ..extend import T\nfrom . import init",
        "flowlite.nn.init": "from flowlite.extend import T",
        "flowlite.nn.layers/": "from .conv import Conv",
        "flowlite.nn.layers.conv": "from .. import functional\nfrom ..init import x\n"
                                   "import flowlite.nn.functional as F\n"
                                   "from ...extend import T",
    }
    assert _cycles_of(clean) == []
    # the TYPE_CHECKING import is all that kept the cycle out
    unguarded = dict(clean, **{"flowlite.core": "from .nn.layers.conv import Conv"})
    assert _cycles_of(unguarded)[:2] == [
        "flowlite.core -> flowlite.nn.layers.conv -> flowlite.extend -> flowlite.core",
        "flowlite.core -> flowlite.nn -> flowlite.nn.functional -> flowlite.extend "
        "-> flowlite.core"]


def test_checker_models_parent_packages_and_package_attribute_imports():
    # `import flowlite` inside nn: flowlite/__init__ imports nn, which imports rnn
    assert _cycles_of({"flowlite/": "from . import nn", "flowlite.nn/": "from . import rnn",
                       "flowlite.nn.rnn": "def f():\n    import flowlite as fl\n"}) == [
        "flowlite -> flowlite.nn -> flowlite.nn.rnn -> flowlite"]
    # `from .. import Module` (an ATTRIBUTE of the enclosing package): a real cycle
    assert _cycles_of({"flowlite/": "", "flowlite.nn/": "from .conv import C",
                       "flowlite.nn.conv": "from . import Module"}) == [
        "flowlite.nn -> flowlite.nn.conv -> flowlite.nn"]
    # importing a submodule of ANOTHER package runs that package's __init__ first
    assert _cycles_of({"flowlite/": "", "flowlite.compile": "from .nn import module",
                       "flowlite.nn/": "from . import functional", "flowlite.nn.module": "",
                       "flowlite.nn.functional": "from .. import compile"}) == [
        "flowlite.compile -> flowlite.nn -> flowlite.nn.functional -> flowlite.compile"]
    # ... but a module's own enclosing packages are initialised before it: no dependency
    assert _cycles_of({"flowlite/": "from .nn import x", "flowlite.nn/": "from .a import x",
                       "flowlite.nn.a": "from .b import y\nimport flowlite.nn.b",
                       "flowlite.nn.b": ""}) == []


def test_checker_resolves_relative_imports():
    mods = synthetic({"flowlite/": "", "flowlite.nn/": "from . import layers",
                      "flowlite.nn.functional": "", "flowlite.nn.layers/": "",
                      "flowlite.nn.layers.conv": "from .. import functional\n"
                                                 "from ... import ops\nfrom ...ops import f\n"
                                                 "from . import pool\nfrom .._x import y",
                      "flowlite.ops": "", "flowlite.nn.layers.pool": ""})
    imports, problems = collect_imports(mods["flowlite.nn.layers.conv"], mods)
    assert {i.target for i in imports if i.explicit} == {
        "flowlite.nn.functional", "flowlite.ops", "flowlite.nn.layers.pool", "flowlite.nn._x"}
    assert problems == ["flowlite/nn/layers/conv.py:5: no module 'flowlite.nn._x'  "
                        "(from .._x import y)"]
    assert {(i.target, i.explicit) for i in collect_imports(mods["flowlite.nn"], mods)[0]} == {
        ("flowlite", False), ("flowlite.nn", False), ("flowlite.nn.layers", True)}
    bad = synthetic({"flowlite/": "", "flowlite.a": "from ... import x"})
    assert "beyond the top-level package" in collect_all(bad)[1][0]


def test_checker_finds_private_src_imports():
    mods = synthetic({"flowlite/": "", "flowlite.a": """\
        import jax
        from jax import lax
        def f():
            from jax._src.lax import convolution
        """, "flowlite.b": "import jax._src.interpreters.ad as ad", "flowlite.c": """\
        from jax import _src
        import importlib
        m = importlib.import_module("jaxlib._src.x")
        """, "flowlite.d": "import jax as J\ny = J._src.config", "flowlite.e": """\
        import jax
        _src = 1
        x = self._src + jax.lax.x  # not a private module
        """})
    assert private_imports(mods) == [
        "flowlite/a.py:4  from jax._src.lax import convolution",
        "flowlite/b.py:1  import jax._src.interpreters.ad as ad",
        "flowlite/c.py:1  from jax import _src",
        "flowlite/c.py:3  importlib.import_module(\"jaxlib._src.x\")",
        "flowlite/d.py:2  J._src"]


def test_checker_finds_imports_of_the_top_level_package():
    mods = synthetic({"flowlite/": "from . import a\nfrom .a import x",
                      "flowlite.a": "import flowlite.b\nfrom flowlite import b\n"
                                    "from . import c as _c",
                      "flowlite.b": "def f():\n    import flowlite\n",
                      "flowlite.c": "from flowlite import Tensor",
                      "flowlite.nn/": "", "flowlite.nn.x": "from .. import Tensor"})
    imports, _ = collect_all(mods)
    assert [w.split("  ")[0] for w in top_level_package_imports(imports)] == [
        "flowlite/b.py:2 (in function)", "flowlite/c.py:1", "flowlite/nn/x.py:1"]


def test_checker_finds_layering_violations():
    mods = synthetic({
        "flowlite/": "", "flowlite.tensor": "", "flowlite.extend": "", "flowlite.ops": "",
        "flowlite.nn/": "from . import functional", "flowlite.optim/": "",
        "flowlite.nn.functional": "from ..extend import T\nfrom . import module\n"
                                  "import flowlite.nn.module\nfrom ..tensor import T\n"
                                  "def f():\n    from flowlite import ops\n",
        "flowlite.nn.module": "from ..optim import SGD\nimport flowlite.extend as X",
        "flowlite.optim.sgd": "from ..nn import Module\nfrom .. import extend",
        "flowlite.data/": "", "flowlite.data.loader": "from .. import tensor",
        "flowlite.compile": "from .tensor import T\nfrom .nn import module",   # core: unrestricted
    })
    imports, problems = collect_all(mods)
    assert not problems
    assert [v.split("    ")[0] for v in layering_violations(imports, mods)] == [
        "flowlite.data.loader -> flowlite.tensor", "flowlite.nn.functional -> flowlite.ops",
        "flowlite.nn.functional -> flowlite.tensor", "flowlite.nn.module -> flowlite.optim",
        "flowlite.optim.sgd -> flowlite.nn"]


def test_policy_names_real_modules():
    """A typo in the policy constants would silently allow or exempt everything."""
    mods = load_package()
    assert PACKAGE in mods and len(mods) > 10
    for name in LAYERED_SUBPACKAGES:
        assert name in mods and mods[name].is_package, name
    for name in LAYERED_MAY_IMPORT:
        assert name in mods, f"{name} (LAYERED_MAY_IMPORT) does not exist"


# ==== the real checks =============================================================================
@pytest.fixture(scope="module")
def package():
    mods = load_package()
    imports, problems = collect_all(mods)
    return mods, imports, problems


def test_every_flowlite_import_names_an_existing_module(package):
    _, _, problems = package
    if problems:
        pytest.fail("imports that cannot resolve:\n" + "\n".join(problems), pytrace=False)


def test_no_import_cycles(package):
    mods, imports, _ = package
    graph = import_graph(imports, mods)
    cycles = find_cycles(graph)
    sccs = strongly_connected(graph)
    if cycles:
        pytest.fail(f"{len(cycles)} import cycle(s) among flowlite modules (in-function imports "
                    f"count; strongly connected groups: "
                    f"{'; '.join('{' + ', '.join(s) + '}' for s in sccs)}):\n"
                    + format_cycles(cycles, graph), pytrace=False)


def test_no_private_src_imports(package):
    mods, _, _ = package
    bad = private_imports(mods)
    if bad:
        pytest.fail(f"imports of private `{PRIVATE_COMPONENT}` modules:\n" + "\n".join(bad),
                    pytrace=False)


def test_only_the_package_init_imports_the_top_level_package(package):
    _, imports, _ = package
    bad = top_level_package_imports(imports)
    if bad:
        pytest.fail(f"modules importing the top-level package `{PACKAGE}` itself (only "
                    f"{PACKAGE}/__init__.py may):\n" + "\n".join(bad), pytrace=False)


def test_layered_subpackages_use_only_the_extension_api(package):
    mods, imports, _ = package
    bad = layering_violations(imports, mods)
    if bad:
        pytest.fail(f"{', '.join(LAYERED_SUBPACKAGES)} may import only their own subpackage and "
                    f"{', '.join(sorted(LAYERED_MAY_IMPORT))}; {len(bad)} imports do not:\n"
                    + "\n".join(bad), pytrace=False)


# One fresh interpreter imports the third-party stack once, then imports each flowlite module
# alone: before each, every flowlite module is dropped from sys.modules, so the module must
# import with nothing of flowlite loaded (what matters for the package's own import order),
# without paying jax's ~3 CPU-seconds of import per module.
_IMPORT_EACH_ALONE = textwrap.dedent("""
    import importlib, sys, traceback
    import jax, numpy, optax  # noqa: F401  (third-party stack, loaded once)
    failed = []
    for name in sys.argv[1:]:
        for m in [m for m in sys.modules if m == "flowlite" or m.startswith("flowlite.")]:
            del sys.modules[m]
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001  (report every failure, keep going)
            failed.append(f"{name}: {type(e).__name__}: {e}")
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
""")


def test_every_module_imports_alone():
    modules = sorted(load_package())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _IMPORT_EACH_ALONE, *modules], cwd=REPO_ROOT,
                       env=env, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
    print(f"{len(modules)} modules imported alone in {time.perf_counter() - t0:.1f}s")
    if r.returncode != 0:
        pytest.fail(f"modules that fail to import alone (each in a process with no flowlite "
                    f"module loaded):\n{r.stdout}{r.stderr[-2000:]}", pytrace=False)
