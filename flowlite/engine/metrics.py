"""Counters for everything the executor does, and a readable report.

`counters()` is cheap to call in a loop; `report()` says why each sync
happened (explicit, `.item()` at file:line, optimizer step, ...).

`summary()` is the run summary: wall time, compiles, the host's time by phase (phases.py),
executions, syncs and transfers in total and per training iteration, the lines that synced and
the graph cuts (`note_cut`); `enable_summary()` (`python -m flowlite.run --summary`,
`FLOWLITE_SUMMARY=1`) starts the phase clock and prints it at exit.

Layer: engine — imports phases, runtime. The debug layer adds its report sections and reset
hooks here.
"""
from __future__ import annotations

import atexit
import collections
import os
import sys
import time

from . import phases
from .phases import clock
from .runtime import rt

_C = {"compiles": 0, "cache_hits": 0, "executions": 0, "syncs": 0, "persistent_cache_hits": 0,
      "donated_buffers": 0, "replays": 0, "backward_templates": 0, "graph_nodes": 0, "ops": 0,
      "rerolled_runs": 0, "rerolled_segments": 0, "rerolled_upgrades": 0, "host_uploads": 0,
      "graph_cuts": 0, "background_compiles": 0, "executable_loads": 0,
      "executable_saves": 0, "executable_store_rejects": 0,
      "executable_store_unserializable": 0,
      "trace_s": 0.0, "sync_s": 0.0, "compile_s": 0.0, "execute_s": 0.0,
      # of the programs compiled here (not loaded, not in the background): JAX tracing +
      # lowering to StableHLO, and XLA's compile
      "lower_s": 0.0, "xla_compile_s": 0.0}
_sync_causes: collections.Counter = collections.Counter()
_bucket_misses: dict = {}   # (why a length family could not be bucketed, its sync's cause) -> n
_compile_log: list = []
# (seconds, cause, nodes, lowering s, XLA s) of each program compiled in the foreground: where
# a first step's time went, for the summary
_compile_parts: list = []
_cuts: collections.Counter = collections.Counter()   # (user's line, what was cut) -> n


def counters() -> dict:
    """A snapshot of the counters (ints and cumulative seconds)."""
    return dict(_C)


def reset() -> None:
    if clock.on:        # the run summary counts from the process's start
        _fold()
    for k in _C:
        _C[k] = 0.0 if k.endswith("_s") else 0
    _sync_causes.clear()
    _bucket_misses.clear()
    _compile_log.clear()
    if not clock.on:
        _compile_parts.clear()
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
                 loaded: bool = False, background: bool = False, parts=None) -> None:
    """An in-memory cache miss: `seconds` to build the executable, `loaded` when XLA's
    program came from the persistent cache instead of a compile; `background`: compiled on
    a background thread (no host time of the sync in progress); `parts`: (lowering s,
    XLA compile s) of a program compiled here."""
    _C["compiles"] += 1
    _C["compile_s"] += seconds
    _compile_log.append((cause, n_nodes, n_inputs, n_outputs, seconds, loaded))
    if parts is not None and not loaded:
        _C["lower_s"] += parts[0]
        _C["xla_compile_s"] += parts[1]
        _compile_parts.append((seconds, cause, n_nodes) + tuple(parts))
        if len(_compile_parts) > 64:        # the costliest are what the summary shows
            _compile_parts.sort(reverse=True)
            del _compile_parts[8:]
    if background:
        _C["background_compiles"] += 1
    else:
        _timing.compile_pending += seconds
        if clock.on:
            phases.note_compile(seconds)
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
                     f"their first runs (compiled in the background)")
    if _cuts:
        lines.append("  graphs cut into pieces (work recorded without a read: a sequence grown by "
                     "cat, a loop; FLOWLITE_GRAPH_CUTS=0 turns it off):")
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


# ---- the run summary ---------------------------------------------------------------------------
# what reset() cleared while the summary was on: the summary counts from the process's start
_before = {"counters": dict.fromkeys(_C, 0), "causes": collections.Counter(),
           "cuts": collections.Counter(), "loaded": 0}
clock.counters = _C     # an optimizer step's snapshot reads them (phases.timed_step)


def _fold() -> None:
    phases.rebase(_C["executions"], _C["syncs"], _C["compiles"])
    b = _before["counters"]
    for k, v in _C.items():
        b[k] += v
    _before["causes"].update(_sync_causes)
    _before["cuts"].update(_cuts)
    _before["loaded"] += sum(1 for e in _compile_log if e[5])


