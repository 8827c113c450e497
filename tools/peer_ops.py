"""Run tinygrad's public op test suite (`test/test_ops.py`) against flowlite, with PyTorch as
the oracle.

    python tools/peer_ops.py TINYGRAD [--rev REV] [--baseline] [-k SUBSTR] [--json FILE] [-v]

TINYGRAD is a tinygrad checkout or a bare git directory of one (default: $TINYGRAD_PATH), or
a file written in test_ops.py's form (tests/fixtures/peer_ops_sample.py).
From a git directory the file is read at `--rev` (default: the pinned revision below, whose
test_ops.py has 348 tests); from a checkout, the working file. Nothing of tinygrad is
imported or copied: the names test_ops.py imports from tinygrad are stubbed in sys.modules
by a small shim built here, and tinygrad itself need not be installed.

How a test is run
-----------------
test_ops.py compares a framework with PyTorch through `helper_test_op(shapes, torch_fxn,
tinygrad_fxn=None, ...)` and `TestOps.helper_test_exception(...)`. Here every test method
runs twice, each time in its own copy of the module:

1. the oracle pass: `torch` is PyTorch. Each helper call runs `torch_fxn` on PyTorch tensors
   made from the test's numpy data (seeded as the test seeds it) and records the forward
   value, its dtype and, unless the call is forward-only, the gradients of the inputs after
   `(out+1).square().mean().backward()`; an exception helper records PyTorch's exception.
2. the candidate pass: `torch` in the module's globals is flowlite (`--baseline`: PyTorch
   again). Since the test's lambdas are created in the test body, they see the rebound
   `torch`; each helper call runs the same `torch_fxn` on flowlite tensors made from the same
   numpy data and compares with the recorded call, as test_ops.py compares: shape, numpy
   dtype, values with the call's atol/rtol, gradients with grad_atol/grad_rtol (a missing
   gradient fails). An exception helper passes when the candidate raises an instance of the
   class PyTorch raised (flowlite's classes subclass PyTorch's); `exact=` message equality is
   not asked (flowlite's messages are its own).

The tinygrad-only lambdas (`tinygrad_fxn`) are never called: the PyTorch program `torch_fxn`
is what a user of flowlite would write. Tinygrad statements in a test's body (`Tensor(...)`,
`Tensor.ones(...).expand(...)`, `assertRaises` around them) run through the shim, which maps
tinygrad's names onto the framework of the pass (`cast` -> `to`, `axis=` -> `dim=`,
`Tensor.randint(*shape, low, high)` -> `randint(low, high, shape)`, ...). Random draws made
with `torch` in a test body (index tensors) are replayed in the candidate pass from the
oracle's draws (the two RNG streams differ by design); draws inside a helper's `torch_fxn`
are not (test_multinomial has its own tolerance). tinygrad's skip decorators are about its
own backends and are ignored: every test runs.

Counting: each of the file's test methods is one test. Every statement of a test body runs
under a guard (the test classes' methods are rewritten: `for`, `while` and `if` bodies are
entered, a `with` or `try` statement is one unit). A statement that raises in the oracle pass
asks for something PyTorch itself does not do -- mostly a tinygrad statement expecting
ValueError where PyTorch raises RuntimeError, or a tinygrad-only argument -- and is not
applicable: the candidate pass skips it. PASS: the candidate ran every applicable statement
and every helper call matched. FAIL: it did not. N/A: the oracle left no applicable check
(an assertion or a helper call) in the test; it counts as a pass for neither side. The pass
rate is PASS / all tests; `--json` lists the statements skipped in each test.

Layer: tool — imports flowlite and torch, and nothing of tinygrad.
"""
from __future__ import annotations

import argparse
import ast
import functools
import json
import math
import operator
import os
import subprocess
import sys
import time
import traceback
import types
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# tinygrad commit 0b7c44677d ("Fix uint8 cast underflow", 2024-12-06): test/test_ops.py with
# 348 tests (TestOps 342, TestOpsUint8 6).
PINNED_REV = "0b7c44677d46e77624c1405fe21587e2a9737e4d"
TEST_PATHS = ("test/test_ops.py", "test/backend/test_ops.py")


# ---------------------------------------------------------------------------------------
# reading test_ops.py

