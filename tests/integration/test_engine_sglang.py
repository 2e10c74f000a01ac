"""`specdeploy_engine: sglang` on a sandbox node (issue 29): a release that carries SGLang (the
real sglang 0.5.15 wheel in its venv, installed --no-deps as vLLM's is in the sandbox), its
unit launching `sglang.launch_server` (the stand-in's SGLang dialect, fitted to the recorded
H200 run), the gates from SGLang's own counters, and rollback across engines.

One node, one chain of three deploys (each costs minutes under load):

1. vLLM (the sandbox's default engine): the release to roll back to;
2. SGLang with the SGLang-exported drafter: passes the gates; per-position acceptance is
   "unavailable"; the release's venv holds sglang and no vLLM;
3. the same SGLang deploy again: changed=0;
then `make rollback` (playbooks/rollback.yml) brings the vLLM release back, serving; then
`make compare-engines` compares the two on that node and leaves vLLM serving; a rollback from
vLLM back to the SGLang release; and a new SGLang release whose speculation is slower than none
fails its speed-up gate and rolls back to that SGLang release.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest
from test_deploy_support import (
    REPO,
    Deploy,
    NodeState,
    exec_start_argv,
    flag_value,
    stage_models,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(3000)]

SGLANG = {
    "specdeploy_engine": "sglang",
    "specdeploy_drafter_path": "/srv/models/tiny-dsv3-eagle3-sglang",
}


class Chain:
    def __init__(self, cluster, root) -> None:
        self.play = Deploy(cluster)
        self.node = NodeState(cluster)
        self.host = self.play.host
        self.root = root
        self.runs = 0

    def run(self, playbook: str, extra: dict):
        run = self.play(playbook, extra={"validation_report_root": str(self.root), **extra},
                        timeout=1500)  # fmt: skip
        self.runs += 1
        (self.root / f"run-{self.runs}.log").write_text(run.stdout + run.stderr)
        return run

    def result(self, release: str) -> dict:
        path = f"/var/log/specdeploy/validation/{release}.json"
        return json.loads(self.node.sh(f"sudo -n cat {path}"))


@pytest.fixture(scope="module")
def chain(cluster, tmp_path_factory):
    c = Chain(cluster, tmp_path_factory.mktemp("reports"))
    cluster.set_scenario(cluster.nodes[0], "healthy")
    stage_models(c.play)
    return c


@pytest.fixture(scope="module")
def vllm_release(chain):
    run = chain.run("deploy.yml", {})
    assert run.returncode == 0, run.tail()
    return chain.node.current_release()


@pytest.fixture(scope="module")
def sglang_release(chain, vllm_release):
    run = chain.run("deploy.yml", SGLANG)
    assert run.returncode == 0, run.tail()
    release = chain.node.current_release()
    assert release != vllm_release and release.startswith("sglang-0.5.15-")
    return release


def test_sglang_release_serves_and_passes_sglangs_own_gates(chain, sglang_release):
    node = chain.node
    unit = node.sh("sudo -n cat /etc/systemd/system/vllm.service")
    argv = exec_start_argv(unit)
    assert argv[1].endswith("/tests/standin/sglang_standin.py"), argv  # the stand-in, named
    assert flag_value(argv, "--speculative-algorithm") == "EAGLE3"
    assert flag_value(argv, "--speculative-draft-model-path") == SGLANG["specdeploy_drafter_path"]
    assert flag_value(argv, "--speculative-num-steps") == "3"
    assert flag_value(argv, "--speculative-eagle-topk") == "1"
    assert flag_value(argv, "--speculative-num-draft-tokens") == "4"
    assert flag_value(argv, "--tp-size") == "8"
    assert flag_value(argv, "--attention-backend") == "triton"
    assert "--enable-metrics" in argv and "--speculative-config" not in argv
    # the same hardening as the vLLM unit
    assert "NoNewPrivileges=yes" in unit and "ProtectSystem=strict" in unit
    # the release's venv carries the real sglang wheel, and no vLLM
    venv = f"/opt/specdeploy/releases/{sglang_release}/venv"
    # (the venv's own Python lists what is installed: a venv uv made has no pip in it)
    listing = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
    )
    show = node.sh(f"sudo -n {venv}/bin/python -c {shlex.quote(listing)}")
    names = json.loads(show)
    assert names.get("sglang") == "0.5.15" and "vllm" not in names, names
    # gates judged on SGLang's counters, in vLLM's definition; per position unavailable
    res = chain.result(sglang_release)
    assert res["status"] == "pass", res.get("reasons")
    acc = res["acceptance"]
    assert acc["mean_acceptance_length"] >= 1.5 and acc["per_position_acceptance"] is None
    # SGLang's own log lines, through the journal
    # (counted over the whole journal: the validation's lines push them out of any fixed tail)
    for line in ("The server is fired up and ready to roll!", "accept len:"):
        found = node.sh(f"sudo -n journalctl -u vllm.service -o cat --no-pager | grep -cF '{line}'")
        assert int(found.strip() or 0) >= 1, line


def test_redeploy_of_the_sglang_release_changes_nothing(chain, sglang_release):
    run = chain.run("deploy.yml", SGLANG)
    assert run.returncode == 0, run.tail()
    assert run.recap(chain.host)["changed"] == 0, run.changed_tasks()
    assert chain.node.current_release() == sglang_release


def test_check_diff_of_an_sglang_change_changes_nothing(chain, sglang_release):
    """`--check --diff` with SGLang: a changed input shows what would change, nothing does."""
    pid = chain.node.sh("systemctl show -p MainPID --value vllm.service").strip()
    run = chain.play(
        "deploy.yml",
        "--check",
        "--diff",
        extra={"validation_report_root": str(chain.root), **SGLANG,
               "specdeploy_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4}},
    )  # fmt: skip
    (chain.root / "check-diff.log").write_text(run.stdout + run.stderr)
    assert run.returncode == 0, run.tail()
    assert run.recap(chain.host)["failed"] == 0
    assert chain.node.current_release() == sglang_release
    assert chain.node.sh("systemctl show -p MainPID --value vllm.service").strip() == pid


def test_rollback_to_the_vllm_release(chain, vllm_release, sglang_release):
    run = chain.run("playbooks/rollback.yml", SGLANG)
    assert run.returncode == 0, run.tail()
    assert chain.node.current_release() == vllm_release
    argv = exec_start_argv(chain.node.sh("sudo -n cat /etc/systemd/system/vllm.service"))
    assert "serve" in argv and "--speculative-config" in argv, argv
    assert chain.node.sh("systemctl is-active vllm.service").strip() == "active"


def test_compare_engines_prints_both_per_level_and_leaves_what_served(
    chain, vllm_release, sglang_release
):
    """`make compare-engines` on the node vLLM serves again: vLLM's deploy finds it serving
    (nothing restarts), SGLang's switches and validates, then vLLM is brought back."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    sglang_vars = {k: v for k, v in SGLANG.items() if k != "specdeploy_engine"}
    argv = [str(REPO / ".venv/bin/python"), "-m", "specdeploy.controller.compare_engines", "run",
            "-i", str(chain.play.inventory), "--node", chain.host,
            "--db", str(chain.root / "history.sqlite"),
            "--set", "sglang=" + json.dumps(sglang_vars),
            "--", "-e", json.dumps({"validation_report_root": str(chain.root)})]  # fmt: skip
    run = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    (chain.root / "compare.log").write_text(run.stdout + run.stderr)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert any(line.startswith(f"vllm: release {vllm_release} (pass") for line in lines), lines
    assert any(line.startswith(f"sglang: release {sglang_release} (pass") for line in lines)
    rows = [line.split() for line in lines if line[:4].strip().isdigit()]
    for c in sorted({int(r[0]) for r in rows}):  # every level, both engines, a figure each
        engines = {r[1]: r[2] for r in rows if int(r[0]) == c}
        assert set(engines) == {"vllm", "sglang"} and all(float(v) > 0 for v in engines.values())
    assert any(line.startswith("winner at the load mix (") for line in lines), lines[-5:]
    assert lines[-1] == f"compare-engines: {vllm_release} serves again"
    assert chain.node.current_release() == vllm_release
    assert chain.node.sh("systemctl is-active vllm.service").strip() == "active"


