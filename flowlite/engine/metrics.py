"""Counters for everything the executor does, and a readable report.

`counters()` is cheap to call in a loop; `report()` says why each sync
happened (explicit, `.item()` at file:line, optimizer step, ...).

Layer: engine — imports runtime. The debug layer adds its report sections and reset hooks here.
"""
from __future__ import annotations

import collections
import os
import sys
import time

from .runtime import rt

_C = {"compiles": 0, "cache_hits": 0, "executions": 0, "syncs": 0, "persistent_cache_hits": 0,
      "donated_buffers": 0, "replays": 0, "backward_templates": 0, "graph_nodes": 0, "ops": 0,
      "rerolled_runs": 0, "rerolled_segments": 0, "rerolled_upgrades": 0, "host_uploads": 0,
      "graph_cuts": 0,
      "trace_s": 0.0, "sync_s": 0.0, "compile_s": 0.0, "execute_s": 0.0}
_sync_causes: collections.Counter = collections.Counter()
_bucket_misses: dict = {}   # (why a length family could not be bucketed, its sync's cause) -> n
_compile_log: list = []
_cuts: collections.Counter = collections.Counter()   # (user's line, what was cut) -> n


def counters() -> dict:
    """A snapshot of the counters (ints and cumulative seconds)."""
    return dict(_C)


def reset() -> None:
    for k in _C:
        _C[k] = 0.0 if k.endswith("_s") else 0
    _sync_causes.clear()
    _bucket_misses.clear()
    _compile_log.clear()
    _cuts.clear()
    _timing.last_end = None
    for hook in rt.on_reset:
        hook()


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # flowlite/ itself


# Both caches key code objects by id: hashing a code object hashes its bytecode, names and
# constants on every call.  `_in_pkg` holds the code object, so its id can't be reused while
# either cache names it (both are cleared together).
_in_pkg: dict = {}      # id(code object) -> (the code object, defined inside flowlite?)
_sites: dict = {}       # (id(code object), instruction offset) -> "file:line"


def _first_user_frame(f):
    """(the first frame from `f` outward whose code is not flowlite's or None, how many
    frames were skipped to reach it)."""
    skipped = 0
    while f is not None:
        code = f.f_code
        e = _in_pkg.get(id(code))
        if e is None or e[0] is not code:
            if len(_in_pkg) > 50_000:     # exec'd code keeps making new code objects
                _in_pkg.clear()
                _sites.clear()
            e = _in_pkg[id(code)] = (code, code.co_filename.startswith(_PKG_DIR))
        if not e[1]:
            break
        f = f.f_back
        skipped += 1
    return f, skipped


def user_site(depth: int = 2) -> str:
    """file:line of the first frame outside flowlite (the user's line)."""
    f = _first_user_frame(sys._getframe(depth))[0]
    if f is None:
        return "<unknown>"
    code = f.f_code
    # keyed by the instruction offset: f_lineno decodes the line table on every read
    k = (id(code), f.f_lasti)
    s = _sites.get(k)
    if s is None:
        s = _sites[k] = f"{os.path.basename(code.co_filename)}:{f.f_lineno}"
    return s


def user_stacklevel() -> int:
    """The `stacklevel` that makes a `warnings.warn` called by the caller of this function
    point at the user's line (the first frame outside flowlite), however deep inside
    flowlite the warning is raised."""
    return 1 + _first_user_frame(sys._getframe(1))[1]


# fn(kind, now, data) for every sync, compile and execution (a profiler's trace); empty
# unless one is recording, so the hot path pays one truth test
listeners: list = []


def _tell(kind, data):
    now = time.perf_counter()
    for fn in listeners:
        fn(kind, now, data)


def note_sync(cause: str) -> None:
    _C["syncs"] += 1
    _sync_causes[cause] += 1
    if listeners:
        _tell("sync", cause)


def persistent_hits() -> int:
    return _C["persistent_cache_hits"]


def note_compile(seconds: float, n_nodes: int, n_inputs: int, n_outputs: int, cause: str,
                 loaded: bool = False) -> None:
    """An in-memory cache miss: `seconds` to build the executable, `loaded` when XLA's
    program came from the persistent cache instead of a compile."""
    _C["compiles"] += 1
    _C["compile_s"] += seconds
    _timing.compile_pending += seconds
    _compile_log.append((cause, n_nodes, n_inputs, n_outputs, seconds, loaded))
    if listeners:
        _tell("compile", (cause, n_nodes, n_inputs, n_outputs, seconds, loaded))


