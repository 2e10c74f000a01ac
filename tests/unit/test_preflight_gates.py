"""The preflight's gate check (roles/validation/tasks/preflight.yml), run as the role runs it.

The task's own argv expression is rendered with the inventory's values and executed with the
gates on stdin, as Ansible does: this pins the interface between the role and
`python -m specdeploy.node.validation.gate --validate` (issue 19: bad gates are a one-line error
naming the
key, before anything on a node changes).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "validation" / "tasks" / "preflight.yml"


def gate_task() -> dict:
    tasks = yaml.safe_load(TASKS.read_text())
    (task,) = [t for t in tasks if "specdeploy.node.validation.gate" in str(t)]
    return task


def preflight(gates: dict, k: int = 3, levels=(1, 8, 32), speculative: bool = True):
    """(exit code, the message the role's assert shows) for these inventory values."""
    command = gate_task()["specdeploy.toolkit.controller_check"]
    argv = ast.literal_eval(
        jinja2.Environment()
        .from_string(command["argv"])
        .render(
            ansible_playbook_python=sys.executable,
            validation_concurrency=list(levels),
            # the config the node serves (roles/specdeploy/vars: the knob with a resolved schedule)
            specdeploy_speculative_config_served={"num_speculative_tokens": k},
            specdeploy_speculative_enabled=speculative,
        )
    )
    proc = subprocess.run(
        argv, input=json.dumps(gates), capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    message = re.sub(r"^gates /dev/stdin: ", "", lines[-1]) if lines else ""
    return proc.returncode, message, lines


def test_the_task_calls_the_gate_validator_with_the_gates_on_stdin():
    command = gate_task()["specdeploy.toolkit.controller_check"]
    assert "'--validate', '/dev/stdin'" in command["argv"]
    assert command["stdin"] == "{{ specdeploy_release_gates | to_json }}"


def test_the_default_gates_pass():
    code, _, lines = preflight(
        {"min_mean_acceptance_length": 1.5, "per_position_floors": [], "min_speed_up": 1.0,
         "max_regression_vs_previous": 0.05}
    )  # fmt: skip
    assert code == 0, lines


@pytest.mark.parametrize(
    ("gates", "names"),
    [
        ({"per_position_floors": [0.5, 0.4, 0.3, 0.2]}, ["per_position_floors", "3"]),
        ({"min_speed_up": {1: 0.8, 16: 1.0}}, ["min_speed_up", "16"]),
        ({"min_speedup": 1.0}, ["min_speedup"]),
        ({"max_regression_vs_previous": 5}, ["max_regression_vs_previous"]),
        ({"speed_up_waiver": 7}, ["speed_up_waiver"]),
    ],
)
def test_bad_gates_are_one_line_errors_naming_the_key(gates, names):
    code, message, lines = preflight(gates)
    assert code == 2 and len(lines) == 1, lines
    for name in names:
        assert name in message, message


def test_a_waiver_and_a_map_by_level_are_accepted():
    code, _, lines = preflight(
        {"min_speed_up": {1: 0.8, 8: 1.0, 32: 1.2}, "speed_up_waiver": "A/B of the new drafter"}
    )
    assert code == 0, lines


def test_without_speculation_the_floors_are_not_checked_against_k():
    code, _, lines = preflight({"per_position_floors": [0.5, 0.4, 0.3, 0.2]}, speculative=False)
    assert code == 0, lines
