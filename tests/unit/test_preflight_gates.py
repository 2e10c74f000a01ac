"""The preflight's gate check (plugins/plugin_utils/preflight.py, run by the action
specdeploy.toolkit.preflight_inputs), its command run as the action runs it.

The action's own command line is built with the inventory's values and executed with the gates
on stdin: this pins the interface between the action and
`python -m specdeploy.node.validation.gate --validate` (issue 19: bad gates are a one-line error
naming the key, before anything on a node changes), and the one-line refusal the deploy shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import (
    preflight as rules,
)

ROOT = Path(__file__).resolve().parents[2]


def preflight(gates: dict, k: int = 3, levels=(1, 8, 32), speculative: bool = True):
    """(exit code, the refusal the deploy shows, stderr lines) for these inventory values."""
    knobs = {
        "ansible_playbook_python": sys.executable,
        "validation_concurrency": list(levels),
        "specdeploy_speculative_enabled": speculative,
        "specdeploy_release_gates": gates,
    }
    # the config the node serves (roles/specdeploy/vars: the knob with a resolved schedule)
    command = rules.gates_command(knobs, {"num_speculative_tokens": k})
    proc = subprocess.run(
        command.argv, input=command.stdin, capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    answer = {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    errors = rules.gates_verdict(answer, "node1").errors
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return proc.returncode, errors[0] if errors else "", lines


def test_the_command_calls_the_gate_validator_with_the_gates_on_stdin():
    command = rules.gates_command(
        {"ansible_playbook_python": "python3", "validation_concurrency": [1, 8],
         "specdeploy_speculative_enabled": True, "specdeploy_release_gates": {"min_speed_up": 1}},
        {"num_speculative_tokens": 4},
    )  # fmt: skip
    assert command.argv[1:5] == [
        "-m",
        "specdeploy.node.validation.gate",
        "--validate",
        "/dev/stdin",
    ]
    assert command.argv[-4:] == ["--levels", "1,8", "--num-speculative-tokens", "4"]
    assert json.loads(command.stdin) == {"min_speed_up": 1}


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
    assert message.startswith("specdeploy_gates on node1: ") and "\n" not in message
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
