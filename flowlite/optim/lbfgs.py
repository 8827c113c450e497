"""L-BFGS with PyTorch's `step(closure)` interface and iterates (torch.optim.LBFGS).

The algorithm decides on data: whether a curvature pair is kept (y·s > 1e-10), whether the
direction still descends, the convergence tests, every strong-Wolfe line-search branch.  So
it reads a few scalars on the host — but it reads them all at once, one sync per closure
evaluation, and keeps every graph's structure fixed:

* the history is two fixed (history_size, n) buffers (oldest first, zero rows while not
  full) and the two-loop recursion is a `scan` over them, so the graphs never change as the
  history grows — no recompiles after the first step;
* at each sync the direction is computed for both outcomes of the y·s test (pair kept or
  not), with its g·d and max|d|, and the host picks one; together with the loss, max|g| and
  the previous max|d·t| that is everything the next decisions need.

Without a line search one step costs one executable per closure evaluation (at most
max_iter; each contains the closure's forward and backward, the parameter update and the
next direction), plus one at the end for the final parameter update.  A closure whose graph
is big (more than SPLIT_AT recorded nodes: a model stepped over hundreds of time steps)
runs as an executable of its own before the direction's, so the variants of the first
iterations (no history yet, a curvature pair kept or not) recompile only the small direction
program, not the closure.  With
line_search_fn="strong_wolfe" each line-search evaluation is one executable and each
iteration one more.  See docs/layers-and-ops.md.
"""
from __future__ import annotations

import math

import numpy as np

from .. import extend
from ..extend import Tensor, enable_grad, no_grad, ops as F, rebind, scan, share
from .optimizer import Optimizer
from . import _checks as C


