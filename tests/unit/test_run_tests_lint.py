"""`make test` lints in a session of the test runner, beside the tests (scripts/run_tests.py):
the lint still gates the run, once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts import run_tests

REPO = Path(__file__).resolve().parents[2]


def test_make_test_lints_through_the_runner_once() -> None:
    names = [name for name, _paths in run_tests.sessions()]
    assert names.count("lint") == 1
    assert run_tests.COMMANDS["lint"][-1] == "lint"
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    test_rule = re.search(r"^test:([^#\n]*)", makefile, re.M)
    assert test_rule is not None
    assert "lint" not in test_rule.group(1).split(), "lint would run twice"


@pytest.mark.parametrize(("command", "exit_code"), [(["true"], 0), (["false"], 1)])
def test_a_failing_lint_fails_the_run(
    command: list[str], exit_code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    monkeypatch.setattr(run_tests, "LOGS", logs)
    monkeypatch.setattr(run_tests, "CENSUS", logs / "census")
    monkeypatch.setattr(run_tests, "DURATIONS", logs / "durations.json")
    monkeypatch.setattr(run_tests, "CPU", logs / "cpu.json")
    monkeypatch.setattr(run_tests, "COMMANDS", {"lint": command})
    assert run_tests.main(["--only", "lint"]) == exit_code
    assert (logs / "lint.log").is_file()
