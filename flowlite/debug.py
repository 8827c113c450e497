"""Making laziness visible: recompile explanations, sync hygiene, eager and anomaly modes,
graph and HLO inspection.

Layer: entry — imports engine.cache, engine.device, engine.executor, engine.ir, engine.lowering,
engine.metrics, engine.runtime, engine.tape, frontend.tensor. Everything here is off the hot
path unless switched on: the tracer checks one flag per op.
"""
from __future__ import annotations

import contextlib
import difflib
import warnings

import numpy as np

from .engine import cache, executor, ir, metrics
from .engine.device import default_device
from .engine.lowering import lower_program
from .engine.runtime import rt
from .engine.tape import _state as _grad_state
from .frontend.tensor import Tensor

# ---- switches read by the tracer: `rt.debug_on` is the one flag checked per op ---------------
flags = rt.flags


class _Watch:
    """What the debug layer keeps between calls."""
    recompile_warn_after = 3     # warn once a site has recompiled more than N times
    graph_size_warn = 200_000    # pending tensors without a sync before the guard warns
    auto_track_until = 0         # execution count after which automatic site tracking stops
    auto_track_ops = 0           # ... or the op count (a huge graph pays ~3 µs an op for it)
    graph_start = None           # the user line where the current pending graph began
    graph_warned = False


_watch = _Watch()
AUTO_TRACK_OPS = 100_000


def set_recompile_warning_threshold(n: int) -> None:
    _watch.recompile_warn_after = int(n)


def set_graph_size_threshold(n: int) -> None:
    _watch.graph_size_warn = int(n)


def track_sites(on: bool = True) -> None:
    """Record the user's source line for every op (costs ~1 µs per op)."""
    flags["track_sites"] = bool(on)
    _watch.auto_track_until = 0
    _sync_tracer_flags()


def _sync_tracer_flags():
    rt.update_debug_on()


# ---- recompile explanations --------------------------------------------------------------------
_site_graphs: dict = {}        # site -> list of graph summaries compiled there (most recent last)
# sites remembered at once: each optimizer has its own (an optimizer per run of a sweep makes
# one per run), and a site keeps up to 8 graph summaries alive
_MAX_SITES = 256
_site_recompiles: dict = {}
_explanations: list = []
_warned_sites: set = set()


def _site_of(cause: str) -> str:
    return cause


def _history(site) -> list:
    """The graph summaries remembered for `site`; a new site forgets the oldest one when
    _MAX_SITES are remembered."""
    h = _site_graphs.get(site)
    if h is None:
        if len(_site_graphs) >= _MAX_SITES:
            del _site_graphs[next(iter(_site_graphs))]
        h = _site_graphs[site] = []
    return h


def _summary(order, leaves, scalars, roots):
    # a multi-output node kept for backward can be an input (shape and dtype are tuples)
    inputs = [("input", _shape(n.shape), _dname(n.dtype), n.site) for n in leaves]
    nodes = [(n.op.name, _short(n.attrs), _shape(n.shape), _dname(n.dtype), n.site)
             for n in order]
    outs = [(_shape(r.shape), _dname(r.dtype)) for r in roots]
    return {"inputs": inputs, "nodes": nodes, "scalars": [s.dtype.name for s in scalars],
            "outputs": outs}


def _shape(s):
    return tuple(s) if s and isinstance(s[0], int) or s == () else tuple(map(tuple, s))


def _dname(d):
    return d.name if hasattr(d, "name") else tuple(x.name for x in d)


def _short(attrs):
    r = repr(attrs)
    return r if len(r) <= 80 else r[:77] + "..."


