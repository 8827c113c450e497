"""flowlite's own persistent store of compiled executables: a warm start without tracing.

Layer: engine — imports dtypes, ir, lowering, matmul_precision, metrics, onednn, reroll. JAX's
persistent compilation cache (cache.py) keys a program by its lowered StableHLO, so a second
process still traces and lowers every program through JAX only to find its entry (nanoGPT's
README config: ~1 s of its first iteration). This store keys the compiled executable by
flowlite's own graph key — the walked graph the in-memory cache is keyed by, with every node's
signature spelled out (primitive, static attributes, shape, dtype) instead of its process-local
number — plus what else changes the compiled program: the donated arguments, checks and
chaining, re-rolling, the lowering's knobs, the device (platform, kind, id, platform version),
jax/jaxlib versions, x64, matmul precision, XLA_FLAGS, the host CPU's features and a hash of
flowlite's own source. A hit loads the serialized executable
(`jax.experimental.serialize_executable`): no trace, no lowering, no XLA compile.

Entries live in `<FLOWLITE_CACHE_DIR>/flowlite-executables/<key>.exe` (the cache directory of
cache.py; "off" turns both off), one file each: a magic line, the SHA-256 of the body, then
the pickled body (key, environment, the executable's bytes, its argument/result trees, how
the executor wraps it).  Writes go to a temporary file renamed into place, so a reader never
sees half an entry and concurrent writers of one key leave one whole entry.  A corrupt,
truncated or mismatched entry is counted (`executable_store_rejects`), removed and the
program compiled again; nothing here ever fails a sync.  Programs whose key can't be spelled
portably (an attribute holding a user function, a primitive lowered outside flowlite, a mesh)
are left to JAX's persistent cache.  An attribute object may spell itself for the key with a
`__flowlite_key__()` method (optim's transformation factories do).  FLOWLITE_EXECUTABLE_CACHE=0 turns this store off alone.

Entries are pickles: like JAX's own cache, the directory must be trusted (it is the user's).
"""
from __future__ import annotations

import contextlib
import copyreg
import enum
import functools
import hashlib
import importlib.metadata
import io
import os
import pickle
import platform
import sys
import tempfile
import threading
import types

import jax
import numpy as np

from . import dtypes, ir, lowering, matmul_precision, metrics, onednn, reroll

_MAGIC = b"flowlite-executable 2\n"     # 2: avals' AutoLayout pickled by reference (below)
_SUBDIR = "flowlite-executables"
_state = {"dir": None, "on": os.environ.get("FLOWLITE_EXECUTABLE_CACHE", "1").strip().lower()
          not in ("0", "off", "false", "no")}


def _auto_layout():
    from jax.experimental.layout import Layout
    return Layout.AUTO


def _keep_auto_layout_a_singleton() -> None:
    """Pickle JAX's `Layout.AUTO` as a reference to the one instance.  jax 0.12 puts it in
    every aval, compares layouts by identity, and pickles it (inside a serialized
    executable's result avals) as a plain object: a loaded program's outputs then carried
    a second AUTO, and a `lax.cond` over one of them and a fresh value failed ("cond branches
    must have equal output types ... the layouts do not match")."""
    try:
        from jax.experimental.layout import Layout
        auto = Layout.AUTO
    except (ImportError, AttributeError):       # a JAX without layouts in its avals
        return
    copyreg.pickle(type(auto), lambda _: (_auto_layout, ()))


_keep_auto_layout_a_singleton()


def configure(cache_dir) -> None:
    """Store entries under `cache_dir` (the persistent cache's directory; None: nowhere)."""
    _state["dir"] = None if cache_dir is None else os.path.join(cache_dir, _SUBDIR)


def set_enabled(on: bool) -> None:
    """Turn the store on or off for this process (FLOWLITE_EXECUTABLE_CACHE=0: starts off)."""
    _state["on"] = bool(on)


def directory():
    """Where entries are read and written, or None when the store is off."""
    return _state["dir"] if _state["on"] else None


