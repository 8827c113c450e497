"""Recurrent layers (RNN, LSTM, GRU) on the core `scan` primitive.

The input projection of every time step is one big matmul outside the loop;
only the recurrent matmul runs inside `scan`, which is one node lowered to
`lax.scan` — so compile time doesn't grow with sequence length.  Parameter
names, layouts, gate orders and initialisation follow PyTorch exactly
(`weight_ih_l0`, `weight_hh_l0_reverse`, LSTM gates i,f,g,o; GRU gates r,z,n).
"""
from __future__ import annotations

import math

from ..extend import ArgumentError, DTypeError
from ..extend import autocast, ops as F, random as R, scan
from . import init
from .module import Module, Parameter
from .utils.rnn import PackedSequence

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


class RNNBase(Module):
    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__()
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ArgumentError(f"hidden_size must be a positive integer, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ArgumentError(f"num_layers must be a positive integer, got {num_layers!r}")
        if not 0 <= dropout <= 1:
            raise ArgumentError(f"dropout should be a number in range [0, 1], got {dropout}")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        g = _GATES[mode]
        dirs = 2 if bidirectional else 1
        self._names = []
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else hidden_size * dirs
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                setattr(self, names[0], Parameter(F.empty(g * hidden_size, in_size,
                                                          dtype=dtype, device=device)))
                setattr(self, names[1], Parameter(F.empty(g * hidden_size, hidden_size,
                                                          dtype=dtype, device=device)))
                if bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    setattr(self, names[2], Parameter(F.empty(g * hidden_size, dtype=dtype,
                                                              device=device)))
                    setattr(self, names[3], Parameter(F.empty(g * hidden_size, dtype=dtype,
                                                              device=device)))
                self._names.append(names)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def flatten_parameters(self):
        """PyTorch packs cuDNN's weights into one buffer here; flowlite's weights are
        already laid out as the executable needs them, so this does nothing."""
        return None

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s

    # -- forward --------------------------------------------------------------------------
    def _check_input(self, x):
        if x.ndim not in (2, 3):
            raise ArgumentError(f"{type(self).__name__}: expected input of 2 (unbatched) or 3 "
                                f"dimensions, got shape {tuple(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise ArgumentError(f"{type(self).__name__}: input.size(-1) must be equal to "
                                f"input_size. Expected {self.input_size}, got {x.shape[-1]}")

    def _zeros_state(self, batch, x):
        dirs = 2 if self.bidirectional else 1
        return F.zeros(self.num_layers * dirs, batch, self.hidden_size, dtype=x.dtype,
                       device=x.device)

    def _check_state(self, h, batch, name):
        dirs = 2 if self.bidirectional else 1
        want = (self.num_layers * dirs, batch, self.hidden_size)
        if tuple(h.shape) != want:
            raise ArgumentError(f"{type(self).__name__}: expected {name} size {want}, got "
                                f"{tuple(h.shape)}")

    def forward(self, x, hx=None):
        if isinstance(x, PackedSequence):
            # the padded batch (time-major, caller's order) with each sequence's state
            # frozen past its length: h_n is each sequence's state at its last step
            padded = x.padded()
            mask = x.mask(padded.shape[0], padded.device)
            out, hidden = self._forward_cast(padded, hx, mask, time_major=True)
            return x._like(out), hidden
        return self._forward_cast(x, hx, None)

    def _forward_cast(self, x, hx, mask, time_major=False):
        if autocast.current() is None:
            return self._forward(x, hx, None, mask, time_major)
        # PyTorch's CPU LSTM (mkldnn_rnn_layer) and RNN (linear layers) compute and return in
        # the autocast dtype; its GRU's gates are linear layers in it, and its state keeps
        # the state's dtype
        if self.mode == "GRU":
            return self._forward(x, hx, autocast.lower, mask, time_major)
        x, = autocast.lower(x)
        if hx is not None:
            hx = autocast.lower(*hx) if isinstance(hx, (tuple, list)) else autocast.lower(hx)[0]
        return self._forward(x, hx, autocast.lower, mask, time_major)

    def _forward(self, x, hx, cast, mask=None, time_major=False):
        self._check_input(x)
        if mask is not None and x.ndim != 3:
            raise ArgumentError(f"{type(self).__name__}: a PackedSequence's data must be "
                                f"(sum(lengths), input_size), got padded shape "
                                f"{tuple(x.shape)}")
        unbatched = x.ndim == 2
        if unbatched:
            x = x.unsqueeze(1)
            if hx is not None:
                hx = tuple(h.unsqueeze(1) for h in hx) if isinstance(hx, tuple) else \
                    hx.unsqueeze(1)
        elif self.batch_first and not time_major:
            x = x.transpose(0, 1)
        batch = x.shape[1]
        is_lstm = self.mode == "LSTM"
        if hx is None:
            h0 = self._zeros_state(batch, x)
            c0 = self._zeros_state(batch, x) if is_lstm else None
        elif is_lstm:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:     # any pair, as PyTorch
                raise DTypeError("LSTM: hx must be a tuple (h_0, c_0)")
            h0, c0 = hx
            self._check_state(h0, batch, "h_0")
            self._check_state(c0, batch, "c_0")
        else:
            h0 = hx
            self._check_state(h0, batch, "hidden")
        dirs = 2 if self.bidirectional else 1
        hs, cs = [], []
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                params = [getattr(self, n) for n in self._names[k]]
                if cast is not None:
                    params = list(cast(*params))
                out, h, c = self._run_direction(layer_in, params, h0[k],
                                                c0[k] if is_lstm else None, reverse=d == 1,
                                                mask=mask)
                outs.append(out)
                hs.append(h)
                cs.append(c)
            layer_in = outs[0] if dirs == 1 else F.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                keep = 1.0 - self.dropout
                layer_in = layer_in * R.bernoulli_mask(tuple(layer_in.shape), keep,
                                                       dtype=layer_in.dtype,
                                                       device=layer_in.device) / keep
        output = layer_in
        h_n = F.stack(hs, 0)
        c_n = F.stack(cs, 0) if is_lstm else None
        if unbatched:
            output = output.squeeze(1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if is_lstm else None
        elif self.batch_first and not time_major:
            output = output.transpose(0, 1)
        return (output, (h_n, c_n)) if is_lstm else (output, h_n)

    def _run_direction(self, x, params, h0, c0, reverse, mask=None):
        """One layer in one direction: the input projection of every time step at once,
        then only the recurrent part inside `scan`.  With `mask` (T, B, 1) — a padded batch
        of packed sequences — a sequence whose step is masked (it has ended or, in reverse,
        not begun) keeps its state and outputs zero, so the final state is each sequence's
        state at its own last step."""
        xw = self._input_projection(x, params)
        cell = self._cell(params)
        is_lstm = self.mode == "LSTM"
        init = (h0, c0) if is_lstm else h0
        if mask is None:
            carry, ys = scan(cell, init, xw, reverse=reverse)
        else:
            def step(carry, xs):
                xt, m = xs
                new, y = cell(carry, xt)
                if is_lstm:
                    new = (F.where(m, new[0], carry[0]), F.where(m, new[1], carry[1]))
                else:
                    new = F.where(m, new, carry)
                return new, F.where(m, y, 0.0)
            carry, ys = scan(step, init, (xw, mask), reverse=reverse)
        if is_lstm:
            return ys, carry[0], carry[1]
        return ys, carry, None

    def _input_projection(self, x, params):
        w_ih = params[0]
        xw = x @ w_ih.T                      # all time steps at once: (T, B, G*H)
        if self.bias:
            b_ih, b_hh = params[2], params[3]
            xw = xw + (b_ih + b_hh if self.mode != "GRU" else b_ih)
        return xw

    def _cell(self, params):
        """step(carry, projected input of one step) -> (new carry, output)."""
        w_hh_t = params[1].T
        b_hh = params[3] if self.bias else None
        H = self.hidden_size
        mode = self.mode
        if mode == "LSTM":
            def step(carry, xt):
                h, c = carry
                gates = xt + h @ w_hh_t
                i = F.sigmoid(gates[:, :H])
                f = F.sigmoid(gates[:, H:2 * H])
                g = F.tanh(gates[:, 2 * H:3 * H])
                o = F.sigmoid(gates[:, 3 * H:])
                c = f * c + i * g
                h = o * F.tanh(c)
                return (h, c), h
            return step
        if mode == "GRU":
            def step(h, xt):
                gh = h @ w_hh_t
                if b_hh is not None:
                    gh = gh + b_hh
                r = F.sigmoid(xt[:, :H] + gh[:, :H])
                z = F.sigmoid(xt[:, H:2 * H] + gh[:, H:2 * H])
                n = F.tanh(xt[:, 2 * H:] + r * gh[:, 2 * H:])
                h = (1 - z) * n + z * h
                return h, h
            return step
        act = F.tanh if mode == "RNN_TANH" else F.relu

        def step(h, xt):
            h = act(xt + h @ w_hh_t)
            return h, h
        return step


class RNN(RNNBase):
    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                                "'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device, dtype)


class LSTM(RNNBase):
    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device, dtype)


class GRU(RNNBase):
    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device, dtype)
