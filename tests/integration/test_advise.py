"""`make advise` on a sandbox node with the stand-in: the k table from a serving speculative
release and the node's no-speculation baseline in the history, without restarting anything."""

from __future__ import annotations

import re

import pytest
from integration.test_validate import Env, profile

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def env(sandbox, tmp_path_factory):
    cluster = sandbox(1)
    cluster.set_scenario(cluster.nodes[0], "healthy")
    e = Env(cluster, tmp_path_factory.mktemp("reports"))
    staged = e.playbook("tests/playbooks/stage-models.yml")
    assert staged.returncode == 0, staged.stdout[-3000:]
    # One clean deploy, as a new user runs it: its baseline start (the model without
    # speculation, measured before the release with speculation starts) is kept in the
    # controller's history, which is where `make advise` finds the node's baseline.
    e.deploy({"specdeploy_standin_profile": profile("pass")})
    return e


def main_pid(e: Env) -> str:
    return e.ssh("systemctl show -p MainPID,NRestarts --value vllm.service").strip()


def test_advise_prints_the_k_table_without_a_restart(env):
    before = main_pid(env)
    proc = env.playbook(
        "playbooks/advise.yml",
        {
            "advise_levels": [1],
            "advise_min_window_s": 1,
            "advise_repeats": 1,
            "advise_k_max": 5,
            "advise_history_db": str(env.history),
            "advise_out_dir": str(env.root / "advice"),
        },
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert main_pid(env) == before  # same server process, no restart
    # The table: the deployed k=3 measured, k=4 and 5 extrapolated, a recommendation.
    assert re.search(r"deployed k=3, per-position acceptance 0\.\d\d/0\.\d\d/0\.\d\d", out), out
    row = next(ln for ln in out.splitlines() if re.search(r'"\s+1\s+\d\.\d\d', ln))
    assert "*" in row and "~" in row and re.search(r"(k=\d|off)", row.split("~")[-1]), row
    # The node's inputs are kept next to the table.
    advice = env.root / "advice"
    assert (advice / f"{env.host}.metrics.txt").read_text().count(
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{"
    ) == 3
    assert '"speculative": true' in (advice / f"{env.host}.spec.json").read_text()


def test_advise_without_a_baseline_says_so(env, tmp_path):
    proc = env.playbook(
        "playbooks/advise.yml",
        {
            "advise_levels": [1],
            "advise_min_window_s": 0.5,
            "advise_repeats": 1,
            "advise_history_db": str(tmp_path / "empty.sqlite"),
            "advise_out_dir": str(tmp_path / "advice"),
        },
    )
    assert proc.returncode != 0
    assert "no such file" in proc.stdout + proc.stderr