class Unportable(Exception):
    """A value of a program's key that another process could not name the same way."""


# ---- the key ---------------------------------------------------------------------------------

_OK_MODULES = ("flowlite", "jax", "jaxlib", "numpy", "ml_dtypes", "math", "operator", "builtins")


def _named(obj) -> str:
    """A function, class or enum member another process finds by its name, whose code is
    covered by the environment's versions (flowlite's source hash, jax's, numpy's)."""
    mod = getattr(obj, "__module__", None) or ""
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not qual or "<locals>" in qual or mod.split(".")[0] not in _OK_MODULES:
        raise Unportable(f"{obj!r} is not a module-level name of flowlite, jax or numpy")
    closure = getattr(obj, "__closure__", None)
    if closure:
        return f"{mod}.{qual}[{','.join(_canon(c.cell_contents) for c in closure)}]"
    return f"{mod}.{qual}"


def _prim(p) -> str:
    low = p.lower
    return (f"P({p.name},{'-' if low is None else _named(low)},{int(bool(p.multi))},"
            f"{int(bool(p.elementwise))})")


def _canon(x) -> str:
    """`x` spelled the same in every process, or Unportable."""
    t = type(x)
    if x is None or t is bool or t is int or t is str or t is bytes:
        return f"{t.__name__[0]}{x!r}"
    if t is float or t is complex:
        return f"{t.__name__[0]}{x!r}"
    if isinstance(x, (tuple, list)):
        return ("T(" if isinstance(x, tuple) else "L(") + ",".join(map(_canon, x)) + ")"
    if isinstance(x, ir.Prim):
        return _prim(x)
    if isinstance(x, dtypes.DType):
        return f"D{x.name}"
    if isinstance(x, np.dtype):
        return f"N{x.str}{x.name}"
    if isinstance(x, np.generic):
        return f"G{x.dtype.str}{x.tobytes().hex()}"
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        return f"A{a.dtype.str}{a.shape}{hashlib.sha256(a.tobytes()).hexdigest()}"
    if t is slice:
        return f"S({_canon(x.start)},{_canon(x.stop)},{_canon(x.step)})"
    if x is Ellipsis:
        return "E"
    if isinstance(x, (frozenset, set)):
        return "F(" + ",".join(sorted(map(_canon, x))) + ")"
    if isinstance(x, dict):
        return "M(" + ",".join(sorted(f"{_canon(k)}:{_canon(v)}" for k, v in x.items())) + ")"
    if isinstance(x, enum.Enum):
        return f"e{_named(type(x))}.{x.name}"
    if isinstance(x, jax.tree_util.PyTreeDef):
        return f"Y{x}"
    spell = getattr(type(x), "__flowlite_key__", None)
    if spell is not None:       # an attribute object that spells itself (optim's _Factory)
        return f"K{_named(type(x))}{_canon(spell(x))}"
    if isinstance(x, functools.partial):
        return f"p({_canon(x.func)},{_canon(x.args)},{_canon(x.keywords)})"
    if isinstance(x, (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc)) or \
            callable(x):
        return f"f{_named(x)}"
    raise Unportable(f"an attribute of type {t.__name__}")


_sig_text: dict = {}      # signature number -> its spelling (None: unportable)
_sig_tuple: dict = {}     # signature number -> its tuple (ir._SIGS reversed, refreshed on miss)


def _sig(num: int) -> str:
    s = _sig_text.get(num, 0)
    if s == 0:
        tup = _sig_tuple.get(num)
        if tup is None:
            _sig_tuple.update((v, k) for k, v in list(ir._SIGS.items()))
            tup = _sig_tuple[num]
        try:
            s = _canon(tup)
        except Unportable:
            s = None
        _sig_text[num] = s
    if s is None:
        raise Unportable("a node's signature")
    return s


