"""The validation's command lines (plugins/plugin_utils/validation_argv.py): what the checker on
the node and the baseline plan on the controller are asked, from the role's variables."""

from __future__ import annotations

import json

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.validation_argv import argv

VALUES = {
    "inventory_hostname": "node1",
    "specdeploy_local_url": "http://127.0.0.1:8000",
    "specdeploy_served_model_name": "kimi",
    "specdeploy_tensor_parallel_size": 8,
    "specdeploy_pipeline_parallel_size": "1",
    "validation_release_dir": "/opt/specdeploy/releases/r1",
    "validation_release_id": "r1",
    "validation_release_speculative": "True",
    "validation_release_schedule": "",
    "validation_gates_file": "/opt/specdeploy/releases/r1/config/gates.json",
    "validation_gates_override_path": "/var/log/specdeploy/validation/gates-override.json",
    "validation_baseline": {"source": "history", "argv": ["--baseline-tps", "400"]},
    "validation_out": "/var/log/specdeploy/validation/r1.json",
    "validation_concurrency": [1, 8, 32],
    "validation_acceptance_concurrency": "4",
    "validation_max_requests": "12",
    "validation_time_budget_s": 300,
    "validation_repeats": 3,
    "validation_min_window_s": "2",
    "validation_endpoint": "chat",
    "validation_temperature": 0,
    "validation_top_p": 1,
    "validation_prompts_file": "",
    "validation_prompts_on_node": "/var/log/specdeploy/validation/prompts-shipped.jsonl",
    "validation_hardware": "NVIDIA RTX PRO 6000",
    "validation_api_key_file": "/etc/specdeploy/vllm.api-key",
    "validation_baseline_tps": {"1": 500, "8": 1900},
    "validation_baseline_from_history": "false",
    "validation_history_db": "/srv/reports/history.sqlite",
}


def flag(line: list[str], name: str) -> list[str]:
    return [line[i + 1] for i, item in enumerate(line) if item == name]


def test_the_check_runs_the_releases_own_checker_with_its_gates_and_the_workload() -> None:
    line = argv("all", VALUES)
    python = "/opt/specdeploy/releases/r1/venv/bin/python"
    assert line[:4] == [python, "-m", "specdeploy.node.validation.check", "all"]
    assert flag(line, "--gates") == [VALUES["validation_gates_file"]]
    assert flag(line, "--label") == [
        "speculative=true", "baseline=history", "model=kimi", "parallel=tp=8,pp=1",
        "hardware=NVIDIA RTX PRO 6000",
    ]  # fmt: skip
    workload = json.loads(flag(line, "--workload-json")[0])
    assert workload == {
        "levels": "1,8,32", "concurrency": 4, "max_requests": 12, "time_budget_s": 300.0,
        "repeats": 3, "min_window_s": 2.0, "endpoint": "chat", "temperature": 0.0, "top_p": 1.0,
        "prompts": None,
    }  # fmt: skip
    assert line[-2:] == ["--baseline-tps", "400"]  # the chosen baseline's own arguments last


def test_what_if_gates_a_schedule_and_a_prompt_file_show_in_the_check() -> None:
    values = VALUES | {
        "validation_gates": {"min_speed_up": 1.2},
        "validation_release_schedule": [[1, 4, 3], [5, 1024, 1]],
        "validation_prompts_file": "/srv/prompts.jsonl",
        "validation_prompts_on_node": "/var/log/specdeploy/validation/prompts-0a1b.jsonl",
    }
    line = argv("all", values)
    assert flag(line, "--gates") == [VALUES["validation_gates_override_path"]]
    assert "k_schedule=[[1, 4, 3], [5, 1024, 1]]" in flag(line, "--label")
    assert json.loads(flag(line, "--workload-json")[0])["prompts"].endswith("prompts-0a1b.jsonl")


def test_a_baseline_measurement_names_its_release_and_file_and_no_gates() -> None:
    values = VALUES | {"validation_hardware": "", "validation_api_key_file": ""}
    line = argv("baseline", values, release="r0", out="/tmp/r1.previous.json")
    assert line[3] == "baseline" and "--gates" not in line
    assert flag(line, "--release") == ["r0"] and flag(line, "--out") == ["/tmp/r1.previous.json"]
    assert flag(line, "--label") == ["model=kimi", "parallel=tp=8,pp=1"]  # no hardware known
    assert "--api-key-file" not in line
    with pytest.raises(ValueError, match="needs out"):
        argv("baseline", values, release="r0")


def test_the_baseline_plan_asks_the_history_only_when_told_to() -> None:
    line = argv("baseline-plan", VALUES)
    assert flag(line, "--history") == [""]
    assert flag(line, "--knob") == ['{"1": 500, "8": 1900}']
    assert flag(line, "--levels") == ["1,8,32"] and line[-1] == "--json"
    line = argv("baseline-plan", VALUES | {"validation_baseline_from_history": True})
    assert flag(line, "--history") == ["/srv/reports/history.sqlite"]
    with pytest.raises(ValueError, match="unknown command line"):
        argv("smoke", VALUES)
