"""What the rollback role's settle and verify checks run and say (filter/rollback_checks.py):
the messages an operator reads when a server did not stay up, stopped answering, or is not what
the release it rolled back to was; the release's own patcher command."""

from __future__ import annotations

import json

from ansible_collections.specdeploy.toolkit.plugins.filter import rollback_checks

BEFORE = {"MainPID": "101", "NRestarts": "0", "ActiveState": "active"}


def test_a_server_that_restarted_says_the_processes_restarts_and_log() -> None:
    now = {"MainPID": "202", "NRestarts": "1", "ActiveState": "activating"}
    journal = {"stdout_lines": ["loading", "CUDA error: out of memory"]}
    said = rollback_checks.settle_failure_message(
        "R2", before=BEFORE, now=now, settle_s=30, journal=journal
    )
    assert said == (
        "the server of release R2 did not stay up after it became ready: process 101 -> 202,"
        " restarts 0 -> 1, state activating within 30 s (log: loading | CUDA error: out of memory)"
    )


def test_a_long_log_is_cut_at_a_word_like_jinjas_truncate() -> None:
    journal = {"stdout_lines": ["word " * 100]}
    said = rollback_checks.settle_failure_message(
        "R2", before=BEFORE, now=BEFORE, settle_s=30, journal=journal
    )
    log = said.split("(log: ", 1)[1]
    assert log.endswith("word...)") and len(log) <= 400 + 1
    assert rollback_checks.settle_failure_message(
        "R2", before=BEFORE, now=BEFORE, settle_s=0, journal=None
    ).endswith("(log: )")


def test_a_failed_smoke_check_says_its_reasons_else_its_stderr() -> None:
    answer = {"stdout": json.dumps({"reasons": ["no tokens", "HTTP 500"]}), "stderr": "e"}
    assert rollback_checks.smoke_failure_reasons(answer) == "no tokens; HTTP 500"
    no_json = {"stdout": "Traceback ...", "stderr": "boom"}
    assert rollback_checks.smoke_failure_reasons(no_json) == "boom"
    assert rollback_checks.smoke_failure_reasons(no_json, stderr_without_reasons=True) == "boom"
    no_reasons = {"stdout": '  {"ok": false}', "stderr": "boom"}
    assert rollback_checks.smoke_failure_reasons(no_reasons) == ""
    assert rollback_checks.smoke_failure_reasons(no_reasons, stderr_without_reasons=True) == "boom"
    assert rollback_checks.smoke_failure_reasons({"stdout": ""}) == ""


def test_a_node_that_is_not_what_the_release_was_says_what_differs() -> None:
    said = rollback_checks.release_mismatch_message(
        "R1",
        host="node1",
        unit_matches=False,
        process={"command_line": ""},
        patch={"state": "unknown", "recorded": "applied"},
    )
    assert said == (
        "after activating release R1 on node1 the node is not what that release was: installed"
        " unit DIFFERS from the release's unit; serving process: none; patch state unknown"
        " (recorded applied)."
    )
    said = rollback_checks.release_mismatch_message(
        "R1",
        host="node1",
        unit_matches=True,
        process={"command_line": "/opt/sd/releases/R2/venv/bin/python " + "-x " * 100},
        patch={"state": "applied", "recorded": "applied"},
    )
    assert "installed unit matches the release's unit; serving process: /opt/sd/releases/R2" in said
    assert "-x...; patch state applied (recorded applied)." in said


def test_the_patch_state_is_asked_of_the_releases_own_patcher() -> None:
    command = rollback_checks.patch_status_command(
        {"vllm_version": "0.9.1"}, "/opt/sd", "R1", "patch-backups"
    )
    release = "/opt/sd/releases/R1"
    assert command == {
        "argv": [
            f"{release}/venv/bin/python", "-m", "specdeploy.node.patching.patches", "status",
            "--version", "0.9.1",
            "--manifest", f"{release}/toolkit/patches/vllm/manifest.yml",
            "--backup-dir", f"{release}/patch-backups",
            "--json",
        ],
        "environment": {"PYTHONPATH": f"{release}/toolkit"},
    }  # fmt: skip


def test_a_refused_lock_names_the_holder_else_its_owner_record() -> None:
    said = rollback_checks.lock_refused_message(
        {"acquired": False, "message": "deploy by ops@ctl (pid 7)"},
        host="node1",
        purpose="rollback",
        stale_s=14400,
    )
    assert said == (
        "REFUSED: another run holds the deploy lock on node1: deploy by ops@ctl (pid 7). This"
        " rollback changed nothing. Wait for that run to finish. If it is gone (killed on another"
        " controller), its lock counts as stale after 14400 s; or check and remove the lock in"
        " /run/lock/specdeploy/ on the node by hand."
    )
    said = rollback_checks.lock_refused_message(
        {"acquired": False, "owner": {"pid": 7, "user": "ops"}},
        host="node1",
        purpose="deploy",
        stale_s=60,
    )
    assert 'on node1: {"pid": 7, "user": "ops"}. This deploy changed nothing.' in said
    assert ": {}. This" in rollback_checks.lock_refused_message(
        {}, host="node1", purpose="deploy", stale_s=60
    )
