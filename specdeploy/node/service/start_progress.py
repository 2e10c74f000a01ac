"""Follow a server start in its journal: the load phase, an ETA, the downtime window (node side).

Reads the unit's journal since a time (systemd's own lines for the old server's stop and the new
process, then the engine's: weights with the shards' percentage, torch.compile, CUDA graph
capture, the API server, ready; specdeploy.node.service.engine_log knows the words) and waits, at
most
``--wait`` seconds, until the phase differs from ``--known`` (the deploy's last printed state),
the server is ready or its process ended. The ETA comes from this node's recorded starts (the
``starts`` of every release manifest under ``--root``); when the start is ready, the downtime
window (old server's stop to readiness) and its parts. Read-only: changes nothing.

    python -m specdeploy.node.service.start_progress --unit vllm --since EPOCH --root
    /opt/specdeploy \\
        [--known weights:50] [--wait 20] [--journal-file FILE] --json

Exit codes: 0 a state was read, 2 usage or environment error (no journal).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specdeploy.node.service import engine_log

# journalctl -o short-unix: "1733154000.123456 host identifier[pid]: message"
_JOURNAL_LINE = re.compile(r"^(?P<at>\d+(?:\.\d+)?) \S+ [^:]+?: (?P<message>.*)$")
_STOPPING = re.compile(r"^Stopping \S+\.service\b")
_STARTING = re.compile(r"^Starting \S+\.service\b")
_STARTED = re.compile(r"^Started \S+\.service\b")
# The journal is read from a little before the controller's `since`: the node's clock may be a
# bit behind; the start followed is the journal's last one (last_start).
CLOCK_SLACK_S = 60.0
# The weights' percentage is reported in steps of this size (a 64-shard checkpoint would
# otherwise print 64 lines).
PERCENT_STEP = 25
# How many of this node's latest starts make the ETA.
ETA_STARTS = 5


def parse_journal(text: str) -> list[tuple[float, str]]:
    """(time, message) of each journal line in short-unix format; other lines are skipped."""
    entries = []
    for line in text.splitlines():
        m = _JOURNAL_LINE.match(line)
        if m:
            entries.append((float(m.group("at")), m.group("message")))
    return entries


# The line that says why a server process ended: an argparse refusal ("vllm: error: ..."),
# a logged ERROR, or an exception's last line. systemd's own lines ("Failed with result") are
# consequences, not causes.
_ERROR_LINE = re.compile(r"(?:^\S+: error: |\bERROR\b|^[\w.]*(?:Error|Exception): )")
_SYSTEMD_LINE = re.compile(r"\S+\.service: ")


def last_error(entries: list[tuple[float, str]]) -> str | None:
    """The newest line of these entries that says what went wrong, or None."""
    for _, message in reversed(entries):
        if _ERROR_LINE.search(message) and not _SYSTEMD_LINE.match(message):
            return message.strip()
    return None


def last_start(entries: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The entries of the journal's last start: from the old server's stop (systemd's
    "Stopping") when it led to this start, else from the start itself ("Starting"/"Started").
    Entries without systemd's lines (a plain engine log) are taken whole."""
    messages = [message for _, message in entries]
    starts = [i for i, m in enumerate(messages) if _STARTED.match(m) or _STARTING.match(m)]
    if not starts:
        return entries
    begin = starts[-1]
    if _STARTED.match(messages[begin]) and len(starts) > 1:
        before = starts[-2]
        between = messages[before + 1 : begin]
        if _STARTING.match(messages[before]) and not any(_STOPPING.match(m) for m in between):
            begin = before  # "Starting" then "Started" of one start
    stops = [i for i in range(begin) if _STOPPING.match(messages[i])]
    if stops and not any(i > stops[-1] for i in starts if i < begin):
        begin = stops[-1]
    return entries[begin:]


def read_journal(unit: str, since: float, journal_file: Path | None) -> str:
    if journal_file is not None:
        return journal_file.read_text(errors="replace")
    argv = ["journalctl", "-u", f"{unit}.service", "-o", "short-unix", "--no-pager", "-q"]
    argv += ["--since", f"@{since - CLOCK_SLACK_S:.6f}"]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


