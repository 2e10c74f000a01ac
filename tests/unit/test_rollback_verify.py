"""The rollback's verification (plugins/action/rollback_verify.py): the steps the seven tasks of
roles/rollback/tasks/verify.yml ran, in their order and with their arguments, and what the
assertions that stayed in the role read."""

from __future__ import annotations

import base64
import json

from ansible_collections.specdeploy.toolkit.plugins.action.rollback_verify import (
    ActionModule,
    manifest_engine,
)

RELEASE = "0.16.0-abc"
DIR = f"/opt/s/releases/{RELEASE}"
KNOBS = {
    "specdeploy_root": "/opt/s",
    "specdeploy_service_name": "vllm",
    "rollback_patch_backup_dirname": "patch-backups",
    "specdeploy_local_url": "http://127.0.0.1:8000",
    "specdeploy_served_model_name": "m",
    "specdeploy_api_key_file": "/etc/specdeploy/api-key",
}
VLLM = {"vllm_version": "0.16.0", "patches": {"state": "applied"}}
SGLANG = {"patches": {"engine": "sglang", "engine_version": "0.5.0", "state": "native"}}
SAME = {"stat": {"exists": True, "checksum": "f00d"}}


class FakeAction(ActionModule):
    """The action's steps, with the node's modules answered in order from a list."""

    def __init__(self, manifest: dict, answers: list[dict]) -> None:  # no connection, no task
        self.manifest = manifest
        self.answers = answers
        self.calls: list[tuple[str, dict, dict | None]] = []

    def _module(self, name, args, task_vars, environment=None):
        self.calls.append((name, args, environment))
        if name == "ansible.builtin.slurp":
            return {"content": base64.b64encode(json.dumps(self.manifest).encode()).decode()}
        return dict(self.answers.pop(0))

    def verify(self) -> dict:
        return self._verify({}, RELEASE, KNOBS, "node1", {})


def patcher(state: str, rc: int = 0) -> dict:
    return {"rc": rc, "stdout": json.dumps({"state": state}), "stderr": ""}


def test_a_vllm_release_that_is_what_it_was_is_smoke_checked_and_kept() -> None:
    smoke = {"rc": 0, "stdout": "{}", "stderr": ""}
    process = {"runs_release_dir": True}
    action = FakeAction(VLLM, [SAME, SAME, process, patcher("applied"), smoke])
    result = action.verify()
    assert [call[0].rsplit(".", 1)[-1] for call in action.calls] == [
        "slurp", "stat", "stat", "service_process", "command", "command",
    ]  # fmt: skip
    assert action.calls[0][1] == {"src": f"{DIR}/manifest.json"}
    assert action.calls[1][1] == {
        "path": "/etc/systemd/system/vllm.service", "checksum_algorithm": "sha256",
    }  # fmt: skip
    assert action.calls[2][1]["path"] == f"{DIR}/config/vllm.service"
    assert action.calls[3][1] == {"service": "vllm.service", "release_dir": DIR}
    status_argv = action.calls[4][1]["argv"]
    assert status_argv[:5] == [
        f"{DIR}/venv/bin/python", "-m", "specdeploy.node.patching.patches", "status", "--version",
    ]  # fmt: skip
    assert f"{DIR}/patch-backups" in status_argv
    assert action.calls[4][2] == {"PYTHONPATH": f"{DIR}/toolkit"}
    assert action.calls[5][1]["argv"][-3:] == ["--release", RELEASE, "--json"]
    assert result["node_matches"] is True and result["smoke"]["rc"] == 0
    verified = result["verified"]
    assert verified.pop("at").endswith("Z")
    assert verified == {
        "release": RELEASE, "unit_sha256": "f00d", "patch_state": "applied", "smoke": "pass",
    }  # fmt: skip


def test_a_node_that_differs_is_said_and_not_smoke_checked() -> None:
    other = {"stat": {"exists": True, "checksum": "beef"}}
    process = {"runs_release_dir": False, "command_line": "/usr/bin/python -m vllm"}
    action = FakeAction(VLLM, [SAME, other, process, patcher("applied")])
    result = action.verify()
    assert len(action.calls) == 5  # no smoke check
    assert result["node_matches"] is False and result["verified"] == {}
    assert result["mismatch"] == (
        f"after activating release {RELEASE} on node1 the node is not what that release was:"
        " installed unit DIFFERS from the release's unit; serving process:"
        " /usr/bin/python -m vllm; patch state applied (recorded applied)."
    )


def test_a_patch_state_other_than_recorded_or_a_failed_patcher_is_a_mismatch() -> None:
    process = {"runs_release_dir": True}
    drifted = FakeAction(VLLM, [SAME, SAME, process, patcher("pristine")]).verify()
    assert drifted["node_matches"] is False and drifted["patch"]["state"] == "pristine"
    failed = FakeAction(VLLM, [SAME, SAME, process, patcher("applied", rc=1)]).verify()
    assert failed["node_matches"] is False


def test_an_sglang_release_is_native_when_its_venv_holds_the_recorded_version() -> None:
    version = {"rc": 0, "stdout": "0.5.0\n", "stderr": ""}
    smoke = {"rc": 0, "stdout": "{}", "stderr": ""}
    action = FakeAction(SGLANG, [SAME, SAME, {"runs_release_dir": True}, version, smoke])
    result = action.verify()
    assert action.calls[4][1]["argv"][0] == f"{DIR}/venv/bin/python"
    assert action.calls[4][2] is None  # no patcher, no release toolkit needed
    assert result["node_matches"] is True and result["verified"]["patch_state"] == "native"


def test_a_failed_smoke_check_says_its_reasons() -> None:
    smoke = {"rc": 1, "stdout": json.dumps({"reasons": ["no models", "500"]}), "stderr": ""}
    process = {"runs_release_dir": True}
    result = FakeAction(VLLM, [SAME, SAME, process, patcher("applied"), smoke]).verify()
    assert result["node_matches"] is True and result["verified"] == {}
    assert result["smoke_failure"] == (
        f"release {RELEASE} serves but fails its smoke check: no models; 500"
    )


def test_the_engine_is_vllm_unless_the_patch_record_names_another() -> None:
    assert manifest_engine({}) == "vllm"
    assert manifest_engine({"patches": None}) == "vllm"
    assert manifest_engine(SGLANG) == "sglang"
