"""Issue 28 item 3 on four nodes: a canary-then-stages deploy under live traffic loses no request.

Four sandbox nodes behind the sandbox's HAProxy; release A everywhere, then release B with the
deploy's default stages (`[1, '50%']`: the canary, then two nodes at once, then the last) while
two client threads stream chat requests through the balancer. The row goes to
docs/live-traffic.md with test_live_traffic's (livetraffic.record).
"""

from __future__ import annotations

import livetraffic
import pytest
from test_deploy_support import Deploy, stage_models
from test_live_traffic import A, B, planned_release, serving, under_traffic, wait_in_rotation

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def cluster(sandbox):
    return sandbox(4)


def test_a_canary_then_stages_deploy_of_four_nodes_loses_no_request(cluster):
    hosts = [n.hostname for n in cluster.nodes]
    play = Deploy(cluster)
    stage_models(play)
    first = play(extra={**A, "specdeploy_rollout_stages": ["100%"]})
    assert first.returncode == 0, first.tail()
    release_a = planned_release(first)
    assert wait_in_rotation(hosts) == dict.fromkeys(hosts, "in rotation")

    run, summary = under_traffic(lambda: play(extra=B))  # the default stages
    release_b = planned_release(run) if run.returncode == 0 else "?"
    states = wait_in_rotation(hosts, timeout_s=10)
    livetraffic.record(
        "7-fleet-stages",
        {
            "scenario": "deploy of a new release, canary then stages of 2 and 1 (4 nodes)",
            "nodes": "; ".join(f"{h}: {release_b}, {states.get(h, '?')}" for h in hosts),
            **summary,
        },
    )
    assert run.returncode == 0, run.tail()
    assert release_b != release_a
    assert serving(cluster) == dict.fromkeys(hosts, release_b)
    assert states == dict.fromkeys(hosts, "in rotation"), states
    out = run.stdout
    for host in hosts:
        assert f"{host}: out of rotation (HAProxy vllm/{host} state drain" in out, run.tail()
        assert f"{host}: back in rotation (HAProxy vllm/{host} state ready)" in out
    # the stages, in the order the output shows them: the canary is back before any other
    # node leaves; the second stage (two nodes) is back before the last node leaves
    canary, second, last = hosts[0], hosts[1:3], hosts[3]
    assert all(
        out.index(f"{canary}: back in rotation") < out.index(f"{h}: out of rotation")
        for h in hosts[1:]
    )
    assert all(
        out.index(f"{h}: back in rotation") < out.index(f"{last}: out of rotation") for h in second
    )
    # what a user of the fleet checks: requests kept flowing, none failed, none was cut
    assert summary["sent_during"] >= 10, summary
    assert summary["failed"] == 0 and summary["cut"] == 0, summary["problems"]
    assert summary["completed"] == summary["sent"]
