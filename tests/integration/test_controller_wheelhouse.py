"""Downloads happen once on the controller, not once per node (issue 8), on two sandbox nodes.

With specdeploy_controller_wheelhouse set, the deploy fills that controller directory once for
the rollout (pip download for the nodes' platform), copies each node only the wheels it lacks,
and the node installs offline from its copy. The sandbox's own read-only wheelhouse mount is
switched off here (specdeploy_vllm_wheelhouse: ""), so a node that did not get the wheels could
not install. The controller's pip reads the sandbox cache as its mirror (PIP_FIND_LINKS,
PIP_NO_INDEX: what an operator with a local mirror sets), so the test needs no network.
"""

from __future__ import annotations

import json
import re

import pytest
from test_deploy_support import ROOT, Deploy, Run, stage_models
from testbed.sandbox.node_wheelhouse import ensure_node_wheelhouse

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

FILL_TASK = (
    "vllm_release : Fill the controller's wheelhouse"
    " (once for the rollout; downloads only what it lacks)"
)
COPY_TASK = "vllm_release : Copy the wheels the node lacks from the controller's wheelhouse"
SPECULATIVE = {
    "method": "eagle3",
    "model": "/srv/models/tiny-dsv3-eagle3",
    "num_speculative_tokens": 3,
}
RESULT = re.compile(r"^(?:ok|changed|skipping|failed|fatal): \[")
FAST = {
    "rollback_settle_s": 3,
    "specdeploy_start_timeout_s": 60,
    "specdeploy_rollout_stages": ["100%"],
}


@pytest.fixture(scope="module")
def cluster(sandbox):
    return sandbox(2)


@pytest.fixture(scope="module")
def controller_wheelhouse(tmp_path_factory):
    return tmp_path_factory.mktemp("controller") / "wheelhouse"


@pytest.fixture(scope="module")
def mirror_env() -> dict[str, str]:
    return {
        "PIP_NO_INDEX": "1",
        # the sandbox nodes' wheels (vLLM's without kernels: testbed.sandbox.node_wheelhouse)
        "PIP_FIND_LINKS": str(ensure_node_wheelhouse()),
    }


@pytest.fixture(scope="module")
def inputs(controller_wheelhouse):
    return {
        **FAST,
        "specdeploy_vllm_wheelhouse": "",
        "specdeploy_controller_wheelhouse": str(controller_wheelhouse),
        "specdeploy_speculative_config": SPECULATIVE,
    }


def task_results(run: Run, task: str) -> list[str]:
    """The result lines (`ok: [...]`, `changed: [...]`, `skipping: [...]`) of one task."""
    lines, inside = [], False
    for line in run.stdout.splitlines():
        if line.startswith(("TASK [", "PLAY ", "RUNNING HANDLER [")):
            inside = line.startswith("TASK [") and line[6 : line.rfind("]")] == task
        elif inside and RESULT.match(line):
            lines.append(line)
    return lines


def node_sums(cluster, node) -> dict[str, str]:
    text = cluster.ssh(node, f"cat {ROOT}/wheelhouse/SHA256SUMS").stdout
    return {name: digest for digest, name in (line.split() for line in text.splitlines())}


def serving(cluster) -> list[str]:
    return [
        cluster.ssh(n, f"readlink {ROOT}/current").stdout.strip().rsplit("/", 1)[-1]
        for n in cluster.nodes
    ]


@pytest.fixture(scope="module")
def first(play: Deploy, inputs, mirror_env) -> Run:
    stage_models(play)
    run = play(extra=inputs, env=mirror_env)
    assert run.returncode == 0, run.tail()
    return run


def test_the_first_rollout_downloads_once_and_every_node_installs_from_its_copy(
    first, cluster, controller_wheelhouse
):
    fills = task_results(first, FILL_TASK)
    assert len(fills) == 1 and fills[0].startswith("changed: ["), fills  # once, not per node
    fill = json.loads(
        next(p.read_text() for p in (controller_wheelhouse / ".fills").glob("vllm-0.16.0-*.json"))
    )["wheels"]
    assert any(name.startswith("vllm-0.16.0-") for name in fill)
    for node in cluster.nodes:
        assert node_sums(cluster, node) == fill
        # The copy is intact (sha256sum -c), and the release venv runs the vLLM it brought.
        cluster.ssh(node, f"cd {ROOT}/wheelhouse && sha256sum --quiet -c SHA256SUMS")
        version = cluster.ssh(
            node,
            f"{ROOT}/current/venv/bin/python -c "
            "'import importlib.metadata as m; print(m.version(\"vllm\"))'",
        ).stdout.strip()
        assert version == "0.16.0"
    assert len(set(serving(cluster))) == 1


def test_a_second_deploy_changes_nothing_and_fills_nothing(
    first, play, inputs, mirror_env, cluster
):
    run = play(extra=inputs, env=mirror_env)
    assert run.returncode == 0, run.tail()
    for node in cluster.nodes:
        assert run.recap(node.hostname)["changed"] == 0, run.changed_tasks()
    assert not any(line.startswith("changed") for line in task_results(run, FILL_TASK))


def test_a_new_release_reuses_the_wheels_the_controller_and_nodes_already_have(
    first, play, inputs, mirror_env, cluster
):
    before = serving(cluster)
    tokens = {**SPECULATIVE, "num_speculative_tokens": 4}
    run = play(extra={**inputs, "specdeploy_speculative_config": tokens}, env=mirror_env)
    assert run.returncode == 0, run.tail()
    after = serving(cluster)
    assert after[0] == after[1] and after[0] != before[0]
    fills = task_results(run, FILL_TASK)
    assert len(fills) == 1 and fills[0].startswith("ok: ["), fills  # a record: no download
    assert not any(line.startswith("changed") for line in task_results(run, COPY_TASK))


def test_both_wheelhouse_knobs_at_once_is_refused_before_anything_changes(
    first, play, inputs, mirror_env, cluster
):
    before = serving(cluster)
    run = play(extra={**inputs, "specdeploy_vllm_wheelhouse": "/srv/wheelhouse"}, env=mirror_env)
    assert run.returncode != 0
    message = run.failure_message()
    assert "set at most one of them" in message and "specdeploy_controller_wheelhouse" in message
    for node in cluster.nodes:
        assert run.recap(node.hostname)["changed"] == 0
    assert serving(cluster) == before


def test_check_mode_of_a_new_release_downloads_and_changes_nothing(
    first, play, inputs, mirror_env, cluster, controller_wheelhouse
):
    before = serving(cluster)
    releases = [cluster.ssh(n, f"ls {ROOT}/releases").stdout for n in cluster.nodes]
    fills = sorted(p.name for p in (controller_wheelhouse / ".fills").iterdir())
    tokens = {**SPECULATIVE, "num_speculative_tokens": 5}
    run = play(
        "deploy.yml",
        "--check",
        "--diff",
        extra={**inputs, "specdeploy_speculative_config": tokens},
        env=mirror_env,
    )
    assert run.returncode == 0, run.tail()
    assert serving(cluster) == before
    assert [cluster.ssh(n, f"ls {ROOT}/releases").stdout for n in cluster.nodes] == releases
    assert sorted(p.name for p in (controller_wheelhouse / ".fills").iterdir()) == fills
