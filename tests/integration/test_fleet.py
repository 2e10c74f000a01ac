"""Fleet rollouts on three sandbox nodes (issue 8): canary first, then stages, one release id.

The module deploys release A to all three nodes at once, then rolls release B (the same inputs
with 4 speculative tokens instead of 3) in stages. A node is made to fail its acceptance gate
the way an operator's inventory would: a host_vars file with a stricter gate (gates are not part
of the release id, so every node still plans the same release). The assertions read what an
operator reads: the exit code, the failing node's message, which release each node serves
(over SSH, from the `current` symlink, and the server answering), and `make status`.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path

import pytest
from test_deploy_support import ROOT, Deploy, stage_models

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

SPECULATIVE = {
    "method": "eagle3",
    "model": "/srv/models/tiny-dsv3-eagle3",
    "num_speculative_tokens": 3,
}
# Short waits for the stand-in; the settle check still runs.
FAST = {"rollback_settle_s": 3, "specdeploy_start_timeout_s": 60}
A = {**FAST, "specdeploy_speculative_config": SPECULATIVE}
B = {**FAST, "specdeploy_speculative_config": {**SPECULATIVE, "num_speculative_tokens": 4}}
# The stand-in's mean acceptance length is about 3: this gate cannot pass.
IMPOSSIBLE_GATE = {"specdeploy_gates": {"min_mean_acceptance_length": 50.0, "min_speed_up": 1.0}}
ALL_AT_ONCE = {"specdeploy_rollout_stages": ["100%"]}
ONE_BY_ONE = {"specdeploy_rollout_stages": [1]}


@pytest.fixture(scope="module")
def cluster(sandbox):
    return sandbox(3)


@pytest.fixture(scope="module")
def hosts(cluster):
    return [n.hostname for n in cluster.nodes]


def host_vars(play: Deploy, host: str, data: dict | None) -> None:
    """Write (or remove) the inventory's host_vars file for one node."""
    directory = Path(play.inventory) / "host_vars"
    if data is None:
        shutil.rmtree(directory, ignore_errors=True)
        return
    directory.mkdir(exist_ok=True)
    (directory / f"{host}.yml").write_text(json.dumps(data) + "\n")


def serving(cluster) -> dict[str, str]:
    """node -> the release its `current` symlink points at ('' for none)."""
    out = {}
    for node in cluster.nodes:
        link = cluster.ssh(node, f"readlink {ROOT}/current", check=False).stdout.strip()
        out[node.hostname] = link.rsplit("/", 1)[-1]
    return out


def releases_on(cluster, node) -> list[str]:
    return cluster.ssh(node, f"ls {ROOT}/releases", check=False).stdout.split()