def read_test_ops(path: str, rev: str | None) -> tuple[str, str]:
    """(source, description) of test_ops.py from a checkout or a bare git directory (or the
    path of a file in its form)."""
    if os.path.isfile(path):
        with open(path) as fh:
            return fh.read(), path
    for rel in TEST_PATHS:
        f = os.path.join(path, rel)
        if os.path.isfile(f):
            with open(f) as fh:
                return fh.read(), f
    git_dir = path
    if os.path.isdir(os.path.join(path, ".git")):
        git_dir = os.path.join(path, ".git")
    rev = rev or PINNED_REV
    for rel in TEST_PATHS:
        r = subprocess.run(["git", "--git-dir", git_dir, "show", f"{rev}:{rel}"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout, f"{git_dir} @ {rev}:{rel}"
    raise SystemExit(f"peer_ops: no test_ops.py in {path} (tried {', '.join(TEST_PATHS)}"
                     f" in the work tree and at git revision {rev})")


# ---------------------------------------------------------------------------------------
# the framework side: numpy in and out

def _is_tensor(fw, x) -> bool:
    return isinstance(x, fw.Tensor)


def _to_numpy(x):
    return x.detach().cpu().numpy() if hasattr(x, "cpu") else x.detach().numpy()


def _dtype_name(d) -> str:
    return str(d).rpartition(".")[2]


# ---------------------------------------------------------------------------------------
# the tinygrad shim: the names test_ops.py imports, mapped onto one framework

_TINY_DTYPES = {
    "bool": "bool", "int8": "int8", "char": "int8", "uint8": "uint8", "uchar": "uint8",
    "int16": "int16", "short": "int16", "uint16": "uint16", "ushort": "uint16",
    "int32": "int32", "int": "int32", "default_int": "int32", "uint32": "uint32",
    "uint": "uint32", "int64": "int64", "long": "int64", "uint64": "uint64", "ulong": "uint64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "float32": "float32",
    "float": "float32", "default_float": "float32", "float64": "float64", "double": "float64",
}
# Answered the same for every framework (both passes must take the same branches): PyTorch
# has only limited operator support for these.
_UNSUPPORTED_DTYPES = {"uint16", "uint32", "uint64"}


class TinyDType:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"dtypes.{self.name}"

    def __eq__(self, other):
        return isinstance(other, TinyDType) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


def make_tinygrad_shim(fw) -> dict[str, types.ModuleType]:
    """Modules `tinygrad`, `tinygrad.helpers`, `tinygrad.tensor`, `tinygrad.device` whose
    Tensor makes tensors of `fw` (torch or flowlite)."""
    F = fw.nn.functional

    def fw_dtype(d):
        if d is None:
            return None
        if isinstance(d, str):
            d = TinyDType(_TINY_DTYPES.get(d, d))
        if isinstance(d, TinyDType):
            return getattr(fw, d.name)
        return d

    def unwrap(x):
        if isinstance(x, TT):
            return x._t
        if isinstance(x, (list, tuple)):
            return type(x)(unwrap(v) for v in x)
        if isinstance(x, dict):
            return {k: unwrap(v) for k, v in x.items()}
        if isinstance(x, TinyDType):
            return fw_dtype(x)
        return x

    def wrap(x):
        if _is_tensor(fw, x):
            return TT._wrap(x)
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            return type(x)(wrap(v) for v in x)
        return x

    def kw(kwargs):
        out = {}
        for k, v in kwargs.items():
            k = {"axis": "dim", "acc_dtype": "dtype"}.get(k, k)
            out[k] = unwrap(v)
        return out

    def call(fn, *args, **kwargs):
        return wrap(fn(*unwrap(args), **kw(kwargs)))

    def shape_of(args):
        if len(args) == 1 and isinstance(args[0], (tuple, list)):
            return tuple(args[0])
        return tuple(args)

    def pad_arg(padding):
        # tinygrad: a flat tuple in PyTorch's order, or one (before, after) pair per dim
        # from the first dim on
        if padding and all(isinstance(p, (tuple, list)) or p is None for p in padding):
            flat = []
            for p in reversed(padding):
                flat.extend(p if p is not None else (0, 0))
            return tuple(flat)
        return tuple(padding)

    def isinf(self, detect_positive=True, detect_negative=True):
        t = self._t
        out = fw.zeros_like(t, dtype=fw.bool)
        if detect_positive:
            out = out | fw.isposinf(t)
        if detect_negative:
            out = out | fw.isneginf(t)
        return wrap(out)

    methods = {
        "cast": lambda self, dt: call(self._t.to, dt),
        "realize": lambda self: self,
        "contiguous": lambda self: call(self._t.contiguous),
        "idiv": lambda self, x: call(fw.div, self, x, rounding_mode="trunc"),
        "xor": lambda self, x: call(fw.bitwise_xor, self, x),
        "lshift": lambda self, x: call(fw.bitwise_left_shift, self, x),
        "rshift": lambda self, x: call(fw.bitwise_right_shift, self, x),
        "leakyrelu": lambda self, neg_slope=0.01: call(F.leaky_relu, self, neg_slope),
        "meshgrid": lambda self, *args, indexing="ij": call(fw.meshgrid, self, *args,
                                                             indexing=indexing),
        "where": lambda self, x, y: call(fw.where, self, x, y),
        "isinf": isinf,
        "pad": lambda self, padding, mode="constant", value=0.0: call(
            F.pad, self, pad_arg(padding), mode=mode,
            **({"value": value} if mode == "constant" else {})),
        "numpy": lambda self: _to_numpy(self._t),
        "cat": lambda self, *args, dim=0: call(fw.cat, [self, *args], dim=dim),
        "stack": lambda self, *args, dim=0: call(fw.stack, [self, *args], dim=dim),
    }

    def creation(name):
        def rand_like(make):
            return lambda *shape, **kwargs: call(make, shape_of(shape), **kwargs)

        def uniform(*shape, low=0.0, high=1.0, **kwargs):
            return wrap(fw.empty(shape_of(shape), **kw(kwargs)).uniform_(low, high))

        def scaled_uniform(*shape, **kwargs):
            s = shape_of(shape)
            return wrap(fw.empty(s, **kw(kwargs)).uniform_(-1.0, 1.0) * math.prod(s) ** -0.5)

        def init(fn):
            return lambda *shape, **kwargs: wrap(fn(fw.empty(*shape), **kw(kwargs)))

        table = {
            "empty": rand_like(fw.empty), "zeros": rand_like(fw.zeros),
            "ones": rand_like(fw.ones), "rand": rand_like(fw.rand),
            "randn": rand_like(fw.randn),
            "randint": lambda *shape, low=0, high=10, **kwargs: call(
                fw.randint, low, high, shape_of(shape), **kwargs),
            "normal": lambda *shape, mean=0.0, std=1.0, **kwargs: call(
                fw.normal, mean, std, size=shape_of(shape), **kwargs),
            "uniform": uniform, "scaled_uniform": scaled_uniform,
            "glorot_uniform": init(fw.nn.init.xavier_uniform_),
            "kaiming_uniform": init(fw.nn.init.kaiming_uniform_),
            "kaiming_normal": init(fw.nn.init.kaiming_normal_),
            "full": lambda shape, fill_value, **kwargs: call(fw.full, shape, fill_value,
                                                             **kwargs),
            "eye": lambda n, m=None, **kwargs: call(fw.eye, n, m if m is not None else n,
                                                    **kwargs),
            "arange": lambda *args, **kwargs: call(fw.arange, *args, **kwargs),
            "einsum": lambda formula, *operands, **kwargs: call(fw.einsum, formula, *operands),
        }
        return table.get(name)

    class TTMeta(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            made = creation(name)
            if made is not None:
                return made
            if name in methods:
                return lambda self, *a, **k: methods[name](TT._as(self), *a, **k)

            def unbound(*args, **kwargs):
                if args and isinstance(args[0], TT):
                    return getattr(args[0], name)(*args[1:], **kwargs)
                return call(getattr(fw, name), *args, **kwargs)
            return unbound

    class TT(metaclass=TTMeta):
        """A tinygrad-style handle on a tensor of the framework."""

        def __init__(self, data, dtype=None, requires_grad=None, device=None):
            if isinstance(data, TT):
                t = data._t
            elif _is_tensor(fw, data):
                t = data
            else:
                arr = np.asarray(data)
                if dtype is None and arr.dtype == np.float64:
                    arr = arr.astype(np.float32)
                if dtype is None and arr.dtype == np.int64:
                    arr = arr.astype(np.int32)
                t = fw.tensor(arr)
            if dtype is not None:
                t = t.to(fw_dtype(dtype))
            if requires_grad:
                t = t.detach().requires_grad_(True)
            self._t = t

        @classmethod
        def _wrap(cls, t):
            obj = object.__new__(cls)
            obj._t = t
            return obj

        @staticmethod
        def _as(x):
            return x if isinstance(x, TT) else TT(x)

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            if name in methods:
                return functools.partial(methods[name], self)
            attr = getattr(self._t, name)
            if callable(attr):
                return lambda *args, **kwargs: call(attr, *args, **kwargs)
            return wrap(attr)

        @property
        def grad(self):
            return wrap(self._t.grad)

        @property
        def shape(self):
            return tuple(self._t.shape)

        def __len__(self):
            return len(self._t)

        def __bool__(self):
            return bool(self._t)

        def __float__(self):
            return float(self._t)

        def __int__(self):
            return int(self._t)

        def __index__(self):
            return operator.index(self._t)

        def __repr__(self):
            return f"TinyShim({self._t!r})"

        __hash__ = object.__hash__

    def _binop(op, reflected=False):
        if reflected:
            return lambda self, other: wrap(op(unwrap(other), self._t))
        return lambda self, other: wrap(op(self._t, unwrap(other)))

    for nm, op in [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv),
                   ("pow", operator.pow), ("matmul", operator.matmul),
                   ("and", operator.and_), ("or", operator.or_), ("xor", operator.xor),
                   ("lshift", operator.lshift), ("rshift", operator.rshift),
                   ("mod", operator.mod)]:
        setattr(TT, f"__{nm}__", _binop(op))
        setattr(TT, f"__r{nm}__", _binop(op, reflected=True))
    for nm, op in [("lt", operator.lt), ("le", operator.le), ("gt", operator.gt),
                   ("ge", operator.ge), ("eq", operator.eq), ("ne", operator.ne)]:
        setattr(TT, f"__{nm}__", _binop(op))
    TT.__neg__ = lambda self: wrap(-self._t)
    TT.__invert__ = lambda self: wrap(~self._t)
    TT.__abs__ = lambda self: wrap(abs(self._t))
    TT.__getitem__ = lambda self, idx: wrap(self._t[unwrap(idx)])

    def __setitem__(self, idx, value):
        self._t[unwrap(idx)] = unwrap(value)
    TT.__setitem__ = __setitem__

    class DTypes:
        def __getattr__(self, name):
            if name in _TINY_DTYPES:
                return TinyDType(_TINY_DTYPES[name])
            raise AttributeError(f"tinygrad shim: dtypes.{name}")

    class Context:
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def getenv(key, default=0):
        return type(default)(os.getenv(key, default))

    def is_dtype_supported(dtype, device=None):
        return dtype.name not in _UNSUPPORTED_DTYPES

    def _to_np_dtype(dtype):
        return np.dtype(dtype.name)

    class Device:
        DEFAULT = "CPU"

    helpers = types.ModuleType("tinygrad.helpers")
    helpers.__dict__.update(getenv=getenv, IMAGE=0, DEBUG=0, CI=False, Context=Context,
                            TRANSCENDENTAL=0)
    tensor_mod = types.ModuleType("tinygrad.tensor")
    tensor_mod.__dict__.update(_to_np_dtype=_to_np_dtype, Tensor=TT)
    device_mod = types.ModuleType("tinygrad.device")
    device_mod.__dict__.update(is_dtype_supported=is_dtype_supported, Device=Device)
    top = types.ModuleType("tinygrad")
    top.__path__ = []
    top.__dict__.update(Tensor=TT, Device=Device, dtypes=DTypes(), helpers=helpers,
                        tensor=tensor_mod, device=device_mod)
    return {"tinygrad": top, "tinygrad.helpers": helpers, "tinygrad.tensor": tensor_mod,
            "tinygrad.device": device_mod}


# ---------------------------------------------------------------------------------------
# statements PyTorch itself fails: each statement of a test body runs under a guard

_GUARD = """
if __peer__.begin({line}, {check}):
    try:
        pass
    except Exception as __peer_e__:
        __peer__.fail(__peer_e__)
    finally:
        __peer__.end()
"""


class _Guards(ast.NodeTransformer):
    """Wraps every statement of the test classes' methods (recursing into `for`, `while`
    and `if` bodies; a `with` or `try` statement is one unit) in a guard: in the oracle pass a
    statement that raises is marked not applicable and skipped in the candidate pass."""

    def __init__(self, source):
        self.lines = source.splitlines()

    def visit_ClassDef(self, node):
        for fn in node.body:
            if isinstance(fn, ast.FunctionDef) and fn.name != "helper_test_exception":
                fn.body = self.guard_list(fn.body)
        return node

    def guard_list(self, stmts):
        out = []
        for i, st in enumerate(stmts):
            if (i == 0 and isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)) \
                    or isinstance(st, (ast.Global, ast.Nonlocal, ast.Pass, ast.FunctionDef)):
                out.append(st)
                continue
            if isinstance(st, (ast.For, ast.While, ast.If)):
                # the checks are the inner statements'
                st.body = self.guard_list(st.body)
                st.orelse = self.guard_list(st.orelse)
                check = False
            else:
                text = "\n".join(self.lines[st.lineno - 1:st.end_lineno])
                check = "assert" in text or "helper_test" in text or "_test_cmp" in text
            guard = ast.parse(_GUARD.format(line=st.lineno, check=check)).body[0]
            guard.body[0].body = [st]
            inner = {id(n) for n in ast.walk(st)}
            for n in ast.walk(guard):   # the guard's own nodes sit on the statement's line
                if id(n) not in inner and "lineno" in n._attributes:
                    ast.copy_location(n, st)
            out.append(guard)
        return out


def guarded_code(source: str, filename: str):
    tree = _Guards(source).visit(ast.parse(source, filename))
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec")


# ---------------------------------------------------------------------------------------
# one pass: a copy of the module whose `torch` is a framework

_RANDOM = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
           "normal", "bernoulli"}


