"""The settle check's reading (plugins/action/rollback_settle.py): the commands the three tasks
of roles/rollback/tasks/settle.yml ran, in their order, and what the assertions that stayed in
the role read."""

from __future__ import annotations

import json

from ansible_collections.specdeploy.toolkit.plugins.action.rollback_settle import (
    ActionModule,
    shown,
    stayed_up,
)

KNOBS = {
    "specdeploy_root": "/opt/s",
    "specdeploy_release": {"id": "0.16.0-abc"},
    "specdeploy_service_name": "vllm",
    "specdeploy_local_url": "http://127.0.0.1:8000",
    "specdeploy_served_model_name": "m",
    "specdeploy_api_key_file": "/etc/specdeploy/api-key",
    "rollback_settle_s": 30,
    "rollback_watch": {"MainPID": "41", "NRestarts": "0", "ActiveState": "active"},
}
UP = {"stdout_lines": ["MainPID=41", "NRestarts=0", "ActiveState=active"]}
JOURNAL = {"rc": 0, "stdout_lines": ["loading", "Traceback", "CUDA error", "exit 1"]}


class FakeAction(ActionModule):
    """The action's commands, answered in order from a list."""

    def __init__(self, answers: list[dict]) -> None:  # no connection, no task
        self.answers = answers
        self.calls: list[tuple[list[str], dict | None]] = []

    def _command(self, argv, task_vars, environment=None):
        self.calls.append((argv, environment))
        return dict(self.answers.pop(0))

    def settle(self) -> dict:
        return self._settle({}, KNOBS, {})


def test_a_server_that_stayed_up_is_smoke_checked() -> None:
    action = FakeAction([UP, JOURNAL, {"rc": 0, "stdout": "{}", "stderr": ""}])
    result = action.settle()
    argvs = [call[0] for call in action.calls]
    assert argvs[0] == [
        "systemctl", "show", "--property=MainPID", "--property=NRestarts",
        "--property=ActiveState", "vllm.service",
    ]  # fmt: skip
    assert argvs[1] == ["journalctl", "-u", "vllm.service", "-n", "4", "-o", "cat", "--no-pager"]
    assert argvs[2][-3:] == ["--release", "0.16.0-abc", "--json"]
    assert action.calls[2][1] == {"PYTHONPATH": "/opt/s/releases/0.16.0-abc/toolkit"}
    assert result["stayed_up"] is True and result["smoke"]["rc"] == 0
    assert result["message"] == "" and result["smoke_failure"] == ""


def test_a_restarted_server_is_said_with_its_log_and_not_smoke_checked() -> None:
    restarted = {"stdout_lines": ["MainPID=77", "NRestarts=1", "ActiveState=active"]}
    action = FakeAction([restarted, JOURNAL])
    result = action.settle()
    assert len(action.calls) == 2 and result["stayed_up"] is False
    assert result["message"] == (
        "the server of release 0.16.0-abc did not stay up after it became ready:"
        " process 41 -> 77, restarts 0 -> 1, state active within 30 s"
        " (log: loading | Traceback | CUDA error | exit 1)"
    )


def test_a_server_that_stopped_answering_says_why() -> None:
    smoke = {"rc": 1, "stdout": json.dumps({"ok": False}), "stderr": "connection refused"}
    result = FakeAction([UP, JOURNAL, smoke]).settle()
    assert result["stayed_up"] is True
    assert result["smoke_failure"] == (
        "the server of release 0.16.0-abc stopped answering after validation: connection refused"
    )


def test_stayed_up_needs_active_and_the_same_process() -> None:
    before = shown(UP["stdout_lines"])
    assert stayed_up(before, before)
    assert not stayed_up(before, dict(before, ActiveState="failed"))
    assert not stayed_up(before, dict(before, MainPID="42"))
    assert shown(["A=b=c"]) == {"A": "b=c"}