def test_rollback_from_vllm_back_to_the_sglang_release(chain, vllm_release, sglang_release):
    run = chain.run("playbooks/rollback.yml", {"rollback_to": sglang_release})
    assert run.returncode == 0, run.tail()
    assert chain.node.current_release() == sglang_release
    argv = exec_start_argv(chain.node.sh("sudo -n cat /etc/systemd/system/vllm.service"))
    assert argv[1].endswith("/tests/standin/sglang_standin.py"), argv
    assert chain.node.sh("systemctl is-active vllm.service").strip() == "active"


# Speculation 0.66x as fast as without (a speculative step costs 2.5 plain decode steps).
SLOW_SPECULATION = {
    "startup_delay_s": 1.0,
    "acceptance": [0.4, 0.15, 0.1],
    "tokens_per_s": 400.0,
    "spec_step_cost": 2.5,
}


def test_a_failed_sglang_speed_gate_rolls_back_to_the_sglang_release(chain, sglang_release):
    """A new SGLang release whose speculation is slower than none fails its speed-up gate on
    SGLang's own figures and the deploy brings the SGLang release before it back."""
    if chain.node.current_release() != sglang_release:
        run = chain.run("playbooks/rollback.yml", {"rollback_to": sglang_release})
        assert run.returncode == 0, run.tail()
    run = chain.run("deploy.yml", {**SGLANG, "specdeploy_standin_profile": SLOW_SPECULATION})
    assert run.returncode != 0, run.tail()
    message = run.failure_message()
    assert "speed-up 0." in message and "< 1.00 at c=" in message, message
    assert f"Rolled back automatically: release {sglang_release}" in message, message
    assert chain.node.current_release() == sglang_release
    assert chain.node.sh("systemctl is-active vllm.service").strip() == "active"