class PeerFailure(BaseException):
    """A candidate's difference from the oracle. A BaseException, so that no `except
    Exception` or `assertRaises(Exception)` in a test body swallows it."""


class FrameworkModule(types.ModuleType):
    """`torch` as the test module sees it: the framework, with random draws in a test's body
    recorded (oracle) or replayed from the oracle's (candidate)."""

    def __init__(self, fw, run):
        super().__init__(fw.__name__)
        object.__setattr__(self, "_fw", fw)
        object.__setattr__(self, "_run", run)

    def __getattr__(self, name):
        attr = getattr(self._fw, name)
        if name in _RANDOM and callable(attr):
            return functools.partial(self._run.random_draw, attr, name)
        return attr


class Pass:
    """One pass over a test method: `oracle` records, `candidate` compares."""

    def __init__(self, fw, role: str, source: str, filename: str):
        self.fw = fw
        self.role = role
        self.reset()
        shim = make_tinygrad_shim(fw)
        saved = {k: sys.modules.get(k) for k in shim}
        sys.modules.update(shim)
        try:
            mod = types.ModuleType(f"peer_test_ops_{role}")
            mod.__file__ = filename
            mod.__dict__["__peer__"] = self
            exec(guarded_code(source, filename), mod.__dict__)
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        mod.torch = FrameworkModule(fw, self)
        mod.helper_test_op = self.helper_test_op
        mod.TestOps.helper_test_exception = self._exception_method()
        self.mod = mod

    # -- state per test
    def reset(self, records=None, draws=None, guards=None):
        """The oracle fills records/draws/guards; the candidate reads the oracle's."""
        self.records = [] if records is None else records
        self.draws = [] if draws is None else draws
        self.guards = [] if guards is None else guards   # [line, check, applicable, why]
        self.pos = self.draw_pos = self.guard_pos = 0
        self.stack = []
        self.in_helper = False

    # -- statement guards (see _Guards)
    def begin(self, line, check):
        if self.role == "oracle":
            self.stack.append((len(self.guards), len(self.records), len(self.draws)))
            self.guards.append([line, check, True, ""])
            return True
        if self.guard_pos >= len(self.guards):
            raise PeerFailure(f"line {line}: a statement the oracle did not run")
        g = self.guards[self.guard_pos]
        if g[0] != line:
            raise PeerFailure(f"line {line}: ran where the oracle ran line {g[0]}")
        self.guard_pos += 1
        if g[2]:
            self.stack.append(None)
        return g[2]

    def fail(self, e):
        if self.role != "oracle":
            raise e
        gi, nrec, ndraw = self.stack[-1]
        self.guards[gi][2:] = [False, f"{type(e).__name__}: {_first_line(e)}"]
        del self.guards[gi + 1:]
        del self.records[nrec:]
        del self.draws[ndraw:]

    def end(self):
        self.stack.pop()

    def not_applicable(self):
        """The oracle's statements that PyTorch fails, and whether no check is left."""
        skipped = [g for g in self.guards if not g[2]]
        checks = any(g[1] and g[2] for g in self.guards) or bool(self.records)
        return skipped, not checks

    # -- inputs, as prepare_test_op makes them
    def inputs(self, low, high, shps, vals, forward_only):
        fw = self.fw
        rg = not forward_only
        if shps is None:
            return [fw.tensor(x, requires_grad=rg) for x in vals]
        np.random.seed(0)
        data = [np.random.uniform(low=low, high=high, size=size).astype(np.float32)
                for size in shps]
        return [fw.tensor(d, requires_grad=rg) for d in data]

    def random_draw(self, fn, name, *args, **kwargs):
        out = fn(*args, **kwargs)
        if self.in_helper or not _is_tensor(self.fw, out):
            return out
        if self.role == "oracle":
            self.draws.append((name, tuple(out.shape), _to_numpy(out)))
            return out
        if self.draw_pos >= len(self.draws):
            raise PeerFailure(f"{name}: a random draw the oracle did not make")
        oname, oshape, value = self.draws[self.draw_pos]
        self.draw_pos += 1
        if (oname, oshape) != (name, tuple(out.shape)):
            raise PeerFailure(f"{name}: draw of shape {tuple(out.shape)}, the oracle drew "
                              f"{oname} of shape {oshape}")
        made = self.fw.tensor(value, dtype=out.dtype)
        return made.requires_grad_(True) if out.requires_grad else made

    def _failure(self, msg):
        """The oracle's failures are ordinary (its guard marks the statement not applicable),
        the candidate's are PeerFailures."""
        return AssertionError(msg) if self.role == "oracle" else PeerFailure(msg)

    def _site(self, fxn):
        code = getattr(fxn, "__code__", None)
        if code is None and isinstance(fxn, functools.partial):
            code = getattr(fxn.func, "__code__", None)
        return f"line {code.co_firstlineno}" if code is not None else repr(fxn)[:60]

    def _next(self, kind):
        if self.role == "oracle":
            return None
        if self.pos >= len(self.records):
            raise PeerFailure(f"helper call #{self.pos + 1}: the oracle made only "
                              f"{len(self.records)} calls")
        rec = self.records[self.pos]
        if rec["kind"] != kind:
            raise PeerFailure(f"helper call #{self.pos + 1}: {kind}, the oracle's was "
                              f"{rec['kind']}")
        return rec

    # -- helper_test_op
    def helper_test_op(self, shps, torch_fxn, tinygrad_fxn=None, atol=1e-6, rtol=1e-3,
                       grad_atol=1e-4, grad_rtol=1e-3, forward_only=False, vals=None,
                       low=-2, high=2):
        rec = self._next("op")
        where = f"helper call #{self.pos + 1} ({self._site(torch_fxn)})"
        self.pos += 1
        ts = self.inputs(low, high, shps, vals, forward_only)
        self.in_helper = True
        try:
            out = torch_fxn(*ts)
        except Exception as e:
            # a call inside `with self.assertRaises(...)`: the candidate must raise as PyTorch
            if rec is None:
                self.records.append({"kind": "op", "raises": type(e), "msg": _first_line(e)})
                raise
            if rec.get("raises") is not None and isinstance(e, rec["raises"]):
                raise
            raise PeerFailure(f"{where}: forward raised {type(e).__name__}: "
                              f"{_first_line(e)}") from e
        finally:
            self.in_helper = False
        if rec is not None and rec.get("raises") is not None:
            raise PeerFailure(f"{where}: raised nothing, PyTorch raises "
                              f"{rec['raises'].__name__}: {rec['msg']}")
        if not _is_tensor(self.fw, out):
            raise self._failure(f"{where}: forward returned {type(out).__name__}, not a "
                                "tensor")
        fwd = _to_numpy(out)
        grads = None
        if not forward_only:
            try:
                ((out + 1).square().mean()).backward()
            except Exception as e:
                if rec is None:
                    raise
                raise PeerFailure(f"{where}: backward raised {type(e).__name__}: "
                                  f"{_first_line(e)}") from e
            grads = []
            for i, t in enumerate(ts):
                if t.grad is None:
                    raise self._failure(f"{where}: no gradient for input {i}")
                grads.append(_to_numpy(t.grad))
        if rec is None:
            self.records.append({"kind": "op", "out": fwd, "dtype": _dtype_name(out.dtype),
                                 "grads": grads})
            return
        self._compare(f"{where} forward", fwd, rec["out"], atol, rtol,
                      _dtype_name(out.dtype), rec["dtype"])
        if grads is not None:
            for i, (g, og) in enumerate(zip(grads, rec["grads"])):
                self._compare(f"{where} gradient of input {i}", g, og, grad_atol, grad_rtol)

    def _compare(self, what, got, want, atol, rtol, got_dt=None, want_dt=None):
        if got.shape != want.shape:
            raise PeerFailure(f"{what}: shape {got.shape}, PyTorch {want.shape}")
        if got_dt is not None and got_dt != want_dt:
            raise PeerFailure(f"{what}: dtype {got_dt}, PyTorch {want_dt}")
        if got.dtype != want.dtype:
            raise PeerFailure(f"{what}: numpy dtype {got.dtype}, PyTorch {want.dtype}")
        try:
            np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = "; ".join(ln for ln in lines if ln.startswith(("Mismatched", "Max")))
            raise PeerFailure(f"{what}: values differ ({detail})") from None

    # -- helper_test_exception
    def _exception_method(self):
        run = self

        def helper_test_exception(testcase, shps, torch_fxn, tinygrad_fxn=None, expected=None,
                                  exact=False, vals=None, low=-1.5, high=1.5):
            rec = run._next("exception")
            where = f"helper call #{run.pos + 1} ({run._site(torch_fxn)})"
            run.pos += 1
            ts = run.inputs(low, high, shps, vals, False)
            raised = None
            run.in_helper = True
            try:
                torch_fxn(*ts)
            except Exception as e:
                raised = e
            finally:
                run.in_helper = False
            if rec is None:
                if raised is None:
                    raise AssertionError(f"{where}: PyTorch raises nothing")
                if expected is not None and not isinstance(raised, expected):
                    raise AssertionError(f"{where}: PyTorch raises {type(raised).__name__}, "
                                         f"the test expects {expected}")
                run.records.append({"kind": "exception", "cls": type(raised),
                                    "msg": _first_line(raised)})
                return
            want = rec["cls"]
            if raised is None:
                raise PeerFailure(f"{where}: raised nothing, PyTorch raises {want.__name__}: "
                                  f"{rec['msg']}")
            if not isinstance(raised, want):
                raise PeerFailure(f"{where}: raised {type(raised).__name__} "
                                  f"({_first_line(raised)}), PyTorch raises {want.__name__}")
        return helper_test_exception

    # -- running one test method
    def run_test(self, cls_name: str, name: str):
        cls = getattr(self.mod, cls_name)
        fn = cls.__dict__[name]
        while getattr(fn, "__unittest_skip__", False) and hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        case = cls(name)
        fn(case)


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0][:300] if s else ""


