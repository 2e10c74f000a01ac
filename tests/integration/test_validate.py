"""`make validate` on a sandbox node with the stand-in: reports, history, baseline, gates.

One node and two releases serve every case: a release with speculation OFF is deployed and
validated first (its no-speculation throughput becomes the node's baseline in the history),
then the speculative release; the cases then degrade the stand-in's behaviour profile of the
serving release in place (as a server that got worse under the same release) and restore it.
Every run writes its own report directory under one per-module report root.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "tests" / "standin" / "profiles"

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


def profile(name: str) -> dict:
    return json.loads((PROFILES / f"{name}.json").read_text())


class Env:
    def __init__(self, cluster, root: Path) -> None:
        self.cluster = cluster
        self.node = cluster.nodes[0]
        self.host = self.node.hostname
        self.inventory = Path(cluster.inventory).parent
        self.root = root  # validation_report_root: history.sqlite, run dirs, latest
        self.history = root / "history.sqlite"
        self.runs = 0
        self.base_url = f"http://{self.node.address}:8000"

    def playbook(self, playbook: str, extra: dict | None = None, timeout: float = 900):
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        extra = {"validation_report_root": str(self.root), **(extra or {})}
        cmd = [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "-i",
            str(self.inventory),
            str(REPO / playbook),
            "-e",
            json.dumps(extra),
        ]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
        )

    def deploy(self, extra: dict) -> subprocess.CompletedProcess[str]:
        proc = self.playbook("deploy.yml", extra)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        return proc

    def validate(self, extra: dict | None = None) -> tuple[int, Path, str]:
        """validate.yml; returns (the exit code make would give, report dir, output)."""
        self.runs += 1
        report = self.root / f"run-{self.runs:02d}"
        exit_file = self.root / f"exit-{self.runs:02d}"
        proc = self.playbook(
            "playbooks/validate.yml",
            {
                "validation_report_dir": str(report),
                "validation_exit_file": str(exit_file),
                **(extra or {}),
            },
        )
        out = proc.stdout + proc.stderr
        assert exit_file.exists(), out[-4000:]
        code = int(exit_file.read_text())
        assert (proc.returncode == 0) == (code == 0), out[-3000:]
        return code, report, out

    def ssh(self, command: str, timeout: float = 120) -> str:
        r = self.cluster.ssh(self.node, command, timeout=timeout)
        assert r.returncode == 0, f"{command}: {r.stdout}{r.stderr}"
        return r.stdout

    def manifest(self) -> dict:
        return json.loads(self.ssh("sudo cat /opt/specdeploy/current/manifest.json"))

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.cluster.ssh(self.node, f"curl -sf -m 2 {self.base_url}/health")
            if r.returncode == 0:
                return
            time.sleep(1)
        pytest.fail(f"{self.base_url}/health not ready after {timeout}s")

    def wait_port(self, timeout: float = 30) -> None:
        host, port = self.node.address, 8000
        probe = f"timeout 2 bash -c 'echo > /dev/tcp/{host}/{port}'"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.cluster.ssh(self.node, probe).returncode == 0:
                return
            time.sleep(0.5)
        pytest.fail(f"{host}:{port} not open after {timeout}s")

    def set_profile(self, prof: dict, wait: bool = True) -> None:
        """Change the serving release's stand-in behaviour in place and restart the server."""
        data = shlex.quote(json.dumps(prof))
        self.ssh(
            f"echo {data} | sudo tee /opt/specdeploy/current/config/standin-profile.json"
            " >/dev/null && sudo systemctl reset-failed vllm.service;"
            " sudo systemctl restart vllm.service"
        )
        if wait:
            self.wait_healthy()
        else:
            self.wait_port()

    def history_rows(self) -> list[dict]:
        conn = sqlite3.connect(self.history)
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY id")]
        conn.close()
        return rows


