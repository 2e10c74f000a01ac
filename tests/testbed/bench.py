"""`make bench`: wall times of deploy.yml, a no-op re-deploy and a rollback on 1, 2 and 4 nodes.

Every figure is a real ansible-playbook run against sandbox nodes (systemd-nspawn, real SSH and
systemd, the real vLLM wheel patched, the CI stand-in serving), on a sandbox instance of its own
(a developer's `make sandbox-up` nodes are left alone). Per node count and repeat: fresh nodes,
then a first deploy of release A (deploy.yml's default stages: a canary, then half the fleet at
a time); on the first repeat also a deploy of release B (4 speculative tokens instead of 3) to
all nodes in one stage, then no-op re-deploys and rollbacks (alternating B -> A -> B). The
settle check is shortened to 5 s (a wait by policy, not toolkit work). The stand-in's own start
(stop to ready, from the release manifests) is reported separately. Medians with min-max;
T(n)/T(1) ratios of the medians; the slowest roles of the no-op re-deploy (profile_tasks).
Writes docs/bench.md (and --json); the hand-written part of docs/bench.md below NOTES_MARKER
(measurements that are not make bench's, e.g. the execution-layer comparison) is kept.
Exit codes: 0 ok, 1 a run failed, 2 environment error (not root, no venv).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
LOGS = REPO / "build" / "bench"
SPECULATIVE = {"method": "eagle3", "model": "/srv/models/tiny-dsv3-eagle3"}
COMMON = {"rollback_settle_s": 5}
RELEASE_A = {
    **COMMON,
    "specdeploy_speculative_config": {**SPECULATIVE, "num_speculative_tokens": 3},
}
RELEASE_B = {
    **COMMON,
    "specdeploy_speculative_config": {**SPECULATIVE, "num_speculative_tokens": 4},
}
NEW_RELEASE = "new release, all nodes at once"
OPERATIONS = ("first deploy", NEW_RELEASE, "no-op re-deploy", "rollback")
# Release B goes to every node in one stage: the fleet's parallel scaling, without the canary's
# sequential stages that the first deploy goes through.
ALL_AT_ONCE = {"specdeploy_rollout_stages": ["100%"]}
# profile_tasks lines: "role : task name ---- 1.23s"
TASK_TIME = re.compile(r"^(?P<name>.+?) -+ (?P<seconds>[\d.]+)s$", re.M)
RECAP = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.M)
# ok, failed and skipped of one host in the PLAY RECAP: the host-tasks it ran
HOST_TASKS = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)\s+skipped=(\d+)", re.M
)


NOTES_MARKER = "<!-- written by hand below this line; make bench keeps it -->"


class BenchError(Exception):
    pass


CONTROLLER_CPU: list[float] = []  # CPU seconds of each run's ansible-playbook and ssh processes


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def playbook(inventory: Path, name: str, extra: dict | None, log: Path) -> tuple[float, str]:
    """Run one playbook; its wall seconds and output. A failed run stops the bench.
    The controller's CPU seconds for the run (ansible-playbook, its workers, ssh) go to
    CONTROLLER_CPU; the nodes' share of the machine is not in it."""
    argv = [str(PLAYBOOK), "-i", str(inventory), str(REPO / name)]
    if extra:
        argv += ["-e", json.dumps(extra)]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    # profile_tasks' own variable (the recap lists every task, not only the slowest 20)
    env["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "all"
    started, cpu = time.monotonic(), children_cpu()
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    CONTROLLER_CPU.append(children_cpu() - cpu)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise BenchError(f"{name} exited {result.returncode}; log {log}")
    return seconds, result.stdout


# What the speed-up measurement adds to a deploy (issue 19), as the deploy prints it per node.
SPEED_STEPS = {
    "baseline start": re.compile(r"the baseline start took\s+([\d.]+) s"),
    "canary measurement": re.compile(r"measured before the switch in\s+([\d.]+) s"),
}


def speed_step_seconds(output: str) -> dict[str, list[float]]:
    return {step: [float(x) for x in rx.findall(output)] for step, rx in SPEED_STEPS.items()}


def changed(output: str) -> int:
    return sum(int(m[1]) for m in RECAP.findall(output))


def host_tasks_per_node(output: str) -> float:
    """Host-tasks (ok + failed + skipped) per node of the run, from the PLAY RECAP (the
    controller's own localhost plays left out): what the controller pays per node."""
    counts = [
        int(m[2]) + int(m[3]) + int(m[4])
        for m in HOST_TASKS.finditer(output)
        if m[1] != "localhost"
    ]
    return sum(counts) / len(counts) if counts else 0.0


def role_seconds(output: str) -> dict[str, float]:
    """Seconds per role (or play-level task) from the profile_tasks recap."""
    recap = output.split("TASKS RECAP", 1)[-1]
    totals: dict[str, float] = defaultdict(float)
    for match in TASK_TIME.finditer(recap):
        name = match["name"].strip()
        totals[name.split(" : ", 1)[0] if " : " in name else "(play tasks)"] += float(
            match["seconds"]
        )
    return {role: round(seconds, 2) for role, seconds in totals.items()}


def server_start_seconds(cluster, root: str = "/opt/specdeploy") -> list[float]:
    """The last downtime window of the current release on each node (the stand-in's start)."""
    out = []
    for node in cluster.nodes:
        text = cluster.ssh(node, f"sudo -n cat {root}/current/manifest.json", check=True).stdout
        starts = json.loads(text).get("starts") or []
        if starts:
            # the downtime window from the engine log (old server's stop to ready), else the
            # controller's stop-to-ready
            window = (starts[-1].get("window") or {}).get("window_s")
            out.append(float(window or starts[-1].get("stop_to_ready_s") or 0.0))
    return out


def median_spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
        "n": len(values),
    }


