"""playbooks/downtime.yml, the last play of a deploy, run by real Ansible on the controller with
the facts a deploy with a baseline start leaves (issue 28): every window is said (the baseline
start's and the start with speculation), with per-level figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_history_starts import BASELINE_DOC, WINDOW

from specdeploy.controller import history

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_the_deploy_ends_with_every_window_per_level(tmp_path) -> None:
    db = tmp_path / "history.sqlite"
    windows = [
        {"release": "r2", "action": "baseline-start", "restarted": True, "window": WINDOW},
        {"release": "r2", "action": "deploy", "restarted": True, "window": WINDOW},
    ]
    validation = {
        "release": "r2",
        "run_id": "v1",
        "acceptance": {"output_tokens_per_s": {"median": 112.04}, "speed_up": {"median": 1.83}},
        "speed": {"levels": [{"concurrency": 1, "output_tps": 112.04, "speed_up": 1.8354},
                             {"concurrency": 8, "output_tps": 610.0, "speed_up": 1.5137}]},
    }  # fmt: skip
    facts = {
        "vllm_service_downtime": windows[-1],
        "vllm_service_downtimes": windows,
        "validation_result": validation,
        "validation_baseline_start_run": {"rc": 0, "stdout": json.dumps(BASELINE_DOC)},
    }
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    (tmp_path / "hosts.yml").write_text(
        "gpu_nodes:\n  hosts:\n    n1:\n      ansible_connection: local\n"
        f"      validation_history_db: {db}\n"
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_vars: {file: facts.json}\n"
        f"- ansible.builtin.import_playbook: {REPO}/playbooks/downtime.yml\n"
    )
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.yml", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # the JSON callback's document (profile_tasks, enabled in ansible.cfg, prints after it)
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    said = next(
        t["hosts"]["localhost"].get("msg", t["hosts"]["localhost"])
        for p in plays
        for t in p["tasks"]
        if t["task"]["name"] == "Say the measured downtime window per node"
    )
    assert said == [
        "n1: downtime window 7.5 s (baseline-start of r2; stop 1.0 s, weights 4.0 s, compile 2.5 s)"
        "; measured without speculation: c=1 61.0 tok/s, c=8 403.0 tok/s",
        "n1: downtime window 7.5 s (deploy of r2; stop 1.0 s, weights 4.0 s, compile 2.5 s)"
        "; validated: c=1 112.0 tok/s 1.84x, c=8 610.0 tok/s 1.51x",
    ]
    assert len(history.starts(history.connect(db))) == 2
