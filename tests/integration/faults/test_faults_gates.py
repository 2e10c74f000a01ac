"""Fault group `gates`: a crash after readiness, the speed-up and acceptance gates (rollback
and the disable_speculation policy), `make rollback TO=`, and a node reboot during the
readiness wait. See faultlib for the harness."""

from __future__ import annotations

import time
import urllib.request

import pytest
from faultlib import (
    B_PROFILE,
    LOCKS,
    PORT,
    ROOT,
    SERVICE,
    UNIT,
    assert_is_release,
    deploy_base,
    first_release_of,
    init_started,
    profile,
    record,
    wait_until,
)

GROUP = "gates"
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


def test_base_release_deploys_and_serves(node, ids):
    deploy_base(node, ids)


def test_crash_after_healthy_rolls_back(node, ids):
    """The new server is killed (SIGKILL) after it became ready, during validation."""
    before = node.snapshot()
    proc = node.start(extra={"specdeploy_standin_profile": B_PROFILE})
    deadline = time.monotonic() + 600
    killed = None
    while killed is None:
        assert proc.poll() is None, "the deploy ended before the new server served"
        assert time.monotonic() < deadline
        current = node.current()
        # after readiness passed: the deploy records the start in the manifest, then validates
        if current and current != ids["A"] and node.manifest(current).get("starts"):
            pid = node.sh(f"systemctl show -p MainPID --value {SERVICE}.service").strip()
            node.sh(f"sudo -n kill -9 {pid}")
            killed = current
        time.sleep(0.2)
    run = node.finish(proc)
    ids["B"] = first_release_of(run)
    assert killed == ids["B"]
    assert run.rc == 2, run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    assert "did not become ready" not in run.message  # it had: the crash came after
    assert (
        "did not stay up" in run.message
        or "could not measure" in run.message
        or "stopped answering" in run.message
    ), run.message
    node.serves(ids["A"])
    assert node.manifest(ids["B"])["failure_stage"] == "serve"
    record(
        "crash-after-healthy",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_speed_up_below_one_rolls_back(node, ids):
    """B again (reused as it is), measured against a no-speculation baseline it cannot beat."""
    before = node.snapshot()
    run = node(extra={"specdeploy_standin_profile": B_PROFILE, "validation_baseline_tps": 2000})
    assert run.rc == 2, run.message
    if first_release_of(run) == ids["B"]:  # (unless the toolkit was edited meanwhile)
        assert not node.manifest(ids["B"])["history"][0].get("previous_status")  # not rebuilt
        installs = [r for name, r in run.results() if "install the pinned engine" in name.lower()]
        assert not any(r.get("changed") for r in installs)  # reused, nothing installed
    assert "speed" in run.message.lower() and "failed a check or gate" in run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    node.serves(ids["A"])
    record(
        "speed-up-below-one",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_low_acceptance_with_policy_disable_speculation(node, ids):
    before = node.snapshot()
    run = node(
        extra={
            "specdeploy_standin_profile": profile("low-acceptance"),
            "rollback_failed_gate_policy": "disable_speculation",
        }
    )
    ids["LOW"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "acceptance" in run.message.lower() and "failed a check or gate" in run.message
    assert "rollback_failed_gate_policy=disable_speculation" in run.message
    nospec = node.current()
    assert nospec not in (ids["LOW"], ids["A"])
    ids["NOSPEC"] = nospec
    node.serves(nospec)
    unit = node.sh(f"cat {UNIT}")
    assert "--speculative-config" not in unit
    assert unit == node.sh(f"cat {ROOT}/releases/{nospec}/config/{SERVICE}.service")
    manifest = node.manifest(nospec)
    assert manifest["inputs"]["speculative_config"] is None
    assert manifest["speculation_disabled"]["derived_from"] == ids["LOW"]
    assert node.manifest(ids["LOW"])["status"] == "failed"
    with urllib.request.urlopen(f"http://{node.node.address}:{PORT}/metrics", timeout=10) as r:
        assert "spec_decode" not in r.read().decode()
    record(
        "low-acceptance-disable-speculation",
        run,
        f"new release {nospec} (no --speculative-config) serves and answers",
        node.nothing_lost(before),
    )


def test_make_rollback_to_a_named_release(node, ids):
    before = node.snapshot()
    run = node.make("rollback", TO=ids["A"])
    assert run.rc == 0, run.message
    node.serves(ids["A"])
    assert_is_release(node, ids["A"])
    last = node.ledger()[-1]
    assert (last["action"], last["release"], last["previous"]) == (
        "rollback",
        ids["A"],
        ids["NOSPEC"],
    )
    assert node.manifest(ids["A"])["last_rollback"]["from"] == ids["NOSPEC"]
    record(
        "rollback-to-named",
        run,
        "release A serves and answers; installed unit == A's rendered unit; patches applied",
        node.nothing_lost(before),
    )


SLOW_BOOT = "/etc/systemd/system/ssh.service.d/specdeploy-faults-slow-boot.conf"


def test_node_rebooted_during_the_readiness_wait(node, ids):
    """B (6 s start-up) is deployed again while A serves; the node reboots during the wait.
    The sandbox boots the node again by itself on the same disk (as systemd-nspawn@.service
    does). A container boots in seconds, a GPU server in minutes: sshd is held back 40 s at
    boot (a drop-in, removed afterwards), so the node is away as long as a real one would be
    for the run's SSH connections (a few seconds would let the run ride through the boot)."""
    before = node.snapshot()
    first_boot = init_started(node)
    assert first_boot
    node.sh(
        f"sudo -n mkdir -p {SLOW_BOOT.rsplit('/', 1)[0]} && printf '[Service]\\n"
        f"ExecStartPre=/bin/sleep 40\\n' | sudo -n tee {SLOW_BOOT} >/dev/null"
    )
    try:
        proc = node.start(extra={"specdeploy_standin_profile": B_PROFILE})
        deadline = time.monotonic() + 600
        while True:  # restarted on the new release: readiness is being waited for (6 s)
            assert proc.poll() is None, "the deploy ended before the restart"
            assert time.monotonic() < deadline, "the deploy never restarted the server"
            serving = node.serving_process_release()
            if serving and serving != before["serving"] and node.current() == serving:
                break
            time.sleep(0.2)
        ids["B"] = serving
        node.sh("sudo -n systemctl reboot", check=False, timeout=30)
        run = node.finish(proc)
        assert run.rc in (2, 4), run.message  # the node went away under the run
        assert run.stats().get("unreachable") == 1
        # The node comes back by itself (another boot: PID 1 started anew), SSH works again.
        wait_until(lambda: init_started(node) not in ("", first_boot), 240, "the node's boot")
    finally:
        wait_until(lambda: init_started(node) != "", 240, "SSH to the node")
        node.sh(f"sudo -n rm -f {SLOW_BOOT} && sudo -n systemctl daemon-reload")
    # After the boot, systemd starts the installed unit: B's (current points at B).
    wait_until(lambda: node.service_state() == "active", 90, "the unit to start after the boot")
    assert node.current() == ids["B"]
    # The lock lived in /run/lock (tmpfs): the reboot removed it, the re-run takes it anew.
    assert node.sh(f"ls -A {LOCKS} 2>/dev/null || true").strip() == ""
    rerun = node(extra={"specdeploy_standin_profile": B_PROFILE})
    assert rerun.rc == 0, rerun.message
    assert rerun.ran("deploy lock")
    node.serves(ids["B"])
    assert_is_release(node, ids["B"])
    record(
        "reboot-during-readiness",
        run,
        "after the re-run: release B serves, validated, and answers",
        node.nothing_lost(before, rerun),
        rerun=(
            f"the node booted again by itself (sshd held back 40 s at boot); re-run exit "
            f"{rerun.rc} after {rerun.seconds:.0f} s"
        ),
    )
