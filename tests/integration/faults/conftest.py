"""Fixtures of the fault-injection suite: one sandbox node per group (pytest session).

`node` (module scope): the group's Player on node1 of the session's own sandbox instance, the
test models staged, the suite's release root wiped (unless SPECDEPLOY_FAULTS_REUSE=1). A module
with NODES = n gets n nodes (the Player's `on(i)` views node i) and with PORT its servers on that
port (the traffic group: the sandbox balancer's backend port). When the module ends it writes
the group's rows and renders docs/faults.md (faultlib.finish_group).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import faultlib
import pytest

OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each case's outcome, recorded with the group's rows."""
    name = report.nodeid.split("::", 1)[-1]
    if report.failed:
        OUTCOMES[name] = "failed" if report.when == "call" else f"error in {report.when}"
    elif report.skipped:
        OUTCOMES.setdefault(name, "skipped")
    elif report.when == "call":
        OUTCOMES.setdefault(name, "passed")


@pytest.fixture(scope="module")
def node(sandbox, tmp_path_factory, request):
    group = request.module.GROUP
    assert group in faultlib.GROUPS, group
    cluster = sandbox(getattr(request.module, "NODES", 1))
    player = faultlib.Player(
        cluster,
        tmp_path_factory.mktemp(f"faults-{group}"),
        port=getattr(request.module, "PORT", faultlib.PORT),
    )
    nodes = [player.on(i) for i in range(len(cluster.nodes))]
    stage = subprocess.run(
        [
            str(faultlib.REPO / ".venv/bin/ansible-playbook"),
            "-i",
            str(player.inventory),
            str(faultlib.REPO / "tests/playbooks/stage-models.yml"),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, ANSIBLE_CONFIG=str(faultlib.REPO / "ansible.cfg")),
        cwd=faultlib.REPO,
        check=False,
    )
    assert stage.returncode == 0, stage.stdout[-2000:]
    if faultlib.REUSE:  # development only: continue on the node a previous run left
        player.provisioned = True
    else:
        for each in nodes:
            each.sh(
                f"sudo -n systemctl disable --now {faultlib.SERVICE} 2>&1; "
                f"sudo -n rm -rf {faultlib.ROOT} {faultlib.CACHE} {faultlib.UNIT}; "
                "sudo -n systemctl daemon-reload; true"
            )
    yield player
    faultlib.finish_group(group, dict(OUTCOMES))
    for each in nodes:
        each.sh(
            f"sudo -n systemctl disable --now {faultlib.SERVICE} 2>/dev/null; true", check=False
        )


class Ids(dict):
    """Release ids by role (A, B, C, ...); kept in a file for SPECDEPLOY_FAULTS_REUSE=1."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        self.path.write_text(json.dumps(self))


@pytest.fixture(scope="module")
def ids(request) -> dict:
    path = (
        Path(os.environ.get("TMPDIR", "/tmp"))
        / f"specdeploy-faults-ids-{request.module.GROUP}.json"
    )
    found = Ids(path)
    if faultlib.REUSE and path.is_file():
        found.update(json.loads(path.read_text()))
    return found
