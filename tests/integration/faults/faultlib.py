"""The fault-injection suite's harness (issue 7): playbook runs, the node, the results table.

Every fault is injected for real on a sandbox node (real SSH, real systemd, the real vLLM 0.16
wheel patched in each release venv, the stand-in server in place of the GPU server). Each case
asserts the message the operator sees, the exit code, which release serves afterwards (asked
over HTTP from the controller), and that nothing was lost: model files, earlier releases, the
serving release's files, the ledger (append-only), the validation history and the serving
release's compile cache.

The cases are split into GROUPS, one test module each (test_faults_<group>.py). `make test`
runs every group as a pytest session of its own (scripts/run_tests.py): its own sandbox instance
and node, its own base release, so the groups' deploys and waits overlap. Within a group the
cases run in order and reuse releases: a release that failed while serving is deployed again as
it is (no rebuild), so only releases whose inputs differ cost a venv install. Deploys after the
first successful one skip the provisioning and hardware-doctor plays (`--skip-tags
provision,hardware`: unchanged, already run). Timeouts are shortened for the stand-in (start
20 s, probe 3 s, settle 3 s, readiness poll 2 s).

The table: each group writes its rows to build/faults/<group>.json when it ends, then renders
docs/faults.md from every group's file in the fixed order of ROWS (under a lock, so the last
group to end writes the whole table). A fault whose case did not pass is shown as not observed.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import sqlite3
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "tests" / "standin" / "profiles"
DOCS = REPO / "docs" / "faults.md"
RESULTS = REPO / "build" / "faults"  # <group>.json per group; the table is rendered from them
ROOT = "/opt/specdeploy-faults"
CACHE = "/var/cache/specdeploy-faults"
SERVICE = "vllm-faults"
PORT = 18777
UNIT = f"/etc/systemd/system/{SERVICE}.service"
MODELS = "/srv/models"
LOCKS = "/run/lock/specdeploy/opt_specdeploy-faults"  # the node's deploy lock for ROOT
START_TIMEOUT_S = 20
PROBE_TIMEOUT_S = 3

# Every row of docs/faults.md, in table order: key -> (group, fault, expected). The group is
# the module (test_faults_<group>.py) whose cases observe it.
REFUSED = (
    "refused by the preflight naming the variable, the value and what is allowed; nothing changed"
)
ROWS: dict[str, tuple[str, str, str]] = {
    "first-deploy-fails": (
        "first",
        "smoke text wrong (first deploy, nothing earlier)",
        "stop the server, remove `current`, mark the release failed, exit non-zero",
    ),
    "rollback-nothing-earlier": (
        "first",
        "`make rollback` with no earlier release",
        "refuse with a clear message, change nothing",
    ),
    "concurrent-deploy": (
        "first",
        "concurrent second deploy",
        "refused at once by the node's deploy lock, naming the holder; nothing changed",
    ),
    "never-healthy": (
        "first",
        "server never becomes healthy (/health 503)",
        "readiness times out; roll back; mark failed; exit non-zero",
    ),
    "port-hangs": (
        "first",
        "port open but not answering (requests hang)",
        "readiness bounded by wall time (every probe has a timeout); roll back",
    ),
    "crash-after-healthy": (
        "gates",
        "server crashes after becoming healthy (SIGKILL during validation)",
        "the settle check (same process, no restart) or validation fails; roll back",
    ),
    "speed-up-below-one": (
        "gates",
        "speed-up below 1.0 (baseline 2000 tok/s without speculation)",
        "the speed-up gate fails; roll back (policy rollback, the default)",
    ),
    "low-acceptance-disable-speculation": (
        "gates",
        "acceptance below the floor, rollback_failed_gate_policy=disable_speculation",
        "keep the inputs with speculation off as a NEW release, smoke only; exit non-zero",
    ),
    "rollback-to-named": (
        "gates",
        "`make rollback TO=<A>` (from the release without speculation)",
        "switch, restart, readiness, smoke; unit, env, patch state of A verified; ledger",
    ),
    "reboot-during-readiness": (
        "gates",
        "node rebooted during the readiness wait",
        "the run stops (host unreachable); the node boots again by itself and starts the "
        "installed unit; the boot clears the lock (/run/lock); the re-run converges",
    ),
    "patch-drift": (
        "build",
        "patch target drifted (vllm/config/speculative.py hand-edited in the installed build)",
        "the patcher refuses (drift), nothing switched, release marked failed (build)",
    ),
    "disk-full": (
        "build",
        "disk full on the release root (8 MB tmpfs at the release's directory)",
        "the build fails with ENOSPC, nothing switched, the serving release untouched",
    ),
    "unsupported-version": ("build", "unsupported vLLM version", REFUSED),
    "unknown-speculative-key": ("build", "malformed speculative config: unknown key", REFUSED),
    "zero-speculative-tokens": ("build", "malformed speculative config: zero tokens", REFUSED),
    "incompatible-drafter": (
        "build",
        "drafter incompatible (llama-3.1-8B EAGLE-3 drafter for the DeepSeek-V3 target)",
        REFUSED,
    ),
    "ssh-dropped": (
        "build",
        "SSH connection dropped mid-deploy (ansible-playbook killed during the vLLM install)",
        "nothing half-built is selected; the re-run breaks the stale lock, rebuilds, converges",
    ),
    "rollback-and-forward": (
        "build",
        "`make rollback`, then `make rollback` again (rollback of a rollback)",
        "back to the ledger's previous release, then forward again; each verified",
    ),
    "rollback-refused": (
        "build",
        "`make rollback TO=<failed or half-built release>` and `TO=<unknown id>`",
        "refuse, saying why (failed: with its reason; unknown: the known ids); nothing changed",
    ),
    # Group `traffic` (issue 28 item 4): two nodes behind the sandbox HAProxy, two client
    # threads streaming chat requests through it before, during and after each fault.
    "balancer-api-unreachable": (
        "traffic",
        "the balancer's runtime API unreachable (HAProxy's socket moved away; HAProxy serves)",
        "the preflight refuses before anything changes; traffic unaffected (0 failed, 0 cut)",
    ),
    "clock-off": (
        "traffic",
        "the clock of a node 10 minutes off",
        "not injectable truthfully on a sandbox node (see observed); the lock's age is read on "
        "the node's own clock",
    ),
    "second-operator": (
        "traffic",
        "a second operator starts a deploy on the same fleet while one runs",
        "refused by the canary's deploy lock naming the holder; the first deploy goes on and "
        "converges; 0 failed, 0 cut",
    ),
    "oom-killed": (
        "traffic",
        "the server OOM-killed after readiness (SIGKILL of its main process, the OOM killer's "
        "signal; a sandbox node's cgroups are read-only, so no real OOM)",
        "HAProxy's health check takes the node out; systemd restarts it (Restart=on-failure, "
        "30 s); back in rotation on the same release; 0 failed; only streams running on it cut",
    ),
    "compile-cache-full": (
        "traffic",
        "the compile-cache filesystem full (a full 1 MB tmpfs at <cache>/compile)",
        "the canary's build fails with ENOSPC before its switch; the rollout stops; both nodes "
        "serve the old release, in rotation; 0 failed, 0 cut",
    ),
    "controller-killed": (
        "traffic",
        "the controller killed (SIGKILL of ansible-playbook) mid-stage, then the deploy re-run",
        "the killed stage's node keeps serving or stays drained (never cut); the re-run breaks "
        "the stale lock and converges, both in rotation; 0 failed, 0 cut",
    ),
    "node-rebooted": (
        "traffic",
        "a node rebooted mid-deploy (the canary, its new server up, out of rotation for its "
        "checks), then the deploy re-run",
        "the run stops (host unreachable), the other node is not touched; the canary boots, "
        "stays out of rotation; the re-run converges, both in rotation; 0 failed, 0 cut",
    ),
    "model-files-changed": (
        "traffic",
        "the model files changed under the running servers (a new weight shard in the target's "
        "directory on both nodes, same path), then the same deploy again",
        "the node probe's model fingerprint gives a new release id: built, validated, switched "
        "stage by stage (the old release serves until each node's switch); 0 failed, 0 cut; "
        "the deploy after it changes nothing",
    ),
    "releases-read-only": (
        "traffic",
        "a disk error while the release is written (ext4 errors=remount-ro: a read-only bind "
        "mount over the canary's <root>/releases once the new release's directory appears)",
        "the canary's deploy fails before its switch, one line naming the path and the "
        "read-only file system; the rollout stops; the old release serves on both nodes, in "
        "rotation; 0 failed, 0 cut",
    ),
    "network-cut": (
        "traffic",
        "one node cut off the network mid-stage (nftables drops everything to and from the "
        "canary's address once its new release's directory appears; it serves in rotation), "
        "lifted after the run ended, then the deploy re-run",
        "the run stops within SSH's timeouts naming the unreachable node; the rollout stops, "
        "the other node is not touched and keeps serving; HAProxy's checks take the cut node "
        "out; the re-run completes the rollout; 0 failed on the fleet, only requests in "
        "flight on the cut node lost",
    ),
    "ctrl-c-mid-stage": (
        "traffic",
        "Ctrl-C mid-stage (SIGINT to `make rollback`'s process group, as a terminal sends it) "
        "while the second stage's node is out of rotation for its restart, a long request "
        "still running on it",
        "the run stops; `make` ends each node in a named, safe state: the first stage's node "
        "serves what it rolled back to; the second, its server never stopped, ends on the "
        "release that server runs (rolled back to it when `current` had been switched, kept "
        "when not), in rotation; both locks free; 0 failed, 0 cut",
    ),
}
GROUPS = {
    "first": "the first deploy fails; base release; concurrent deploy; readiness faults",
    "gates": "crash, gates and the speculation-off policy; rollback by id; a node reboot",
    "build": "build faults (patch drift, disk full), input faults, dropped SSH, rollbacks",
    "traffic": "two nodes behind HAProxy with client traffic through it during each fault",
}


def profile(name: str, **changes) -> dict:
    return {**json.loads((PROFILES / f"{name}.json").read_text()), **changes}


PASS = profile("pass")
# crash, speed-up and reboot cases (one build; a 6 s start-up gives the reboot a wait to hit)
B_PROFILE = profile("pass", startup_delay_s=6.0)
C_PROFILE = profile("pass", max_request_s=9.7)  # the dropped-SSH case and the rollbacks
DRIFT_PROFILE = profile("pass", max_request_s=9.0)  # drift and disk-full cases (never built)

RECORDED: dict[str, dict] = {}  # this session's rows, by key
# Development only: keep the node's state from an earlier run (with SPECDEPLOY_SANDBOX_KEEP=1)
# and run single cases again; their rows replace the same faults' rows of the group's file.
REUSE = os.environ.get("SPECDEPLOY_FAULTS_REUSE") == "1"


# ---------------------------------------------------------------- running playbooks


@dataclass
class Run:
    rc: int
    report: dict | None
    stdout: str
    seconds: float

    def results(self) -> list[tuple[str, dict]]:
        out = []
        for play in (self.report or {}).get("plays", []):
            for task in play["tasks"]:
                for result in task["hosts"].values():
                    out.append((task["task"]["name"], result))
        return out

    @property
    def message(self) -> str:
        failed = [r for _, r in self.results() if r.get("failed") or r.get("unreachable")]
        if not failed:
            return ""
        return str(failed[-1].get("msg", ""))

    def task(self, fragment: str) -> dict:
        found = [r for name, r in self.results() if fragment.lower() in name.lower()]
        assert found, f"no task like {fragment!r} ran"
        return found[-1]

    def seconds_of(self, fragment: str) -> float:
        """How long the first task whose name contains `fragment` took where it ran (not
        skipped), from the JSON callback."""
        from datetime import datetime

        for play in (self.report or {}).get("plays", []):
            for task in play["tasks"]:
                ran = any(not r.get("skipped") for r in task["hosts"].values())
                if ran and fragment.lower() in task["task"]["name"].lower():
                    span = task["task"]["duration"]
                    start, end = (
                        datetime.fromisoformat(span[k].replace("Z", "+00:00"))
                        for k in ("start", "end")
                    )
                    return (end - start).total_seconds()
        raise AssertionError(f"no task like {fragment!r} ran")

    def ran(self, fragment: str) -> bool:
        """A task whose name contains `fragment` (any case) ran and was not skipped."""
        return any(
            fragment.lower() in name.lower() and not r.get("skipped") for name, r in self.results()
        )

    def pruned(self) -> set[str]:
        """Releases the run's prune step removed (its JSON: {"removed": [...], ...})."""
        removed: set[str] = set()
        for name, result in self.results():
            if "prune" not in name.lower() or result.get("skipped"):
                continue
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                removed.update(json.loads(result.get("stdout") or "{}").get("removed", []))
        return removed

    def stats(self) -> dict:
        return next(iter((self.report or {}).get("stats", {}).values()), {})