def _totals() -> dict:
    """The counters since the process started (metrics.reset() calls included, while the
    summary is on)."""
    b = _before["counters"]
    return {k: v + b[k] for k, v in _C.items()}


_PHASE_NAMES = {
    "startup": "startup (python, jax and flowlite imports)",
    "forward": "recording ops (forward; outside backward/step)",
    "backward": "backward()",
    "optimizer": "optimizer.step() recording",
    "data": "data (DataLoader, tensor(), from_numpy())",
    "reads": "host reads (.item(), .tolist(), print)",
    "sync": "syncs (graph walk, cache lookup, dispatch)",
    "compile": "compile (or load from the persistent cache)",
    "blocked": "blocked waiting on the device",
    "other": "other python",
}


def _persistent_cache_dir():
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        return jax.config.jax_compilation_cache_dir or None
    except AttributeError:
        return None


def summary(top: int = 8) -> dict:
    """The run so far, as numbers (what `--summary` prints at exit):

    wall_s: seconds since the process started (since enable_summary() when the clock
    can't tell); compiles: count, seconds, how many were compiled and how many loaded from
    JAX's persistent compile cache or flowlite's store of executables (its directory; of those,
    loaded_without_tracing: from flowlite's store, exec_store); phases_s: the host's seconds by phase
    (None unless the summary is on: enable_summary()) — they add up to wall_s, "other" being
    the rest; executions, syncs, transfers (host->device and device->host counts and bytes,
    counted while the summary is on); iterations: Optimizer.step() calls; per_iteration:
    the same numbers per iteration over iterations 2..N (the steady loop: from the first
    step's end to the last's; None with fewer than 2), with host_s = wall_s - blocked_s;
    sync_sites: [(cause with the user's file:line, count)] most frequent first; graph_cuts:
    [(site, reason, count)]."""
    c = _totals()
    log_loaded = sum(1 for e in _compile_log if e[5]) + _before["loaded"]
    causes = _before["causes"] + _sync_causes
    cuts = _before["cuts"] + _cuts
    wall, acc = phases.elapsed()
    on = clock.on
    if on:
        named = sum(v for k, v in acc.items() if k != "other")
        acc["other"] = max(0.0, wall - named)
        tr = clock.transfers
        transfers = {"h2d": tr[0], "h2d_bytes": tr[1], "d2h": tr[2], "d2h_bytes": tr[3]}
    else:
        transfers = None
    per = None
    first, latest = clock.first, clock.latest
    if on and clock.steps >= 2 and latest is not first:
        n = clock.steps - 1
        w0, a0, *c0 = first
        w1, a1, *c1 = latest
        ph = {k: (a1[k] - a0[k]) / n for k in a1}
        per = {"iterations": n, "wall_s": (w1 - w0) / n, "blocked_s": ph["blocked"],
               "host_s": (w1 - w0) / n - ph["blocked"], "phases_s": ph}
        for j, k in enumerate(("executions", "syncs", "compiles", "h2d", "d2h")):
            per[k] = (c1[j] - c0[j]) / n
    return {
        "wall_s": wall,
        "enabled": on,
        "compiles": {"count": c["compiles"], "seconds": c["compile_s"],
                     "compiled": c["compiles"] - log_loaded, "loaded": log_loaded,
                     "loaded_without_tracing": c["executable_loads"],
                     "persistent_cache_dir": _persistent_cache_dir(),
                     "lowering_s": c["lower_s"], "xla_s": c["xla_compile_s"],
                     "costliest": [{"seconds": p[0], "cause": p[1], "nodes": p[2],
                                    "lowering_s": p[3], "xla_s": p[4]}
                                   for p in sorted(_compile_parts, reverse=True)[:3]]},
        "phases_s": acc if on else None,
        "executions": c["executions"],
        "syncs": c["syncs"],
        "cache_hits": c["cache_hits"],
        "transfers": transfers,
        "iterations": clock.steps if on else None,
        "per_iteration": per,
        "sync_sites": causes.most_common(top),
        "graph_cuts": [(site, reason, n) for (site, reason), n in cuts.most_common(top)],
        "graph_cuts_total": sum(cuts.values()),
    }


def _bytes(n) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def _ms(s) -> str:
    return f"{s * 1e3:.2f} ms"


