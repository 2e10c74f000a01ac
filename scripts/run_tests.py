"""Run the test suite as independent pytest sessions, a few at a time (`make test` uses this).

Each integration module gets a session of its own, so it gets its own sandbox instance
(127.0.k.1N, see tests/testbed/sandbox/) and starts from fresh nodes: no state leaks between
modules, and the sessions' waits (server start, readiness polls) overlap. The fault-injection
suite is split into groups (tests/integration/faults/test_faults_<group>.py), a session each;
together they render docs/faults.md. `--only PREFIX` runs some sessions (make test-faults).
Logs go to build/test-logs/; the slowest tests of each session are printed with its summary.
Ctrl-C or SIGTERM stops every running session (each gets SIGTERM, which its sandbox Session
turns into a clean stop of its nodes; a session that does not end in STOP_GRACE_S is killed
and the nodes of its instance are stopped here). `--session NAME=PATH` runs only the given
sessions. The lint (`make lint`) is a session too: it runs beside the tests instead of before
them (about 80 s of one core that the tests' sessions would leave half idle before them).
Exit code: 0 when every session passed, 1 otherwise, 2 interrupted.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LOGS = REPO / "build" / "test-logs"
FAULT_RESULTS = REPO / "build" / "faults"  # the fault groups' rows (tests/integration/faults/)
SUMMARY = re.compile(r"=+ (.*?(passed|failed|error).*?) in ([\d.]+)s")
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


# Wall seconds of each session in ci46 (a fresh clone of 439005c on this 2-core machine, nothing
# else running, the torch venvs and uv's cache removed: 2026-12-06 08:22-08:54 UTC, all 22 sessions
# in 1923 s). Sessions start longest first, so the longest do not start last; a fresh clone (CI)
# has no build/test-logs/durations.json, so there this order is the schedule; later runs order by
# what they measured. The root file system's build goes first whatever its estimate (with_rootfs).
ESTIMATE_S = {
    # First on a fresh machine: its 20 GB of downloads wait on the network, not the CPU, so they
    # overlap the others' work (it builds two torch venvs from an empty cache on CI)
    "patches": 1400,
    "test_faults_traffic": 1102,  # two nodes behind HAProxy, traffic during each fault
    "test_live_traffic": 762,
    "test_deploy": 543,
    "test_k_schedule": 480,
    "test_faults_first": 425,
    "unit": 418,
    "test_faults_gates": 417,
    "test_speedup": 410,
    "test_engine_sglang": 404,
    "test_fleet": 385,
    "test_live_traffic_fleet": 336,  # 4 nodes: a first deploy, then the staged one
    "test_faults_build": 297,
    "test_validate": 297,
    "test_controller_wheelhouse": 219,
    "test_on_failure": 195,
    "test_schedule": 155,
    "test_security": 108,
    "test_advise": 95,
    "lint": 81,  # ansible-lint, ansible-test sanity, yamllint, ruff
    "test_provision": 67,
    "test_sandbox": 44,
}
# Sessions that are a command of their own, not pytest on paths.
COMMANDS = {
    "lint": ["make", "--no-print-directory", "lint"],
    # The sandbox nodes' root file system, built once per cache (debootstrap: 2-3 minutes of
    # downloads on a fresh machine, which CI is on every run). Built first, beside the sessions
    # that boot no node, instead of inside the first node sessions, which would each hold a
    # slot waiting on its lock while the cores idle. Cached: about a second.
    "rootfs": [sys.executable, "-m", "testbed.sandbox", "build"],
}
# The sessions that boot no sandbox node: the only ones started while the root file system builds.
NODELESS = {"patches", "unit", "lint", "rootfs"}
DURATIONS = LOGS / "durations.json"
# CPU-seconds per session: its pytest process and everything it waited for (the controller
# side and its sandbox nodes, whose supervisor it reaps), and the nodes' part from their
# cgroups; on a shared 2-core machine the wall time says how loaded the machine was, the CPU
# what the session itself costs.
CPU = LOGS / "cpu.json"
CGROUP = Path("/sys/fs/cgroup")
# What the sessions' Ansible runs cost, a JSON line per run (tests/callback_plugins/census.py).
CENSUS = LOGS / "census"
CENSUS_PLUGINS = REPO / "tests" / "callback_plugins"
STOP_GRACE_S = 120  # a session's own teardown (stopping its sandbox nodes) may take this long


class Interrupted(Exception):
    """Ctrl-C or SIGTERM on this runner."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def stop_sessions(running: dict[str, tuple[subprocess.Popen[bytes], float, Path]]) -> None:
    """SIGTERM to every session; kill what outlives the grace; stop the nodes it left."""
    for name, (proc, _began, _log) in running.items():
        if proc.poll() is None:
            print(f"tests: stopping {name} (pid {proc.pid})", flush=True)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    killed: set[int] = set()
    for name, (proc, _began, _log) in running.items():
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"tests: {name} did not stop in {STOP_GRACE_S} s: killed", flush=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            killed.add(proc.pid)
    if killed:
        stop_nodes_of(killed)


