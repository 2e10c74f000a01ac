"""One format for every progress line a human waits on (issue 27 item 3).

    <who>: <what> <percent>% (<elapsed> in; ETA <left> from <basis>)
    <who>: <what> (<elapsed> in; no ETA: <why>)
    <who>: <what> (<elapsed> in; <over> past the usual <expected> of <basis>)

The server start's lines (plugins/action/start_progress.py: ``node1: loading weights 50%
(12.3 s in; ETA 31 s from 4 earlier starts)``) set the format; the drafter pipeline's steps,
the wheel download, the rollout's stages and the baseline start print theirs with it. The ETA
comes from a history where one exists (earlier starts, this run's rate so far, the stages
already done) and the line says which. Stdlib only: the node package and the action plugins
import it (specdeploy.node.module_utils).
"""

from __future__ import annotations

import sys
import threading
import time


def span(seconds: float, decimals: int = 0) -> str:
    """12 s, 12.3 s (decimals=1), 4 min 05 s, 2 h 05 min."""
    s = max(0.0, float(seconds))
    if s < 120:
        return f"{s:.{decimals}f} s"
    whole = int(s)
    if whole < 7200:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def line(
    who: str,
    what: str,
    elapsed_s: float,
    *,
    percent: float | None = None,
    eta_s: float | None = None,
    expected_s: float | None = None,
    basis: str = "",
    no_eta: str = "no history yet",
) -> str:
    """A line while the work runs: ``eta_s`` None says ``no_eta``; a negative ``eta_s`` is
    the time past ``expected_s`` (the usual duration of ``basis``)."""
    pct = f" {percent:.0f}%" if percent is not None else ""
    head = f"{who}: {what}{pct} ({span(elapsed_s, 1)} in"
    if eta_s is None:
        tail = f"no ETA: {no_eta}"
    elif eta_s >= 0:
        tail = f"ETA {span(eta_s)} from {basis}"
    else:
        usual = f" {span(expected_s)}" if expected_s is not None else ""
        tail = f"{span(-eta_s)} past the usual{usual} of {basis}"
    return f"{head}; {tail})"


def done(
    who: str, what: str, elapsed_s: float, expected_s: float | None = None, basis: str = ""
) -> str:
    """The closing line: how long it took and, with a history, what it usually takes."""
    tail = f" (the usual {span(expected_s)} from {basis})" if expected_s is not None else ""
    return f"{who}: {what} after {span(elapsed_s, 1)}{tail}"


class Ticker:
    """A line every ``every`` seconds while a blocking call runs (a download, a subprocess
    that prints nothing), then the closing line; silent for work done within ``every``.

        with Ticker("wheelhouse", "downloading vllm==0.16.0", expected_s=None):
            subprocess.run(...)
    """

    def __init__(
        self,
        who: str,
        what: str,
        *,
        expected_s: float | None = None,
        basis: str = "",
        no_eta: str = "no history yet",
        every: float = 10.0,
        out=None,
        clock=None,
    ) -> None:
        self.who, self.what, self.expected_s, self.basis = who, what, expected_s, basis
        self.no_eta, self.every = no_eta, every
        self.out = out or sys.stdout
        self.clock = clock or time.monotonic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.lines = 0
        self.t0 = 0.0

    def now_line(self) -> str:
        elapsed = self.clock() - self.t0
        eta = None if self.expected_s is None else self.expected_s - elapsed
        return line(self.who, self.what, elapsed, eta_s=eta, expected_s=self.expected_s,
                    basis=self.basis, no_eta=self.no_eta)  # fmt: skip

    def _say(self, text: str) -> None:
        self.out.write(text + "\n")  # a stream, not print(): module_utils code (sanity)
        self.out.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._say(self.now_line())
            self.lines += 1

    def __enter__(self) -> Ticker:
        self.t0 = self.clock()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self.lines and exc[0] is None:
            elapsed = self.clock() - self.t0
            self._say(done(self.who, self.what, elapsed))