def gauge(prom: str, name: str, node: str) -> float | None:
    """The value of a node's sample of a gauge in a Prometheus textfile (None: absent)."""
    for line in prom.splitlines():
        if line.startswith(name + "{") and f'node="{node}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def summary(report: Path) -> dict:
    return json.loads((report / "summary.json").read_text())


def only_result(report: Path) -> dict:
    (result,) = summary(report)["results"]
    return result


@pytest.fixture(scope="module")
def env(sandbox, tmp_path_factory):
    cluster = sandbox(1)
    cluster.set_scenario(cluster.nodes[0], "healthy")
    e = Env(cluster, tmp_path_factory.mktemp("reports"))
    staged = e.playbook("tests/playbooks/stage-models.yml")
    assert staged.returncode == 0, staged.stdout[-3000:]
    t0 = time.monotonic()
    # 1. A release without speculation: its deploy gate and validation measure the baseline.
    e.deploy(
        {"specdeploy_speculative_enabled": False, "specdeploy_standin_profile": profile("pass")}
    )
    code, report, out = e.validate({"validation_repeats": 3})
    assert code == 0, out[-3000:]
    e.baseline = only_result(report)
    # 2. The speculative release; its deploy gate already uses the baseline from the history.
    e.deploy({"specdeploy_standin_profile": profile("pass")})
    e.spec_extra = {"specdeploy_standin_profile": profile("pass")}
    e.original_profile = e.ssh("sudo cat /opt/specdeploy/current/config/standin-profile.json")
    # make validate's baseline from the history, as on a real node (the sandbox's group_vars
    # turn it off: under CI load an older figure drifts; this one is minutes old). The
    # regression check's tolerance is wider here: this run's tok/s, a minute after the deploy's
    # (the release's first validated run), measured 10.8% lower on CI's loaded 2 cores (stop 41);
    # the regression check itself is the low-acceptance case's, on a figure that load does not move.
    e.first = e.validate(
        {
            "validation_repeats": 3,
            "validation_baseline_from_history": True,
            "validation_regression_tolerance": 0.5,
        }
    )
    e.setup_s = time.monotonic() - t0
    yield e
    e.ssh(
        f"echo {shlex.quote(e.original_profile)} | sudo tee "
        "/opt/specdeploy/current/config/standin-profile.json >/dev/null"
        " && sudo systemctl reset-failed vllm.service; sudo systemctl restart vllm.service"
    )
    e.wait_healthy()


def test_baseline_run_records_the_no_speculation_throughput(env):
    base = env.baseline
    acc = base["acceptance"]
    assert base["status"] == "pass" and acc["mode"] == "no_spec_baseline"
    assert acc["num_drafts"] in (None, 0) and acc["speed_up"] is None
    assert acc["output_tokens_per_s"]["n"] == 3 and acc["output_tokens_per_s"]["median"] > 0
    rows = [r for r in env.history_rows() if r["run_id"] == base["run_id"]]
    assert len(rows) == 1 and rows[0]["output_tps"] == acc["output_tokens_per_s"]["median"]