def format_summary(s: dict = None) -> str:
    """summary() as the text `--summary` prints."""
    s = summary() if s is None else s
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    wall = s["wall_s"]
    lines = [f"flowlite summary: {script}: {wall:.2f} s wall, from the process's start"]
    cc = s["compiles"]
    where = cc["persistent_cache_dir"]
    lines.append(f"  compiles: {cc['count']} in {cc['seconds']:.2f} s ({cc['compiled']} compiled, "
                 f"{cc['loaded']} loaded from the persistent cache"
                 + (f" {where}" if where else "; the persistent cache is off")
                 + (f", {cc['loaded_without_tracing']} of them without tracing"
                    if cc.get("loaded_without_tracing") else "") + ")")
    if cc["costliest"]:
        lines.append(f"    of the programs compiled: tracing and lowering {cc['lowering_s']:.2f} s, "
                     f"XLA's compiler {cc['xla_s']:.2f} s; the costliest:")
        lines.extend(f"    {p['seconds']:7.2f} s  {p['cause']}: {p['nodes']} nodes (lowering "
                     f"{p['lowering_s']:.2f} s, XLA {p['xla_s']:.2f} s)" for p in cc["costliest"])
    ph = s["phases_s"]
    if ph is not None:
        lines.append("  host time by phase:")
        for k in phases.PHASES:
            v = ph[k]
            pct = 100 * v / wall if wall > 0 else 0.0
            lines.append(f"    {_PHASE_NAMES[k]:<48} {v:8.3f} s {pct:5.1f}%")
    tr = s["transfers"]
    lines.append(f"  executions: {s['executions']}   syncs: {s['syncs']}   cache hits: "
                 f"{s['cache_hits']}" + (
                     f"   host->device: {tr['h2d']} ({_bytes(tr['h2d_bytes'])})   "
                     f"device->host: {tr['d2h']} ({_bytes(tr['d2h_bytes'])})" if tr else ""))
    it = s["iterations"]
    per = s["per_iteration"]
    if it is not None:
        if not it:
            lines.append("  iterations: none (no Optimizer.step() call)")
        elif per is None:
            lines.append(f"  iterations: {it} Optimizer.step() call (per-iteration numbers "
                         "need 2)")
        else:
            lines.append(f"  per iteration ({it} Optimizer.step() calls; the steady loop, "
                         f"iterations 2-{it}): {per['executions']:.2f} executions, "
                         f"{per['syncs']:.2f} syncs, {per['compiles']:.2f} compiles, "
                         f"{per['h2d']:.2f} host->device, {per['d2h']:.2f} device->host")
            comp = per["phases_s"]["compile"]
            lines.append(f"    {_ms(per['wall_s'])} wall = {_ms(per['host_s'])} host"
                         + (f" ({_ms(comp)} of it compiling)" if comp >= 5e-6 else "")
                         + f" + {_ms(per['blocked_s'])} blocked on the device")
    if s["sync_sites"]:
        lines.append("  syncs by site:")
        lines.extend(f"    {n:7d}  {cause}" for cause, n in s["sync_sites"])
    if s["graph_cuts"]:
        lines.append(f"  graph cuts ({s['graph_cuts_total']}):")
        lines.extend(f"    {n:7d}  {site}: {reason}" for site, reason, n in s["graph_cuts"])
    else:
        lines.append("  graph cuts: none")
    return "\n".join(lines)


def _print_summary() -> None:
    try:
        text = format_summary()
    except Exception as e:  # noqa: BLE001 — never turn a finished run into a failure
        text = f"flowlite summary: unavailable ({type(e).__name__}: {e})"
    print(text, file=sys.stderr, flush=True)


_summary_state = {"atexit": False}


def enable_summary(print_at_exit: bool = True) -> None:
    """Time the host's phases from now on (the time before, back to the process's start,
    counts as startup and "other"), and print summary() to stderr at exit."""
    phases.enable()
    if print_at_exit and not _summary_state["atexit"]:
        _summary_state["atexit"] = True
        atexit.register(_print_summary)


def imported() -> None:
    """`import flowlite` finished (flowlite/__init__.py): startup ends here, and the summary
    starts when FLOWLITE_SUMMARY is set."""
    phases.mark_imported()
    if os.environ.get("FLOWLITE_SUMMARY", "") not in ("", "0"):
        enable_summary()
