"""Run the test suite as independent pytest sessions, a few at a time (`make test` uses this).

Each integration module gets a session of its own, so it gets its own sandbox instance
(127.0.k.1N, see specdeploy/sandbox.py) and starts from fresh nodes: no state leaks between
modules, and the sessions' waits (server start, readiness polls) overlap. Logs go to
build/test-logs/; the slowest tests of each session are printed with its summary.
Exit code: 0 when every session passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOGS = REPO / "build" / "test-logs"
SUMMARY = re.compile(r"=+ (.*?(passed|failed|error).*?) in ([\d.]+)s")
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


def sessions() -> list[tuple[str, list[str]]]:
    """Quick tiers together; every integration module alone (slowest first)."""
    integration = sorted((REPO / "tests" / "integration").glob("test_*.py"))
    if os.environ.get("SPECDEPLOY_TEST_FAULTS") != "1":
        # The fault-injection suite (issue 7) is not yet reliable inside make test's budget;
        # `make test-faults` runs it on its own.
        integration = [p for p in integration if p.name != "test_faults.py"]
    slow_first = sorted(integration, key=lambda p: -p.stat().st_size)
    return [
        ("patches", ["tests/patches"]),
        *[(p.stem, [str(p.relative_to(REPO))]) for p in slow_first],
        ("unit", ["tests/unit", "tests/sandbox", "tests/gpu"]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", "4")))
    parser.add_argument("pytest_args", nargs="*", help="passed to every session")
    args = parser.parse_args(argv)
    LOGS.mkdir(parents=True, exist_ok=True)
    pending = sessions()
    running: dict[str, tuple[subprocess.Popen[bytes], float, Path]] = {}
    results: dict[str, tuple[int, float, str]] = {}
    start = time.monotonic()
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args]
    while pending or running:
        while pending and len(running) < args.jobs:
            name, paths = pending.pop(0)
            log = LOGS / f"{name}.log"
            handle = log.open("wb")
            proc = subprocess.Popen([*pytest, *paths], cwd=REPO, stdout=handle, stderr=handle)
            running[name] = (proc, time.monotonic(), log)
            print(f"tests: started {name}", flush=True)
        time.sleep(1)
        for name, (proc, began, log) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            text = log.read_text(errors="replace")
            match = SUMMARY.search(text.splitlines()[-1] if text.strip() else "")
            summary = match.group(1) if match else f"exit {proc.returncode}"
            results[name] = (proc.returncode, time.monotonic() - began, text)
            print(f"tests: {name}: {summary} ({time.monotonic() - began:.0f} s)", flush=True)
    totals = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failed_sessions = []
    for name, (rc, seconds, text) in results.items():
        tail = text.splitlines()[-1] if text.strip() else ""
        for number, kind in COUNT.findall(tail):
            totals["errors" if kind.startswith("error") else kind] += int(number)
        # pytest's exit 5 means the session collected nothing: not a failure of ours.
        if rc not in (0, 5):
            failed_sessions.append(name)
            print(f"\n===== {name} (exit {rc}, {seconds:.0f} s): last lines of {LOGS / name}.log")
            print("\n".join(text.splitlines()[-60:]))
    for name, (_rc, _s, text) in results.items():
        slow = re.search(r"=+ slowest \d+ durations =+\n(.*?)\n\n", text, re.S)
        if slow:
            print(f"\n----- slowest in {name}\n" + "\n".join(slow.group(1).splitlines()[:5]))
    print(
        f"\ntests: all sessions done in {time.monotonic() - start:.0f} s; "
        f"failed sessions: {', '.join(failed_sessions) or 'none'}"
    )
    failed = totals["failed"] + totals["errors"]
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return 1 if failed_sessions else 0


if __name__ == "__main__":
    sys.exit(main())
