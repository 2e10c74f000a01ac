"""One progress format for every wait (issue 27 item 3): the server start's line, the drafter
pipeline's steps and the wheel download read the same way, with an ETA where a history exists
and a reason where none does."""

from __future__ import annotations

import io
import re
import time

from specdeploy.controller.drafter_pipeline.workdir import Progress
from specdeploy.node.module_utils import progress_line

# <who>: <what>[ N%] (<elapsed> in; ETA <left> from <basis> | no ETA: <why> | <over> past ...)
FORMAT = re.compile(
    r"^(?P<who>[^:]+): (?P<what>.+?)(?: (?P<pct>\d+)%)? \((?P<elapsed>[\d.]+ s|\d+ min \d\d s"
    r"|\d+ h \d\d min) in; (?P<tail>ETA .+ from .+|no ETA: .+|.+ past the usual .+ of .+)\)$"
)


def test_spans_read_as_seconds_then_minutes_then_hours() -> None:
    assert progress_line.span(31.4) == "31 s"
    assert progress_line.span(12.34, 1) == "12.3 s"
    assert progress_line.span(245) == "4 min 05 s"
    assert progress_line.span(9000) == "2 h 30 min"


def test_the_start_line_and_its_three_tails() -> None:
    eta = progress_line.line("node1", "loading weights", 12.3, percent=50, eta_s=31,
                             basis="4 earlier start(s)")  # fmt: skip
    assert eta == "node1: loading weights 50% (12.3 s in; ETA 31 s from 4 earlier start(s))"
    none = progress_line.line("node1", "importing", 3.0, no_eta="no earlier start recorded")
    assert none == "node1: importing (3.0 s in; no ETA: no earlier start recorded)"
    late = progress_line.line("node1", "compiling", 95, eta_s=-20, expected_s=75,
                              basis="2 earlier start(s)")  # fmt: skip
    assert late == "node1: compiling (95.0 s in; 20 s past the usual 75 s of 2 earlier start(s))"
    for text in (eta, none, late):
        assert FORMAT.match(text), text


def test_the_drafter_steps_use_the_format_with_the_rate_so_far_as_history() -> None:
    out = io.StringIO()
    now = [0.0]
    prog = Progress("train", 81, "sequences", done=6, out=out, clock=lambda: now[0])
    prog.advance(0, "epoch 1/3")
    now[0] = 40.0
    prog.advance(12, "epoch 1/3")
    first, second = out.getvalue().splitlines()
    assert FORMAT.match(first) and FORMAT.match(second), (first, second)
    assert "no ETA: no sequences finished yet in this run; 6 resumed" in first
    m = FORMAT.match(second)
    assert m["who"] == "[drafter] train" and m["pct"] == "22"
    # 12 sequences in 40 s: 18/min; 63 left -> 210 s
    assert (
        m["tail"]
        == "ETA 3 min 30 s from this run's 18.0 sequences/min; 6 resumed from an earlier run"
    )


def test_a_silent_wait_gets_a_line_every_interval_and_a_closing_line() -> None:
    out = io.StringIO()
    with progress_line.Ticker("wheelhouse", "downloading vllm==0.16.0", every=0.05, out=out,
                              no_eta="pip does not say the size ahead"):  # fmt: skip
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3, lines
    assert all(FORMAT.match(x) for x in lines[:-1]), lines
    assert lines[0].endswith("in; no ETA: pip does not say the size ahead)")
    assert re.match(r"^wheelhouse: downloading vllm==0\.16\.0 after [\d.]+ s$", lines[-1])
    quick = io.StringIO()
    with progress_line.Ticker("wheelhouse", "downloading x==1", every=5, out=quick):
        pass
    assert quick.getvalue() == ""  # done within the interval: nothing to say