def bench_nodes(count: int, first_repeats: int, repeats: int) -> dict:
    from testbed.sandbox import Session

    times: dict[str, list[float]] = {op: [] for op in OPERATIONS}
    cpu: dict[str, list[float]] = {op: [] for op in OPERATIONS}
    starts: dict[str, list[float]] = {op: [] for op in OPERATIONS}
    profile: dict[str, list[float]] = defaultdict(list)
    noop_tasks: list[float] = []
    speed_steps: dict[str, list[float]] = defaultdict(list)
    load_at_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for repeat in range(first_repeats):
        session = Session()
        try:
            cluster = session(count)
            inventory = Path(cluster.inventory).parent
            logs = LOGS / f"{count}-nodes" / f"repeat-{repeat + 1}"
            playbook(inventory, "tests/playbooks/stage-models.yml", None, logs / "stage.log")
            seconds, out = playbook(inventory, "deploy.yml", RELEASE_A, logs / "first.log")
            for step, values in speed_step_seconds(out).items():
                speed_steps[step] += values
            times["first deploy"].append(seconds)
            cpu["first deploy"].append(CONTROLLER_CPU[-1])
            starts["first deploy"] += server_start_seconds(cluster)
            say(f"{count} node(s), repeat {repeat + 1}: first deploy {seconds:.1f} s")
            if repeat:
                continue
            seconds, out = playbook(
                inventory, "deploy.yml", {**RELEASE_B, **ALL_AT_ONCE}, logs / "release-b.log"
            )
            for step, values in speed_step_seconds(out).items():
                speed_steps[step] += values
            times[NEW_RELEASE].append(seconds)
            cpu[NEW_RELEASE].append(CONTROLLER_CPU[-1])
            starts[NEW_RELEASE] += server_start_seconds(cluster)
            current = RELEASE_B
            for index in range(repeats):
                seconds, out = playbook(
                    inventory, "deploy.yml", current, logs / f"noop-{index}.log"
                )
                if changed(out):
                    raise BenchError(f"no-op re-deploy changed {changed(out)} things: {logs}")
                times["no-op re-deploy"].append(seconds)
                cpu["no-op re-deploy"].append(CONTROLLER_CPU[-1])
                for role, value in role_seconds(out).items():
                    profile[role].append(value)
                noop_tasks.append(host_tasks_per_node(out))
                seconds, _ = playbook(
                    inventory, "playbooks/rollback.yml", None, logs / f"rollback-{index}.log"
                )
                times["rollback"].append(seconds)
                cpu["rollback"].append(CONTROLLER_CPU[-1])
                starts["rollback"] += server_start_seconds(cluster)
                current = RELEASE_A if current is RELEASE_B else RELEASE_B
                say(
                    f"{count} node(s): no-op {times['no-op re-deploy'][-1]:.1f} s, "
                    f"rollback {seconds:.1f} s"
                )
        finally:
            session.close()
    return {
        "nodes": count,
        "load": {"start": load_at_start, "end": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "times": {op: median_spread(v) for op, v in times.items() if v},
        "server_start": {op: median_spread(v) for op, v in starts.items() if v},
        "controller_cpu": {op: median_spread(v) for op, v in cpu.items() if v},
        "speed_steps": {step: median_spread(v) for step, v in speed_steps.items() if v},
        "noop_host_tasks": round(statistics.median(noop_tasks), 1) if noop_tasks else None,
        "noop_profile": {
            role: round(statistics.median(v), 1)
            for role, v in sorted(profile.items(), key=lambda kv: -statistics.median(kv[1]))
        },
    }


def machine() -> dict[str, str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory_gib": f"{mem_kb / 1048576:.0f}",
        "kernel": platform.release(),
        "load_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "strategy": strategy(),
    }


def strategy() -> str:
    """The Ansible strategy the runs use (ansible.cfg, or ANSIBLE_STRATEGY)."""
    result = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-config"), "dump", "--only-changed"],
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^DEFAULT_STRATEGY\(.*?\) = (\S+)", result.stdout, re.M)
    return found[1] if found else "linear"


def render(results: list[dict], host: dict[str, str], started: str) -> str:
    base = next((r for r in results if r["nodes"] == 1), None)
    lines = [
        "# Benchmark: deploy, no-op re-deploy and rollback on sandbox nodes",
        "",
        f"GENERATED by `make bench` (tests/testbed/bench.py) on {started}; do not edit.",
        f"Machine: {host['cpu']}, {host['cores']} cores, {host['memory_gib']} GiB, "
        f"kernel {host['kernel']}, load average at start {host['load_at_start']}; "
        f"Ansible strategy {host['strategy']}.",
        "Real ansible-playbook runs over real SSH to systemd-nspawn nodes; the CI stand-in serves "
        "in place of the GPU server. First deploy: deploy.yml's default rollout stages (a canary, "
        "then half the fleet per stage: 1, 2, 1 nodes for 4); the new release goes to all nodes "
        "in one stage (specdeploy_rollout_stages=['100%']); settle check 5 s.",
        "The nodes are containers on the same machine: they share its cores with the controller, "
        "so work on the nodes adds up here where a real fleet's nodes would work in parallel. "
        "Controller CPU: ansible-playbook, its workers and ssh (the nodes' processes excluded).",
        "",
        "| nodes | operation | wall median (min-max, n) | T(n)/T(1) "
        "| downtime window per node (stop to ready), median | controller CPU, median |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        for op in OPERATIONS:
            t = result["times"].get(op)
            if not t:
                continue
            ratio = "-"
            if base and op in base["times"] and result["nodes"] != 1:
                ratio = f"{t['median'] / base['times'][op]['median']:.2f}"
            start = result["server_start"].get(op)
            start_text = f"{start['median']} s" if start else "- (no restart)"
            cpu = result.get("controller_cpu", {}).get(op)
            cpu_text = f"{cpu['median']} s" if cpu else "-"
            lines.append(
                f"| {result['nodes']} | {op} | {t['median']} s ({t['min']}-{t['max']}, "
                f"n={t['n']}) | {ratio} | {start_text} | {cpu_text} |"
            )
    lines += [
        "",
        "Load average (1, 5, 15 min) at the start and end of each node count: "
        + "; ".join(
            f"{r['nodes']} node(s) {r['load']['start']} -> {r['load']['end']}"
            for r in results
            if "load" in r
        )
        + ".",
    ]
    lines += [
        "",
        "What the speed-up measurement adds to a deploy, per node (issue 19; median, min-max, n): "
        "the baseline start (first deploys without a baseline: the release started without "
        "speculation and measured, before its real start) and the canary measurement (the "
        "serving release measured before the switch):",
        "",
    ]
    for result in results:
        steps = result.get("speed_steps") or {}
        lines.append(
            f"- {result['nodes']} node(s): "
            + (
                ", ".join(
                    f"{step} {v['median']} s ({v['min']}-{v['max']}, n={v['n']})"
                    for step, v in steps.items()
                )
                or "none measured"
            )
        )
    lines += [
        "",
        "Where a no-op re-deploy spends its time (host-tasks per node from the PLAY RECAP; "
        "median seconds per role, profile_tasks):",
        "",
    ]
    for result in results:
        top = list(result["noop_profile"].items())[:8]
        tasks = result.get("noop_host_tasks")
        lines.append(
            f"- {result['nodes']} node(s): "
            + (f"{tasks:g} host-tasks per node; " if tasks else "")
            + ", ".join(f"{role} {s} s" for role, s in top)
        )
    return "\n".join(lines) + "\n"


def with_notes(generated: str, old: str) -> str:
    """The new table, then the hand-written notes of the old file (below NOTES_MARKER)."""
    if NOTES_MARKER not in old:
        return generated
    return generated + "\n" + NOTES_MARKER + old.split(NOTES_MARKER, 1)[1]


def say(message: str) -> None:
    print(f"bench: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--first-repeats", type=int, default=3, help="fresh-node first deploys")
    parser.add_argument("--repeats", type=int, default=3, help="no-op re-deploys and rollbacks")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "bench.md")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not PLAYBOOK.exists():
        print("bench: needs root (sandbox nodes) and the venv (make setup)", file=sys.stderr)
        return 2
    # The sandbox nodes' zipimport cache off: these figures stand for a real node, which
    # compiles every module's payload each run (make test keeps it on: docs/test-time.md).
    os.environ["SPECDEPLOY_SANDBOX_ZIPIMPORT_CACHE"] = "off"
    # and the real vLLM wheels, 1.2 GB of kernels included, as a real node installs them
    os.environ["SPECDEPLOY_SANDBOX_NODE_WHEELS"] = "real"
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    host = machine()
    results = []
    try:
        for count in args.nodes:
            results.append(bench_nodes(count, args.first_repeats, args.repeats))
    except BenchError as error:
        print(f"bench: FAILED: {error}", file=sys.stderr)
        return 1
    text = render(results, host, started)
    text = with_notes(text, args.out.read_text() if args.out.exists() else "")
    args.out.write_text(text)
    (LOGS / "results.json").write_text(json.dumps({"machine": host, "results": results}, indent=2))
    print(json.dumps({"machine": host, "results": results}, indent=2) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