@functools.lru_cache(maxsize=1)
def _fixed_environment() -> str:
    """What a process can't change after start: versions, flowlite's source, the CPU."""
    h = hashlib.sha256()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                h.update(os.path.relpath(p, root).encode())
                with open(p, "rb") as fh:
                    h.update(fh.read())
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "model name", "Features", "CPU part")):
                    cpu += line
                if line.strip() == "":
                    break
    except OSError:
        pass
    versions = []
    for name in ("jaxlib", "optax"):     # (optax: the optimizers' update is lowered by it)
        try:
            versions.append(importlib.metadata.version(name))
        except Exception:
            versions.append("?")
    return "|".join([
        _MAGIC.decode().strip(), jax.__version__, *versions, np.__version__,
        sys.version.split()[0], platform.machine(), h.hexdigest(),
        hashlib.sha256(cpu.encode()).hexdigest(),
        os.environ.get("XLA_FLAGS", ""), os.environ.get("LIBTPU_INIT_ARGS", "")])


def _config(name):
    try:
        return getattr(jax.config, name)
    except AttributeError:
        return None


def environment(device) -> str:
    """Everything outside the graph that changes `device`'s compiled program."""
    jd = device.jax_device
    try:
        version = jd.client.platform_version
    except Exception:
        version = "?"
    knobs = (lowering._BREAK_DEPTH, lowering.guards_in_conditional(device),
             reroll.reroll_enabled(), reroll.MIN_ENTRIES, reroll.MIN_PERIOD, reroll.MIN_REPS,
             reroll.UPGRADE_AFTER, reroll.UPGRADE_MAX_REPS, onednn.mode())
    return "|".join(map(str, (
        _fixed_environment(), jd.platform, getattr(jd, "device_kind", "?"), jd.id, version,
        jax.device_count(), jax.process_count(), _config("jax_enable_x64"),
        _config("jax_default_matmul_precision"), _config("jax_default_prng_impl"),
        _config("jax_threefry_partitionable"), _config("jax_numpy_dtype_promotion"),
        matmul_precision.get(), knobs)))


def program_key(nodes, slot, out_slots, check_slots, device, donate, chain, roll):
    """The store's key of one program (hex), or None when it can't be spelled portably.
    `nodes`: the graph's leaves, host scalars and ops, numbered by `slot` (the walk's)."""
    if directory() is None or getattr(device, "mesh", None) is not None or \
            device.type == "mesh":
        return None
    try:
        items = [None] * len(slot)
        for n in nodes:
            items[slot[id(n)]] = (_sig(n.sig), tuple([slot[id(i)] for i in n.inputs]))
        text = repr((environment(device), items, tuple(out_slots), tuple(check_slots),
                     tuple(donate), bool(chain), roll))
    except Exception:       # (Unportable; a closure that holds itself: RecursionError)
        return None
    return hashlib.sha256(text.encode()).hexdigest()


# ---- entries ---------------------------------------------------------------------------------

def _path(key: str) -> str:
    return os.path.join(_state["dir"], key + ".exe")


def _reject(path, why) -> None:
    metrics._C["executable_store_rejects"] += 1
    try:
        os.remove(path)
    except OSError:
        pass


def name(key: str) -> str:
    """The function name of the program stored under `key`: its StableHLO module is named
    after it, so its JAX cache key is its own (an executable JAX loads from its cache
    serializes without its code: it is never stored)."""
    return f"flowlite_{key[:24]}"


_storing = {"depth": 0, "was": None, "lock": threading.Lock()}


@contextlib.contextmanager
def storing():
    """While a program this store will hold compiles: JAX's persistent cache doesn't write
    it too (a second copy, and its write costs ~0.3 s for nanoGPT's step).  Counted, so a
    background compile and one on the main thread overlapping restore the setting once."""
    st = _storing
    with st["lock"]:
        if st["depth"] == 0:
            st["was"] = _min_compile_time()
            if st["was"] is not None:
                jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e30)
        st["depth"] += 1
    try:
        yield
    finally:
        with st["lock"]:
            st["depth"] -= 1
            if st["depth"] == 0 and st["was"] is not None:
                jax.config.update("jax_persistent_cache_min_compile_time_secs", st["was"])