def unit_state(unit: str) -> str:
    result = subprocess.run(
        ["systemctl", "is-active", f"{unit}.service"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return result.stdout.strip() or "unknown"


def recorded_windows(root: Path) -> list[dict[str, Any]]:
    """This node's recorded starts (every release), oldest first: at, total seconds, and the
    seconds from the window's beginning to the end of each phase, where recorded."""
    starts = []
    for path in sorted(root.glob("releases/*/manifest.json")):
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for start in manifest.get("starts") or []:
            window = start.get("window") or {}
            total = window.get("window_s", start.get("stop_to_ready_s"))
            if not isinstance(total, int | float) or total <= 0:
                continue
            ends, offset = {}, 0.0
            for phase in engine_log.PHASES:
                if phase in (window.get("parts") or {}):
                    offset += float(window["parts"][phase])
                    ends[phase] = offset
            starts.append({"at": str(start.get("at", "")), "total_s": float(total), "ends": ends})
    return sorted(starts, key=lambda s: s["at"])


def estimate(
    history: list[dict[str, Any]], phase: str, elapsed: float
) -> dict[str, float | int | None]:
    """Expected total seconds (median of the latest starts), the seconds left, and the
    expected end of the current phase (seconds from the window's beginning), where known."""
    latest = history[-ETA_STARTS:]
    if not latest:
        return {"expected_s": None, "eta_s": None, "phase_expected_end_s": None, "starts": 0}
    expected = statistics.median(s["total_s"] for s in latest)
    phase_ends = [s["ends"][phase] for s in latest if phase in s["ends"]]
    return {
        "expected_s": round(expected, 1),
        "eta_s": round(expected - elapsed, 1),
        "phase_expected_end_s": round(statistics.median(phase_ends), 1) if phase_ends else None,
        "starts": len(latest),
    }


def state_key(phase: str, percent: int | None) -> str:
    """What the deploy prints a line for: the phase, and the weights' percentage in steps."""
    if phase == "weights" and percent is not None:
        return f"{phase}:{percent // PERCENT_STEP * PERCENT_STEP}"
    return phase


def read_state(
    unit: str, since: float, root: Path, journal_file: Path | None, now: float
) -> dict[str, Any]:
    every = parse_journal(read_journal(unit, since, journal_file))
    entries = last_start(every)
    events, percent = engine_log.parse_phases(entries)
    phase = events[-1].phase if events else "start"
    began = events[0].at if events else since
    parsed = engine_log.parse("\n".join(message for _, message in entries))
    state: dict[str, Any] = {
        "phase": phase,
        "title": engine_log.PHASE_TITLES[phase],
        "percent": percent if phase == "weights" else None,
        "key": state_key(phase, percent),
        "phase_since": events[-1].at if events else since,
        "phase_elapsed_s": round(now - (events[-1].at if events else since), 1),
        "elapsed_s": round(now - began, 1),
        "ready": phase == "ready",
        "unit": "active" if journal_file is not None else unit_state(unit),
        "events": [
            {"phase": e.phase, "title": engine_log.PHASE_TITLES[e.phase], "at": e.at}
            for e in events
        ],
        "window": engine_log.downtime_window(events),
        "engine": parsed.startup,
        # the attention backends the engine chose (what `engine_log --json` says), so that the
        # deploy needs no second read of the journal once the start is ready
        "backends": [asdict(choice) for choice in parsed.backends],
    }
    state["ended"] = not state["ready"] and state["unit"] in ("failed", "inactive")
    # systemd may restart a failing server several times: its own start's lines then hold
    # only the last try, so the error is read from every line since the deploy's restart
    state["error"] = last_error(every) if state["ended"] else None
    state.update(estimate(recorded_windows(root), phase, state["elapsed_s"]))
    return state


def follow(
    unit: str,
    since: float,
    root: Path,
    known: str,
    wait: float,
    poll: float,
    journal_file: Path | None = None,
) -> dict[str, Any]:
    """The state once it differs from ``known``, is ready or ended, or after ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        state = read_state(unit, since, root, journal_file, time.time())
        if state["key"] != known or state["ready"] or state["ended"]:
            return state
        if time.monotonic() + poll > deadline:
            return state
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="specdeploy.node.service.start_progress", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--unit", required=True, help="the service name (without .service)")
    parser.add_argument("--since", required=True, type=float, help="epoch seconds")
    parser.add_argument("--root", type=Path, default=Path("/opt/specdeploy"))
    parser.add_argument("--known", default="", help="the state already shown (phase[:percent])")
    parser.add_argument("--wait", type=float, default=0.0, help="wait at most this for a change")
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--journal-file", type=Path, help="read this short-unix text instead")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        state = follow(
            args.unit, args.since, args.root, args.known, args.wait, args.poll, args.journal_file
        )
    except (OSError, subprocess.SubprocessError) as error:
        print(f"start_progress: cannot read the journal of {args.unit}: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(state))
    else:
        percent = f" {state['percent']}%" if state["percent"] is not None else ""
        print(f"{state['title']}{percent} for {state['phase_elapsed_s']} s")
        if state["window"]:
            print(f"downtime window {state['window']['window_s']} s: {state['window']['parts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