def _diff(old, new, limit=6):
    out = []
    oi, ni = old["inputs"], new["inputs"]
    for j, (a, b) in enumerate(zip(oi, ni)):
        if a[1] != b[1] or a[2] != b[2]:
            what = []
            if a[1] != b[1]:
                what.append(f"shape {a[1]} -> {b[1]}")
            if a[2] != b[2]:
                what.append(f"dtype {a[2]} -> {b[2]}")
            site = f" (created at {b[3]})" if b[3] else ""
            out.append(f"input {j}{site}: " + ", ".join(what))
    if len(oi) != len(ni):
        out.append(f"number of inputs {len(oi)} -> {len(ni)}")
    on, nn = old["nodes"], new["nodes"]
    # align on op names, then report what differs inside aligned ops (shape/dtype/attrs)
    for tag, i1, i2, j1, j2 in _align([x[0] for x in on], [x[0] for x in nn]):
        if tag == "equal":
            if all(a[:4] == b[:4] for a, b in zip(on[i1:i2], nn[j1:j2])):
                continue
            tag = "replace"
        if tag == "replace" and i2 - i1 == j2 - j1:
            for a, b, k in zip(on[i1:i2], nn[j1:j2], range(j1, j2)):
                if a[:4] == b[:4]:
                    continue
                site = f" (created at {b[4]})" if b[4] else ""
                if a[0] != b[0]:
                    out.append(f"op {k}: '{a[0]}' -> '{b[0]}'{site}")
                elif a[1] != b[1]:
                    kind = "constant" if a[0] == "full" else "attributes"
                    out.append(f"op {k} '{b[0]}': {kind} {a[1]} -> {b[1]}{site}")
                elif a[3] != b[3]:
                    out.append(f"op {k} '{b[0]}': dtype {a[3]} -> {b[3]}{site}")
                else:
                    out.append(f"op {k} '{b[0]}': shape {a[2]} -> {b[2]}{site}")
                if len(out) >= limit:
                    break
        else:
            removed = ", ".join(f"'{x[0]}'" for x in on[i1:i2][:4])
            added = ", ".join(f"'{x[0]}'" + (f" (created at {x[4]})" if x[4] else "")
                              for x in nn[j1:j2][:4])
            if removed:
                out.append(f"ops removed: {removed}" + (" ..." if i2 - i1 > 4 else ""))
            if added:
                out.append(f"ops added: {added}" + (" ..." if j2 - j1 > 4 else ""))
        if len(out) >= limit:
            break
    if len(on) != len(nn):
        out.append(f"graph size {len(on)} -> {len(nn)} ops")
    if old["scalars"] != new["scalars"]:
        out.append(f"host scalars (data) {len(old['scalars'])} -> {len(new['scalars'])}")
    if old["outputs"] != new["outputs"] and not out:
        out.append(f"outputs {len(old['outputs'])} -> {len(new['outputs'])}")
    return out or ["same structure; a donation pattern or device placement differs"]


_ALIGN_MAX = 2000    # ops each side that difflib aligns (its time grows as their product)


def _align(a, b):
    """difflib's opcodes aligning op-name lists `a` and `b`: their common prefix and suffix
    first (linear), difflib on the rest only when that is short — a program of 15,000 ops
    (an LSTM cell stepped 999 times) took minutes — else the rest as one replaced block."""
    m = min(len(a), len(b))
    p = 0
    while p < m and a[p] == b[p]:
        p += 1
    q = 0
    while q < m - p and a[len(a) - 1 - q] == b[len(b) - 1 - q]:
        q += 1
    ea, eb = len(a) - q, len(b) - q
    ops = [("equal", 0, p, 0, p)] if p else []
    if ea - p <= _ALIGN_MAX and eb - p <= _ALIGN_MAX:
        sm = difflib.SequenceMatcher(a=a[p:ea], b=b[p:eb], autojunk=False)
        ops += [(t, i1 + p, i2 + p, j1 + p, j2 + p) for t, i1, i2, j1, j2 in sm.get_opcodes()]
    elif ea > p or eb > p:
        ops.append(("replace", p, ea, p, eb))
    if q:
        ops.append(("equal", ea, len(a), eb, len(b)))
    return ops


def _distance(a, b):
    d = abs(len(a["nodes"]) - len(b["nodes"])) + abs(len(a["inputs"]) - len(b["inputs"]))
    d += sum(1 for x, y in zip(a["nodes"], b["nodes"]) if x[:4] != y[:4])
    d += sum(1 for x, y in zip(a["inputs"], b["inputs"]) if x[1:3] != y[1:3])
    return d


def on_compile(cause, order, leaves, scalars, roots, exe=None):
    """Called by the executor on every cache miss."""
    site = _site_of(cause)
    summary = _summary(order, leaves, scalars, roots)
    if exe is not None:
        exe.summary = summary
    history = _history(site)
    if history:
        nearest = min(history, key=lambda h: _distance(h, summary))
        changes = _diff(nearest, summary)
        n = _site_recompiles[site] = _site_recompiles.get(site, 0) + 1
        secs = metrics._compile_log[-1][4] if metrics._compile_log else 0.0
        how = ("loaded from the persistent cache" if exe is not None and exe.loaded
               else "compiled")
        text = f"recompile #{n} at {site}: " + "; ".join(changes) + f" ({how} in {secs:.2f}s)"
        _explanations.append(text)
        del _explanations[:-50]
        if (not flags["track_sites"] or _watch.auto_track_until) and \
                not cause.startswith("graph cut:"):
            # record source lines for a while, so the next explanation can name them; the
            # tracking (1-20 µs per op, with the depth of the Python stack) switches itself off
            # after 50 executions or 100,000 recorded ops without a compile (an LSTM closure
            # stepped over 999 steps records 126,000 a call: ~1 s each) (not for a cut loop's
            # pieces: their few programs are expected, and tracking cost a generation ~10 µs
            # an op)
            if not flags["track_sites"]:
                track_sites(True)
            _watch.auto_track_until = metrics._C["executions"] + 50
            _watch.auto_track_ops = metrics._C["ops"] + AUTO_TRACK_OPS
        # (a cut loop's pieces compile a bounded few programs as its length grows: the
        # buckets' doing, nothing the user should pad)
        if n > _watch.recompile_warn_after and site not in _warned_sites and \
                not cause.startswith("graph cut:"):
            _warned_sites.add(site)
            warnings.warn(f"flowlite: {site} has recompiled {n} times. Last change: "
                          + "; ".join(changes) + ". Keep shapes/dtypes fixed (pad or drop the "
                          "last batch) and pass changing values as tensors.",
                          stacklevel=metrics.user_stacklevel())
    history.append(summary)
    del history[:-8]




