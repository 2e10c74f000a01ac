"""Rollback, automatic rollback and the fault-injection suite (issue 7), on one sandbox node.

Every fault is injected for real on a sandbox node (real SSH, real systemd, the real vLLM 0.16
wheel patched in each release venv, the stand-in server in place of the GPU server). Each case
asserts the message the operator sees, the exit code, which release serves afterwards (asked
over HTTP from the controller), and that nothing was lost: model files, earlier releases, the
serving release's files, the ledger (append-only), the validation history and the serving
release's compile cache. The results table is written to docs/faults.md at the end.

Budget (make test, 2 cores): the module keeps its own release root, service and port on node1
(other modules' deploys on the same node do not interfere), the cases run in order and reuse
releases: a release that failed while serving is deployed again as it is (no rebuild), so only
releases whose inputs differ cost a venv install. Deploys after the first skip the provisioning
and hardware-doctor plays (`--skip-tags provision,hardware`: unchanged, already run; the first
deploy provisions). Timeouts are shortened for the stand-in (start 20 s, probe 3 s, settle 3 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "tests" / "standin" / "profiles"
DOCS = REPO / "docs" / "faults.md"
ROOT = "/opt/specdeploy-faults"
CACHE = "/var/cache/specdeploy-faults"
SERVICE = "vllm-faults"
PORT = 18777
UNIT = f"/etc/systemd/system/{SERVICE}.service"
MODELS = "/srv/models"
LOCKS = "/run/lock/specdeploy/opt_specdeploy-faults"  # the node's deploy lock for ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


def profile(name: str, **changes) -> dict:
    return {**json.loads((PROFILES / f"{name}.json").read_text()), **changes}


PASS = profile("pass")
# crash, speed-up and reboot cases (one build; a 6 s start-up gives the reboot a wait to hit)
B_PROFILE = profile("pass", startup_delay_s=6.0)
C_PROFILE = profile("pass", max_request_s=9.7)  # the dropped-SSH case and the rollbacks
DRIFT_PROFILE = profile("pass", max_request_s=9.0)  # drift and disk-full cases (never built)

ROWS: list[dict] = []  # the table of docs/faults.md
# Development only: keep the node's state from an earlier run (with SPECDEPLOY_SANDBOX_KEEP=1)
# and run single cases again; their rows replace the same faults' rows in docs/faults.md.
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
        found = [r for name, r in self.results() if fragment in name]
        assert found, f"no task like {fragment!r} ran"
        return found[-1]

    def seconds_of(self, fragment: str) -> float:
        """How long the first task whose name contains `fragment` took (JSON callback)."""
        from datetime import datetime

        for play in (self.report or {}).get("plays", []):
            for task in play["tasks"]:
                if fragment in task["task"]["name"]:
                    span = task["task"]["duration"]
                    start, end = (
                        datetime.fromisoformat(span[k].replace("Z", "+00:00"))
                        for k in ("start", "end")
                    )
                    return (end - start).total_seconds()
        raise AssertionError(f"no task like {fragment!r} ran")

    def ran(self, fragment: str) -> bool:
        return any(fragment in name and not r.get("skipped") for name, r in self.results())

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
    def __init__(self, cluster, workdir: Path) -> None:
        self.cluster = cluster
        self.node = cluster.nodes[0]
        self.inventory = Path(cluster.inventory).parent
        self.workdir = workdir
        self.reports = workdir / "reports"
        self.provisioned = False
        self.common = {
            "specdeploy_root": ROOT,
            "specdeploy_cache_dir": CACHE,
            "specdeploy_service_name": SERVICE,
            "specdeploy_port": PORT,
            "specdeploy_keep_releases": 6,
            "specdeploy_start_timeout_s": 20,
            "vllm_service_probe_timeout_s": 3,
            "rollback_settle_s": 3,
            "validation_baseline_tps": 400,
            "validation_max_requests": 6,
            "validation_report_root": str(self.reports),
            "specdeploy_standin_profile": PASS,
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
        out = open(self.workdir / f"bg-{time.monotonic_ns()}.out", "w+")  # noqa: SIM115
        proc = subprocess.Popen(
            self.command(playbook, extra, args),
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

    def make(self, target: str, extra: dict | None = None, **make_vars: str) -> Run:
        """A Makefile target, as the operator types it (make rollback TO=...)."""
        vars_file = self.workdir / f"vars-{time.monotonic_ns()}.json"
        vars_file.write_text(json.dumps({**self.common, **(extra or {})}))
        command = ["make", "-s", target, f"INVENTORY={self.inventory}", f"EXTRA=-e @{vars_file}"]
        command += [f"{k}={v}" for k, v in make_vars.items()]
        started = time.monotonic()
        proc = subprocess.run(
            command, capture_output=True, text=True, env=self.env(), cwd=REPO, timeout=600
        )
        run = Run(
            proc.returncode, parse_report(proc.stdout), proc.stdout, time.monotonic() - started
        )
        assert run.report is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
        return run

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
        base = f"http://{self.node.address}:{PORT}"
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
        pruned = set()
        if run is not None and run.rc == 0 and run.ran("Prune old releases"):
            pruned = set(json.loads(run.task("Prune old releases")["stdout"])["removed"])
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
    for name, result in run.results():
        if name.endswith("Compute the release id and the code fingerprint"):
            return result["ansible_facts"]["preflight_release_id"].strip()
    raise AssertionError(f"the run planned no release (exit {run.rc}): {run.message}")


def record(fault: str, expected: str, run: Run | None, serving: str, lost: str, **extra) -> None:
    observed = []
    if run is not None:
        message = run.message.replace("\n", " ").replace("|", "/")
        observed.append(f"exit {run.rc} after {run.seconds:.0f} s")
        if message:
            observed.append(f"“{message[:420]}{'…' if len(message) > 420 else ''}”")
    observed += [v for v in extra.values() if v]
    observed.append(serving)
    observed.append(lost)
    ROWS.append({"fault": fault, "expected": expected, "observed": "; ".join(observed)})


def merged_rows() -> list[dict]:
    """SPECDEPLOY_FAULTS_REUSE=1 re-runs single cases: their rows replace the same faults'."""
    if not REUSE or not DOCS.is_file():
        return ROWS
    old = []
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[0].isdigit():
            old.append({"fault": cells[1], "expected": cells[2], "observed": cells[3]})
    fresh = {row["fault"]: row for row in ROWS}
    out = [fresh.pop(row["fault"], row) for row in old]
    return out + list(fresh.values())