def session_instances(pids: set[int]) -> dict[int, Path]:
    """The sandbox instances (and their state dirs) whose session.json names one of these
    session processes."""
    found = {}
    for state in Path("/run").glob("specdeploy-sandbox-*/session.json"):
        try:
            owner = int(json.loads(state.read_text()).get("pid", 0))
            index = int(state.parent.name.rsplit("-", 1)[1])
        except (OSError, ValueError, AttributeError):
            continue
        if owner in pids:
            found[index] = state.parent
    return found


def stop_nodes_of(pids: set[int]) -> None:
    """Stop the sandbox nodes of the instances these (killed) sessions owned, with the test
    bed's own command (its lock died with the session)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"))
    for index in sorted(session_instances(pids)):
        print(f"tests: stopping the nodes of sandbox instance {index}", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "testbed.sandbox", "down"],
            cwd=REPO,
            env=dict(env, SPECDEPLOY_SANDBOX_INSTANCE=str(index)),
            capture_output=True,
            text=True,
            check=False,
        )
        for line in (done.stdout + done.stderr).splitlines():
            print(f"tests: {line}", flush=True)


def _cgroup_base() -> Path:
    return CGROUP if (CGROUP / "cgroup.controllers").exists() else CGROUP / "unified"


def census_env(path: Path) -> dict[str, str]:
    """The session's environment with the census callback on: ansible.cfg's own callbacks (read
    from it, so the list lives there only) and census, writing to `path`."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "ansible.cfg")
    listed = parser.get("defaults", "callbacks_enabled", fallback="")
    enabled = [c.strip() for c in listed.split(",")]
    return dict(
        os.environ,
        ANSIBLE_CALLBACK_PLUGINS=str(CENSUS_PLUGINS),
        ANSIBLE_CALLBACKS_ENABLED=",".join([*filter(None, enabled), "census"]),
        SPECDEPLOY_CENSUS=str(path),
    )


def census_totals(path: Path) -> dict[str, Any]:
    """A session's Ansible runs added up: runs, host-tasks, skipped, venv builds, CPU-s, and the
    host-tasks that ran by module (``actions``)."""
    totals: dict[str, Any] = {"runs": 0, "host_tasks": 0, "skipped": 0, "venv_builds": 0}
    totals["cpu_s"] = 0.0
    actions: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                run = json.loads(line)
                counted = {key: run[key] for key in ("host_tasks", "skipped", "venv_builds")}
                counted["cpu_s"] = run["cpu_s"]
                ran = {str(k): int(v) for k, v in run.get("actions", {}).items()}
                totals["runs"] += 1
                for key, value in counted.items():
                    totals[key] += value
                for action, count in ran.items():
                    actions[action] = actions.get(action, 0) + count
    totals["cpu_s"] = round(totals["cpu_s"], 1)
    totals["actions"] = actions
    return totals