def _min_compile_time():
    try:
        return jax.config.jax_persistent_cache_min_compile_time_secs
    except AttributeError:
        return None


def lookup(key, device):
    """(the executable stored under `key` for `device`, ready to run, or None; the key to
    store it under once compiled, or None: JAX's persistent cache keeps it — it could not
    be serialized before)."""
    if key is None or directory() is None:
        return None, None
    if os.path.exists(_path(key) + ".unserializable"):
        return None, None
    return load(key, device), key


def load(key, device):
    """The executable stored under `key` for `device` (flowlite's Executable, ready to run),
    or None: not stored, or unusable (rejected and removed)."""
    if key is None or directory() is None:
        return None
    path = _path(key)
    try:
        with open(path, "rb") as fh:
            blob = fh.read()
    except OSError:
        return None
    try:
        if not blob.startswith(_MAGIC):
            raise ValueError("not an entry")
        head = len(_MAGIC)
        digest, body = blob[head:head + 32], blob[head + 32:]
        if hashlib.sha256(body).digest() != digest:
            raise ValueError("corrupt or truncated")
        entry = pickle.loads(body)
        if entry["key"] != key or entry["environment"] != environment(device):
            raise ValueError("made for another program or environment")
        from jax.experimental import serialize_executable
        compiled = serialize_executable.deserialize_and_load(
            entry["executable"], entry["in_tree"], entry["out_tree"],
            backend=device.jax_device.client, execution_devices=[device.jax_device])
        m = entry["meta"]
        exe = lowering.finish_executable(compiled, m["where"], m["n_outputs"],
                                         tuple(m["donate"]), m["n_checks"], m["chained"],
                                         frozenset(m["guarded"]), tuple(m["rolled"]),
                                         dict(m["stats"]))
    except Exception as e:      # never fatal: the caller compiles it again
        _reject(path, e)
        return None
    # what lowering it would have counted
    for reps in exe.rolled:
        metrics._C["rerolled_runs"] += 1
        metrics._C["rerolled_segments"] += reps
    metrics._C["executable_loads"] += 1
    exe.loaded = True
    return exe


def save(key, exe, device) -> bool:
    """Store `exe` (just compiled) under `key`; False when it can't be serialized or written
    (it stays in JAX's persistent cache)."""
    if key is None or directory() is None:
        return False
    try:
        from jax.experimental import serialize_executable
        payload, in_tree, out_tree = serialize_executable.serialize(exe.compiled)
        meta = {"where": exe.where, "n_outputs": exe.n_outputs, "donate": tuple(exe.donate),
                "n_checks": exe.n_checks, "chained": exe.chained,
                "guarded": tuple(sorted(exe.guarded)), "rolled": tuple(exe.rolled),
                "stats": dict(exe.stats or {})}
        buf = io.BytesIO()
        pickle.dump({"key": key, "environment": environment(device), "executable": payload,
                     "in_tree": in_tree, "out_tree": out_tree, "meta": meta}, buf,
                    protocol=pickle.HIGHEST_PROTOCOL)
        body = buf.getvalue()
    except Exception:
        # marked, so that the next process compiles it through JAX's persistent cache
        metrics._C["executable_store_unserializable"] += 1
        try:
            os.makedirs(_state["dir"], exist_ok=True)
            open(_path(key) + ".unserializable", "wb").close()
        except OSError:
            pass
        return False
    d = _state["dir"]
    tmp = None
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".exe")
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC)
            fh.write(hashlib.sha256(body).digest())
            fh.write(body)
        os.chmod(tmp, 0o644)            # (mkstemp's 0600: as JAX's cache files are)
        os.replace(tmp, _path(key))     # atomic: readers see the old entry or the new one
        tmp = None
    except OSError:
        return False
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
    metrics._C["executable_saves"] += 1
    return True