def test_pass_writes_every_report_and_the_speed_up_against_the_baseline(env):
    code, report, out = env.first
    assert code == 0, out[-3000:]
    result = only_result(report)
    acc = result["acceptance"]
    assert result["status"] == "pass" and result["node"] == env.host
    # The speed-up, per concurrency level, is against this node's recorded no-spec baseline
    # (the history: same node, model, parallel sizes and GPU), with its spread.
    speed = result["speed"]
    assert speed["baseline_source"] == "history" and speed["status"] == "pass"
    recorded = {lv["concurrency"]: lv["output_tps"] for lv in env.baseline["speed"]["levels"]}
    assert sorted(recorded) == [1, 4]  # the sandbox's validation_concurrency
    for level in speed["levels"]:
        assert level["baseline_tps"] == pytest.approx(recorded[level["concurrency"]])
        assert level["speed_up"] > 1.0 and level["status"] == "pass"
    assert acc["baseline_output_tokens_per_s"] == pytest.approx(recorded[1])
    su = acc["speed_up"]
    assert su["n"] == 3 and su["min"] <= su["median"] <= su["max"] and su["median"] > 1.0
    gates = {c["name"]: c["status"] for c in result["gates"]["checks"]}
    assert gates["speed_up.c1"] == "pass" and gates["speed_up.c4"] == "pass"
    assert gates["mean_acceptance_length"] == "pass"
    # Side by side with the release it replaced (measured by the deploy before the switch).
    assert result["previous"]["release"] == env.baseline["release"]
    assert result["previous"]["status"] == "pass"
    # The terminal table (one line per node) and the checker's own per-check table.
    row = next(
        ln for ln in out.splitlines() if env.host in ln and "PASS" in ln and "NODE" not in ln
    )
    assert f"{su['median']:.2f}" in row
    assert "gate.speed_up.c1" in out and "baseline: history" in out
    # JUnit XML.
    suites = ET.parse(report / "junit.xml").getroot()
    assert suites.get("failures") == "0" and suites.get("errors") == "0"
    names = {tc.get("name") for tc in suites.iter("testcase")}
    assert {"smoke.determinism", "gate.speed_up.c1", "gate.mean_acceptance_length"} <= names
    # Prometheus textfile.
    prom = (report / "specdeploy_validation.prom").read_text()
    assert gauge(prom, "specdeploy_speed_up", env.host) == pytest.approx(su["median"])
    assert gauge(prom, "specdeploy_validation_passed", env.host) == 1.0
    # HTML with the per-position plot and the history plots (two releases so far).
    html = (report / "report.html").read_text()
    assert html.count("<svg") >= 4 and "Per-position acceptance" in html
    assert env.baseline["release"] in html and result["release"] in html
    assert (env.root / "latest").resolve() == report.resolve()
    # History: the baseline and this run, keyed by node and release.
    rows = env.history_rows()
    assert {(r["node"], r["release"]) for r in rows} >= {
        (env.host, env.baseline["release"]),
        (env.host, result["release"]),
    }
    # The node keeps its result; the manifest records the last validation.
    on_node = json.loads(
        env.ssh(f"sudo cat /var/log/specdeploy/validation/{result['release']}.json")
    )
    assert on_node["run_id"] == result["run_id"]
    last = env.manifest()["last_validation"]
    assert last["run_id"] == result["run_id"] and last["status"] == "pass"
    assert last["speed_up"] == pytest.approx(su["median"])
    assert last["mean_acceptance_length"] == pytest.approx(acc["mean_acceptance_length"])


def changed_tasks(stdout: str, host: str) -> list[str]:
    """Names of the tasks that reported `changed` for host (default callback output)."""
    names, current = [], None
    for line in stdout.splitlines():
        m = re.match(r"^TASK \[(.+?)\] \*+$", line)
        if m:
            current = m.group(1)
        elif line.startswith(f"changed: [{host}") and current and current not in names:
            names.append(current)
    return names


def test_a_second_deploy_changes_nothing_and_records_nothing(env):
    before = env.manifest()["last_validation"]
    proc = env.deploy(env.spec_extra)
    # Nothing restarted and the release passed its last validation with the same gates: the
    # steady-node check runs the readiness smoke check, the acceptance run does not run (make
    # validate re-measures), and the node does not walk the rollout.
    steady_check = "vllm_service : Check in one read-only round trip that the node serves unchanged"
    assert steady_check in proc.stdout
    assert "vllm_service : Wait for readiness" not in proc.stdout
    assert "validation : Run the smoke and acceptance checks" not in proc.stdout
    assert f"passed its last validation ({before['at']}" in proc.stdout
    assert "the readiness smoke check passed just now" in proc.stdout
    # Nothing changes, not even the deploy lock (the steady check only reads it), and the
    # validation records nothing on a no-op.
    assert changed_tasks(proc.stdout, env.host) == []
    assert env.manifest()["last_validation"] == before


