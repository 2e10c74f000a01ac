"""Fault group `first`: a first deploy that fails, the base release, a concurrent deploy and
the readiness faults (never healthy, port open but hanging). See faultlib for the harness."""

from __future__ import annotations

import time
import urllib.request

import pytest
from faultlib import (
    LOCKS,
    PORT,
    PROBE_TIMEOUT_S,
    ROOT,
    SERVICE,
    START_TIMEOUT_S,
    deploy_base,
    first_release_of,
    probes_of,
    profile,
    record,
)

GROUP = "first"
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


def test_first_deploy_that_fails_stops_the_server(node, ids):
    """Smoke text wrong on the very first deploy: nothing to go back to -> stopped."""
    run = node(extra={"specdeploy_standin_profile": profile("wrong-text")})
    ids["W"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "did not become ready within" in run.message
    assert "no earlier release to go back to: the server is stopped" in run.message
    assert node.service_state() in ("inactive", "failed")
    assert node.current() is None
    manifest = node.manifest(ids["W"])
    assert manifest["status"] == "failed" and "did not become ready" in manifest["failure_reason"]
    assert node.ledger()[-1]["action"] == "failed-first-deploy"
    record(
        "first-deploy-fails",
        run,
        "nothing serves (service inactive, no `current`)",
        f"release {ids['W']} kept, status failed",
    )

    # `make rollback` with nothing to go back to: a clear refusal, nothing changed.
    before = node.ledger()
    refused = node.make("rollback")
    assert refused.rc != 0
    assert "REFUSED" in refused.message and "no earlier release to go back to" in refused.message
    assert "Nothing was changed" in refused.message
    assert node.ledger() == before and node.current() is None
    record("rollback-nothing-earlier", refused, "nothing serves (as before)", "ledger unchanged")

    # Still no release ever served; this one passes its smoke check but fails only its
    # speculative gate (acceptance). Under the default policy (rollback) there is nothing to
    # go back to: the same inputs serve without speculation (what its baseline start just
    # measured), and the run exits non-zero saying so (issue 28 item 5).
    gated = node(extra={"specdeploy_standin_profile": profile("low-acceptance")})
    ids["G"] = first_release_of(gated)
    assert gated.rc == 2, gated.message
    assert "failed a check or gate" in gated.message and "acceptance" in gated.message.lower()
    assert "FIRST DEPLOY FAILED ITS SPECULATIVE GATES" in gated.message
    assert "SPECULATION IS OFF" in gated.message
    assert "the server is stopped" not in gated.message
    nospec = node.current()
    assert nospec not in (None, ids["G"], ids["W"])
    assert f"Release {nospec} " in gated.message
    node.serves(nospec)
    unit = node.sh(f"cat /etc/systemd/system/{SERVICE}.service")
    assert "--speculative-config" not in unit
    manifest = node.manifest(nospec)
    assert manifest["inputs"]["speculative_config"] is None
    assert manifest["speculation_disabled"]["derived_from"] == ids["G"]
    assert manifest["speculation_disabled"]["policy"] == "first-deploy"
    assert node.manifest(ids["G"])["status"] == "failed"
    assert node.sh(f"test -d {ROOT}/releases/{ids['G']} && echo kept").strip() == "kept"
    with urllib.request.urlopen(f"http://{node.node.address}:{PORT}/metrics", timeout=10) as r:
        assert "spec_decode" not in r.read().decode()


def test_base_release_deploys_and_serves(node, ids):
    deploy_base(node, ids)


def test_concurrent_deploy_is_refused_and_never_healthy_rolls_back(node, ids):
    before = node.snapshot()
    first = node.start(extra={"specdeploy_standin_profile": profile("never-healthy")})
    deadline = time.monotonic() + 600
    while not node.sh(f"test -e {LOCKS}/.deploy.lock && echo held || true").strip():
        assert first.poll() is None, "the first deploy ended before it took the lock"
        assert time.monotonic() < deadline, "the first deploy never took the lock"
        time.sleep(0.5)
    ledger_before = node.ledger()
    try:
        second = node()
    finally:  # the first run always ends here: a failure below must not leave it holding the lock
        run = node.finish(first)
    assert second.rc == 2
    assert "REFUSED: another run holds the deploy lock" in second.message
    assert f"ansible-playbook pid {first.pid}" in second.message
    assert "changed nothing" in second.message
    assert second.stats().get("changed", 0) == 0
    assert not second.ran("Build the release")
    record(
        "concurrent-deploy",
        second,
        "the first deploy went on (below)",
        "no task changed anything",
    )

    ids["NH"] = first_release_of(run)
    # The ledger grew by the first run's switch to its release and its rollback from it, and by
    # nothing of the refused run's (the first run went on meanwhile: read it only now).
    added = node.ledger()[len(ledger_before) :]
    assert added and all(ids["NH"] in (e["release"], e.get("previous")) for e in added), added
    assert run.rc == 2, run.message
    assert "did not become ready within" in run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    answer = node.serves(ids["A"])
    assert node.manifest(ids["NH"])["status"] == "failed"
    assert node.sh(f"test -e {LOCKS}/.deploy.lock && echo held || true").strip() == ""
    record(
        "never-healthy",
        run,
        f"release A={ids['A']} serves and answers ({answer.strip()[:30]!r})",
        node.nothing_lost(before),
    )


def test_port_open_but_not_answering_rolls_back(node, ids):
    """Every request hangs. With a 1 s poll the readiness loop may make 21 probes; each lasts
    its whole timeout, so a loop bounded only by retries makes all 21 (> 80 s). Bounded by wall
    time it gives up after the start timeout, a few probes in (the message counts them)."""
    before = node.snapshot()
    run = node(
        extra={"specdeploy_standin_profile": profile("hang"), "specdeploy_readiness_poll_s": 1}
    )
    ids["H"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "did not become ready within" in run.message
    assert f"Rolled back automatically: release {ids['A']} serves again" in run.message
    retries = START_TIMEOUT_S // 1 + 1
    probes = probes_of(run)
    # stopped by the clock (start timeout), not after all the retries a 1 s poll allows
    assert probes < retries, (probes, retries)
    node.serves(ids["A"])
    assert node.manifest(ids["H"])["status"] == "failed"
    record(
        "port-hangs",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
        waited=(
            f"readiness gave up after {probes} probes, by the clock (start timeout "
            f"{START_TIMEOUT_S} s, probe timeout {PROBE_TIMEOUT_S} s; a 1 s poll allows {retries})"
        ),
    )