def parse_report(stdout: str) -> dict | None:
    lines = stdout.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "{"), None)
    if start is None:
        return None
    try:
        return json.JSONDecoder().raw_decode("".join(lines[start:]))[0]
    except ValueError:
        return None


class Player:
    def __init__(self, cluster, workdir: Path, port: int = PORT) -> None:
        self.cluster = cluster
        self.node = cluster.nodes[0]
        self.port = port
        self.inventory = Path(cluster.inventory).parent
        self.workdir = workdir
        self.reports = workdir / "reports"
        self.provisioned = False
        self.common = {
            "specdeploy_root": ROOT,
            "specdeploy_cache_dir": CACHE,
            "specdeploy_service_name": SERVICE,
            "specdeploy_port": port,
            "specdeploy_keep_releases": 6,
            "specdeploy_start_timeout_s": START_TIMEOUT_S,
            "specdeploy_readiness_poll_s": 2,
            "vllm_service_probe_timeout_s": PROBE_TIMEOUT_S,
            "rollback_settle_s": 3,
            "validation_baseline_tps": 400,
            "validation_max_requests": 6,
            "validation_report_root": str(self.reports),
            "specdeploy_standin_profile": PASS,
            # The fault cases are about what a fault leaves serving, not the canary comparison
            # (test_deploy, test_live_traffic test that): one 1 s window per level, with a second
            # make test beside this one on two cores, measured one stand-in 22% apart between
            # two releases (ci25b), past the sandbox's 20%. The other gates as the sandbox's.
            "specdeploy_gates": {
                "min_mean_acceptance_length": 1.5,
                "per_position_floors": [],
                "min_speed_up": 1.0,
                "max_regression_vs_previous": 0.9,
            },
        }

    def env(self) -> dict:
        return dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
            ANSIBLE_NOCOLOR="1",
        )

    def command(self, playbook: str, extra: dict | None, args: tuple[str, ...]) -> list[str]:
        vars_file = self.workdir / f"vars-{time.monotonic_ns()}.json"
        vars_file.write_text(json.dumps({**self.common, **(extra or {})}))
        skip = "hardware" if not self.provisioned else "provision,hardware"
        if playbook == "deploy.yml":
            args = ("--skip-tags", skip, *args)
        return [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "-i",
            str(self.inventory),
            str(REPO / playbook),
            "-e",
            f"@{vars_file}",
            *args,
        ]

    def __call__(self, playbook: str = "deploy.yml", extra: dict | None = None, *args: str) -> Run:
        started = time.monotonic()
        proc = subprocess.run(
            self.command(playbook, extra, args),
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=REPO,
            timeout=900,
        )
        run = Run(
            proc.returncode, parse_report(proc.stdout), proc.stdout, time.monotonic() - started
        )
        if run.report is None:
            pytest.fail(
                f"no JSON from ansible-playbook (rc {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        if playbook == "deploy.yml" and run.rc == 0:
            self.provisioned = True
        return run

    def start(self, playbook: str = "deploy.yml", extra: dict | None = None, *args: str):
        """A playbook in the background (own session: killed as a group, by its id)."""
        return self._background(self.command(playbook, extra, args))

    def _background(self, command: list[str]):
        """``command`` in the background, in a session of its own (its process group is
        signalled as a whole, by its id); ``finish`` collects its output."""
        out = open(self.workdir / f"bg-{time.monotonic_ns()}.out", "w+")  # noqa: SIM115
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=REPO,
            start_new_session=True,
        )
        proc.started = time.monotonic()  # type: ignore[attr-defined]
        proc.out = out  # type: ignore[attr-defined]
        return proc

    @staticmethod
    def finish(proc, timeout: float = 900) -> Run:
        proc.wait(timeout=timeout)
        proc.out.seek(0)
        stdout = proc.out.read()
        proc.out.close()
        return Run(proc.returncode, parse_report(stdout), stdout, time.monotonic() - proc.started)

    def make_command(self, target: str, extra: dict | None, make_vars: dict) -> list[str]:
        vars_file = self.workdir / f"vars-{time.monotonic_ns()}.json"
        vars_file.write_text(json.dumps({**self.common, **(extra or {})}))
        command = ["make", "-s", target, f"INVENTORY={self.inventory}", f"EXTRA=-e @{vars_file}"]
        return command + [f"{k}={v}" for k, v in make_vars.items()]

    def start_make(self, target: str, extra: dict | None = None, **make_vars: str):
        """A Makefile target in the background, in a session of its own: its process group is
        the terminal's, which Ctrl-C signals as a whole (os.killpg(proc.pid, SIGINT))."""
        return self._background(self.make_command(target, extra, make_vars))

    def make(self, target: str, extra: dict | None = None, **make_vars: str) -> Run:
        """A Makefile target, as the operator types it (make rollback TO=...)."""
        command = self.make_command(target, extra, make_vars)
        started = time.monotonic()
        proc = subprocess.run(
            command, capture_output=True, text=True, env=self.env(), cwd=REPO, timeout=600
        )
        run = Run(
            proc.returncode, parse_report(proc.stdout), proc.stdout, time.monotonic() - started
        )
        assert run.report is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
        return run

    def on(self, index: int) -> Player:
        """The same player, its node views (sh, serves, snapshot ...) on node `index`."""
        other = copy.copy(self)
        other.node = self.cluster.nodes[index]
        return other

    # ------------------------------------------------------------ the node

    def sh(self, command: str, check: bool = True, timeout: float = 120) -> str:
        result = self.cluster.ssh(self.node, command, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{command!r}: {result.returncode} {result.stderr}")
        return result.stdout

    def current(self) -> str | None:
        out = self.sh(f"readlink {ROOT}/current || true").strip()
        return Path(out).name if out else None

    def manifest(self, release: str) -> dict:
        return json.loads(self.sh(f"cat {ROOT}/releases/{release}/manifest.json"))

    def ledger(self) -> list[dict]:
        out = self.sh(f"cat {ROOT}/ledger.jsonl 2>/dev/null || true")
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def service_state(self) -> str:
        return self.sh(f"systemctl is-active {SERVICE}.service || true").strip()

    def serving_process_release(self) -> str | None:
        out = self.sh(
            f"pid=$(systemctl show -p MainPID --value {SERVICE}.service); "
            f"[ \"$pid\" != 0 ] && sudo -n tr '\\0' ' ' < /proc/$pid/cmdline || true"
        )
        marker = f"{ROOT}/releases/"
        if marker not in out:
            return None
        return out.split(marker, 1)[1].split("/", 1)[0]

    def answers(self) -> str:
        """Ask the server over HTTP from the controller: the model list and a completion."""
        base = f"http://{self.node.address}:{self.port}"
        with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as response:
            models = json.loads(response.read())
        body = json.dumps(
            {
                "model": models["data"][0]["id"],
                "prompt": "The capital of France is",
                "max_tokens": 8,
                "temperature": 0,
            }
        ).encode()
        request = urllib.request.Request(
            f"{base}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=20) as response:
            text = json.loads(response.read())["choices"][0]["text"]
        assert text.strip(), "empty completion"
        return text

    def serves(self, release: str) -> str:
        """`release` is current, its process serves, and it answers over HTTP."""
        assert self.current() == release, (self.current(), release)
        assert self.service_state() == "active"
        assert self.serving_process_release() == release
        return self.answers()

    # ------------------------------------------------------------ nothing lost

    def snapshot(self) -> dict:
        serving = self.current()
        digest = "sha256sum | cut -c1-16"
        tree = (
            f"cd {ROOT}/releases/{serving} && sudo -n find . -name __pycache__ -prune -o "
            f"-name manifest.json -prune -o -type f -printf '%P %s %T@\\n' | sort | {digest}"
        )
        script = "\n".join(
            [
                "set -e",
                f'echo "models $(sudo -n find {MODELS} -type f -print0 | sort -z '
                f'| sudo -n xargs -0 sha256sum | {digest})"',
                f'for r in $(ls {ROOT}/releases 2>/dev/null); do echo "release $r"; done',
                f'echo "tree $({tree})"' if serving else "true",
                "for v in $(sudo -n ls /var/log/specdeploy/validation 2>/dev/null); do "
                'echo "result $v"; done',
                f"for m in $(sudo -n find {CACHE}/compile -name warm-marker 2>/dev/null); do "
                f'echo "cache $m $(sudo -n cat $m | {digest})"; done',
            ]
        )
        out = self.sh(script)
        snap: dict = {
            "serving": serving,
            "releases": [],
            "results": set(),
            "caches": {},
            "ledger": self.ledger(),
        }
        for line in out.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "release":
                snap["releases"].append(rest)
            elif kind == "result":
                snap["results"].add(rest)
            elif kind == "cache":
                path, digest = rest.split()
                snap["caches"][path] = digest
            elif kind in ("models", "tree"):
                snap[kind] = rest
        snap["history"] = history_rows(self.reports / "history.sqlite")
        return snap

    def nothing_lost(self, before: dict, run: Run | None = None) -> str:
        """After a run: nothing lost. A successful run prunes by design (never current nor
        the one before it, keep specdeploy_keep_releases): what its prune step removed is
        allowed to be gone, and nothing else."""
        after = self.snapshot()
        assert after["models"] == before["models"], "model files changed"
        pruned = run.pruned() if run is not None and run.rc == 0 else set()
        missing = set(before["releases"]) - set(after["releases"]) - pruned
        assert not missing, f"releases lost: {missing}"
        if before.get("tree") and after["serving"] == before["serving"]:
            assert after["tree"] == before["tree"], "the serving release's files changed"
        assert after["ledger"][: len(before["ledger"])] == before["ledger"], "ledger rewritten"
        for path, digest in before["caches"].items():
            assert after["caches"].get(path) == digest, f"cache lost: {path}"
        assert after["history"] >= before["history"], "validation history lost"
        assert after["results"] >= before["results"], "validation results on the node lost"
        return (
            f"models, {len(before['releases'])} earlier releases, ledger "
            f"({len(before['ledger'])} entries), validation history ({len(before['history'])} "
            f"runs; {len(before['results'])} results on the node) and the serving release's "
            "compile cache intact"
        )


def history_rows(db: Path) -> set[str]:
    if not db.is_file():
        return set()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return {row[0] for row in conn.execute("SELECT run_id FROM runs")}


def first_release_of(run: Run) -> str:
    """The release the run planned (the plan's release object, whatever its task is called)."""
    for _name, result in run.results():
        release = (result.get("ansible_facts") or {}).get("specdeploy_release")
        if isinstance(release, dict) and release.get("id"):
            return str(release["id"]).strip()
    raise AssertionError(f"the run planned no release (exit {run.rc}): {run.message}")


def probes_of(run: Run) -> int:
    """How many readiness probes the failure message says were made ("(N probes)")."""
    found = re.search(r"\((\d+) probes?[,)]", run.message)
    assert found, f"no probe count in {run.message!r}"
    return int(found.group(1))


def record(
    key: str, run: Run | None, serving: str, lost: str, traffic: dict | None = None, **extra: str
) -> None:
    """One row of the table, after the case's assertions passed. `traffic`: the requests sent
    through the balancer during the case (livetraffic.summarize), for the request columns."""
    assert key in ROWS, key
    observed = []
    if run is not None:
        message = run.message.replace("\n", " ").replace("|", "/")
        observed.append(f"exit {run.rc} after {run.seconds:.0f} s")
        if message:
            observed.append(f"“{message[:420]}{'…' if len(message) > 420 else ''}”")
    observed += [v for v in extra.values() if v]
    observed.append(serving)
    observed.append(lost)
    RECORDED[key] = {"observed": "; ".join(observed).replace("|", "/")}
    if traffic is not None:
        RECORDED[key]["traffic"] = {
            k: traffic[k] for k in ("sent", "completed", "failed", "cut", "p99_ms", "operation_s")
        }


# ---------------------------------------------------------------- the table


@contextlib.contextmanager
def results_lock():
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def finish_group(group: str, outcomes: dict[str, str]) -> None:
    """Write this group's rows (build/faults/<group>.json), then render docs/faults.md."""
    with results_lock():
        path = RESULTS / f"{group}.json"
        rows = dict(RECORDED)
        if REUSE and path.is_file():  # single cases re-run: their rows replace the old ones
            rows = {**json.loads(path.read_text()).get("rows", {}), **rows}
        data = {
            "group": group,
            "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rows": rows,
            "tests": outcomes,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
        DOCS.write_text(render_table())


def render_table(results: Path = RESULTS) -> str:
    """docs/faults.md from every group's file, rows in the order of ROWS."""
    groups = {}
    for group in GROUPS:
        with contextlib.suppress(OSError, ValueError):
            groups[group] = json.loads((results / f"{group}.json").read_text())
    runs = "; ".join(
        f"`{g}` ({GROUPS[g]}): {groups[g]['finished'] if g in groups else 'not run'}"
        for g in GROUPS
    )
    lines = [
        "# Fault injection: what each fault does to a deploy",
        "",
        "GENERATED by the fault-injection suite (`tests/integration/faults/`, part of "
        "`make test`; alone: `make test-faults`) from build/faults/<group>.json; do not edit.",
        "Each group runs as a pytest session of its own on its own sandbox node "
        "(systemd-nspawn, real SSH and systemd, the vLLM 0.16.0 wheel, its Python files the "
        "real ones and its compiled kernels emptied, patched per release, the stand-in server "
        "in place of the GPU server). Every row is a real fault "
        "injected on the node; *observed* is what the run printed and what the suite then "
        f"found on the node. Last runs: {runs}.",
        "",
        "Request columns (group `traffic`: two nodes behind the sandbox's HAProxy, two client "
        "threads streaming chat requests through it before, during and after the fault; "
        "`-` for the one-node groups, which run no traffic): requests *sent*, *completed*, "
        "*failed* (refused before the answer began) and *cut* (the stream ended without "
        "`[DONE]`), and the p99 latency of the completed ones before / during / after the "
        "fault (ms; the stand-in on a loaded CI machine, not a GPU figure).",
        "",
        "| # | fault | expected | observed | sent | completed | failed | cut "
        "| p99 before / during / after (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for number, (key, (group, fault, expected)) in enumerate(ROWS.items(), 1):
        row = groups.get(group, {}).get("rows", {}).get(key)
        requests = "| - | - | - | - | - |"
        if row:
            observed = row["observed"]
            if row.get("traffic"):
                t = row["traffic"]
                p99 = " / ".join(
                    "-" if t["p99_ms"].get(k) is None else str(t["p99_ms"][k])
                    for k in ("before", "during", "after")
                )
                requests = (
                    f"| {t['sent']} | {t['completed']} | {t['failed']} | {t['cut']} | {p99} |"
                )
        else:
            observed = (
                f"**NOT OBSERVED** in the last run of group `{group}` (its case failed or did "
                f"not run; see build/test-logs/test_faults_{group}.log)"
            )
        lines.append(f"| {number} | {fault} | {expected} | {observed} {requests}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- checks on the node


def assert_is_release(node: Player, release: str) -> None:
    """The node is exactly what the release was: unit, environment, caches, patch state."""
    installed = node.sh(f"sudo -n sha256sum {UNIT}").split()[0]
    rendered = node.sh(
        f"sudo -n sha256sum {ROOT}/releases/{release}/config/{SERVICE}.service"
    ).split()[0]
    assert installed == rendered
    unit = node.sh(f"cat {UNIT}")
    assert f"EnvironmentFile={ROOT}/releases/{release}/config/vllm.env" in unit
    env = node.sh(f"cat {ROOT}/releases/{release}/config/vllm.env")
    cache = [
        line.split("=", 1)[1] for line in env.splitlines() if line.startswith("VLLM_CACHE_ROOT=")
    ]
    assert cache and node.sh(f"sudo -n test -d {cache[0]} && echo ok").strip() == "ok"
    version = node.manifest(release)["vllm_version"]
    status = json.loads(
        node.sh(
            f"cd {ROOT}/releases/{release} && sudo -n env PYTHONPATH=toolkit venv/bin/python -m "
            f"specdeploy.node.patching.patches status --version {version} --manifest "
            f"toolkit/patches/vllm/manifest.yml --backup-dir patch-backups --json"
        )
    )
    assert status["state"] == "applied" and status["verified"], status


def wait_until(predicate, timeout: float, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if predicate():
                return
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.5)


def init_started(node: Player) -> str:
    """When the node's PID 1 started (host clock ticks): another value means another boot."""
    result = node.cluster.ssh(node.node, "cut -d' ' -f22 /proc/1/stat", timeout=20)
    return result.stdout.strip() if result.returncode == 0 else ""


def deploy_base(node: Player, ids: dict) -> None:
    """Release A: the group's base, serving, with a warm compile cache and a validation run in
    the controller's history (every fault after it must leave both intact)."""
    run = node()
    assert run.rc == 0, run.message
    ids["A"] = first_release_of(run)
    node.serves(ids["A"])
    cache = node.sh(f"grep -oP '^VLLM_CACHE_ROOT=\\K.*' {ROOT}/releases/{ids['A']}/config/vllm.env")
    node.sh(f"echo warm | sudo -n tee {cache.strip()}/warm-marker >/dev/null")
    # Only the history entry counts here, not the speed: a baseline far under the stand-in's
    # throughput keeps the one gate that measures time out of it (ci31: this validate failed
    # once on a loaded machine, most likely its speed-up against the group's 400 tok/s), and a
    # wide regression tolerance keeps the comparison with the deploy's validation a minute
    # earlier out of it (ci53: tok/s more than 10% under it on loaded cores, REGRESS, exit 1;
    # test_validate's pass case had the same in stop 41's CI).
    validated = node(
        "playbooks/validate.yml",
        {"validation_baseline_tps": 100, "validation_regression_tolerance": 0.5},
    )
    assert validated.rc == 0, (validated.message, validated.stdout[-6000:])
    snap = node.snapshot()
    assert snap["caches"] and snap["history"] and snap["results"]
