"""The named deploy states (specdeploy.controller.deploy_state): a run whose ansible-playbook is
gone never looks live, and the clean-up after an interrupted run picks a safe state (issue 28:
SIGINT mid-deploy left the canary on an unvalidated release and the dead run's lock looking
held, and `make status` flagged neither)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from specdeploy.node.module_utils.deploy_lock import process_starttime

from specdeploy.controller import deploy_state


def owner(pid: int, purpose: str = "deploy") -> dict:
    return {"token": "t", "controller": socket.gethostname(), "pid": pid,
            "pid_starttime": process_starttime(pid), "user": "ops", "purpose": purpose,
            "taken_at": "2026-12-04T01:00:00Z"}  # fmt: skip


@pytest.fixture
def dead() -> dict:
    """The owner record of an ansible-playbook that has exited (a real process, gone)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    record = owner(proc.pid)
    proc.wait()
    return record


def test_a_dead_runs_lock_is_interrupted_never_running(dead) -> None:
    state, text = deploy_state.lock_state(dead)
    assert state == "interrupted" and text.startswith("INTERRUPTED: a deploy by ops@")
    assert "not running" in text
    live_state, live = deploy_state.lock_state(owner(os.getpid()))
    assert live_state == "running" and live.startswith("running: a deploy by ops@")
    assert deploy_state.lock_state(None) == ("idle", "-")
    other = {**owner(os.getpid()), "controller": "another-controller"}
    assert "only it can tell" in deploy_state.lock_state(other)[1]


ACTIVATED = {"release_id": "r2", "status": "active", "activated_at": "2026-12-04T01:00:00Z"}
PASSED_AFTER = {"status": "pass", "at": "2026-12-04T01:05:00Z"}
PASSED_BEFORE = {"status": "pass", "at": "2026-12-03T01:05:00Z"}  # an earlier activation's


@pytest.mark.parametrize(
    "validation, previous, state, action",
    [
        (None, "r1", "rolled-back", "rollback"),  # switched to r2 ("active"), never validated
        (PASSED_BEFORE, "r1", "rolled-back", "rollback"),  # validated before, not since
        ({**PASSED_AFTER, "status": "fail"}, "r1", "rolled-back", "rollback"),
        (PASSED_AFTER, "r1", "kept", "unlock"),  # r2 validated before the interruption
        (None, None, "unvalidated", "unlock"),  # a first deploy: nothing to go back to
    ],
)
def test_the_clean_up_after_an_interrupted_deploy_names_a_safe_state(
    dead, validation, previous, state, action
) -> None:
    current = {**ACTIVATED, **({"last_validation": validation} if validation else {})}
    plan = deploy_state.decide("gpu-01", dead, current, previous)
    assert (plan["state"], plan["action"]) == (state, action)
    assert plan["message"].startswith("gpu-01: the interrupted deploy")


VERIFIED_AFTER = {"at": "2026-12-04T01:02:00Z", "release": "r2", "smoke": "pass", "kind": "manual"}


@pytest.mark.parametrize(
    "rollback, state",
    [
        (VERIFIED_AFTER, "kept"),  # a rollback to r2 verified it after its activation
        ({**VERIFIED_AFTER, "at": "2026-12-03T01:02:00Z"}, "rolled-back"),  # an earlier one's
        ({**VERIFIED_AFTER, "smoke": "fail"}, "rolled-back"),
    ],
)
def test_a_release_a_rollback_verified_since_its_activation_is_kept(dead, rollback, state):
    """A run interrupted after a rollback had verified its release (the release validated when
    it served before): before, only a validation counted, so the clean-up rolled back a
    verified rollback."""
    current = {**ACTIVATED, "last_validation": PASSED_BEFORE, "last_rollback": rollback}
    assert deploy_state.decide("gpu-01", dead, current, "r1")["state"] == state


def test_a_running_deploy_is_left_alone() -> None:
    plan = deploy_state.decide("gpu-01", owner(os.getpid()), {"release_id": "r2"}, "r1")
    assert (plan["state"], plan["action"]) == ("running", "none")


def test_status_shows_how_the_interrupted_run_ended_until_the_next_validation() -> None:
    manifest = {
        "interrupted": {"at": "2026-12-04T01:10:00Z", "state": "rolled-back", "message": "m"},
        "last_validation": {"at": "2026-12-04T00:00:00Z"},
    }
    shown = deploy_state.show([{"node": "gpu-01", "lock": None, "manifest": manifest}])
    assert shown == {"gpu-01": "ROLLED-BACK at 2026-12-04T01:10:00Z: m"}
    manifest["last_validation"]["at"] = "2026-12-04T02:00:00Z"
    assert deploy_state.show([{"node": "gpu-01", "lock": None, "manifest": manifest}]) == {
        "gpu-01": "-"
    }


def test_the_cli_as_the_playbooks_call_it(dead) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.deploy_state", "decide", "--node", "n",
         "--lock-json", json.dumps(dead), "--current-json", '{"release_id": "r2"}',
         "--previous", "r1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0 and json.loads(run.stdout)["action"] == "rollback"
    bad = subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.deploy_state", "show", "--nodes-json", "{"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
