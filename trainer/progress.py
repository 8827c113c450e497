"""The progress display while training: a bar on a terminal, log lines otherwise."""
from __future__ import annotations

import sys
import time


def _interactive() -> bool:
    """Both output streams are terminals (tqdm's bar goes to stderr, the lines to stdout)."""
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):        # replaced or closed streams
        return False


class Progress:
    """On a terminal: tqdm when installed, else a plain line every few seconds.  When the
    output is not a terminal (a log file, a pipe): no bar and no timed lines, whose carriage
    returns and redraws would interleave with the evaluation lines; one log line per
    evaluation (the step, the training loss and rate, and the evaluation's result) and one
    at the last step."""

    def __init__(self, args, start, total, lm):
        self.quiet, self.total, self.lm = args.quiet, total, lm
        self.bar = None
        self.last_print = time.perf_counter()
        self.t0, self.s0 = time.perf_counter(), start
        self.log = not _interactive()
        self.fields, self.step = {}, start
        if not self.quiet and not self.log:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True,
                                desc=f"{args.model}", leave=True)
            except ImportError:
                pass

    def update(self, step, loss, acc, force=False):
        if self.quiet:
            return
        fields = {"loss": f"{loss:.4f}"}
        if acc is not None:
            fields["acc"] = f"{100 * acc:.1f}%"
        self.fields, self.step = fields, step
        if self.log:
            if force:
                print(self._line(step), flush=True)
            return
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(fields, refresh=False)
            self.bar.refresh()
            return
        now = time.perf_counter()
        if force or now - self.last_print >= 5.0:
            print(self._line(step), flush=True)
            self.last_print = now

    def _line(self, step):
        rate = (step - self.s0) / max(time.perf_counter() - self.t0, 1e-9)
        extra = "".join(f"  {k} {v}" for k, v in self.fields.items())
        return f"step {step}/{self.total}{extra}  {rate:.1f} steps/s"

    def evaluation(self, step, text):
        """An evaluation's result: below the bar, or (not a terminal) one log line with the
        training progress in front."""
        if self.quiet:
            return
        if self.log:
            self.fields = self.fields if self.step == step else {}
            print(f"{self._line(step)}  |  {text}", flush=True)
        else:
            self.write(f"step {step}: {text}")

    def write(self, text):
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