def on_run(cause, exe) -> None:
    """Every execution: remember which programs ran at which site (for later diffs)."""
    if _watch.auto_track_until and (metrics._C["executions"] > _watch.auto_track_until or
                                    metrics._C["ops"] > _watch.auto_track_ops):
        _watch.auto_track_until = 0
        track_sites(False)
    h = _site_graphs.get(cause)
    summ = exe.summary
    if summ is None:
        return
    if h is None:
        _history(cause).append(summ)
    elif h[-1] is not summ and summ not in h:
        h.append(summ)
        del h[:-8]


def recompile_explanations() -> list:
    return list(_explanations)


def _reset():
    _site_graphs.clear()
    _site_recompiles.clear()
    _explanations.clear()
    _warned_sites.clear()
    _warned_lines.clear()


# ---- sync hygiene ---------------------------------------------------------------------------
_warned_lines: set = set()


def on_mid_step_execution(cause: str) -> None:
    """An execution while the tape still holds the forward pass: the training step will run
    (at least) two executables.  Warn once per line."""
    if cause in _warned_lines:
        return
    _warned_lines.add(cause)
    warnings.warn(f"flowlite: a sync by {cause} happened between the forward pass and "
                  "backward(), so this training step runs more than one executable. Read values "
                  "after opt.step() instead (the step's sync materialises every live tensor, so "
                  "`loss.item()` after the step is free), or collect them and read them later.",
                  stacklevel=metrics.user_stacklevel())


class strict(contextlib.ContextDecorator):
    """Inside `with flowlite.strict():` any implicit sync (a host read of a pending value)
    raises, naming the line; explicit `flowlite.sync()` and optimizer steps are allowed."""

    def __enter__(self):
        flags["strict"] += 1
        return self

    def __exit__(self, *exc):
        flags["strict"] -= 1
        return False


def check_implicit_sync(cause: str) -> None:
    if flags["strict"]:
        raise RuntimeError(f"flowlite.strict(): implicit sync by {cause}. Move the read after "
                           "the step's sync (opt.step() / flowlite.sync()) or out of the "
                           "strict block.")




def on_first_pending(site: str) -> None:
    _watch.graph_start = site
    _watch.graph_warned = False


def check_graph_size(n_pending: int) -> None:
    if n_pending >= _watch.graph_size_warn and not _watch.graph_warned:
        _watch.graph_warned = True
        warnings.warn(f"flowlite: {n_pending} tensors recorded without a sync; the graph "
                      f"started at {_watch.graph_start}. A missing barrier (opt.step(), "
                      "flowlite.sync()) makes the graph grow without bound.",
                      stacklevel=metrics.user_stacklevel())


# ---- eager and anomaly modes -------------------------------------------------------------------
@contextlib.contextmanager
def eager(on: bool = True):
    """Execute every op as it is recorded (per-op cached executables): same results,
    values visible in a debugger.  Also `FLOWLITE_EAGER=1`."""
    prev = flags["eager"]
    flags["eager"] = on
    _sync_tracer_flags()
    try:
        yield
    finally:
        flags["eager"] = prev
        _sync_tracer_flags()


@contextlib.contextmanager
def detect_anomaly():
    """Run op by op and raise at the first op (forward or backward) that produced a NaN/Inf,
    naming it and the user's line that created it."""
    prev = (flags["anomaly"], flags["track_sites"])
    flags["anomaly"] = True
    flags["track_sites"] = True
    _sync_tracer_flags()
    try:
        yield
    finally:
        flags["anomaly"], flags["track_sites"] = prev
        _sync_tracer_flags()


