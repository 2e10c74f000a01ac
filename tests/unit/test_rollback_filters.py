"""The rollback role's messages (plugins/filter/rollback.py): what a failed deploy or rollback
says, for each way the rescue ends."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.filter import rollback

FACTS = {
    "host": "node1",
    "failed": "R2",
    "reason": "smoke failed",
    "kept_dir": "/opt/sd/releases/R2",
    "marked_failed": True,
    "to": "R1",
    "serving": "R2-nospec",
    "policy": "rollback",
}


def test_the_drain_note_says_whether_the_node_is_back_in_rotation() -> None:
    assert rollback.drain_note("node1", False, {"changed": True}) == (
        "It is back in the balancer's rotation. "
    )
    assert rollback.drain_note("node1", False, {"skipped": True}) == ""
    assert rollback.drain_note("node1", False, None) == ""
    out = rollback.drain_note("node1", True, None, "vllm", "node1")
    assert out.startswith("node1 STAYS OUT OF THE BALANCER'S ROTATION (drained)")
    assert "set server vllm/node1 state ready" in out


def test_an_automatic_rollback_says_which_release_serves_again() -> None:
    said = rollback.auto_rollback_message("rolled-back", **FACTS, drain="D. ", rollout="N.")
    assert said == (
        "deploy of release R2 on node1 FAILED: smoke failed. Rolled back automatically: release R1"
        " serves again (its unit, environment and patch state verified, smoke check passed). The"
        " failed release is kept as /opt/sd/releases/R2 (status failed). D. N."
    )


def test_a_first_deploy_that_failed_its_gates_says_speculation_is_off() -> None:
    said = rollback.auto_rollback_message("speculation-disabled", **FACTS)
    assert "FIRST DEPLOY FAILED ITS SPECULATIVE GATES" in said
    assert "SPECULATION IS OFF on node1. Release R2-nospec" in said
    by_policy = rollback.auto_rollback_message(
        "speculation-disabled", **{**FACTS, "policy": "disable_speculation"}
    )
    assert "By rollback_failed_gate_policy=disable_speculation release R2-nospec" in by_policy
    assert "FIRST DEPLOY" not in by_policy


def test_a_stop_and_a_failed_rollback_say_what_serves() -> None:
    stopped = rollback.auto_rollback_message("stopped", **{**FACTS, "marked_failed": False})
    assert "the server is stopped and nothing serves on node1. " in stopped
    assert "(status unchanged: its manifest could not be written)" in stopped
    failed = rollback.auto_rollback_message(
        "rollback-failed", **FACTS, rollback_error="bad unit", disable_error="no venv"
    )
    assert "Rolling back to R1 FAILED TOO: bad unit. NOTHING MAY BE SERVING on node1" in failed
    assert "(Serving with speculation disabled failed first: no venv.) The failed release" in failed


def test_a_build_failure_points_at_drift_or_a_full_disk() -> None:
    assert rollback.build_failed_hint("patch: sha256 mismatch").startswith("Patch target drift")
    assert rollback.build_failed_hint("[Errno 28] No space left on device").startswith(
        "The release root is out of space"
    )
    assert rollback.build_failed_hint(
        "[Errno 30] Read-only file system: '/opt/specdeploy/releases/x/config'"
    ).startswith("The file system is read-only")
    assert rollback.build_failed_hint("pip failed") == ""


def test_a_build_failure_says_nothing_was_switched() -> None:
    current = {"islnk": True, "lnk_target": "/opt/sd/releases/R1"}
    said = rollback.build_failed_message(
        "R2", host="node1", reason="pip failed", current=current, serving_answered=True,
        kept_dir="/opt/sd/releases/R2", marked_failed=True, rollout="",
    )  # fmt: skip
    assert said == (
        "deploy of release R2 on node1 FAILED before the switch: pip failed.  Nothing was switched:"
        " release R1 still serves and answered its smoke check. The half-built release"
        " /opt/sd/releases/R2 is marked failed and kept for inspection; the next deploy rebuilds"
        " it from scratch. "
    )
    nothing = rollback.build_failed_message(
        "R2", host="node1", reason="x", current={"exists": False}, serving_answered=False,
        kept_dir="/d", marked_failed=False,
    )  # fmt: skip
    assert "no release was serving before, and none serves now." in nothing
    assert "left as it was (its manifest could not be written)" in nothing
    silent = rollback.build_failed_message(
        "R2", host="n", reason="x", current=current, serving_answered=False, kept_dir="/d",
        marked_failed=True,
    )  # fmt: skip
    assert "release R1 still serves but did NOT answer its smoke check." in silent


def test_a_failed_manual_rollback_says_what_serves() -> None:
    said = rollback.manual_rollback_failed_message(
        "R0", host="node1", error="x failed", started_from="R1", drained=True
    )
    assert said == (
        "rollback of node1 to release R0 FAILED: x failed. Release R1 serves again (it answered its"
        " smoke check). node1 STAYS OUT OF THE BALANCER'S ROTATION (drained)."
    )
    assert rollback.manual_rollback_failed_message(
        "R0", host="node1", error="e", started_from="", drained=False
    ).endswith("Nothing was serving before the rollback. ")


def test_the_filters_are_registered() -> None:
    assert set(rollback.FilterModule().filters()) == {
        "drain_note",
        "auto_rollback_message",
        "build_failed_message",
        "manual_rollback_failed_message",
        "failed_speculative_gate",
        "release_patch_state",
    }


@pytest.mark.parametrize(
    ("result", "gate", "expected"),
    [
        ({"smoke": {"ok": True}, "gates": {"passed": False}}, True, True),
        ({"smoke": {"ok": True}, "gates": {"passed": True}}, True, False),  # failed later
        ({"smoke": {"ok": False}, "gates": {"passed": False}}, True, False),  # did not serve
        ({"smoke": {"ok": True}}, True, False),  # no gate said no
        ({"smoke": {"ok": True}, "gates": {"passed": False}}, False, False),  # gate off
        ({"smoke": {"ok": True}, "gates": {"passed": False}}, "False", False),
        ({"smoke": {"ok": True}, "gates": {"passed": False}}, "off", False),  # as Jinja's bool
        (None, True, False),  # failed before any validation of this attempt
    ],
)
def test_a_failure_is_a_speculative_gate_s_only_when_it_served_and_a_gate_said_no(
    result, gate, expected
) -> None:
    assert rollback.failed_speculative_gate(result, gate) is expected


def test_a_release_s_patch_state_now_and_as_recorded() -> None:
    vllm = {"patches": {"state": "applied"}}
    state = rollback.release_patch_state
    assert state(vllm, "vllm", None, {"rc": 0, "stdout": '{"state": "applied"}'}) == {
        "state": "applied",
        "recorded": "applied",
    }
    # the patcher could not answer: unknown, never a guess
    assert state(vllm, "vllm", None, {"rc": 1, "stdout": "Traceback ..."})["state"] == "unknown"
    assert state({}, "vllm", None, {"skipped": True}) == {"state": "unknown", "recorded": "unknown"}
    sglang = {"patches": {"state": "native", "engine_version": "0.5.16"}}
    assert state(sglang, "sglang", {"rc": 0, "stdout": "0.5.16\n"}, None)["state"] == "native"
    assert state(sglang, "sglang", {"rc": 0, "stdout": "0.5.15\n"}, None)["state"] == "unknown"
    assert state(sglang, "sglang", {"rc": 1, "stdout": ""}, None)["state"] == "unknown"