def write_docs() -> None:
    rows = merged_rows()
    lines = [
        "# Fault injection: what each fault does to a deploy",
        "",
        "GENERATED by `tests/integration/test_faults.py` (`make test-faults`); do not edit.",
        f"Last run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, one sandbox node "
        "(systemd-nspawn, real SSH and systemd, the real vLLM 0.16.0 wheel patched per release, "
        "the stand-in server in place of the GPU server). Every row is a real fault injected on "
        "the node; *observed* is what the run printed and what the suite then found on the node."
        + (
            " Rows of cases re-run alone (SPECDEPLOY_FAULTS_REUSE=1) replace earlier rows."
            if REUSE
            else ""
        ),
        "",
        "| # | fault | expected | observed |",
        "|---|---|---|---|",
    ]
    for i, row in enumerate(rows, 1):
        lines.append(f"| {i} | {row['fault']} | {row['expected']} | {row['observed']} |")
    DOCS.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def node(sandbox, tmp_path_factory):
    cluster = sandbox(1)
    player = Player(cluster, tmp_path_factory.mktemp("faults"))
    stage = subprocess.run(
        [
            str(REPO / ".venv/bin/ansible-playbook"),
            "-i",
            str(player.inventory),
            str(REPO / "tests/playbooks/stage-models.yml"),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
        cwd=REPO,
        check=False,
    )
    assert stage.returncode == 0, stage.stdout[-2000:]
    if REUSE:  # development only: continue on the node a previous run left
        player.provisioned = True
    else:
        player.sh(
            f"sudo -n systemctl disable --now {SERVICE} 2>&1; "
            f"sudo -n rm -rf {ROOT} {CACHE} {UNIT}; "
            "sudo -n systemctl daemon-reload; true"
        )
    yield player
    write_docs()
    player.sh(f"sudo -n systemctl disable --now {SERVICE} 2>/dev/null; true", check=False)


class Ids(dict):
    """Release ids by role (A, B, C, ...); kept in a file for SPECDEPLOY_FAULTS_REUSE=1."""

    FILE = Path(os.environ.get("TMPDIR", "/tmp")) / "specdeploy-faults-ids.json"

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        self.FILE.write_text(json.dumps(self))


@pytest.fixture(scope="module")
def ids() -> dict:
    found = Ids()
    if REUSE and Ids.FILE.is_file():
        found.update(json.loads(Ids.FILE.read_text()))
    return found


# ---------------------------------------------------------------- the cases, in order


def test_first_deploy_that_fails_stops_the_server(node, ids):
    """Smoke text wrong on the very first deploy: nothing to go back to -> stopped."""
    run = node(extra={"specdeploy_standin_profile": profile("wrong-text")})
    ids["W"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "did not become ready within" in run.message
    assert "no earlier release to go back to: the server is stopped" in run.message
    assert node.service_state() in ("inactive", "failed")
    assert node.current() is None
    manifest = node.manifest(ids["W"])
    assert manifest["status"] == "failed" and "did not become ready" in manifest["failure_reason"]
    assert node.ledger()[-1]["action"] == "failed-first-deploy"
    record(
        "smoke text wrong (first deploy, nothing earlier)",
        "stop the server, remove `current`, mark the release failed, exit non-zero",
        run,
        "nothing serves (service inactive, no `current`)",
        f"release {ids['W']} kept, status failed",
    )

    # `make rollback` with nothing to go back to: a clear refusal, nothing changed.
    before = node.ledger()
    refused = node.make("rollback")
    assert refused.rc != 0
    assert "REFUSED" in refused.message and "no earlier release to go back to" in refused.message
    assert "Nothing was changed" in refused.message
    assert node.ledger() == before and node.current() is None
    record(
        "`make rollback` with no earlier release",
        "refuse with a clear message, change nothing",
        refused,
        "nothing serves (as before)",
        "ledger unchanged",
    )


def test_base_release_deploys_and_serves(node, ids):
    run = node()
    assert run.rc == 0, run.message
    ids["A"] = first_release_of(run)
    node.serves(ids["A"])
    # A warm compile cache of the serving release: must survive every fault below.
    cache = node.sh(f"grep -oP '^VLLM_CACHE_ROOT=\\K.*' {ROOT}/releases/{ids['A']}/config/vllm.env")
    node.sh(f"echo warm | sudo -n tee {cache.strip()}/warm-marker >/dev/null")
    # `make validate` records the run in the controller's history: it must survive every fault.
    validated = node("playbooks/validate.yml")
    assert validated.rc == 0, validated.message
    snap = node.snapshot()
    assert snap["caches"] and snap["history"] and snap["results"]


def test_concurrent_deploy_is_refused_and_never_healthy_rolls_back(node, ids):
    before = node.snapshot()
    first = node.start(extra={"specdeploy_standin_profile": profile("never-healthy")})
    deadline = time.monotonic() + 300
    while not node.sh(f"test -e {LOCKS}/.deploy.lock && echo held || true").strip():
        assert first.poll() is None, "the first deploy ended before it took the lock"
        assert time.monotonic() < deadline, "the first deploy never took the lock"
        time.sleep(0.5)
    ledger_before = node.ledger()
    second = node()
    assert second.rc == 2
    assert "REFUSED: another run holds the deploy lock" in second.message
    assert f"ansible-playbook pid {first.pid}" in second.message
    assert "changed nothing" in second.message
    assert second.stats().get("changed", 0) == 0
    assert node.ledger() == ledger_before
    assert not second.ran("Build the release (venv")
    record(
        "concurrent second deploy",
        "refused at once by the node's deploy lock, naming the holder; nothing changed",
        second,
        "the first deploy went on (below)",
        "no task changed anything",
    )

    run = node.finish(first)
    ids["NH"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "did not become ready within" in run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    answer = node.serves(ids["A"])
    assert node.manifest(ids["NH"])["status"] == "failed"
    assert node.sh(f"test -e {LOCKS}/.deploy.lock && echo held || true").strip() == ""
    record(
        "server never becomes healthy (/health 503)",
        "readiness times out; roll back; mark failed; exit non-zero",
        run,
        f"release A={ids['A']} serves and answers ({answer.strip()[:30]!r})",
        node.nothing_lost(before),
    )


def test_port_open_but_not_answering_rolls_back(node, ids):
    before = node.snapshot()
    run = node(extra={"specdeploy_standin_profile": profile("hang")})
    ids["H"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "did not become ready within" in run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    # bounded by wall time (start timeout 20 s + one probe of 3 s), not retries x probe timeout
    waited = run.seconds_of("Wait for readiness")
    assert waited < 20 + 3 + 20, waited  # without the bound: 21 polls x (3 s + overhead)
    node.serves(ids["A"])
    assert node.manifest(ids["H"])["status"] == "failed"
    record(
        "port open but not answering (requests hang)",
        "readiness bounded by wall time (every probe has a timeout); roll back",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
        waited=f"readiness gave up after {waited:.0f} s (start timeout 20 s, probe timeout 3 s)",
    )


def test_crash_after_healthy_rolls_back(node, ids):
    """The new server is killed (SIGKILL) after it became ready, during validation."""
    before = node.snapshot()
    proc = node.start(extra={"specdeploy_standin_profile": B_PROFILE})
    deadline = time.monotonic() + 600
    killed = None
    while killed is None:
        assert proc.poll() is None, "the deploy ended before the new server served"
        assert time.monotonic() < deadline
        current = node.current()
        # after readiness passed: the deploy records the start in the manifest, then validates
        if current and current != ids["A"] and node.manifest(current).get("starts"):
            pid = node.sh(f"systemctl show -p MainPID --value {SERVICE}.service").strip()
            node.sh(f"sudo -n kill -9 {pid}")
            killed = current
        time.sleep(0.2)
    run = node.finish(proc)
    ids["B"] = first_release_of(run)
    assert killed == ids["B"]
    assert run.rc == 2, run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    assert "did not become ready" not in run.message  # it had: the crash came after
    assert (
        "did not stay up" in run.message
        or "could not measure" in run.message
        or "stopped answering" in run.message
    ), run.message
    node.serves(ids["A"])
    assert node.manifest(ids["B"])["failure_stage"] == "serve"
    record(
        "server crashes after becoming healthy (SIGKILL during validation)",
        "the settle check (same process, no restart) or validation fails; roll back",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_speed_up_below_one_rolls_back(node, ids):
    """B again (reused as it is), measured against a no-speculation baseline it cannot beat."""
    before = node.snapshot()
    run = node(extra={"specdeploy_standin_profile": B_PROFILE, "validation_baseline_tps": 2000})
    assert run.rc == 2, run.message
    if first_release_of(run) == ids["B"]:  # (unless the toolkit was edited meanwhile)
        assert not node.manifest(ids["B"])["history"][0].get("previous_status")  # not rebuilt
        assert run.seconds_of("Install the pinned vLLM") < 30  # reused, nothing installed
    assert "speed" in run.message.lower() and "failed a check or gate" in run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    node.serves(ids["A"])
    record(
        "speed-up below 1.0 (baseline 2000 tok/s without speculation)",
        "the speed-up gate fails; roll back (policy rollback, the default)",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_low_acceptance_with_policy_disable_speculation(node, ids):
    before = node.snapshot()
    run = node(
        extra={
            "specdeploy_standin_profile": profile("low-acceptance"),
            "rollback_failed_gate_policy": "disable_speculation",
        }
    )
    ids["LOW"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "acceptance" in run.message.lower() and "failed a check or gate" in run.message
    assert "rollback_failed_gate_policy=disable_speculation" in run.message
    nospec = node.current()
    assert nospec not in (ids["LOW"], ids["A"])
    ids["NOSPEC"] = nospec
    node.serves(nospec)
    unit = node.sh(f"cat {UNIT}")
    assert "--speculative-config" not in unit
    assert unit == node.sh(f"cat {ROOT}/releases/{nospec}/config/{SERVICE}.service")
    manifest = node.manifest(nospec)
    assert manifest["inputs"]["speculative_config"] is None
    assert manifest["speculation_disabled"]["derived_from"] == ids["LOW"]
    assert node.manifest(ids["LOW"])["status"] == "failed"
    with urllib.request.urlopen(f"http://{node.node.address}:{PORT}/metrics", timeout=10) as r:
        assert "spec_decode" not in r.read().decode()
    record(
        "acceptance below the floor, rollback_failed_gate_policy=disable_speculation",
        "keep the inputs with speculation off as a NEW release, smoke only; exit non-zero",
        run,
        f"new release {nospec} (no --speculative-config) serves and answers",
        node.nothing_lost(before),
    )


def test_make_rollback_to_a_named_release(node, ids):
    before = node.snapshot()
    run = node.make("rollback", TO=ids["A"])
    assert run.rc == 0, run.message
    node.serves(ids["A"])
    assert_is_release(node, ids["A"])
    last = node.ledger()[-1]
    assert (last["action"], last["release"], last["previous"]) == (
        "rollback",
        ids["A"],
        ids["NOSPEC"],
    )
    assert node.manifest(ids["A"])["last_rollback"]["from"] == ids["NOSPEC"]
    record(
        "`make rollback TO=<A>` (from the release without speculation)",
        "switch, restart, readiness, smoke; unit, env, patch state of A verified; ledger",
        run,
        "release A serves and answers; installed unit == A's rendered unit; patches applied",
        node.nothing_lost(before),
    )


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
            f"specdeploy.patches status --version {version} --manifest "
            f"toolkit/patches/vllm/manifest.yml --backup-dir patch-backups --json"
        )
    )
    assert status["state"] == "applied" and status["verified"], status


def test_patch_target_drifted_is_refused_before_the_switch(node, ids):
    """A vLLM build whose patched file was hand-edited (a local hotfix) is in the wheelhouse."""
    drift = "/srv/wheelhouse-drift"
    node.sh(
        f"sudo -n mkdir -p {drift} && cd {drift} && "
        "for w in /srv/wheelhouse/*.whl; do case $w in */vllm-*) ;; "
        "*) sudo -n ln -sf $w . ;; esac; done && sudo -n cp /srv/wheelhouse/vllm-0.16.0-*.whl . && "
        "sudo -n python3 - <<'EOF'\n"
        "import glob, zipfile\n"
        "wheel = glob.glob('vllm-0.16.0-*.whl')[0]\n"
        "with zipfile.ZipFile(wheel) as z:\n"
        "    text = z.read('vllm/config/speculative.py').decode()\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "with zipfile.ZipFile(wheel, 'a') as z:  # a later entry of the same name wins on install\n"
        "    z.writestr('vllm/config/speculative.py', text + '\\n# local hotfix by hand\\n')\n"
        "EOF",
        timeout=300,
    )
    before = node.snapshot()
    run = node(
        extra={"specdeploy_standin_profile": DRIFT_PROFILE, "specdeploy_vllm_wheelhouse": drift}
    )
    ids["DRIFT"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "FAILED before the switch" in run.message
    assert "drift" in run.message.lower() and "config/speculative.py" in run.message
    assert f"release {ids['A']} still serves and answered its smoke check" in run.message
    assert not run.ran("Activate the release and wait")
    node.serves(ids["A"])
    manifest = node.manifest(ids["DRIFT"])
    assert manifest["status"] == "failed" and manifest["failure_stage"] == "build"
    record(
        "patch target drifted (vllm/config/speculative.py hand-edited in the installed build)",
        "the patcher refuses (drift), nothing switched, release marked failed (build)",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_disk_full_on_the_release_root(node, ids):
    """A 64 MB tmpfs where the release is built: the vLLM install runs out of space."""
    target = f"{ROOT}/releases/{ids['DRIFT']}"
    node.sh(f"sudo -n mount -t tmpfs -o size=64m specdeploy-full {target}")
    try:
        before = node.snapshot()
        run = node(extra={"specdeploy_standin_profile": DRIFT_PROFILE})
        assert first_release_of(run) == ids["DRIFT"]
        assert run.rc == 2, run.message
        assert "No space left on device" in run.message, run.message
        assert "FAILED before the switch" in run.message
        assert f"release {ids['A']} still serves and answered its smoke check" in run.message
        node.serves(ids["A"])
        record(
            "disk full on the release root (64 MB tmpfs at the release's directory)",
            "the build fails with ENOSPC, nothing switched, the serving release untouched",
            run,
            "release A serves and answers",
            node.nothing_lost(before),
        )
    finally:
        node.sh(f"sudo -n umount {target}", check=False)


@pytest.mark.parametrize(
    ("fault", "extra", "message"),
    [
        ("unsupported vLLM version", {"specdeploy_vllm_version": "0.14.0"}, "is not supported"),
        (
            "malformed speculative config: unknown key",
            {
                "specdeploy_speculative_config": {
                    "method": "eagle3",
                    "model": "/srv/models/tiny-dsv3-eagle3",
                    "num_speculative_tokens": 3,
                    "draft_model_typo": 2,
                }
            },
            "does not accept: draft_model_typo",
        ),
        (
            "malformed speculative config: zero tokens",
            {
                "specdeploy_speculative_config": {
                    "method": "eagle3",
                    "model": "/srv/models/tiny-dsv3-eagle3",
                    "num_speculative_tokens": 0,
                }
            },
            "an integer > 0",
        ),
        (
            "drafter incompatible (llama-3.1-8B EAGLE-3 drafter for the DeepSeek-V3 target)",
            {"specdeploy_drafter_path": "/srv/models/faults-wrong-drafter"},
            "does not fit the target",
        ),
    ],
)
def test_input_faults_are_refused_before_anything_changes(node, ids, fault, extra, message):
    if "drafter_path" in str(extra):
        config = REPO / "tests/fixtures/drafters/eagle3-llama3.1-8b-yuhuili-like/config.json"
        node.sh(
            "sudo -n mkdir -p /srv/models/faults-wrong-drafter && "
            f"echo {shlex.quote(config.read_text())} | "
            "sudo -n tee /srv/models/faults-wrong-drafter/config.json >/dev/null"
        )
        extra = {
            **extra,
            "specdeploy_speculative_config": {
                "method": "eagle3",
                "model": "/srv/models/faults-wrong-drafter",
                "num_speculative_tokens": 3,
            },
        }
    before = node.snapshot()
    run = node(extra=extra)
    assert run.rc == 2
    assert message in run.message, run.message
    assert not run.ran("Take the deploy lock")  # stopped in the first play
    assert node.snapshot()["releases"] == before["releases"]
    node.serves(ids["A"])
    record(
        fault,
        "refused by the preflight naming the variable, the value and what is allowed; "
        "nothing changed",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_ssh_dropped_mid_deploy_then_rerun_converges(node, ids):
    """ansible-playbook is killed during the vLLM install; the re-run converges."""
    before = node.snapshot()
    proc = node.start(extra={"specdeploy_standin_profile": C_PROFILE})
    deadline = time.monotonic() + 600
    probe = f"ls -d {ROOT}/releases/*/venv/lib/python3*/site-packages/vllm 2>/dev/null || true"
    known = set(node.sh(probe).split())
    while not (set(node.sh(probe).split()) - known):
        assert proc.poll() is None, "the deploy ended before the vLLM install"
        assert time.monotonic() < deadline
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run and its SSH connections, by its id
    killed = node.finish(proc)
    assert killed.rc == -signal.SIGKILL
    half = [r for r in node.sh(f"ls {ROOT}/releases").split() if r not in before["releases"]]
    assert len(half) == 1
    ids["C"] = half[0]
    assert node.manifest(ids["C"])["status"] == "building"  # never selectable
    assert node.sh(f"test -e {LOCKS}/.deploy.lock && echo held").strip() == "held"  # stale now
    node.serves(ids["A"])  # no half-built release selected

    run = node(extra={"specdeploy_standin_profile": C_PROFILE})
    assert run.rc == 0, run.message
    assert "broke a stale deploy lock" in json.dumps(run.task("Say that a stale lock was broken"))
    planned = first_release_of(run)
    if planned == ids["C"]:
        history = node.manifest(ids["C"])["history"]
        assert history[0]["previous_status"] == "building"  # rebuilt from scratch
    else:  # the toolkit was edited meanwhile (a shared tree): another id, the half one unused
        assert node.manifest(ids["C"])["status"] == "building"
        ids["C"] = planned
    node.serves(ids["C"])
    assert_is_release(node, ids["C"])
    record(
        "SSH connection dropped mid-deploy (ansible-playbook killed during the vLLM install)",
        "nothing half-built is selected; the re-run breaks the stale lock, rebuilds, converges",
        run,
        f"during: A still served; after the re-run: release C={ids['C']} serves and answers",
        node.nothing_lost(before, run),
        killed="first run killed (SIGKILL) while pip installed vLLM; lock left stale",
    )


def test_rollback_and_roll_forward_follow_the_ledger(node, ids):
    before = node.snapshot()
    back = node.make("rollback")
    assert back.rc == 0, back.message
    node.serves(ids["A"])
    assert_is_release(node, ids["A"])
    forward = node.make("rollback")
    assert forward.rc == 0, forward.message
    node.serves(ids["C"])
    assert_is_release(node, ids["C"])
    tail = node.ledger()[-3:]
    assert [e["release"] for e in tail] == [ids["C"], ids["A"], ids["C"]]
    assert [e["action"] for e in tail[1:]] == ["rollback", "rollback"]
    record(
        "`make rollback`, then `make rollback` again (rollback of a rollback)",
        "back to the ledger's previous release, then forward again; each verified",
        forward,
        "A served after the first, C serves after the second and answers",
        node.nothing_lost(before, forward),
    )

    ledger = node.ledger()
    # a release that cannot be activated (failed, or half-built), still on the node
    unusable = node.sh(
        'sudo -n python3 -c "import glob, json\n'
        f"for p in sorted(glob.glob('{ROOT}/releases/*/manifest.json')):\n"
        "    m = json.load(open(p))\n"
        "    if m['status'] in ('failed', 'building'): print(m['release_id'], m['status'])\""
    ).split()
    assert unusable, "no failed or half-built release left on the node"
    bad, bad_status = unusable[:2]
    for target, words in ((bad, f"is '{bad_status}'"), ("0.16.0-000000000000", "does not exist")):
        refused = node.make("rollback", TO=target)
        assert refused.rc != 0 and words in refused.message, refused.message
        assert "Nothing was changed" in refused.message
        assert node.ledger() == ledger
    node.serves(ids["C"])
    record(
        "`make rollback TO=<failed or half-built release>` and `TO=<unknown id>`",
        "refuse, saying why (failed: with its reason; unknown: the known ids); nothing changed",
        refused,
        "release C serves and answers",
        "ledger unchanged",
    )


def test_node_rebooted_during_the_readiness_wait(node, ids):
    """B (6 s start-up) is deployed again while C serves; the node reboots during the wait."""
    from specdeploy import sandbox as sb

    before = node.snapshot()
    proc = node.start(extra={"specdeploy_standin_profile": B_PROFILE})
    deadline = time.monotonic() + 600
    while True:  # restarted on the new release: readiness is being waited for (6 s start-up)
        assert proc.poll() is None, "the deploy ended before the restart"
        assert time.monotonic() < deadline
        serving = node.serving_process_release()
        if serving and serving != before["serving"] and node.current() == serving:
            break
        time.sleep(0.2)
    ids["B"] = serving
    node.sh("sudo -n systemctl reboot", check=False, timeout=20)
    run = node.finish(proc)
    assert run.rc in (2, 4), run.message  # the node went away under the run
    assert run.stats().get("unreachable") == 1
    reboot_node(sb, node.node)
    # After the boot, systemd starts the installed unit: B's (current points at B).
    wait_until(lambda: node.service_state() == "active", 60)
    assert node.current() == ids["B"]
    # The lock lived in /run/lock (tmpfs): the reboot removed it, the re-run takes it anew.
    assert node.sh(f"ls -A {LOCKS} 2>/dev/null || true").strip() == ""
    rerun = node(extra={"specdeploy_standin_profile": B_PROFILE})
    assert rerun.rc == 0, rerun.message
    assert rerun.ran("Take the deploy lock on the node")
    node.serves(ids["B"])
    assert_is_release(node, ids["B"])
    record(
        "node rebooted during the readiness wait",
        "the run stops (host unreachable); the boot clears the lock (/run/lock); the re-run "
        "checks and validates the release: converges",
        run,
        "after the re-run: release B serves, validated, and answers",
        node.nothing_lost(before, rerun),
        rerun=f"re-run exit {rerun.rc} after {rerun.seconds:.0f} s",
    )


def wait_until(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if predicate():
                return
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def reboot_node(sb, node) -> None:
    """Boot the node again on the same disk (its overlay's writable layer and host keys).

    A `systemctl reboot` inside a `systemd-nspawn --boot` container makes nspawn exit (status
    133); the sandbox starts nodes without a supervisor that restarts them. This does what
    systemd-nspawn@.service's RestartForceExitStatus=133 would: start it again, same layer.
    """
    deadline = time.monotonic() + 60
    while node.alive():
        sb.reap_children()
        assert time.monotonic() < deadline, "the node did not go down for the reboot"
        time.sleep(0.2)
    with sb.locked():
        sb.clean_nspawn_leftovers([node])
        keep_keys = sb.prepare_layer
        sb.prepare_layer = lambda n, lower: (n.dir / "known_hosts").read_text()
        try:
            sb.start_node(node, sb.rootfs_path(), {})
        finally:
            sb.prepare_layer = keep_keys
        sb.write_known_hosts(sb.running_nodes())
        sb.wait_ready([node], 90)
