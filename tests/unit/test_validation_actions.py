"""The validation role's node-side actions under real ansible-playbook on a local connection:
specdeploy.toolkit.validation_result (plugins/action/validation_result.py) reads the result the
checker wrote, else builds the could-not-measure one naming the node, release and the checker's
last lines; specdeploy.toolkit.validation_baseline (plugins/action/validation_baseline.py) asks
the baseline plan only for a speculative release and reads the deploy's measurements."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run_tasks(tmp_path: Path, tasks: str, host_vars: dict) -> list[dict]:
    inventory = {
        "all": {
            "hosts": {"node1": {}},
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "specdeploy_toolkit_dir": str(REPO),
                **host_vars,
            },
        }
    }
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    return [task["hosts"]["node1"] for task in plays[0]["tasks"]]


def test_the_result_is_read_else_built_on_the_controller(tmp_path: Path) -> None:
    written = tmp_path / "written.json"
    written.write_text(json.dumps({"exit_code": 1, "reasons": ["speed-up 0.9 < 1.0"]}))
    run = {"rc": 2, "stderr": "a\nb\nc\nTraceback: boom\n"}
    tasks = (
        "    - specdeploy.toolkit.validation_result:\n"
        f"        run: {json.dumps(run)}\n"
        f"      vars: {{validation_out: {written}}}\n"
        "    - specdeploy.toolkit.validation_result:\n"
        f"        run: {json.dumps(run)}\n"
        f"      vars: {{validation_out: {tmp_path / 'none.json'}}}\n"
    )
    host_vars = {
        "validation_release_id": "rel-1",
        "specdeploy_local_url": "http://127.0.0.1:8000",
        "specdeploy_served_model_name": "qwen",
    }
    read, built = run_tasks(tmp_path, tasks, host_vars)
    assert read["written"] is True and read["result"]["exit_code"] == 1, read
    assert read["verdict"] == (
        "validation of release rel-1 on node1 failed a check or gate (exit 1): speed-up 0.9 < 1.0"
    )
    assert built["written"] is False, built
    result = built["result"]
    assert result["node"] == "node1" and result["release"] == "rel-1"
    assert result["served_model_name"] == "qwen" and result["exit_code"] == 2
    reason = "the checker wrote no result (exit 2): b / c / Traceback: boom"
    assert result["reasons"] == [f"could not measure: {reason}"]
    assert built["verdict"].startswith("validation of release rel-1 on node1 could not measure")


def test_the_baseline_plan_is_asked_only_for_a_speculative_release(tmp_path: Path) -> None:
    start_out = tmp_path / "start.json"
    previous_out = tmp_path / "previous.json"
    previous_out.write_text(json.dumps({"speculative": False, "levels": {}}))
    tasks = (
        "    - specdeploy.toolkit.validation_baseline:\n"
        "      vars: {validation_measure_baseline: true}\n"
        "    - specdeploy.toolkit.validation_baseline:\n"
        "      vars: {validation_measure_baseline: false, validation_baseline_tps: 500}\n"
        "    - specdeploy.toolkit.validation_baseline:\n"
        "      vars: {validation_measure_baseline: false}\n"
    )
    host_vars = {
        "validation_baseline_start_out": str(start_out),
        "validation_previous_out": str(previous_out),
        "validation_concurrency": [1, 8],
        "validation_baseline_tps": 0,
        "validation_baseline_from_history": False,
        "validation_history_db": str(tmp_path / "history.sqlite"),
        "specdeploy_served_model_name": "qwen",
        "specdeploy_tensor_parallel_size": 1,
        "specdeploy_pipeline_parallel_size": 1,
        "validation_hardware": "",
    }
    measures, knob, serving = run_tasks(tmp_path, tasks, host_vars)
    assert measures["planned"] == {}, measures
    assert measures["baseline"]["argv"] == ["--no-spec-baseline"]
    assert measures["baseline"]["previous_argv"] == ["--previous-file", str(previous_out)]
    assert knob["planned"]["source"] == "knob", knob
    assert knob["baseline"]["argv"] == [
        "--baseline-tps",
        "1=500.0,8=500.0",
        "--baseline-source",
        "knob",
    ]
    # no knob, no history: the replaced release ran without speculation, so it is the baseline
    assert serving["baseline"]["source"] == "serving-release", serving
    assert serving["baseline"]["argv"] == [
        "--baseline-file", str(previous_out), "--baseline-source", "serving-release",
    ]  # fmt: skip
