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


def test_the_root_file_system_builds_first_beside_the_nodeless_sessions() -> None:
    names = [name for name, _paths in run_tests.sessions()]
    assert names[0] == "rootfs" and names.count("rootfs") == 1
    assert run_tests.with_rootfs([("unit", []), ("lint", [])]) == [("unit", []), ("lint", [])]


def test_node_sessions_wait_for_the_root_file_system_and_the_others_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = tmp_path / "rootfs-built"
    early = tmp_path / "lint-ran-before-the-build-ended"
    logs = tmp_path / "logs"
    monkeypatch.setattr(run_tests, "LOGS", logs)
    monkeypatch.setattr(run_tests, "CENSUS", logs / "census")
    monkeypatch.setattr(run_tests, "DURATIONS", logs / "durations.json")
    monkeypatch.setattr(run_tests, "CPU", logs / "cpu.json")
    monkeypatch.setattr(
        run_tests,
        "COMMANDS",
        {
            "rootfs": ["sh", "-c", f"sleep 3; touch {built}"],
            "lint": ["sh", "-c", f"test ! -e {built} && touch {early}"],
        },
    )
    node_test = tmp_path / "test_needs_nodes.py"
    node_test.write_text(
        f"from pathlib import Path\n\ndef test_built():\n    assert Path({str(built)!r}).exists()\n"
    )
    argv = ["--session", f"test_needs_nodes={node_test}", "--session", "lint="]
    assert run_tests.main(argv) == 0
    assert early.exists(), "the lint waited for the root file system"
    assert (logs / "rootfs.log").is_file()
