"""Controller checks run inside the worker (plugins/plugin_utils/controller_checks.py): the same
answer as the command in a new interpreter, exit status, stdout and stderr alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import controller_checks

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def in_a_new_process(argv: list[str], stdin: str | None = None) -> dict:
    proc = subprocess.run(
        argv, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def test_a_check_answers_in_process_as_it_does_in_a_new_interpreter() -> None:
    cases = [
        # a verdict on stdout (exit 0), a usage error (argparse: exit 2, stderr names the program)
        [PY, "-m", "specdeploy.controller.baseline_plan", "--levels", "1,4", "--knob", "0"],
        [PY, "-m", "specdeploy.controller.baseline_plan", "--levels", "1,1", "--knob", "nan"],
        [PY, "-m", "specdeploy.controller.inputs", "--no-such-flag"],
        # the balancer: no balancer (a note), an operator's hook that fails (exit 1, stderr)
        [PY, "-m", "specdeploy.controller.drain", "drain", "--node", "n1", "--json"],
        [PY, "-m", "specdeploy.controller.drain", "undrain", "--node", "n1", "--drain-command",
         "true", "--undrain-command", "echo refused >&2; exit 4"],
        # make status's deploy column, the monitoring render without input, the advisor's usage
        [PY, "-m", "specdeploy.controller.deploy_state", "show", "--nodes-json", "[]"],
        [PY, "-m", "specdeploy.controller.deploy_state", "show", "--nodes-json", "{"],
        [PY, "-m", "specdeploy.controller.monitoring", "-", "--json"],
        [PY, "-m", "specdeploy.controller.advisor", "--no-such-flag"],
    ]  # fmt: skip
    before = (os.getcwd(), sys.stdin, list(sys.argv), list(sys.path))
    for argv in cases:
        assert controller_checks.in_process_module(argv, str(REPO)) == argv[2]
        here = controller_checks.run_check(argv, None, str(REPO))
        assert here == in_a_new_process(argv), argv
    # the worker's state is as it was: directory, argv, streams
    assert (os.getcwd(), sys.stdin, sys.argv, sys.path) == before


def test_what_may_not_run_in_process_gets_a_new_interpreter() -> None:
    gate = [PY, "-m", "specdeploy.node.validation.gate", "--validate", "/dev/stdin"]
    other_python = ["/usr/bin/env", "-m", "specdeploy.controller.inputs"]
    for argv in (gate, other_python, ["true"]):
        assert controller_checks.in_process_module(argv, str(REPO)) is None
    # a check of another checkout's code (a copy the test suite edits) must not get this one's
    import specdeploy  # noqa: F401 - this checkout's package, now loaded in this process

    inputs = [PY, "-m", "specdeploy.controller.inputs"]
    assert controller_checks.in_process_module(inputs, "/elsewhere") is None
    assert controller_checks.in_process_module(inputs, str(REPO)) == inputs[2]