def on_new_node(node) -> None:
    """Tracer hook (only when a debug flag is on)."""
    if flags["track_sites"] and node.site is None:
        node.site = metrics.user_site(3)
    if (flags["eager"] or flags["anomaly"]) and not rt.local.tracing_body:
        opname = node.op.name
        executor.sync(f"eager op '{opname}'", extra_roots=(node,))
        if flags["anomaly"] and node.op is ir.DATA and node.dtype.is_floating_point:
            v = np.asarray(node.value)
            if not np.isfinite(v.astype(np.float32) if v.dtype.itemsize < 4 else v).all():
                phase = "backward" if getattr(_grad_state, "in_backward", False) else "forward"
                raise FloatingPointError(
                    f"detect_anomaly: op '{opname}' ({phase}) produced a non-finite "
                    f"value (shape {tuple(node.shape)}, dtype {node.dtype.name}) at "
                    f"{node.site or 'unknown site'}")


# ---- inspection ---------------------------------------------------------------------------------
def _pending_graph(tensors):
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    roots = [t._node for t in tensors if t._node.op is not ir.DATA]
    return roots, executor._walk(roots) if roots else ({}, [], [], [], [])


def graph(tensors, format: str = "text") -> str:  # noqa: A002
    """The pending IR behind `tensors` as text (default) or Graphviz DOT."""
    roots, (slot, order, leaves, scalars, _) = _pending_graph(tensors)
    if format not in ("text", "dot"):
        raise ValueError("graph: format must be 'text' or 'dot'")
    names = {}
    for n in leaves:
        names[id(n)] = f"in{len(names)}"
    for n in scalars:
        names[id(n)] = f"s{len(names)}"
    for n in order:
        names[id(n)] = f"%{len(names)}"
    out_ids = {id(r) for r in roots}
    if format == "text":
        lines = [f"{names[id(n)]} = input {tuple(n.shape)} {n.dtype.name}"
                 + (f"  # {n.site}" if n.site else "") for n in leaves]
        lines += [f"{names[id(n)]} = scalar {n.dtype.name} (data)" for n in scalars]
        for n in order:
            args = ", ".join(names[id(i)] for i in n.inputs)
            attrs = "" if not n.attrs else f" {_short(n.attrs)}"
            mark = "  -> output" if id(n) in out_ids else ""
            site = f"  # {n.site}" if n.site else ""
            lines.append(f"{names[id(n)]} = {n.op.name}({args}){attrs} : "
                         f"{_shape(n.shape)} {_dname(n.dtype)}{mark}{site}")
        return "\n".join(lines)
    lines = ["digraph flowlite {", "  rankdir=TB; node [shape=box, fontsize=10];"]
    for n in list(leaves) + list(scalars) + list(order):
        label = (n.op.name if n.op is not ir.DATA else "input") + f"\\n{_shape(n.shape)}"
        style = ", style=filled, fillcolor=lightblue" if id(n) in out_ids else ""
        lines.append(f'  "{names[id(n)]}" [label="{label}"{style}];')
        for i in n.inputs:
            lines.append(f'  "{names[id(i)]}" -> "{names[id(n)]}";')
    lines.append("}")
    return "\n".join(lines)


def hlo(tensors, dialect: str = "stablehlo") -> str:
    """The lowered program for the pending graph behind `tensors`: 'stablehlo' (before XLA
    optimisation) or 'hlo' (the optimised, compiled module)."""
    roots, (slot, order, leaves, scalars, _) = _pending_graph(tensors)
    if not roots:
        raise ValueError("hlo: nothing pending (the tensors are already materialised)")
    args = [n.value for n in leaves]
    if scalars:
        args.append(cache._pack_scalars(scalars))
    device = roots[0].device or default_device()
    lowered = lower_program(order, leaves, scalars, slot, tuple(slot[id(r)] for r in roots),
                            device, (), args)
    if dialect == "stablehlo":
        return lowered.as_text()
    if dialect == "hlo":
        return lowered.compile().as_text()
    raise ValueError("hlo: dialect must be 'stablehlo' or 'hlo'")


def executable_text(index: int = -1) -> str:
    """Optimised HLO text of a cached executable (default: the most recently compiled)."""
    exes = cache.executables()
    if not exes:
        raise ValueError("executable_text: nothing has been compiled yet")
    return exes[index].compiled.as_text()


def executables() -> list:
    """Statistics of every cached executable: inputs, outputs, donated/argument/output/
    temporary bytes, flops estimate, hits."""
    out = []
    for exe in cache.executables():
        s = dict(exe.stats or {})
        s["hits"] = exe.hits
        out.append(s)
    return out


# ---- hooks: the executor, tracer and tape call these through `rt` ---------------------------------
rt.on_new_node = on_new_node
rt.on_first_pending = on_first_pending
rt.check_graph_size = check_graph_size
rt.check_implicit_sync = check_implicit_sync
rt.on_compile = on_compile
rt.on_run = on_run
rt.on_mid_step_execution = on_mid_step_execution
rt.on_reset.append(_reset)
metrics.report_sections.append(lambda: ("recompiles (what changed)",
                                        recompile_explanations()[-10:]))
