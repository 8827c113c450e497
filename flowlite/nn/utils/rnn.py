"""`nn.utils.rnn`: batching variable-length sequences.

`pad_sequence` is one constant pad per sequence and a stack: shapes are host metadata, so no
sync happens and the gradient flows back to every sequence.
"""
from __future__ import annotations

from ...extend import Tensor, ops as F

__all__ = ["pad_sequence"]


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right"):
    """Stack tensors of shape (L_i, *) into (L_max, B, *), or (B, L_max, *) with batch_first,
    padding each with `padding_value` on the right (or left) of its first dim.  Every tensor
    is copied into the dtype of the first, as PyTorch does."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: expected padding_side to be one of left or right, "
                         f"but got {padding_side!r}")
    seqs = list(sequences)
    if not seqs:
        raise ValueError("pad_sequence: received an empty list of sequences")
    for i, s in enumerate(seqs):
        if not isinstance(s, Tensor):
            raise TypeError(f"pad_sequence: sequence {i} is a {type(s).__name__}, expected a "
                            f"Tensor")
    first = seqs[0]
    if first.ndim == 0:
        raise ValueError("pad_sequence: sequences must have at least one dim (L, *), got a "
                         "0-d tensor")
    trailing = tuple(first.shape[1:])
    for i, s in enumerate(seqs):
        if s.ndim == 0 or tuple(s.shape[1:]) != trailing:
            raise ValueError(f"pad_sequence: every sequence must have shape (L, *{trailing}), "
                             f"but sequence {i} has shape {tuple(s.shape)}")
    longest = max(s.shape[0] for s in seqs)
    dt = first.dtype
    out = []
    for s in seqs:
        if s.dtype is not dt:
            s = F.to_dtype(s, dt)
        extra = longest - s.shape[0]
        if extra:
            side = (0, extra) if padding_side == "right" else (extra, 0)
            s = F.pad(s, (0, 0) * len(trailing) + side, "constant", padding_value)
        out.append(s)
    return F.stack(out, 0 if batch_first else 1)
