"""XLA:CPU options flowlite picks by measurement, set before JAX creates its CPU backend.

Layer: engine — imports nothing of flowlite. `flowlite/__init__.py` imports it first.

jaxlib 0.10's XLA:CPU sends convolutions to YNNPACK by default, whose convolution kernels
are about 2x slower than XLA's Eigen ones on small image models (LeNet's second conv,
forward and both gradients: 1.9-2.5 ms vs 1.1 ms), while its dot kernels are the fastest
XLA:CPU has.  So flowlite keeps YNNPACK for dots and takes convolutions back from it:
`--xla_cpu_experimental_ynn_fusion_type=-individual_convolution` (LeNet step 0.80-0.85x,
GPT step unchanged — its compiled program is identical; results equal within float32
rounding).  Measured in `bench/xla_cpu_flags.py`, reported in bench/XLA_FLAGS_STUDY.md.

The flag is added only where it was measured: for jaxlib 0.10.x (an unknown XLA flag aborts
the process, and it is experimental), when the user's own XLA_FLAGS don't already set it, and
unless FLOWLITE_XLA_TUNING=0.  jaxlib 0.11.2 accepts it (probed by bench/gpu_check.sh on the
GPU machine, 2026-12-04) but its effect there is unmeasured, so on 0.11+ flowlite leaves
XLA:CPU's default and `chosen["reason"]` says so.  XLA reads XLA_FLAGS once, when JAX
creates its CPU backend (the first array or compile, not `import jax`), so it takes effect
when flowlite is imported before the program's first JAX computation.  It is appended to
XLA_FLAGS, so it applies to the whole process (the user's own JAX code too) and is part of
JAX's persistent-cache key.
"""
from __future__ import annotations

import os
import sys

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"
_TESTED_JAXLIB = ("0.10.",)

# what was decided at import, for flowlite.debug / the README's "which lowering" question
chosen: dict = {"cpu_convolutions": "XLA default (not tuned)", "reason": "not applied yet"}


def _jaxlib_version():
    try:
        from importlib.metadata import version
        return version("jaxlib")
    except Exception:
        return None


def apply() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("FLOWLITE_XLA_TUNING", "1").strip().lower() in ("0", "off", "false",
                                                                      "no"):
        chosen.update(reason="FLOWLITE_XLA_TUNING=0")
        return
    if "xla_cpu_experimental_ynn_fusion_type" in flags:
        chosen.update(cpu_convolutions="as the user's XLA_FLAGS say",
                      reason="XLA_FLAGS already sets ynn_fusion_type")
        return
    v = _jaxlib_version()
    if v is None or not v.startswith(_TESTED_JAXLIB):
        chosen.update(reason=f"jaxlib {v}: the convolution flag's effect is not measured there "
                             f"(only on {_TESTED_JAXLIB}); XLA:CPU's default kept")
        return
    os.environ["XLA_FLAGS"] = (flags + " " + YNN_FLAG).strip()
    chosen.update(cpu_convolutions="XLA Eigen kernels (YNNPACK keeps the dots)",
                  reason=f"measured faster on jaxlib {v}: {YNN_FLAG}")
    if "jax" in sys.modules:
        # JAX has no public way to tell whether it made its CPU backend already; if it
        # did, the flag has no effect (results are the same either way)
        chosen["reason"] += " (jax was imported first: effective only if its CPU backend " \
                            "did not exist yet)"


apply()