def top_actions(cpu: dict[str, dict[str, Any]], count: int = 12) -> list[tuple[str, int]]:
    """The modules that ran most often over every session (the host-tasks to merge next)."""
    merged: dict[str, int] = {}
    for session in cpu.values():
        for action, n in session["ansible"].get("actions", {}).items():
            merged[action] = merged.get(action, 0) + n
    return sorted(merged.items(), key=lambda item: (-item[1], item[0]))[:count]


def nodes_cpu_s(pid: int) -> float:
    """CPU-seconds the sandbox nodes of this session's instances have used so far (0 when
    none runs or the machine has no cgroup v2 CPU figures)."""
    total = 0.0
    for state in session_instances({pid}).values():
        try:
            stat = (_cgroup_base() / state.name / "cpu.stat").read_text()
        except OSError:
            continue
        usage = re.search(r"^usage_usec (\d+)", stat, re.M)
        total += int(usage.group(1)) / 1e6 if usage else 0.0
    return total


def sessions() -> list[tuple[str, list[str]]]:
    """Quick tiers together; every integration module alone (the fault-injection suite,
    tests/integration/faults/, one module per group); the longest first."""
    integration = sorted((REPO / "tests" / "integration").glob("test_*.py"))
    integration += sorted((REPO / "tests" / "integration" / "faults").glob("test_*.py"))
    # a module of helpers only (test_deploy_support) is no session: pytest would exit 5
    integration = [p for p in integration if "\ndef test_" in p.read_text(encoding="utf-8")]
    found = [
        ("patches", ["tests/patches"]),
        *[(p.stem, [str(p.relative_to(REPO))]) for p in integration],
        ("unit", ["tests/unit", "tests/sandbox", "tests/gpu"]),
        ("lint", []),
    ]
    measured: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        measured = json.loads(DURATIONS.read_text())
    ordered = sorted(found, key=lambda s: -measured.get(s[0], ESTIMATE_S.get(s[0], 600)))
    return with_rootfs(ordered)


