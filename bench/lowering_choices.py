"""Which lowering of convolution, max-pool and attention is fastest on this backend (issue 17
item 1).

Times, each in one jit on the default backend, the alternatives flowlite chooses between:

  * convolution forward: XLA's convolution vs flowlite's sum of shifted slices
    (primitives._conv_taps), over LeNet's two layers, a 1-channel 5x5, an RGB 3x3 and an RGB
    7x7/2 stem;
  * max-pool forward: lax.reduce_window vs the max of the window's strided slices;
  * avg-pool (a sum window) forward and gradient: lax.reduce_window vs the sum of slices;
  * max-pool gradient: the window choice fused into the gradient vs materialised first
    (primitives._cpu_materialized);
  * causal attention forward + backward at the bench GPT's shapes: the composed form
    (einsum, mask, softmax, einsum: what F.scaled_dot_product_attention records) vs
    jax.nn.dot_product_attention, alternating in blocks;

checks that each alternative gives the reference's values (float32 tolerance; max-pool
exactly), and prints times and ratios (alternative / XLA's).  flowlite takes the slices
where they win (primitives._MAX_TAPS bounds the taps), on CPU only.

    python bench/lowering_choices.py [--reps 40]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import flowlite  # noqa: E402,F401  (its XLA:CPU flags, as in a flowlite program)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

from flowlite.frontend import primitives as P  # noqa: E402

CONVS = {  # name: (x shape, weight shape, stride)
    "lenet conv1 1->16 3x3": ((64, 1, 28, 28), (16, 1, 3, 3), 1),
    "lenet conv2 16->32 3x3": ((64, 16, 13, 13), (32, 16, 3, 3), 1),
    "1->32 5x5": ((64, 1, 28, 28), (32, 1, 5, 5), 1),
    "rgb 3->16 3x3": ((64, 3, 32, 32), (16, 3, 3, 3), 1),
    "rgb stem 3->64 7x7/2": ((32, 3, 64, 64), (64, 3, 7, 7), 2),
}
_2X2 = ((1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4)
POOLS = {  # name: (x shape, (window, strides, padding))
    "lenet pool1 2x2": ((64, 16, 26, 26), _2X2),
    "lenet pool2 2x2": ((64, 32, 11, 11), _2X2),
    "resnet pool 3x3/2 pad 1": ((8, 64, 56, 56),
                                ((1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1)))),
}


def timed(f, *args, reps):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3


def row(name, ref_ms, alt_ms, ok, picked):
    print(f"{name:26s} {ref_ms:8.3f} {alt_ms:8.3f} {alt_ms / ref_ms:6.2f}  {ok!s:5s}  {picked}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=40)
    reps = ap.parse_args().reps
    rng = np.random.default_rng(0)
    print(f"backend {jax.default_backend()}, jax {jax.__version__}; ms, median of {reps}")
    print(f"{'convolution forward':26s} {'XLA':>8s} {'slices':>8s} {'ratio':>6s}  equal  flowlite "
          "uses")
    for name, (xs, ws, s) in CONVS.items():
        x = jnp.asarray(rng.standard_normal(xs, np.float32))
        w = jnp.asarray(rng.standard_normal(ws, np.float32))
        a = ((s, s), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)
        xla = jax.jit(lambda x, w, a=a: lax.conv_general_dilated(x, w, *a[:4]))
        taps = jax.jit(lambda x, w, a=a: P._conv_taps(a, x, w))
        ok = bool(np.allclose(xla(x, w), taps(x, w), rtol=1e-4, atol=1e-4))
        row(name, timed(xla, x, w, reps=reps), timed(taps, x, w, reps=reps), ok,
            "slices" if P._taps_pay(a, x, w) else "XLA")
    print(f"{'max-pool forward':26s} {'r_window':>8s} {'slices':>8s}")
    grads = []
    for name, (shape, window) in POOLS.items():
        x = jnp.asarray(rng.standard_normal(shape, np.float32))
        a = ("max",) + window
        init = np.array(-np.inf, np.float32)
        rw = jax.jit(lambda x, a=a: lax.reduce_window(x, init, lax.max, *a[1:]))
        sl = jax.jit(lambda x, a=a: P._window_slices(x, init, lax.max, *a[1:]))
        ok = bool((rw(x) == sl(x)).all())
        row(name, timed(rw, x, reps=reps), timed(sl, x, reps=reps), ok, "slices")
        grads.append((name, x, a, rw(x).shape))
    print(f"{'avg-pool (sum window)':26s} {'r_window':>8s} {'slices':>8s}")
    for name, (shape, window) in POOLS.items():
        x = jnp.asarray(rng.standard_normal(shape, np.float32))
        a = ("sum",) + window
        g = jnp.asarray(rng.standard_normal(jax.eval_shape(lambda x: P._window(a, x), x).shape,
                                            np.float32))
        for what, fn, arg in (("forward", lambda v, a=a: P._window(a, v), x),
                              ("gradient", lambda v, a=a, s=shape:
                               P._sum_window_transpose_lower(a + (s,), v), g)):
            keep_taps, P._MAX_TAPS = P._MAX_TAPS, 0        # XLA's reduce_window
            xla = jax.jit(lambda v, fn=fn: fn(v))      # (a jit of its own: traced now)
            want, t_xla = xla(arg), timed(xla, arg, reps=reps)
            P._MAX_TAPS = keep_taps
            sl = jax.jit(lambda v, fn=fn: fn(v))
            ok = bool(np.allclose(sl(arg), want, rtol=1e-5, atol=1e-5))
            row(f"{name} {what}"[:26], t_xla, timed(sl, arg, reps=reps), ok, "slices")
    print(f"{'max-pool gradient':26s} {'fused':>8s} {'choice1x':>8s}")
    keep = P._cpu_materialized
    for name, x, a, out in grads:
        g = jnp.asarray(rng.standard_normal(out, np.float32))
        P._cpu_materialized = lambda v: v
        fused = jax.jit(lambda x, g, a=a: P._max_window_grad_lower(a, x, g))
        want = fused(x, g)
        t_fused = timed(fused, x, g, reps=reps)
        P._cpu_materialized = keep
        once = jax.jit(lambda x, g, a=a: P._max_window_grad_lower(a, x, g))
        row(name, t_fused, timed(once, x, g, reps=reps), bool((once(x, g) == want).all()),
            "choice materialised" if jax.default_backend() == "cpu" else "fused")
    attention(rng, reps)


def attention(rng, reps, shape=(16, 64, 4, 32)):
    b, t, h, d = shape
    q, k, v = (jnp.asarray(rng.standard_normal(shape, np.float32)) for _ in range(3))
    mask = jnp.tril(jnp.ones((t, t), bool))

    def composed(q, k, v):
        s = jnp.where(mask, jnp.einsum("bthd,bshd->bhts", q * (1 / np.sqrt(d)), k), -jnp.inf)
        return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, -1), v)

    def builtin(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True)

    def step(f):
        return jax.jit(lambda q, k, v: jax.grad(lambda *a: (f(*a) ** 2).sum(), (0, 1, 2))(q, k, v))
    arms = {"composed": step(composed), "dot_product_attention": step(builtin)}
    times = {n: [] for n in arms}
    for r in range(8):        # alternating blocks: both arms see the same machine
        for n in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
            times[n].append(timed(arms[n], q, k, v, reps=max(reps // 2, 1)))
    ok = bool(np.allclose(composed(q, k, v), builtin(q, k, v), rtol=1e-4, atol=1e-5))
    print(f"{'attention fwd+bwd':26s} {'composed':>8s} {'jax.nn':>8s}")
    row(f"causal {b}x{t}x{h}x{d}", float(np.median(times["composed"])),
        float(np.median(times["dot_product_attention"])), ok, "composed")


if __name__ == "__main__":
    main()
