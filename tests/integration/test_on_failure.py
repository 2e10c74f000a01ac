"""The unit's OnFailure= hook on a sandbox node: installed by the deploy (a second deploy
changes nothing); kill the server process until systemd gives up restarting it
(StartLimitBurst), then the hook unit has run the default command (one line in the journal)
for vllm.service."""

from __future__ import annotations

import time

import pytest
from test_deploy_support import stage_models

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def deployed(play, node):
    stage_models(play)
    run = play("deploy.yml")
    assert run.returncode == 0, run.tail()
    return node


def test_hook_is_installed_once(deployed, play):
    """The hook unit is in place after the deploy; a second deploy changes nothing."""
    hook = deployed.sh("systemctl cat vllm-on-failure@.service")
    assert "ExecStart=/bin/echo" in hook and "Type=oneshot" in hook
    again = play("deploy.yml")
    assert again.returncode == 0, again.tail()
    assert again.recap(play.host)["changed"] == 0, again.changed_tasks()


def test_hook_runs_when_systemd_gives_up(deployed):
    node = deployed
    assert node.service("ActiveState")["ActiveState"] == "active"
    unit_text = node.sh("systemctl cat vllm.service")
    assert "OnFailure=vllm-on-failure@%n.service" in unit_text
    kills, deadline = 0, time.monotonic() + 600
    while time.monotonic() < deadline:
        state = node.service("ActiveState", "SubState")
        if state["ActiveState"] == "failed":
            break
        if state["ActiveState"] == "active":
            node.sh("sudo -n systemctl kill --signal=KILL vllm.service")
            kills += 1
        time.sleep(2)
    state = node.service("ActiveState", "Result", "NRestarts")
    assert state["ActiveState"] == "failed", (kills, state)
    print(f"systemd gave up after {kills} kills ({state['NRestarts']} automatic restarts)")
    hook = "vllm-on-failure@vllm.service.service"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        journal = node.sh("sudo -n journalctl --no-pager -o cat -t vllm-on-failure", check=False)
        if "vllm.service failed" in journal:
            break
        time.sleep(2)
    assert "specdeploy: vllm.service failed; systemd gave up restarting it" in journal, journal
    result = node.sh(f"systemctl show {hook} -p Result -p ExecMainStatus")
    assert "Result=success" in result and "ExecMainStatus=0" in result, result