# ---------------------------------------------------------------------------------------
# the suite

def test_names(mod) -> list[tuple[str, str]]:
    out = []
    for cls_name, cls in vars(mod).items():
        if isinstance(cls, type) and issubclass(cls, unittest.TestCase) and \
                cls.__module__ == mod.__name__:
            out += [(cls_name, n) for n in cls.__dict__ if n.startswith("test_")]
    return out


def run_suite(source: str, filename: str, candidate, select=None, verbose=False):
    import torch
    oracle = Pass(torch, "oracle", source, filename)
    cand = Pass(candidate, "candidate", source, filename)
    results = []
    for cls_name, name in test_names(oracle.mod):
        if select and not any(s in name for s in select):
            continue
        t0 = time.perf_counter()
        oracle.reset()
        status, err = "PASS", ""
        try:
            oracle.run_test(cls_name, name)
        except Exception as e:
            status, err = "N/A", f"PyTorch fails it: {type(e).__name__}: {_first_line(e)}"
        skipped, none_left = oracle.not_applicable()
        if status == "PASS" and none_left:
            status = "N/A"
            why = list(dict.fromkeys(f"line {g[0]}: {g[3]}" for g in skipped if g[1]))
            err = "PyTorch fails every check: " + "; ".join(why[:3]) + (
                f" (+{len(why) - 3} more)" if len(why) > 3 else "")
        if status == "PASS":
            cand.reset(oracle.records, oracle.draws, oracle.guards)
            try:
                cand.run_test(cls_name, name)
                if cand.pos != len(oracle.records):
                    raise PeerFailure(f"made {cand.pos} helper calls, the oracle "
                                      f"{len(oracle.records)}")
                if cand.guard_pos != len(oracle.guards):
                    raise PeerFailure(f"ran {cand.guard_pos} statements, the oracle "
                                      f"{len(oracle.guards)}")
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                status = "FAIL"
                err = f"{type(e).__name__}: {_first_line(e)}" if not isinstance(
                    e, PeerFailure) else _first_line(e)
                if verbose:
                    traceback.print_exc()
        dt = time.perf_counter() - t0
        results.append({"test": f"{cls_name}.{name}", "status": status, "error": err,
                        "seconds": round(dt, 2),
                        "skipped_statements": [f"line {g[0]}: {g[3]}" for g in skipped]})
        if verbose:
            print(f"{status:4} {cls_name}.{name} ({dt:.1f}s) {err}", flush=True)
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tinygrad", nargs="?", default=os.environ.get("TINYGRAD_PATH"),
                    help="tinygrad checkout or bare git dir (default: $TINYGRAD_PATH)")
    ap.add_argument("--rev", default=None,
                    help=f"git revision to read test_ops.py at (default {PINNED_REV[:10]})")
    ap.add_argument("--baseline", action="store_true",
                    help="PyTorch on both sides (the suite's ceiling for a torch framework)")
    ap.add_argument("-k", action="append", default=None,
                    help="run only tests whose name contains this (repeatable)")
    ap.add_argument("--json", default=None, help="write the results to this file")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if not args.tinygrad:
        ap.error("give the tinygrad checkout (or set TINYGRAD_PATH)")
    source, desc = read_test_ops(args.tinygrad, args.rev)
    if args.baseline:
        import torch as candidate
    else:
        import flowlite as candidate
        import flowlite.run
        # as `python -m flowlite.run` runs a PyTorch program: JAX's x64 mode on, so float64
        # and int64 are 64-bit (FLOWLITE_X64=0: off)
        flowlite.run._pytorch_dtypes()
    import warnings
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    results = run_suite(source, "test_ops.py", candidate, args.k, args.verbose)
    total = len(results)
    counts = {s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "N/A")}
    side = "PyTorch (baseline)" if args.baseline else "flowlite"
    print(f"\ntest_ops.py from {desc}")
    for status in ("FAIL", "N/A"):
        rows = [r for r in results if r["status"] == status]
        if rows:
            print(f"\n{status} ({len(rows)}):")
            for r in rows:
                print(f"  {r['test']}: {r['error']}")
    rate = 100.0 * counts["PASS"] / total if total else 0.0
    partly = [r for r in results if r["status"] != "N/A" and r["skipped_statements"]]
    print(f"\n{side}: {counts['PASS']}/{total} passed ({rate:.1f}%), {counts['FAIL']} failed,"
          f" {counts['N/A']} not applicable (PyTorch itself fails them); "
          f"{sum(len(r['skipped_statements']) for r in partly)} statements PyTorch fails "
          f"skipped in {len(partly)} other tests; {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"source": desc, "side": side, "counts": counts, "total": total,
                       "results": results}, fh, indent=1)
    return 0 if counts["FAIL"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
