"""RNNCell, LSTMCell, GRUCell: one recurrent step (PyTorch's parameters and gate order).

Parameters `weight_ih` (G*H, in), `weight_hh` (G*H, H), `bias_ih`, `bias_hh` (G*H,), all
U(-1/sqrt(H), 1/sqrt(H)); gates LSTM i,f,g,o and GRU r,z,n, as `nn.LSTM`/`nn.GRU` use them,
so weights copy across from PyTorch and between the cells and the full layers.  Input is
(N, in) or unbatched (in,); the state defaults to zeros.
"""
from __future__ import annotations

import math

from ...extend import ArgumentError, DTypeError
from ...extend import autocast, ops as F
from .. import init
from ..module import Module
from ._util import new_param


class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        for what, v in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(v, int) or v < 0:
                raise ArgumentError(f"{type(self).__name__}: {what} must be a non-negative "
                                    f"integer, got {v!r}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        g = num_chunks * hidden_size
        self.weight_ih = new_param((g, input_size), dtype, device)
        self.weight_hh = new_param((g, hidden_size), dtype, device)
        if bias:
            self.bias_ih = new_param((g,), dtype, device)
            self.bias_hh = new_param((g,), dtype, device)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    # -- shared input handling ----------------------------------------------------------------
    def _batched_input(self, x):
        """(x as (N, in), whether the call was unbatched), checked as PyTorch checks it."""
        name = type(self).__name__
        if x.ndim not in (1, 2):
            raise ArgumentError(f"{name}: Expected input to be 1D or 2D, got {x.ndim}D instead")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input has inconsistent input_size: got "
                               f"{x.shape[-1]} expected {self.input_size} (input shape "
                               f"{tuple(x.shape)})")
        batched = x.ndim == 2
        return (x if batched else x.unsqueeze(0)), not batched

    def _state(self, h, x, unbatched, label):
        """The state as (N, H): zeros when None, checked against the input otherwise."""
        name = type(self).__name__
        if h is None:
            return F.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
        if h.ndim not in (1, 2):
            raise ArgumentError(f"{name}: Expected {label} to be 1D or 2D, got {h.ndim}D instead")
        if (h.ndim == 1) != unbatched:
            raise RuntimeError(f"{name}: for {'un' if unbatched else ''}batched "
                               f"{x.ndim - unbatched}-D input, {label} should also be "
                               f"{1 if unbatched else 2}-D but got {h.ndim}-D tensor")
        h = h.unsqueeze(0) if unbatched else h
        if tuple(h.shape) != (x.shape[0], self.hidden_size):
            raise RuntimeError(f"{name}: {label} of shape {tuple(h.shape)} does not match "
                               f"input batch size {x.shape[0]} and hidden_size "
                               f"{self.hidden_size}")
        return h

    def _gates(self, x, h):
        """W_ih x + b_ih and W_hh h + b_hh (GRU needs them apart: r scales only the second)."""
        w_ih, w_hh, b_ih, b_hh = self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh
        if autocast.current() is not None:
            # PyTorch's cells are two linear layers: the autocast dtype, biases included (the
            # state itself is not cast: LSTMCell's c and GRUCell's h keep theirs)
            x, h, w_ih, w_hh, b_ih, b_hh = autocast.lower(x, h, w_ih, w_hh, b_ih, b_hh)
        gi = x @ w_ih.T
        gh = h @ w_hh.T
        if b_ih is not None:
            gi = gi + b_ih
            gh = gh + b_hh
        return gi, gh


class RNNCell(RNNCellBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"RNNCell: unknown nonlinearity {nonlinearity!r}; select "
                                "'tanh' or 'relu'")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, unbatched = self._batched_input(input)
        h = self._state(hx, x, unbatched, "hidden")
        gi, gh = self._gates(x, h)
        if self.nonlinearity == "tanh":
            out = F.tanh(gi + gh)
        elif self.nonlinearity == "relu":
            out = F.relu(gi + gh)
        else:
            raise RuntimeError(f"RNNCell: Unknown nonlinearity: {self.nonlinearity}")
        return out.squeeze(0) if unbatched else out


class LSTMCell(RNNCellBase):
    """Gates i, f, g, o; c' = f c + i g, h' = o tanh(c').  Returns (h', c')."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        x, unbatched = self._batched_input(input)
        if hx is None:
            h = c = self._state(None, x, unbatched, "hx[0]")
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise DTypeError("LSTMCell: hx must be a tuple (h_0, c_0)")
            h = self._state(hx[0], x, unbatched, "hx[0]")
            c = self._state(hx[1], x, unbatched, "hx[1]")
        gi, gh = self._gates(x, h)
        i, f, g, o = F.chunk(gi + gh, 4, 1)
        c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
        h = F.sigmoid(o) * F.tanh(c)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    """Gates r, z, n; n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, unbatched = self._batched_input(input)
        h = self._state(hx, x, unbatched, "hidden")
        gi, gh = self._gates(x, h)
        ir, iz, in_ = F.chunk(gi, 3, 1)
        hr, hz, hn = F.chunk(gh, 3, 1)
        r = F.sigmoid(ir + hr)
        z = F.sigmoid(iz + hz)
        n = F.tanh(in_ + r * hn)
        out = (1 - z) * n + z * h
        return out.squeeze(0) if unbatched else out
