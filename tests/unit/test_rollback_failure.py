"""The rollback role's last word read from its variables (specdeploy.toolkit.rollback_failure,
plugins/plugin_utils/rollback_failure.py): the same messages the task vars used to gather for the
filters of plugins/filter/rollback.py, from registered results and facts as the tasks leave them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.rollback_failure import (
    failure_message,
)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

AUTO = {
    "inventory_hostname": "node1",
    "specdeploy_root": "/opt/sd",
    "rollback_auto_failed": "R2",
    "rollback_auto_reason": "smoke failed",
    "rollback_auto_mark": {"changed": True, "status": "failed"},
    "rollback_auto_to": "R1",
    "rollback_auto_outcome": "rolled-back",
    "rollback_failed_gate_policy": "rollback",
    "rollback_rollout_note": "Rollout: 1 of 2 done.",
    "vllm_service_undrain": {"changed": True},
    "specdeploy_haproxy_backend": "vllm",
    "specdeploy_haproxy_server": "node1",
}


def said(case: str, facts: dict) -> str:
    return failure_message(case, lambda name, default: facts.get(name, default))


def test_an_automatic_rollback_says_what_serves_again_and_where_the_failed_release_is() -> None:
    assert said("auto", AUTO) == (
        "deploy of release R2 on node1 FAILED: smoke failed. Rolled back automatically: release R1"
        " serves again (its unit, environment and patch state verified, smoke check passed). The"
        " failed release is kept as /opt/sd/releases/R2 (status failed). It is back in the"
        " balancer's rotation. Rollout: 1 of 2 done."
    )


def test_a_drained_node_whose_rollback_failed_says_so_and_the_unwritten_manifest() -> None:
    facts = AUTO | {
        "rollback_auto_outcome": "rollback-failed",
        "rollback_auto_rollback_error": "bad unit",
        "rollback_auto_disable_error": "Build it: no venv",
        "rollback_auto_mark": {"changed": False, "failed": True},
        "vllm_service_drained": "true",
        "vllm_service_undrain": {"skipped": True},
    }
    out = said("auto", facts)
    assert "Rolling back to R1 FAILED TOO: bad unit. NOTHING MAY BE SERVING on node1" in out
    assert "(Serving with speculation disabled failed first: Build it: no venv.)" in out
    assert "(status unchanged: its manifest could not be written)" in out
    assert "node1 STAYS OUT OF THE BALANCER'S ROTATION (drained)" in out
    assert "set server vllm/node1 state ready" in out


def test_a_first_deploy_without_speculation_names_the_release_that_serves() -> None:
    facts = AUTO | {
        "rollback_auto_outcome": "speculation-disabled",
        "rollback_auto_to": "",
        "rollback_auto_serving": "R3",
    }
    out = said("auto", facts)
    assert "FIRST DEPLOY FAILED ITS SPECULATIVE GATES" in out and "Release R3" in out
    assert "Serving with speculation disabled failed first" not in out


BUILD = {
    "inventory_hostname": "node1",
    "specdeploy_root": "/opt/sd",
    "rollback_build_failed": "R2",
    "rollback_build_reason": "No space left on device",
    "rollback_build_mark": {"status": "failed"},
    "rollback_build_current": {"stat": {"exists": True, "islnk": True, "lnk_target": "/x/R1"}},
    "rollback_build_smoke": {"rc": 0},
    "rollback_rollout_note": "",
}


def test_a_failed_build_says_the_serving_release_answered() -> None:
    out = said("build_failed", BUILD)
    assert out.startswith("deploy of release R2 on node1 FAILED before the switch: No space")
    assert "The release root is out of space" in out
    assert "release R1 still serves and answered its smoke check." in out
    assert "/opt/sd/releases/R2 is marked failed and kept for inspection" in out


def test_a_failed_build_whose_smoke_check_was_skipped_did_not_answer() -> None:
    out = said("build_failed", BUILD | {"rollback_build_smoke": {"skipped": True}})
    assert "release R1 still serves but did NOT answer its smoke check." in out
    out = said("build_failed", BUILD | {"rollback_build_current": {"stat": {"exists": False}}})
    assert "no release was serving before, and none serves now." in out
    assert "left as it was" in said("build_failed", BUILD | {"rollback_build_mark": {}})


def test_a_failed_manual_rollback_says_what_serves_again() -> None:
    facts = {
        "inventory_hostname": "node1",
        "rollback_dest": "R1",
        "rollback_error": "Verify: smoke",
        "rollback_from": "R2",
        "vllm_service_drained": False,
    }
    assert said("manual", facts) == (
        "rollback of node1 to release R1 FAILED: Verify: smoke. Release R2 serves again (it"
        " answered its smoke check). "
    )
    out = said("manual", facts | {"rollback_from": "", "vllm_service_drained": True})
    assert "Nothing was serving before the rollback." in out and "STAYS OUT" in out


def test_an_unknown_case_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown case"):
        said("other", {})


def test_the_action_fails_with_the_message_read_from_templated_variables(tmp_path: Path) -> None:
    """Through ansible-playbook: the variables are read templated (a fact that refers to another
    variable), registered results as the tasks left them; the task fails with the message, also in
    check mode."""
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "specdeploy_root": "/opt/{{ root_name }}",
        "root_name": "sd",
        "rollback_dest": "R1",
        "rollback_error": "Verify: smoke",
        "rollback_from": "R2",
    }
    (tmp_path / "hosts.json").write_text(
        json.dumps({"all": {"hosts": {"node1": host_vars | {"rollback_build_failed": "R2"}}}})
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - specdeploy.toolkit.rollback_failure: {case: manual}\n"
        "      ignore_errors: true\n"
        "    - ansible.builtin.set_fact: {rollback_build_reason: 'it broke'}\n"
        "    - ansible.builtin.stat: {path: /nonexistent-rollback-failure-test}\n"
        "      register: rollback_build_current\n"
        "    - specdeploy.toolkit.rollback_failure: {case: build_failed}\n"
    )
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "--check", "-i", "hosts.json", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    tasks = plays[0]["tasks"]
    manual, build = tasks[0]["hosts"]["node1"], tasks[3]["hosts"]["node1"]
    assert manual["failed"] is True
    assert manual["msg"] == (
        "rollback of node1 to release R1 FAILED: Verify: smoke. Release R2 serves again (it"
        " answered its smoke check). "
    )
    assert build["failed"] is True
    assert build["msg"].startswith("deploy of release R2 on node1 FAILED before the switch: it")
    assert "no release was serving before, and none serves now." in build["msg"]
    assert "/opt/sd/releases/R2 is left as it was" in build["msg"]