last_sync = [0.0, 0.0, 0.0, 0]   # start, executable ready, dispatched, nodes: of the last sync


def note_bucket_miss(why: str, cause: str) -> None:
    """A family of graphs that differ in one length compiles per length: `why` names the op
    (and its line) that has no padding rule for how it uses the length."""
    key = (why, cause)
    _bucket_misses[key] = _bucket_misses.get(key, 0) + 1
    if len(_bucket_misses) > 64:
        del _bucket_misses[next(iter(_bucket_misses))]


def note_cut(site: str, reason: str) -> None:
    """A pending graph was cut into a piece at the user's line `site` (engine/cuts.py)."""
    _C["graph_cuts"] += 1
    _cuts[(site, reason)] += 1
    if len(_cuts) > 256:
        del _cuts[next(iter(_cuts))]


def cuts() -> dict:
    """{(user's line, what was cut): how many times} since the last reset."""
    return dict(_cuts)


def note_execution(t0: float, t1: float, t2: float) -> None:
    """t0: sync start, t1: executable ready, t2: dispatched.  Host time between
    the previous execution and this sync counts as tracing (recording ops)."""
    _C["executions"] += 1
    if _timing.last_end is not None and t0 > _timing.last_end:
        _C["trace_s"] += t0 - _timing.last_end
    _C["sync_s"] += (t1 - t0) - (_timing.compile_pending)
    _timing.compile_pending = 0.0
    _C["execute_s"] += t2 - t1
    if listeners:
        _tell("execution", (t0, t1, t2, _timing.last_end))
    _timing.last_end = t2




class _timing:
    last_end = None          # when the previous execution was dispatched (tracing starts)
    compile_pending = 0.0    # compile seconds of the sync in progress (not graph-walk time)

report_sections: list = []    # () -> (title, lines): sections other layers add to report()


def report() -> str:
    c = _C
    lines = [
        "flowlite metrics",
        f"  syncs: {c['syncs']}   executions: {c['executions']}   compiles: {c['compiles']}"
        f"   cache hits: {c['cache_hits']}   persistent-cache hits: {c['persistent_cache_hits']}",
        f"  host time recording ops {c['trace_s']:.3f}s   graph walk + key {c['sync_s']:.3f}s"
        f"   compile {c['compile_s']:.3f}s"
        f"   execute (dispatch) {c['execute_s']:.3f}s",
    ]
    if c["rerolled_runs"]:
        lines.append(f"  re-rolled: {c['rerolled_runs']} runs of repeated segments lowered as "
                     f"loops ({c['rerolled_segments']} segments; FLOWLITE_REROLL=0 turns it off); "
                     f"{c['rerolled_upgrades']} replaced by their unrolled form after "
                     f"their first runs")
    if _cuts:
        lines.append("  graphs cut into pieces (a sequence grown without a read; "
                     "FLOWLITE_GRAPH_CUTS=0 turns it off):")
        for (site, why), n in _cuts.most_common(10):
            lines.append(f"    {n:6d}  {why} at {site}")
    if _bucket_misses:
        lines.append("  length families compiled per length (an op without a padding rule):")
        for (why, cause), n in _bucket_misses.items():
            lines.append(f"    {why}  ({cause})")
    if _sync_causes:
        lines.append("  syncs by cause:")
        for cause, n in _sync_causes.most_common():
            lines.append(f"    {n:6d}  {cause}")
    for section in report_sections:
        title, entries = section()
        if entries:
            lines.append(f"  {title}:")
            lines.extend(f"    {e}" for e in entries)
    if _compile_log:
        lines.append("  in-memory cache misses (compiled, or loaded from the persistent cache):")
        for cause, nn, ni, no, s, loaded in _compile_log[-20:]:
            lines.append(f"    {s:7.3f}s  {'loaded  ' if loaded else 'compiled'}  {nn} ops, "
                         f"{ni} inputs, {no} outputs  ({cause})")
    return "\n".join(lines)
