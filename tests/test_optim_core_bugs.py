"""Core bugs found while writing flowlite.optim / serialization (minimal failing tests)."""
from __future__ import annotations

import flowlite as fl


def test_bfloat16_repr_formats_as_float():
    # ml_dtypes' bfloat16 has numpy kind 'V', so printing.tensor_repr skips its float path
    # (float16 prints "tensor([1.5000, 2.0000], dtype=flowlite.float16)")
    t = fl.tensor([1.5, 2.0]).to(fl.bfloat16)
    assert repr(t) == "tensor([1.5000, 2.0000], dtype=flowlite.bfloat16)"
