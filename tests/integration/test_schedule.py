"""`make schedule` / `make unschedule`: the validation timer really fires, on a sandbox node.

The machine the tests run on has no systemd as PID 1, so a sandbox node plays the controller:
schedule.yml installs the toolkit, ansible-core and mitogen there (offline, from wheels staged
on the node), and a systemd timer whose service runs playbooks/validate.yml from that copy
against an inventory on the node that reaches the node itself over SSH (its own key and
known_hosts).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.schedule_plan import (
    venv_requirements,
)

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "tests" / "standin" / "profiles"
UNIT = "specdeploy-validate"
BASE = "/opt/specdeploy-controller"
STAGE = "/home/ops/specdeploy-schedule"  # the scheduler's inventory, key and known_hosts
WHEELS_ON_NODE = "/srv/specdeploy-controller-wheels"

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


def controller_wheels() -> Path:
    """The scheduling venv's packages (ansible-core and mitogen at this controller's versions,
    schedule_plan.venv_requirements) and their dependencies as wheels for the node's Python
    3.11 (downloaded once into the cache, through pip)."""
    requirements = venv_requirements()
    cache = Path(os.environ.get("SPECDEPLOY_CACHE", Path.home() / ".cache" / "specdeploy"))
    wheels = cache / "controller-wheels"
    stamp = wheels / ".requirements"
    if not stamp.is_file() or stamp.read_text() != "\n".join(requirements):
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(REPO / ".venv" / "bin" / "pip"), "download", "-q", "--disable-pip-version-check",
             "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
             "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
             "--platform", "manylinux_2_28_x86_64", "-d", str(wheels), *requirements],
            check=True,
            timeout=600,
        )  # fmt: skip
        stamp.write_text("\n".join(requirements))
    return wheels


def tar_of(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), (modes or {}).get(name, 0o644)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Sched:
    def __init__(self, cluster) -> None:
        from testbed import sandbox as sb

        self.sb = sb
        self.cluster = cluster
        self.node = cluster.nodes[0]
        self.host = self.node.hostname
        self.inventory = Path(cluster.inventory).parent

    def ssh(self, command: str, timeout: float = 300, check: bool = True):
        r = self.cluster.ssh(self.node, command, timeout=timeout)
        if check:
            assert r.returncode == 0, f"{command}: {r.stdout}{r.stderr}"
        return r

    def upload(self, target: str, data: bytes, owner: str) -> None:
        cmd = f"sudo mkdir -p {target} && sudo tar -x -C {target} && sudo chown -R {owner} {target}"
        r = subprocess.run(
            self.sb.ssh_command(self.node, cmd), input=data, capture_output=True, timeout=300
        )
        assert r.returncode == 0, r.stderr.decode()

    def playbook(self, playbook: str, extra: dict, timeout: float = 900):
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(self.inventory),
               str(REPO / playbook), "-e", json.dumps(extra)]  # fmt: skip
        return subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
        )

    def history_rows(self) -> list[dict]:
        code = (
            "import json, sqlite3, sys; p = sys.argv[1]; c = sqlite3.connect(p); "
            "c.row_factory = sqlite3.Row; "
            "print(json.dumps([dict(r) for r in c.execute("
            "'SELECT run_id, node, release, status, started_at FROM runs ORDER BY id')]))"
        )
        r = self.ssh(
            f"test -f {BASE}/reports/history.sqlite && python3 -c {shlex.quote(code)} "
            f"{BASE}/reports/history.sqlite || echo '[]'"
        )
        return json.loads(r.stdout)

    def show(self, unit: str, prop: str) -> str:
        return self.ssh(f"systemctl show {unit} -p {prop} --value", check=False).stdout.strip()


def changed(stdout: str, host: str) -> int:
    m = re.search(rf"^{re.escape(host)}\s*: ok=\d+\s+changed=(\d+)", stdout, re.M)
    assert m, stdout[-3000:]
    return int(m.group(1))


@pytest.fixture(scope="module")
def sched(sandbox):
    cluster = sandbox(1)
    cluster.set_scenario(cluster.nodes[0], "healthy")
    s = Sched(cluster)
    pass_profile = json.loads((PROFILES / "pass.json").read_text())
    for playbook, extra in (
        ("tests/playbooks/stage-models.yml", {}),
        ("deploy.yml", {"specdeploy_standin_profile": pass_profile}),
    ):
        proc = s.playbook(playbook, extra)
        assert proc.returncode == 0, proc.stdout[-4000:]
    # What the node needs to play the controller: wheels, and an inventory that reaches the
    # node itself over SSH with the node's own copy of the key and the recorded host key.
    wheels = controller_wheels()
    s.upload(WHEELS_ON_NODE, tar_of({w.name: w.read_bytes() for w in wheels.glob("*.whl")}), "root")
    hosts = Path(cluster.inventory).read_text()
    hosts = hosts.replace(str(cluster.key), f"{STAGE}/id_ed25519")
    hosts = hosts.replace(str(cluster.known_hosts), f"{STAGE}/known_hosts")
    group_vars = (REPO / "inventory" / "sandbox-group_vars" / "gpu_nodes.yml").read_bytes()
    s.upload(
        STAGE,
        tar_of(
            {
                "hosts.yml": hosts.encode(),
                "group_vars/gpu_nodes.yml": group_vars,
                "id_ed25519": Path(cluster.key).read_bytes(),
                "known_hosts": Path(cluster.known_hosts).read_bytes(),
            },
            {"id_ed25519": 0o600},
        ),
        "ops:ops",
    )
    s.extra = {
        "schedule_host": s.host,
        "schedule_inventory": f"{STAGE}/hosts.yml",
        "schedule_on_active_sec": 5,
        "schedule_randomized_delay_s": 0,
        "schedule_pip_extra_args": f"--no-index --find-links {WHEELS_ON_NODE}",
        "schedule_validate_args": ["-e", "validation_max_requests=6"],
    }
    yield s
    s.playbook("playbooks/unschedule.yml", {"schedule_host": s.host, "unschedule_purge": True})


def test_timer_installs_fires_once_and_writes_history(sched):
    t0 = time.monotonic()
    proc = sched.playbook("playbooks/schedule.yml", sched.extra)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    installed_s = time.monotonic() - t0
    assert f"{UNIT}.timer" in proc.stdout and "remove: make unschedule" in proc.stdout
    assert sched.show(f"{UNIT}.timer", "UnitFileState") == "enabled"
    # The timer fires by itself (OnActiveSec=5) and its run records the node in the history.
    deadline = time.monotonic() + 300
    rows: list[dict] = []
    while time.monotonic() < deadline:
        rows = sched.history_rows()
        if rows and sched.show(f"{UNIT}.service", "ActiveState") == "inactive":
            break
        time.sleep(3)
    assert rows, sched.ssh(f"sudo journalctl -u {UNIT}.service --no-pager | tail -40").stdout
    assert sched.show(f"{UNIT}.timer", "LastTriggerUSec") not in ("", "n/a")
    assert sched.show(f"{UNIT}.service", "Result") == "success"
    assert [(r["node"], r["status"]) for r in rows] == [(sched.host, "pass")]
    journal = sched.ssh(f"sudo journalctl -u {UNIT}.service --no-pager -o cat").stdout
    assert re.search(rf"{re.escape(sched.host)}\s+\S+\s+PASS", journal), journal[-3000:]
    assert f"history: {BASE}/reports/history.sqlite" in journal
    # A forced run adds a second row; the report directory and latest link are there.
    forced = sched.ssh(f"sudo systemctl start {UNIT}.service", timeout=600, check=False)
    assert forced.returncode == 0, sched.ssh(
        f"sudo journalctl -u {UNIT}.service --no-pager -o cat | tail -60", check=False
    ).stdout
    rows = sched.history_rows()
    assert len(rows) == 2 and rows[0]["run_id"] != rows[1]["run_id"]
    latest = sched.ssh(f"ls {BASE}/reports/latest/").stdout.split()
    assert {"report.html", "summary.json", "junit.xml", "specdeploy_validation.prom"} <= set(latest)
    print(f"schedule.yml first install took {installed_s:.0f}s", file=sys.stderr)


def test_schedule_again_changes_nothing(sched):
    proc = sched.playbook("playbooks/schedule.yml", sched.extra)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert changed(proc.stdout, sched.host) == 0, proc.stdout[-3000:]


def test_unschedule_removes_the_timer_and_keeps_the_history(sched):
    rows = sched.history_rows()
    proc = sched.playbook("playbooks/unschedule.yml", {"schedule_host": sched.host})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "removed specdeploy-validate.timer and .service" in proc.stdout
    for suffix in ("timer", "service"):
        assert sched.ssh(f"test -e /etc/systemd/system/{UNIT}.{suffix}", check=False).returncode
    assert sched.show(f"{UNIT}.timer", "LoadState") == "not-found"
    assert sched.history_rows() == rows  # history stays
    again = sched.playbook("playbooks/unschedule.yml", {"schedule_host": sched.host})
    assert again.returncode == 0 and changed(again.stdout, sched.host) == 0
