"""The tensor front end: PyTorch's Tensor and ops, recorded as lazy nodes.

Layer: frontend — imports nothing of flowlite. The lazy `Tensor` and `apply`, every op in one
home per family (`ops/`, with its primitive, gradient rule and bucketing rule), views, in-place
recording, the backward engine over the tape, random numbers, `scan`, `compile` (trace once,
replay) and the methods bound onto `Tensor`.
"""
