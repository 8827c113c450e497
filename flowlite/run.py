"""`python -m flowlite.run script.py [args...]`: run an unchanged PyTorch script on flowlite.

A meta-path import hook resolves `torch` and the `torch.*` modules a script imports to
their flowlite counterparts (`torch.nn.functional` -> `flowlite.nn.functional`,
`torch.utils.data` -> `flowlite.utils.data`, ...; the table is `TORCH_MODULES`).  Importing
a torch module flowlite has no counterpart for raises ModuleNotFoundError naming the torch
module; an attribute flowlite lacks (`from torch.nn import Foo`, `torch.fft`) raises
ImportError/AttributeError naming the torch name.  Nothing is ever silently substituted
and the real PyTorch is never imported while the hook is installed.

Each torch module is a thin alias object over the flowlite module: reads come from the
flowlite module (so `torch.nn.Module is flowlite.nn.Module`), writes go to it (so
`torch.backends.cudnn.benchmark = True` sets flowlite's flag).  While `torch` is served,
dtypes and sizes print as PyTorch prints them (`torch.float32`, `torch.Size([4, 100])`);
tensors, devices and autograd nodes print PyTorch's forms in any case.

`python -m flowlite.run --summary script.py` prints at exit where the run's time went
(flowlite.metrics.summary(); FLOWLITE_SUMMARY=1 does it for any program importing flowlite).

In-process use (a notebook): `import flowlite.run; flowlite.run.install()` then `import torch`.

Layer: package — imports nothing of flowlite.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import types

__all__ = ["TORCH_MODULES", "install", "uninstall", "installed", "run_path", "main",
           "resolve"]

# "flowlite" (also when this file runs as __main__ under `python -m flowlite.run`)
_PKG = (__spec__.name if __spec__ is not None else __name__).rpartition(".")[0]

# torch module -> flowlite module.  Only these resolve: flowlite's internal modules
# (executor, ir, ...) are never reachable under a torch name.
TORCH_MODULES = {
    "torch": "",
    "torch.nn": ".nn",
    "torch.nn.functional": ".nn.functional",
    "torch.nn.init": ".nn.init",
    "torch.nn.utils": ".nn.utils",
    "torch.nn.utils.rnn": ".nn.utils.rnn",
    "torch.nn.parallel": ".nn.parallel",
    "torch.nn.parameter": ".nn",               # Parameter lives in torch.nn.parameter
    # torch.nn.modules.<file>.<Class>: the classes, found by name in flowlite.nn
    **{f"torch.nn.modules{sub}": ".nn" for sub in (
        "", ".module", ".activation", ".container", ".conv", ".linear", ".loss",
        ".normalization", ".batchnorm", ".pooling", ".dropout", ".sparse", ".rnn",
        ".transformer", ".flatten", ".instancenorm", ".padding", ".pixelshuffle")},
    "torch.optim": ".optim",
    "torch.optim.lr_scheduler": ".optim.lr_scheduler",
    "torch.optim.optimizer": ".optim",
    "torch.utils": ".compat.utils",
    "torch.utils.data": ".compat.utils.data",
    "torch.utils.data.dataset": ".compat.utils.data",
    "torch.utils.data.dataloader": ".compat.utils.data",
    "torch.utils.data.sampler": ".compat.utils.data",
    "torch.utils.data.distributed": ".compat.utils.data",
    "torch.cuda": ".compat.cuda",
    "torch.accelerator": ".compat.accelerator",
    "torch.backends": ".compat.backends",
    "torch.backends.cudnn": ".compat.backends.cudnn",
    "torch.backends.cuda": ".compat.backends.cuda",
    "torch.backends.mps": ".compat.backends.mps",
    "torch.autograd": ".autograd",
    "torch.autograd.function": ".autograd",
    "torch.onnx": ".compat.onnx",   # importable; export raises (flowlite writes no ONNX)
    "torch.amp": ".compat.amp",     # autocast (CPU autocast; others say they do nothing)
    "torch.cpu": ".compat.cpu",     # torch.cpu.amp.autocast
    "torch.cuda.amp": ".compat.amp",
    "torch.distributed": ".distributed",   # process groups; DDP is nn.parallel's
    "torch.serialization": ".formats.serialization",
    "torch.profiler": ".compat.profiler",
    "torch.random": ".frontend.random",
    "torch.linalg": ".linalg",
    "torch.special": ".special",
    "torch.fft": ".fft",
}


def _flowlite_name(torch_name: str) -> str:
    return _PKG + TORCH_MODULES[torch_name]


class _TorchModule(types.ModuleType):
    """`torch.X` as seen by the script: every read is served by the flowlite module."""

    def __init__(self, torch_name: str, target: types.ModuleType):
        super().__init__(torch_name, getattr(target, "__doc__", None))
        d = self.__dict__
        d["_flowlite_module"] = target
        d["_cache"] = {}

    def __getattr__(self, name):            # only for names not in the alias's own dict
        d = self.__dict__
        cache = d["_cache"]
        if name in cache:
            return cache[name]
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        torch_name = d["__name__"]
        sub = f"{torch_name}.{name}"
        if sub in TORCH_MODULES:            # a submodule: hand out its alias, not flowlite's
            value = importlib.import_module(sub)
        else:
            target = d["_flowlite_module"]
            try:
                value = getattr(target, name)
            except AttributeError:
                raise AttributeError(
                    f"flowlite has no equivalent of {sub} (looked for {target.__name__}.{name}); "
                    "see flowlite's docs/porting.md") from None
        if callable(value) or isinstance(value, types.ModuleType):
            cache[name] = value             # functions and classes never change: skip the lookup
        return value

    def __setattr__(self, name, value):
        d = self.__dict__
        # the import machinery's own bookkeeping (and `torch.nn = <alias>` after importing a
        # submodule) stays on the alias; a script's writes reach the flowlite module
        if (name.startswith("__") and name.endswith("__")) or isinstance(value, _TorchModule):
            d[name] = value
            return
        d["_cache"].pop(name, None)
        setattr(d["_flowlite_module"], name, value)

    def __delattr__(self, name):
        d = self.__dict__
        d["_cache"].pop(name, None)
        if name in d:
            del d[name]
        else:
            delattr(d["_flowlite_module"], name)

    def __dir__(self):
        subs = {t.rpartition(".")[2] for t in TORCH_MODULES
                if t.rpartition(".")[0] == self.__dict__["__name__"]}
        return sorted(set(dir(self.__dict__["_flowlite_module"])) | subs)

    def __repr__(self):
        return (f"<module {self.__dict__['__name__']!r} (flowlite: "
                f"{self.__dict__['_flowlite_module'].__name__})>")


def _printed_prefix(name: str) -> None:
    """Dtypes and sizes print as `torch.float32`, `torch.Size([4, 100])` while the script
    knows flowlite as torch (flowlite.engine.namespace)."""
    importlib.import_module(_PKG + ".engine.namespace").set_prefix(name)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        target = importlib.import_module(_flowlite_name(spec.name))
        if spec.name == "torch":
            _printed_prefix("torch")
        return _TorchModule(spec.name, target)

    def exec_module(self, module):
        pass


class TorchFinder(importlib.abc.MetaPathFinder):
    """Resolves `torch` / `torch.*` imports to flowlite; refuses the ones it cannot."""

    _loader = _Loader()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        if fullname not in TORCH_MODULES:
            parent = fullname.rpartition(".")[0]
            known = sorted(t for t in TORCH_MODULES if t.rpartition(".")[0] == parent)
            raise ModuleNotFoundError(
                f"flowlite has no equivalent of the PyTorch module {fullname!r} (flowlite.run "
                f"maps {', '.join(known) or 'no submodules of ' + parent}); see flowlite's "
                "docs/porting.md", name=fullname)
        is_pkg = any(t.startswith(fullname + ".") for t in TORCH_MODULES)
        spec = importlib.machinery.ModuleSpec(fullname, self._loader, is_package=is_pkg)
        if is_pkg:
            spec.submodule_search_locations = []
        return spec


_finder = TorchFinder()


def installed() -> bool:
    return _finder in sys.meta_path


def install() -> None:
    """Make `import torch` (and its submodules in TORCH_MODULES) resolve to flowlite."""
    loaded = sys.modules.get("torch")
    if loaded is not None and not isinstance(loaded, _TorchModule):
        raise RuntimeError("flowlite.run.install(): the real PyTorch is already imported in "
                           "this process; install the hook before anything imports torch")
    if not installed():
        sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    """Remove the hook and forget the torch aliases (the flowlite modules stay loaded)."""
    if installed():
        sys.meta_path.remove(_finder)
    for name in [n for n, m in sys.modules.items() if isinstance(m, _TorchModule)]:
        del sys.modules[name]
    if (_PKG + ".engine.namespace") in sys.modules:
        _printed_prefix("flowlite")


def resolve(torch_name: str):
    """The flowlite object a dotted torch name refers to (`"torch.nn.functional.relu"`),
    or raise AttributeError/ModuleNotFoundError naming what flowlite lacks.  Works with or
    without the hook installed (the coverage tool uses it)."""
    parts = torch_name.split(".")
    if parts[0] != "torch":
        raise ValueError(f"resolve: {torch_name!r} is not a torch name")
    k = 1
    while k < len(parts) and ".".join(parts[:k + 1]) in TORCH_MODULES:
        k += 1
    mod_name = ".".join(parts[:k])
    obj = importlib.import_module(_flowlite_name(mod_name))
    for i in range(k, len(parts)):
        try:
            obj = getattr(obj, parts[i])
        except AttributeError:
            raise AttributeError(f"flowlite has no equivalent of {'.'.join(parts[:i + 1])}") \
                from None
    return obj


def run_path(script: str, argv=None, run_module: bool = False):
    """Run `script` (a path, or a module name with run_module) as `__main__` with the hook
    installed and `sys.argv = [script, *argv]`, as `python script.py argv...` would."""
    install()
    sys.argv = [script, *(argv or [])]
    if run_module:
        return runpy.run_module(script, run_name="__main__", alter_sys=True)
    directory = os.path.dirname(os.path.abspath(script))
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path[0] = directory             # what `python script.py` puts first
    else:
        sys.path.insert(0, directory)
    return runpy.run_path(script, run_name="__main__")


_USAGE = ("usage: python -m flowlite.run [--summary] script.py [args...]\n"
          "       python -m flowlite.run [--summary] -m module [args...]\n"
          "Runs an unchanged PyTorch script with `torch` resolved to flowlite, with JAX's\n"
          "x64 mode on so float64/int64 are 64-bit as in PyTorch (FLOWLITE_X64=0: off).\n"
          "--summary: at exit, print where the run's time went (compiles, host time by\n"
          "phase, executions/syncs/transfers per iteration, the lines that synced) to\n"
          "stderr; FLOWLITE_SUMMARY=1 does the same for any program importing flowlite.")


def _pytorch_dtypes():
    """PyTorch scripts mean 64 bits by `torch.double` and get int64 from `torch.tensor([1])`;
    without JAX's x64 mode both would be stored as 32-bit, so the script would silently
    compute something else.  float32 stays the default float dtype either way."""
    if os.environ.get("FLOWLITE_X64", "1") != "0":
        import jax
        jax.config.update("jax_enable_x64", True)


def _enable_summary():
    """Time the run's phases and print the summary at exit (flowlite.metrics.summary())."""
    importlib.import_module(_PKG).metrics.enable_summary()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    summary = bool(argv) and argv[0] == "--summary"
    if summary:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "-m":
        if len(argv) < 2:
            print(_USAGE, file=sys.stderr)
            return 2
        _pytorch_dtypes()
        if summary:
            _enable_summary()
        run_path(argv[1], argv[2:], run_module=True)
        return 0
    script = argv[0]
    if not os.path.isfile(script):
        print(f"flowlite.run: {script}: no such file", file=sys.stderr)
        return 2
    _pytorch_dtypes()
    if summary:
        _enable_summary()
    run_path(script, argv[1:])
    return 0


if __name__ == "__main__":
    # hand over to the importable copy of this module, so a script that itself imports
    # flowlite.run (install(), installed()) sees the one hook that is installed
    sys.exit(importlib.import_module("flowlite.run").main())
