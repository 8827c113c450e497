"""A character-level LSTM language model: read characters, predict the next one.

Embedding → nn.LSTM (batch_first) → Linear. flowlite's nn.LSTM runs its time loop as one
`scan` node (lowered to lax.scan), so a window of 128 characters is one small loop in the
compiled program, not 128 unrolled copies of the cell — compile time does not grow with
the sequence length.
"""
from __future__ import annotations

import flowlite as fl
from flowlite import nn

from .gpt import sample_next_token


class CharLSTM(nn.Module):
    def __init__(self, vocab_size: int = 128, embed_dim: int = 64, hidden_size: int = 256,
                 num_layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers, batch_first=True,
                            dropout=dropout)
        self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, idx, state=None):
        """idx (B, T) token ids → (logits (B, T, vocab), (h, c)).

        Pass the returned state back in to continue a sequence where it stopped (that is how
        generate() feeds one character at a time)."""
        out, state = self.lstm(self.embed(idx), state)
        return self.head(out), state

    @fl.no_grad()
    def generate(self, prompt_ids, n: int, temperature: float = 1.0, top_k=None):
        """Continue each prompt row (B, P) by n sampled tokens; returns (B, P + n) int32.

        The prompt is read in one pass; then each new character is one step of the same
        shapes — a (B, 1) token in, the next logits and state out — so after the first step
        every step is a cache hit of one executable. The sampled tokens are written into a
        device-side history at a position held in a tensor (not a Python int, which would
        make every step a different program), and never leave the device until the end.
        """
        was_training = self.training
        self.eval()
        try:
            B, P = prompt_ids.shape
            hist = fl.zeros((B, P + n), dtype=fl.int32, device=prompt_ids.device)
            hist[:, :P] = prompt_ids.to(fl.int32)
            logits, state = self(prompt_ids)
            logits = logits[:, -1]
            pos = fl.full((), P, dtype=fl.int32, device=prompt_ids.device)
            fl.sync()       # the prompt in its own program: every later step is the same one
            for _ in range(n):
                noise = fl.rand(tuple(logits.shape), device=logits.device)
                tok = sample_next_token(logits, noise, temperature, top_k)
                hist[:, pos] = tok
                pos = pos + 1
                logits, state = self(tok.unsqueeze(1), state)
                logits = logits[:, 0]
                fl.sync()   # one executable per character; keeps the graph from growing
            return hist
        finally:
            self.train(was_training)