def with_rootfs(chosen: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """The root file system's build first when any chosen session boots nodes."""
    if all(name in NODELESS for name, _ in chosen):
        return chosen
    return [("rootfs", []), *[s for s in chosen if s[0] != "rootfs"]]


def next_session(
    pending: list[tuple[str, list[str]]], running: dict[str, Any]
) -> tuple[str, list[str]] | None:
    """The first pending session that may start now: while the root file system is still to be
    built, only those that boot no node (a failed build lets the node sessions start: each then
    says why it has no node, and a passing retry of the download is theirs)."""
    rootfs_built = "rootfs" not in running and all(name != "rootfs" for name, _ in pending)
    for index, (name, _paths) in enumerate(pending):
        if rootfs_built or name in NODELESS:
            return pending.pop(index)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Four at a time on CI's two cores, up to two more while they idle (IDLE_TO_START). Five at
    # all times (ci48) filled the 7-9% the cores idled with four, but each session then took
    # 20-25% more CPU (more system time, more polling): a slower run.
    # a string default goes through type=int too: a bad TEST_JOBS is a usage error, not a traceback
    parser.add_argument("--jobs", type=int, default=os.environ.get("TEST_JOBS", "4"))
    parser.add_argument(
        "--max-jobs",
        type=int,
        default=None,
        help="up to this many while the cores idle, one more a minute (default: --jobs + 2)",
    )
    parser.add_argument(
        "--only", default="", help="only sessions whose name starts with this (e.g. test_faults)"
    )
    parser.add_argument(
        "--session",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="run this session instead of the suite's (repeatable)",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to every session")
    args = parser.parse_args(argv)
    if args.max_jobs is None:
        args.max_jobs = args.jobs + EXTRA_WHILE_IDLE
    if args.jobs < 1 or args.max_jobs < args.jobs:
        parser.error(f"--jobs {args.jobs} and --max-jobs {args.max_jobs}: need 1 <= jobs <= max")
    LOGS.mkdir(parents=True, exist_ok=True)
    CENSUS.mkdir(exist_ok=True)
    chosen = [(n, [p]) for n, _, p in (s.partition("=") for s in args.session)]
    pending = with_rootfs([s for s in chosen or sessions() if s[0].startswith(args.only)])
    for name, _ in pending:
        # docs/faults.md is rendered from the groups' files: a group that runs now starts
        # without its old rows (a case that fails now shows as not observed, not as before)
        if name.startswith("test_faults_"):
            (FAULT_RESULTS / f"{name.removeprefix('test_faults_')}.json").unlink(missing_ok=True)
    running: dict[str, tuple[subprocess.Popen[bytes], float, Path]] = {}
    results: dict[str, tuple[int, float, str]] = {}
    cpu: dict[str, dict[str, Any]] = {}
    start = time.monotonic()
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args]
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_sessions(pending, running, results, pytest, args.jobs, args.max_jobs, cpu)
    except Interrupted as why:
        print(f"\ntests: interrupted ({why}): stopping {len(running)} session(s)", flush=True)
        for s in previous:  # a second Ctrl-C must not cut the sessions' own teardown short
            signal.signal(s, signal.SIG_IGN)
        stop_sessions(running)
        print("tests: interrupted; every session stopped", flush=True)
        return 2
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return report(results, start, cpu)


# The lowest free disk (where the sandbox nodes' layers and the caches live) and memory seen
# during the run: a CI page that shows sessions failing together shows whether the machine ran
# out of either.
LOWEST: dict[str, tuple[float, float]] = {}
HEADROOM_EVERY_S = 10.0


def headroom() -> dict[str, float]:
    """GiB free now: the disk under the nodes' state (/run) and the cache, and MemAvailable."""
    out: dict[str, float] = {}
    cache = Path(os.environ.get("SPECDEPLOY_CACHE") or Path.home() / ".cache" / "specdeploy")
    for label, path in (("disk /run", Path("/run")), ("disk cache", cache)):
        with contextlib.suppress(OSError):
            out[label] = shutil.disk_usage(path if path.exists() else Path("/")).free / 2**30
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(
            ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemAvail")
        )
        out["memory"] = int(line.split()[1]) / 2**20
    return out


def note_headroom(since: float) -> None:
    for label, free in headroom().items():
        if label not in LOWEST or free < LOWEST[label][0]:
            LOWEST[label] = (free, time.monotonic() - since)


# Sessions beyond --jobs (up to --max-jobs, one a minute) start while the cores idle. With plays
# over mitogen the four sessions' own CPU fell, and with four node sessions CI's two cores idled
# 12-20% of each minute (ci54, vmstat): the sessions wait on servers, timers and each other,
# not on the CPU. Five at all times (ci48, before mitogen) cost each session 20-25% more CPU
# in the phases that had no idle to fill. The idle is measured over the last IDLE_WINDOW_S and
# only that long after the last start, so a session that just started has shown its load; two
# `make test` side by side leave no idle, so neither starts an extra session. Measured (ci55):
# the cores' idle 14.1 -> 11.6% of the run, its time 0.98x, inside the run-to-run spread.
# Session 25: with the sandbox's vLLM wheel without kernels the nodes' CPU fell by 30% and four
# or five node sessions left the cores idle 13-31% of each minute (ci56), so up to two extra.
IDLE_WINDOW_S = 60.0
IDLE_TO_START = 0.15
EXTRA_WHILE_IDLE = 2


def cpu_idle_total() -> tuple[float, float]:
    """The machine's idle and total CPU time so far (clock ticks, /proc/stat's first line)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return fields[3] + fields[4], sum(fields)  # idle + iowait; user .. steal


def idle_fraction(samples: list[tuple[float, float, float]], window_s: float) -> float | None:
    """The cores' idle share over the last window_s of samples (monotonic time, idle, total),
    oldest first; None while the samples span less than that."""
    if not samples or samples[-1][0] - samples[0][0] < window_s:
        return None
    now, idle_now, total_now = samples[-1]
    then = next(s for s in reversed(samples) if now - s[0] >= window_s)
    spent = total_now - then[2]
    return (idle_now - then[1]) / spent if spent > 0 else None


def session_limit(jobs: int, max_jobs: int, idle: float | None) -> int:
    """How many sessions may run now: jobs, max_jobs while the cores idled enough (each start
    clears the samples, so the next extra waits a window: one a minute)."""
    return max_jobs if idle is not None and idle > IDLE_TO_START else jobs


def run_sessions(
    pending: list[tuple[str, list[str]]],
    running: dict[str, tuple[subprocess.Popen[bytes], float, Path]],
    results: dict[str, tuple[int, float, str]],
    pytest: list[str],
    jobs: int,
    max_jobs: int,
    cpu: dict[str, dict[str, Any]],
) -> None:
    nodes_cpu: dict[str, float] = {}
    started = last_headroom = time.monotonic()
    note_headroom(started)
    samples: list[tuple[float, float, float]] = []  # since the last start (idle_fraction)
    while pending or running:
        if time.monotonic() - last_headroom >= HEADROOM_EVERY_S:
            note_headroom(started)
            last_headroom = time.monotonic()
        with contextlib.suppress(OSError, ValueError, IndexError):
            samples.append((time.monotonic(), *cpu_idle_total()))
            if samples[-1][0] - samples[0][0] > 2 * IDLE_WINDOW_S:
                del samples[0]
        while pending:
            idle = idle_fraction(samples, IDLE_WINDOW_S)
            if len(running) >= session_limit(jobs, max_jobs, idle):
                break
            picked = next_session(pending, running)
            if picked is None:  # node sessions, waiting for the root file system
                break
            name, paths = picked
            log = LOGS / f"{name}.log"
            handle = log.open("wb")
            # Its own process group: a Ctrl-C in the terminal reaches this runner only, which
            # then stops each session once and waits for its teardown.
            census = CENSUS / f"{name}.jsonl"
            census.unlink(missing_ok=True)
            proc = subprocess.Popen(
                COMMANDS.get(name, [*pytest, *paths]),
                cwd=REPO,
                env=census_env(census),
                stdout=handle,
                stderr=handle,
                start_new_session=True,
            )
            running[name] = (proc, time.monotonic(), log)
            extra = ""
            if len(running) > jobs and idle is not None:
                extra = f" (beyond {jobs}: the cores idled {idle:.0%} of the last minute)"
            samples.clear()  # the next extra waits for this one's load to show
            # the offsets give the run's timeline: where the cores idled (a lone last session)
            at = time.monotonic() - started
            print(f"tests: started {name} at +{at:.0f} s{extra}", flush=True)
        time.sleep(1)
        for name, (proc, began, log) in list(running.items()):
            # the nodes' counter goes with their cgroup at the session's teardown: keep the
            # highest figure seen while it ran
            nodes_cpu[name] = max(nodes_cpu.get(name, 0.0), nodes_cpu_s(proc.pid))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == 0:
                continue
            proc.returncode = os.waitstatus_to_exitcode(status)
            # the session's usage holds every process it waited for: the sandbox nodes too
            # (their supervisor is its child), so their cgroup figure is a part of it
            cpu[name] = {
                "total_s": round(usage.ru_utime + usage.ru_stime, 1),
                "nodes_s": round(nodes_cpu.get(name, 0.0), 1),
                "ansible": census_totals(CENSUS / f"{name}.jsonl"),
            }
            del running[name]
            text = log.read_text(errors="replace")
            if name in COMMANDS:  # not pytest: its exit code is its summary
                summary = "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
            else:
                match = SUMMARY.search(text.splitlines()[-1] if text.strip() else "")
                summary = match.group(1) if match else f"exit {proc.returncode}"
            results[name] = (proc.returncode, time.monotonic() - began, text)
            runs = cpu[name]["ansible"]
            print(
                f"tests: {name}: {summary} ({time.monotonic() - began:.0f} s; CPU "
                f"{cpu[name]['total_s']:.0f} s, {cpu[name]['nodes_s']:.0f} s of it on nodes; "
                f"{runs['runs']} Ansible runs, {runs['host_tasks']} host-tasks, "
                f"{runs['venv_builds']} venv builds; ended at +{time.monotonic() - started:.0f} s)",
                flush=True,
            )


def report(
    results: dict[str, tuple[int, float, str]], start: float, cpu: dict[str, dict[str, Any]]
) -> int:
    measured: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        measured = json.loads(DURATIONS.read_text())
    measured.update({name: round(r[1]) for name, r in results.items()})
    DURATIONS.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    CPU.write_text(json.dumps(cpu, indent=1, sort_keys=True) + "\n")
    totals = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failed_sessions = []
    for name, (_rc, _s, text) in results.items():
        slow = re.search(r"=+ slowest \d+ durations =+\n(.*?)\n\n", text, re.S)
        if slow:
            print(f"\n----- slowest in {name}\n" + "\n".join(slow.group(1).splitlines()[:5]))
    # The failures last, nearest the totals: a CI page that shows only the end of the output
    # still shows what failed and why (the slowest lists had pushed them out of it).
    for name, (rc, seconds, text) in results.items():
        tail = text.splitlines()[-1] if text.strip() else ""
        for number, kind in COUNT.findall(tail):
            totals["errors" if kind.startswith("error") else kind] += int(number)
        # pytest's exit 5 means the session collected nothing: not a failure of ours.
        if rc not in (0, 5):
            failed_sessions.append(name)
            print(f"\n===== {name} (exit {rc}, {seconds:.0f} s): last lines of {LOGS / name}.log")
            print("\n".join(text.splitlines()[-40:]))
    for name in failed_sessions:
        lines = [
            ln[:600] for ln in results[name][2].splitlines() if ln.startswith(("FAILED ", "ERROR "))
        ]
        print(f"\n----- {name}: " + ("\n".join(lines) or "no FAILED/ERROR line (see above)"))
    spent = sum(c["total_s"] for c in cpu.values())
    ansible = {
        key: round(sum(c["ansible"][key] for c in cpu.values()), 1)
        for key in ("runs", "host_tasks", "skipped", "venv_builds", "cpu_s")
    }
    print(
        f"\ntests: all sessions done in {time.monotonic() - start:.0f} s "
        f"({spent:.0f} CPU-s in the sessions); "
        f"failed sessions: {', '.join(failed_sessions) or 'none'}"
    )
    print(
        f"tests: Ansible in the sessions: {ansible['runs']:.0f} runs, "
        f"{ansible['host_tasks']:.0f} host-tasks ({ansible['skipped']:.0f} skipped), "
        f"{ansible['venv_builds']:.0f} release venvs built from wheels, "
        f"{ansible['cpu_s']:.0f} CPU-s on the controller side"
    )
    ran = top_actions(cpu)
    if ran:
        print("tests: the host-tasks that ran most: " + ", ".join(f"{a} {n}" for a, n in ran))
    if LOWEST:
        print(
            "tests: lowest free during the run: "
            + ", ".join(f"{k} {v:.1f} GiB (at {t:.0f} s)" for k, (v, t) in LOWEST.items())
        )
    failed = totals["failed"] + totals["errors"]
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return 1 if failed_sessions else 0


if __name__ == "__main__":
    sys.exit(main())