SPLIT_AT = 2048     # recorded nodes above which the closure runs apart (_closure_apart)


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """Minimiser of the cubic through (x1, f1, g1), (x2, f2, g2), clamped to bounds."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, d_norm, c1=1e-4, c2=0.9,
                  tolerance_change=1e-9, max_ls=25):
    """PyTorch's strong-Wolfe line search (bracketing, then zoom by cubic interpolation).
    obj_func(x, t, d) -> (loss, flat grad, grad·d) with the two scalars already on the
    host; f, gtd, d_norm are host floats, g a (lazy) tensor."""
    f_new, g_new, gtd_new = obj_func(x, t, d)
    ls_func_evals = 1
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new, gtd_new = obj_func(x, t, d)
        ls_func_evals += 1
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket until the strong Wolfe conditions hold
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new, gtd_new = obj_func(x, t, d)
        ls_func_evals += 1
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


def _dot(a, b):
    return (a * b).sum()


def _two_loop(g, S, Y, RO, H_diag):
    """The L-BFGS direction -H g by the two-loop recursion over the history buffers
    (rows oldest first; all-zero rows contribute exactly nothing)."""
    def newest_first(q, row):
        s, y, ro = row
        al = _dot(s, q) * ro
        return q - al * y, al
    q, al = scan(newest_first, -g, (S, Y, RO), reverse=True)
    r = q * H_diag

    def oldest_first(r, row):
        s, y, ro, a = row
        be = _dot(y, r) * ro
        return r + (a - be) * s, be
    r, _ = scan(oldest_first, r, (S, Y, RO, al))
    return r


def _shift_in(buf, row):
    return F.cat([buf[1:], row.unsqueeze(0)], 0)


def _read(values) -> list:
    """Several 0-d tensors (or floats) to host floats with one sync."""
    ts = [v for v in values if isinstance(v, Tensor)]
    if not ts:
        return [float(v) for v in values]
    dt = ts[0].dtype
    host = F.stack([F.to_dtype(v.reshape(()), dt) for v in ts]).numpy().astype(np.float64)
    it = iter(host.tolist())
    return [next(it) if isinstance(v, Tensor) else float(v) for v in values]


class LBFGS(Optimizer):
    """torch.optim.LBFGS: one parameter group; `step(closure)` where the closure clears the
    gradients, computes the loss, calls backward() and returns the loss."""

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        self._params = self.param_groups[0]["params"]
        self._numel = sum(int(np.prod(p.shape)) for p in self._params)
        self._lbfgs: dict = {"func_evals": 0, "n_iter": 0}

    # -- the base class's optax state does not apply ------------------------------------------
    def _init_state(self, gi):
        if gi > 0:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._group_steps.append(0)

    def _validate(self, group):
        C.check_lr(group)
        for k in ("max_iter", "max_eval", "history_size"):
            if not isinstance(group[k], int) or group[k] <= 0:
                raise ValueError(f"LBFGS: {k} must be a positive integer, got {group[k]!r}")
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: only 'strong_wolfe' is supported as line_search_fn, "
                             f"got {group['line_search_fn']!r}")

    # -- flat views ------------------------------------------------------------------------------
    def _flat_grad(self):
        views = [(p.grad if p.grad is not None else F.zeros_like(p)).reshape(-1)
                 for p in self._params]
        return F.cat(views, 0) if len(views) > 1 else views[0]

    def _add_grad(self, t, d):
        off = 0
        for p in self._params:
            n = int(np.prod(p.shape))
            rebind(p, p + self._scalar(t, d) * d[off:off + n].reshape(tuple(p.shape)),
                   "LBFGS.step")
            off += n

    def _data(self, a, like):
        """A materialised tensor of like's dtype and device (an executable input)."""
        return extend.from_numpy(a.astype(like.dtype.np)).to(like.device)

    def _scalar(self, v, like):
        """A Python float as graph data, never a baked constant (t = 1.0 is common)."""
        return extend.host_scalar(float(v), like.dtype)

    def _clone_param(self):
        return [share(p) for p in self._params]

    def _set_param(self, xs):
        for p, x in zip(self._params, xs):
            rebind(p, x, "LBFGS.step")

    def _closure_apart(self):
        """Run a big closure's forward and backward (and the update before it) now, as a
        program of their own: it is the same at every evaluation, while the direction's
        differs between the first iterations (no history, a curvature pair kept or not), so
        the closure compiles once instead of once per variant (time_sequence_prediction's
        999-step LSTM: 4 programs of ~20 s each).  A small closure rides along with the
        direction (one executable per evaluation: a recompile costs less than a dispatch)."""
        if extend.recorded_since_sync() > SPLIT_AT:
            extend.sync("LBFGS.step(): the closure's gradient")

    # -- one sync: everything the next decisions need -------------------------------------------
    def _candidates(self, g, first):
        """Directions for the next iteration (lazy): the first one (-g), or with and without
        the new curvature pair; the scalars to read for each."""
        st = self._lbfgs
        if first:
            d = -g
            return {"first": (d, _dot(g, d), d.abs().max())}, [g.abs().sum()]
        y = g - st["prev_flat_grad"]
        s = st["d"] * self._scalar(st["t"], g)
        ys, yy = _dot(y, s), _dot(y, y)
        m = self.param_groups[0]["history_size"]
        if st.get("S") is None:
            # device data from the start (not a lazy `zeros`), so the graph of the first
            # iteration with a history is the graph of every later one
            st["S"] = self._data(np.zeros((m, self._numel)), g)
            st["Y"] = self._data(np.zeros((m, self._numel)), g)
            st["RO"] = self._data(np.zeros((m,)), g)
        S, Y, RO = st["S"], st["Y"], st["RO"]
        kept = (_shift_in(S, s), _shift_in(Y, y), _shift_in(RO, 1.0 / ys), ys / yy)
        out = {}
        for name, (S_, Y_, RO_, H) in (("kept", kept), ("same", (S, Y, RO, st["H_diag"]))):
            d = _two_loop(g, S_, Y_, RO_, H)
            out[name] = (d, _dot(g, d), d.abs().max())
        out["pair"] = kept           # the history with the pair (computed here, read with it)
        return out, [ys]

    def _observe(self, loss, g, first, dt=None):
        """(host values, candidates): loss, max|g|, max|d t| of the last step and the
        candidates' g·d and max|d|, read in ONE sync."""
        cands, extra = self._candidates(g, first)
        keys = [k for k in ("first", "kept", "same") if k in cands]
        vals = [loss, g.abs().max(), dt if dt is not None else 0.0] + extra
        for k in keys:
            vals += [cands[k][1], cands[k][2]]
        host = _read(vals)
        out = {"loss": host[0], "gmax": host[1], "dt": host[2], "extra": host[3]}
        for i, k in enumerate(keys):
            out[k] = (cands[k][0], host[4 + 2 * i], host[5 + 2 * i])
        if "pair" in cands:
            out["pair"] = cands["pair"]
        return out

    def _adopt(self, obs):
        """Pick the direction of the current iteration (updating the history if kept)."""
        st = self._lbfgs
        if "first" in obs:
            st["S"] = st["Y"] = st["RO"] = None
            st["H_diag"] = self._data(np.ones(()), obs["first"][0])
            st["num_old"] = 0
            return obs["first"]
        if obs["extra"] > 1e-10:                # y·s: keep the curvature pair
            st["S"], st["Y"], st["RO"], st["H_diag"] = obs["pair"]
            st["num_old"] = min(st["num_old"] + 1, self.param_groups[0]["history_size"])
            return obs["kept"]
        return obs["same"]

    # -- the step ----------------------------------------------------------------------------------
    def step(self, closure=None):
        if closure is None:
            raise TypeError("LBFGS.step() needs a closure that reevaluates the model and "
                            "returns the loss")
        if extend.clock.on:     # the run summary: one training iteration (its closure's
            # forward and backward passes timed as what they are)
            return extend.timed_step(self._step, closure)
        return self._step(closure)

    def _step(self, closure):
        group = self.param_groups[0]
        lr = float(C._num(group["lr"]))
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search = group["line_search_fn"] is not None
        st = self._lbfgs

        def evaluate():
            with enable_grad():
                return closure()

        with no_grad():
            orig_loss = evaluate()
            g = self._flat_grad()
            self._closure_apart()
            current_evals = 1
            st["func_evals"] += 1
            obs = self._observe(orig_loss, g, first=st["n_iter"] == 0)
            if obs["gmax"] <= tolerance_grad:
                return orig_loss
            loss = obs["loss"]
            n_iter = 0
            while n_iter < max_iter:
                n_iter += 1
                st["n_iter"] += 1
                d, gtd, d_norm = self._adopt(obs)
                st["d"] = d
                st["prev_flat_grad"] = g
                st["prev_loss"] = prev_loss = loss
                if st["n_iter"] == 1:
                    # PyTorch: min(1, 1 / |g|_1) * lr, the division in g's precision
                    f = g.dtype.np.type
                    inv = float(f(1.0) / f(obs["extra"]))
                    t = inv * lr if inv < 1.0 else lr
                else:
                    t = lr
                st["t"] = t
                if gtd > -tolerance_change:
                    break
                ls_func_evals = 0
                loss_t = None
                if line_search:
                    x_init = self._clone_param()

                    def obj_func(x, t_, d_):
                        self._add_grad(t_, d_)
                        f = evaluate()
                        g_ = self._flat_grad()
                        f_host, gtd_host = _read([f, _dot(g_, d_)])
                        self._set_param(x)
                        return f_host, g_, gtd_host
                    loss, g, t, ls_func_evals = _strong_wolfe(
                        obj_func, x_init, t, d, loss, g, gtd, d_norm,
                        tolerance_change=tolerance_change, max_ls=max_eval - current_evals)
                    st["t"] = t
                    self._add_grad(t, d)
                else:
                    self._add_grad(t, d)
                    if n_iter != max_iter:
                        loss_t = evaluate()
                        g = self._flat_grad()
                        self._closure_apart()
                        ls_func_evals = 1
                current_evals += ls_func_evals
                st["func_evals"] += ls_func_evals
                if n_iter == max_iter or current_evals >= max_eval:
                    break
                # the convergence tests and the next iteration's candidates: one sync
                obs = self._observe(loss_t if loss_t is not None else loss, g, first=False,
                                    dt=(d * self._scalar(t, d)).abs().max())
                if loss_t is not None:
                    loss = obs["loss"]
                if obs["gmax"] <= tolerance_grad or obs["dt"] <= tolerance_change or \
                        abs(loss - prev_loss) < tolerance_change:
                    break
        self._step_count += 1
        self._group_steps[0] += 1
        extend.sync("LBFGS.step()")
        return orig_loss

    # -- (de)serialisation: PyTorch's layout --------------------------------------------------------
    def state_dict(self) -> dict:
        st = self._lbfgs
        d = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        d["params"] = list(range(len(self._params)))
        entry = {"func_evals": st["func_evals"], "n_iter": st["n_iter"]}
        if "d" in st:
            k = st.get("num_old", 0)
            m = self.param_groups[0]["history_size"]
            rows = range(m - k, m)
            entry.update(d=share(st["d"]), t=st["t"],
                         old_dirs=[st["Y"][i] for i in rows] if k else [],
                         old_stps=[st["S"][i] for i in rows] if k else [],
                         ro=[st["RO"][i] for i in rows] if k else [],
                         H_diag=share(st["H_diag"]) if isinstance(st["H_diag"], Tensor)
                         else st["H_diag"],
                         prev_flat_grad=share(st["prev_flat_grad"]),
                         prev_loss=st["prev_loss"])
        return {"state": {0: entry} if st["n_iter"] or st["func_evals"] else {},
                "param_groups": [d]}

    def load_state_dict(self, sd: dict) -> None:
        from .torch_state import _as_tensor
        groups = sd["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self._params):
            raise ValueError("LBFGS.load_state_dict: expected one parameter group of "
                             f"{len(self._params)} parameters")
        for k, v in groups[0].items():
            if k != "params":
                self.param_groups[0][k] = v
        self._validate(self.param_groups[0])
        state = sd["state"]
        entry = state.get(0, state.get("0")) if state else None
        st = self._lbfgs = {"func_evals": 0, "n_iter": 0}
        if not entry:
            return
        st["func_evals"] = int(entry.get("func_evals", 0))
        st["n_iter"] = int(entry.get("n_iter", 0))
        if "d" not in entry:
            return
        dev = self._params[0].device
        flat = lambda v: _as_tensor(v).to(dev).reshape(-1)  # noqa: E731
        st["d"] = flat(entry["d"])
        st["prev_flat_grad"] = flat(entry["prev_flat_grad"])
        st["t"] = float(np.asarray(_host_scalar(entry["t"])))
        st["prev_loss"] = float(_host_scalar(entry["prev_loss"]))
        h = entry["H_diag"]
        st["H_diag"] = h if isinstance(h, (int, float)) else _as_tensor(h).to(dev).reshape(())
        m = self.param_groups[0]["history_size"]
        old_dirs, old_stps, ro = entry["old_dirs"][-m:], entry["old_stps"][-m:], entry["ro"][-m:]
        k = len(old_dirs)
        dt = st["d"].dtype
        zeros = F.zeros((m - k, self._numel), dtype=dt, device=dev)
        st["Y"] = F.cat([zeros] + [flat(v).unsqueeze(0) for v in old_dirs], 0)
        st["S"] = F.cat([zeros] + [flat(v).unsqueeze(0) for v in old_stps], 0)
        st["RO"] = F.cat([F.zeros((m - k,), dtype=dt, device=dev)] +
                         [F.to_dtype(flat(v), dt) for v in ro], 0)
        st["num_old"] = k


def _host_scalar(v):
    if isinstance(v, Tensor):
        return v.item()
    if hasattr(v, "item"):
        return v.item()
    return v
