"""`nn.utils.rnn`: batching variable-length sequences.

`pad_sequence` is one constant pad per sequence and a stack: shapes are host metadata, so no
sync happens and the gradient flows back to every sequence.

`PackedSequence` (`pack_padded_sequence`, `pack_sequence`, `pad_packed_sequence`) keeps the
padded batch, time-major in the caller's batch order, beside the lengths (host integers). An
RNN given one runs over the padded batch with each sequence's state frozen past its length
and its outputs zeroed there (a mask that enters the program as data), so a batch of other
lengths of the same padded shape runs the same program, and length buckets apply as for a
padded batch. PyTorch's packed layout (`.data`: the time steps' rows, longest sequence
first) is one gather, made only when `.data` is read; a PackedSequence built from packed
data is scattered back into a padded batch by one gather too.
"""
from __future__ import annotations

import numpy as np

from ...extend import Tensor, from_numpy, ops as F

__all__ = ["pad_sequence", "PackedSequence", "pack_padded_sequence", "pad_packed_sequence",
           "pack_sequence", "unpad_sequence", "unpack_sequence"]


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


def _host_ints(v, what, op):
    if isinstance(v, Tensor):
        if v.dtype.is_floating_point and op != "pack_padded_sequence":
            raise TypeError(f"{op}: {what} must be an integer tensor, got {v.dtype}")
        v = v.numpy()
    arr = np.asarray(v)
    if arr.ndim != 1:
        raise RuntimeError(f"{op}: '{what}' should be a 1D list or tensor of integers, got "
                           f"shape {arr.shape}")
    return arr.astype(np.int64)


def _index_tensor(arr):
    return None if arr is None else from_numpy(np.asarray(arr, np.int64))