def test_per_position_floor_fails_and_make_validate_says_exit_1(env, tmp_path):
    extra = tmp_path / "extra.json"
    extra.write_text(
        json.dumps(
            {
                "validation_report_root": str(env.root),
                "validation_gates": {
                    "min_mean_acceptance_length": 1.5,
                    "per_position_floors": [0.5, 0.99],
                },
            }
        )
    )
    proc = subprocess.run(
        [
            "make",
            "-s",
            "-o",
            ".venv/.stamp",
            "validate",
            f"INVENTORY={env.inventory}",
            f"EXTRA=-e @{extra}",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    # GNU make exits 2 whenever a recipe fails; the recipe's own code is the validation's.
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "make validate: exit 1 (a check, gate or regression failed)" in proc.stderr
    assert "validate] Error 1" in proc.stderr
    # the failed task's headline is the verdict, not Ansible's "Unknown error"
    assert "Unknown error" not in proc.stdout + proc.stderr
    assert "FAILED (exit 1: a check, gate or regression failed)" in proc.stdout + proc.stderr
    assert "position 1 acceptance" in proc.stdout and "< 0.990" in proc.stdout
    assert (env.root / "latest" / "exit-code").read_text().strip() == "1"
    result = only_result(env.root / "latest")
    checks = {c["name"]: c["status"] for c in result["gates"]["checks"]}
    assert checks["position_0_acceptance"] == "pass" and checks["position_1_acceptance"] == "fail"


def test_low_acceptance_fails_the_gate_and_is_a_regression(env):
    env.set_profile(profile("low-acceptance"))
    code, report, out = env.validate()
    assert code == 1, out[-3000:]
    result = only_result(report)
    assert result["acceptance"]["mean_acceptance_length"] < 1.5
    assert any("mean acceptance length" in r and "< 1.5" in r for r in result["reasons"])
    regs = summary(report)["regressions"][f"{env.host}/{result['release']}"]
    assert "mean_acceptance_length" in {g["metric"] for g in regs}
    assert "below the release's first validated run" in out
    prom = (report / "specdeploy_validation.prom").read_text()
    assert gauge(prom, "specdeploy_regression", env.host) == 1.0
    assert env.manifest()["last_validation"]["status"] == "fail"


def test_slow_speculation_fails_the_speed_up_gate(env):
    env.set_profile(profile("slow-spec"))
    code, report, out = env.validate({"validation_repeats": 2})
    assert code == 1, out[-3000:]
    result = only_result(report)
    checks = {c["name"]: c for c in result["gates"]["checks"]}
    assert checks["mean_acceptance_length"]["status"] == "pass"  # accepted, but too slow
    assert checks["speed_up.c1"]["status"] == "fail" and checks["speed_up.c1"]["value"] < 1.0
    assert result["acceptance"]["speed_up"]["n"] == 2
    assert any(r.startswith("speed-up 0.") for r in result["reasons"])


def test_server_down_could_not_measure_exit_2(env):
    env.ssh("sudo systemctl stop vllm.service")
    try:
        code, report, out = env.validate()
    finally:
        env.ssh("sudo systemctl reset-failed vllm.service; sudo systemctl start vllm.service")
        env.wait_healthy()
    assert code == 2, out[-3000:]
    result = only_result(report)
    assert result["status"] == "error" and "connection refused" in result["reasons"][0]
    assert "COULD NOT MEASURE (exit 2" in out and "could not measure: smoke.port" in out


def test_server_hanging_could_not_measure_exit_2(env):
    env.set_profile(profile("hang"), wait=False)
    t0 = time.monotonic()
    code, report, out = env.validate()
    took = time.monotonic() - t0
    assert code == 2, out[-3000:]
    result = only_result(report)
    stages = {s["name"]: s for s in result["smoke"]["stages"]}
    assert stages["port"]["ok"] and not stages["health"]["ok"]
    assert "no answer within" in stages["health"]["message"]
    assert took < 120