def answers(node) -> bool:
    """The server on the node answers a completion, asked from the controller over HTTP."""
    body = json.dumps({"model": "tiny-dsv3", "prompt": "one two", "max_tokens": 4}).encode()
    request = urllib.request.Request(
        f"http://{node.address}:8000/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return bool(json.loads(response.read())["choices"][0]["text"])


def planned_release(run) -> str:
    """The release the plan showed (playbooks/plan.yml, the deploy's first play)."""
    match = re.search(r'^\s*"release ([^:"]+): vLLM ', run.stdout, re.M)
    assert match, f"no plan in the output:\n{run.tail()}"
    return match.group(1)


# What a deploy would change on a node: the release root, the service user, the settings files.
NODE_STATE = (
    f"sudo -n find {ROOT} /etc/specdeploy /etc/sysctl.d /etc/security/limits.d "
    "-printf '%p %s %T@ %m %u\\n' 2>/dev/null | sort; getent passwd vllm; getent group vllm; "
    "dpkg-query -W -f '${Package}\\n' 2>/dev/null | sort | md5sum"
)


def test_a_node_failing_the_hardware_doctor_leaves_every_node_untouched(cluster, play, hosts):
    """Issue 16, point 2: the doctor runs on every node before anything changes anywhere."""
    stage_models(play)
    before = {n.hostname: cluster.ssh(n, NODE_STATE).stdout for n in cluster.nodes}
    # Nothing deployed yet: no release root, no service user, no settings file.
    for state in before.values():
        assert ROOT not in state and "vllm:" not in state and "90-specdeploy" not in state, state
    cluster.set_scenario(cluster.nodes[2], "seven_gpus")
    try:
        run = play(extra={**A, **ALL_AT_ONCE})
    finally:
        cluster.set_scenario(cluster.nodes[2], "healthy")
    assert run.returncode == 2, run.tail()
    message = run.failure_message()
    assert message.startswith(f"{hosts[2]}: hardware preflight failed: gpu_count: "), message
    assert "7 GPUs visible, expected 8" in message, message
    # Every node, the two healthy ones included, is exactly as it was.
    assert {n.hostname: cluster.ssh(n, NODE_STATE).stdout for n in cluster.nodes} == before
    assert "TASK [gpu_node : Install the OS packages" not in run.stdout, run.tail()
    assert "PLAY [Provision the GPU nodes]" not in run.stdout, run.tail()


def rollout_failing_on(play: Deploy, host: str, extra: dict):
    """Roll out with an impossible gate on one node; the run, the release and the message."""
    host_vars(play, host, IMPOSSIBLE_GATE)
    try:
        run = play(extra=extra)
    finally:
        host_vars(play, host, None)
    assert run.returncode == 2, run.tail()
    release = planned_release(run)
    message = run.failure_message()
    assert f"deploy of release {release} on {host} FAILED" in message, message
    return run, release, message


@pytest.fixture(scope="module")
def release_a(play, cluster, hosts):
    stage_models(play)
    host_vars(play, hosts[0], None)
    run = play(extra={**A, **ALL_AT_ONCE})
    assert run.returncode == 0, run.tail()
    release = planned_release(run)
    assert set(serving(cluster).values()) == {release}
    return release


def test_first_rollout_puts_one_release_on_every_node(release_a, cluster, play):
    for node in cluster.nodes:
        assert answers(node)
    status = play("playbooks/status.yml")
    assert status.returncode == 0, status.tail()
    assert f"fleet: 3 node(s); every node serves {release_a}" in status.stdout
    for node in cluster.nodes:
        row = next(line for line in status.stdout.splitlines() if f'"{node.hostname} ' in line)
        assert release_a in row and "applied" in row and "active" in row and "pass" in row, row


def test_a_failed_canary_stops_the_rollout_and_leaves_the_others_untouched(
    release_a, cluster, play, hosts
):
    before = {n.hostname: releases_on(cluster, n) for n in cluster.nodes[1:]}
    run, release_b, message = rollout_failing_on(play, hosts[0], B)
    assert f"Rolled back automatically: release {release_a} serves again" in message
    assert f"not reached yet: {hosts[1]}, {hosts[2]}" in message, message
    # The canary went back to A; the rest never saw B: same releases, A serves and answers.
    assert serving(cluster) == dict.fromkeys(hosts, release_a)
    for node in cluster.nodes[1:]:
        assert releases_on(cluster, node) == before[node.hostname]
        assert release_b not in releases_on(cluster, node)
    assert all(answers(node) for node in cluster.nodes)
    assert run.recap(hosts[0])["failed"] == 1
    for host in hosts[1:]:  # they were checked (preflight, provisioning) and left as they were
        assert run.recap(host)["changed"] == 0 and run.recap(host)["failed"] == 0


def test_a_node_failing_in_the_second_stage_rolls_back_alone(release_a, cluster, play, hosts):
    run, release_b, message = rollout_failing_on(play, hosts[2], {**B, **ONE_BY_ONE})
    assert f"Rollout of {release_b}: it serves on {hosts[0]}, {hosts[1]};" in message, message
    assert "this is the last stage" in message, message
    # The canary and the first stage keep B; the failing node serves A again.
    assert serving(cluster) == {hosts[0]: release_b, hosts[1]: release_b, hosts[2]: release_a}
    assert all(answers(node) for node in cluster.nodes)
    for host in hosts[:2]:
        assert run.recap(host)["failed"] == 0
    assert run.recap(hosts[2])["failed"] == 1

    status = play("playbooks/status.yml")
    assert status.returncode == 0, status.tail()
    assert f"releases served: {release_a}, {release_b}" in status.stdout or (
        f"releases served: {release_b}, {release_a}" in status.stdout
    )
    assert "one rollout serves one release" in status.stdout


def test_nodes_that_plan_different_releases_are_refused_before_any_change(
    release_a, cluster, play, hosts
):
    listing = {n.hostname: releases_on(cluster, n) for n in cluster.nodes}
    host_vars(play, hosts[1], {"specdeploy_max_model_len": 2048})
    try:
        run = play(extra=A)
    finally:
        host_vars(play, hosts[1], None)
    assert run.returncode == 2, run.tail()
    message = run.failure_message()
    assert "plan different releases" in message and "max_model_len" in message, message
    assert {n.hostname: releases_on(cluster, n) for n in cluster.nodes} == listing
    assert "Take the node's deploy lock" not in run.stdout