class PackedSequence:
    """PyTorch's PackedSequence: `data`, `batch_sizes`, `sorted_indices`, `unsorted_indices`
    (iterable as that 4-tuple).  Made by `pack_padded_sequence`/`pack_sequence` or from
    packed data and batch sizes, as in PyTorch."""

    def __init__(self, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if not isinstance(data, Tensor):
            raise TypeError(f"PackedSequence: data must be a Tensor, got {type(data).__name__}")
        if batch_sizes is None:
            raise TypeError("PackedSequence: batch_sizes is required (build one with "
                            "pack_padded_sequence or pack_sequence)")
        bs = _host_ints(batch_sizes, "batch_sizes", "PackedSequence")
        if len(bs) == 0 or (bs <= 0).any() or (np.diff(bs) > 0).any():
            raise RuntimeError(f"PackedSequence: batch_sizes must be positive and "
                               f"non-increasing, got {bs.tolist()}")
        if data.ndim == 0 or int(bs.sum()) != data.shape[0]:
            raise RuntimeError(f"PackedSequence: data has {data.shape[0] if data.ndim else 0} "
                               f"rows but batch_sizes {bs.tolist()} sum to {int(bs.sum())}")
        order = None
        if sorted_indices is not None:
            order = _host_ints(sorted_indices, "sorted_indices", "PackedSequence")
            if sorted(order.tolist()) != list(range(int(bs[0]))):
                raise RuntimeError(f"PackedSequence: sorted_indices {order.tolist()} is not a "
                                   f"permutation of the batch of {int(bs[0])}")
        sorted_lengths = (bs[None, :] > np.arange(bs[0])[:, None]).sum(1)
        self._setup(sorted_lengths, order)
        self._data, self._padded = data, None

    @classmethod
    def _from_padded(cls, padded, lengths, order):
        """`padded`: (T, B, *) time-major, batch in the caller's order; `lengths` per batch
        entry (that order); `order`: sorted position -> batch entry, or None (sorted)."""
        self = cls.__new__(cls)
        self._setup(np.asarray(lengths, np.int64)[order if order is not None else
                                                  slice(None)], order)
        self._data, self._padded = None, padded
        return self

    def _setup(self, sorted_lengths, order):
        b = len(sorted_lengths)
        self._order = np.arange(b) if order is None else np.asarray(order, np.int64)
        self._lengths = np.empty(b, np.int64)
        self._lengths[self._order] = sorted_lengths
        self._bs = (sorted_lengths[None, :] > np.arange(sorted_lengths[0])[:, None]).sum(1)
        self.batch_sizes = from_numpy(self._bs.astype(np.int64))
        self.sorted_indices = _index_tensor(order)
        self.unsorted_indices = None if order is None else _index_tensor(np.argsort(order))

    def _rows(self):
        """(time step, batch entry) of each row of the packed data."""
        t = np.repeat(np.arange(len(self._bs)), self._bs)
        i = np.concatenate([np.arange(n) for n in self._bs])
        return t, self._order[i]

    @property
    def data(self) -> Tensor:
        if self._data is None:
            t, b = self._rows()
            self._data = self._padded[from_numpy(t), from_numpy(b)]
        return self._data

    def padded(self) -> Tensor:
        """(T, B, *) time-major in the caller's batch order (T >= the longest length);
        what lies past a sequence's length is unspecified."""
        if self._padded is None:
            t, b = self._rows()
            n = len(t)
            inv = np.full((len(self._bs), len(self._order)), n, np.int64)
            inv[t, b] = np.arange(n)
            data = self._data
            ext = F.cat([data, F.zeros((1,) + tuple(data.shape[1:]), dtype=data.dtype,
                                       device=data.device)], 0)
            self._padded = ext[from_numpy(inv)]
        return self._padded

    def mask(self, steps, device=None) -> Tensor:
        """(steps, B, 1) bool: True where a time step lies within its sequence."""
        m = np.arange(steps)[:, None] < self._lengths[None, :]
        return from_numpy(m[:, :, None], device=device)

    def _like(self, padded):
        return PackedSequence._from_padded(padded, self._lengths,
                                           None if self.sorted_indices is None else self._order)

    # PyTorch's tuple behaviour and conversions
    def __iter__(self):
        return iter((self.data, self.batch_sizes, self.sorted_indices, self.unsorted_indices))

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return tuple(self)[i]

    def _apply(self, fn):
        out = self._like(fn(self.padded()))
        if self._data is not None:
            out._data = fn(self._data)
        return out

    def to(self, *args, **kwargs):
        return self._apply(lambda t: t.to(*args, **kwargs))

    def cpu(self):
        return self.to("cpu")

    def cuda(self, *args, **kwargs):
        return self._apply(lambda t: t.cuda(*args, **kwargs))

    def double(self):
        return self._apply(lambda t: t.double())

    def float(self):
        return self._apply(lambda t: t.float())

    def half(self):
        return self._apply(lambda t: t.half())

    def long(self):
        return self._apply(lambda t: t.long())

    def int(self):
        return self._apply(lambda t: t.int())

    @property
    def is_cuda(self):
        return (self._padded if self._padded is not None else self._data).is_cuda

    def is_pinned(self):
        return False

    def __repr__(self):
        return (f"PackedSequence(data={self.data!r}, batch_sizes={self.batch_sizes!r}, "
                f"sorted_indices={self.sorted_indices!r}, "
                f"unsorted_indices={self.unsorted_indices!r})")


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):  # noqa: A002
    """A padded batch (T, B, *) — (B, T, *) with batch_first — and each entry's length as a
    PackedSequence.  `enforce_sorted` (PyTorch's default) asks lengths in decreasing order;
    otherwise the batch is ordered here, and the RNN's results come back in the caller's
    order."""
    if not isinstance(input, Tensor):
        raise TypeError(f"pack_padded_sequence: input must be a Tensor, got "
                        f"{type(input).__name__}")
    if input.ndim < 2:
        raise RuntimeError(f"pack_padded_sequence: input must have at least 2 dims (time and "
                           f"batch), got shape {tuple(input.shape)}")
    lengths = _host_ints(lengths, "lengths", "pack_padded_sequence")
    x = input.transpose(0, 1) if batch_first else input
    steps, batch = x.shape[0], x.shape[1]
    if len(lengths) != batch:
        raise RuntimeError(f"pack_padded_sequence: Expected `len(lengths)` to be equal to "
                           f"batch_size, but got {len(lengths)} (batch_size={batch})")
    if enforce_sorted:
        if (np.diff(lengths) > 0).any():
            raise RuntimeError("pack_padded_sequence: `lengths` array must be sorted in "
                               "decreasing order when `enforce_sorted` is True. You can pass "
                               "`enforce_sorted=False` to pack_padded_sequence and/or "
                               "pack_sequence to sidestep this requirement.")
        order = None
    else:
        order = np.argsort(-lengths, kind="stable")
    if (lengths <= 0).any():
        raise RuntimeError("pack_padded_sequence: Length of all samples has to be greater than "
                           "0, but found an element in 'lengths' that is <= 0")
    if lengths.max() > steps:
        # PyTorch reads past the input here; flowlite refuses
        raise RuntimeError(f"pack_padded_sequence: a length ({int(lengths.max())}) exceeds "
                           f"the input's {steps} time steps")
    return PackedSequence._from_padded(x, lengths, order)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """(padded batch, lengths): the inverse of pack_padded_sequence, in the caller's batch
    order, `padding_value` past each length, `total_length` steps if given."""
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence: expected a PackedSequence, got "
                        f"{type(sequence).__name__}")
    longest = int(sequence._lengths.max())
    if total_length is not None and total_length < longest:
        raise ValueError(f"Expected total_length to be at least the length of the longest "
                         f"sequence in input, but got total_length={total_length} and max "
                         f"sequence length being {longest}")
    steps = longest if total_length is None else int(total_length)
    y = sequence.padded()
    if y.shape[0] > steps:
        y = y[:steps]
    elif y.shape[0] < steps:
        y = F.pad(y, (0, 0) * (y.ndim - 1) + (0, steps - y.shape[0]))
    mask = sequence.mask(steps, y.device)
    y = F.where(mask.reshape(mask.shape[:2] + (1,) * (y.ndim - 2)), y,
                F.full((), padding_value, dtype=y.dtype, device=y.device))
    if batch_first:
        y = y.transpose(0, 1)
    return y, from_numpy(sequence._lengths.copy())


def pack_sequence(sequences, enforce_sorted=True):
    """pack_padded_sequence(pad_sequence(sequences), their lengths)."""
    seqs = list(sequences)
    lengths = [s.shape[0] if isinstance(s, Tensor) and s.ndim else 0 for s in seqs]
    return pack_padded_sequence(pad_sequence(seqs), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences in a padded batch, each cut to its length."""
    lengths = _host_ints(lengths, "lengths", "unpad_sequence")
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :int(n)] for i, n in enumerate(lengths)]


def unpack_sequence(packed_sequences):
    """The list of sequences in a PackedSequence, in the caller's order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
