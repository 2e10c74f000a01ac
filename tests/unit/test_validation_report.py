"""make validate's report and a node's result words (plugins/plugin_utils/validation_report.py,
plugins/filter/baseline_start.py, plugins/action/validation_measure.py): the paths, command lines
and messages are the ones the Jinja in playbooks/validate.yml and roles/validation made (the old
expressions are rendered here with Jinja for the comparison), and the report step under real
ansible-playbook writes a could-not-measure result for a node without one, the reports, latest
and the exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import jinja2
from ansible_collections.specdeploy.toolkit.plugins.action import validation_measure
from ansible_collections.specdeploy.toolkit.plugins.filter import baseline_start
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import validation_report as vr

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PATHS = {
    "validate_report_root": "/r",
    "validate_report_dir": "/r/run-01",
    "validate_history_db": "/r/history.sqlite",
}


def jinja(template: str, **values) -> str:
    return jinja2.Environment().from_string(template).render(**values)


def test_the_paths_default_under_the_root_and_the_knobs_win(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "playbooks").mkdir()
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    paths = vr.report_paths({}, str(tmp_path / "playbooks"), now)
    root = os.path.realpath(tmp_path / "reports")
    assert paths == {
        "validate_report_root": root,
        "validate_report_dir": f"{root}/20260102T030405Z",
        "validate_history_db": f"{root}/history.sqlite",
    }
    knobs = {"validation_report_root": "/x/../y", "validation_history_db": "/h.sqlite"}
    paths = vr.report_paths(knobs | {"validation_report_dir": "/d"}, "/p", now)
    assert paths == {
        "validate_report_root": "/y",
        "validate_report_dir": "/d",
        "validate_history_db": "/h.sqlite",
    }


def test_the_report_command_line_writes_every_report_and_the_textfile_only_when_asked() -> None:
    argv = vr.report_argv("py", PATHS, {})
    assert argv[:4] == ["py", "-m", "specdeploy.controller.report", "/r/run-01/results"]

    def flag(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag("--history") == "/r/history.sqlite" and "--record" in argv
    assert argv[argv.index("--regression-tolerance") + 1] == "0.1"
    assert flag("--json") == "/r/run-01/summary.json"
    assert flag("--html") == "/r/run-01/report.html"
    proms = [argv[i + 1] for i, a in enumerate(argv) if a == "--prom"]
    assert proms == ["/r/run-01/specdeploy_validation.prom", ""]  # an empty --prom is skipped
    knobs = {"validation_textfile_dir": "/t", "validation_regression_tolerance": 0.25}
    argv = vr.report_argv("py", PATHS, knobs)
    assert argv[-1] == "/t/specdeploy_validation.prom"
    assert argv[argv.index("--regression-tolerance") + 1] == "0.25"


def test_latest_and_the_exit_files() -> None:
    assert vr.latest_link(PATHS) == "/r/latest"
    assert vr.latest_link(PATHS | {"validate_report_dir": "/elsewhere/run"}) is None
    assert vr.exit_files(PATHS, {}) == ["/r/run-01/exit-code"]
    assert vr.exit_files(PATHS, {"validation_exit_file": "/tmp/x"})[1:] == ["/tmp/x"]


def test_the_words_are_the_ones_the_jinja_said() -> None:
    old_verdict = (
        "validation {{ 'FAILED (exit 1: a check, gate or regression failed)' if rc == 1"
        " else 'COULD NOT MEASURE (exit 2: a server did not answer or the run broke)' }};"
        " see the table above and {{ dir }}/report.html"
    )
    for rc in (1, 2):
        assert vr.report_verdict(rc, "/d") == jinja(old_verdict, rc=rc, dir="/d")
    answer = {"stdout": "TABLE\nrow", "stderr": "warn"}
    assert vr.shown_lines(answer, PATHS) == [
        "TABLE",
        "row",
        "warn",
        "reports: /r/run-01/{report.html,summary.json,junit.xml,specdeploy_validation.prom}",
        "history: /r/history.sqlite",
    ]
    old_gate = (
        "validation of release {{ r }} on {{ n }}"
        " {{ 'failed a check or gate' if res.exit_code == 1 else 'could not measure' }}"
        " (exit {{ res.exit_code }}): {{ res.reasons | join('; ') }}"
    )
    for result in ({"exit_code": 1, "reasons": ["a", "b"]}, {"exit_code": 2, "reasons": []}):
        said = vr.gate_verdict(result, "rel", "node1")
        assert said == jinja(old_gate, r="rel", n="node1", res=result)
    old_reason = (
        "the checker wrote no result (exit {{ run.rc }}):"
        " {{ (run.stderr | default('')).splitlines()[-3:] | join(' / ') }}"
    )
    run = {"rc": 2, "stderr": "one\ntwo\nthree\nfour\n"}
    assert vr.checker_failure_reason(run) == jinja(old_reason, run=run)
    assert vr.checker_failure_reason(run).endswith("two / three / four")


def test_the_could_not_measure_command_lines_name_what_is_known() -> None:
    argv = vr.not_measured_argv("py", node="n1", model="m", reason="why", out="/o.json")
    assert argv[3:] == [
        "not-measured", "--node", "n1", "--served-model-name", "m", "--reason", "why",
        "--out", "/o.json", "--keep",
    ]  # fmt: skip
    argv = vr.not_measured_argv("py", node="n1", model="m", reason="w", release="r", base_url="u")
    assert argv[3:] == [
        "not-measured", "--node", "n1", "--release", "r", "--base-url", "u",
        "--served-model-name", "m", "--reason", "w",
    ]  # fmt: skip


def test_the_baseline_start_words_are_the_ones_the_jinja_said() -> None:
    env = jinja2.Environment()
    old_failure = env.from_string(
        "baseline start of release {{ r }}: the release without speculation could not be measured"
        " (exit {{ run.rc }}): {{ ((run.stderr_lines | default([]))[-2:]"
        " + (run.stdout_lines | default([]))[-1:]) | join(' / ') | truncate(400) }}"
    )
    long_line = " ".join(["word"] * 150)
    for run in (
        {"rc": 3, "stderr_lines": ["a", "b", "c"], "stdout_lines": ["x", "y"]},
        {"rc": 1, "stderr_lines": [long_line], "stdout_lines": []},
    ):
        said = baseline_start.baseline_start_failure(run, "rel")
        assert said == old_failure.render(r="rel", run=run)
    run = {
        "rc": 0,
        "stdout": json.dumps({"levels": {"1": {"output_tps": 100.0}, "8": {"output_tps": 700.5}}}),
    }
    said = baseline_start.baseline_start_said(run, "rel", took_s=12.34)
    assert said.startswith(
        "baseline start of release rel (speculation off): c=1 100.0 tok/s, c=8 700.5 tok/s"
    )
    assert said.endswith(
        "; the baseline start took 12.3 s (start and measurement); now restarting it with"
        " speculation on"
    )


def test_the_check_removes_an_earlier_result_before_the_checker_runs(
    tmp_path: Path, monkeypatch
) -> None:
    asked = []

    def fake_argv(mode: str, values: dict, **options: str) -> list[str]:
        asked.append((mode, options))
        # a checker that says whether the result file is still there
        return ["sh", "-c", 'test ! -e "$0" && echo gone', values["validation_out"]]

    monkeypatch.setattr(validation_measure.validation_argv, "argv", fake_argv)
    out = tmp_path / "result.json"
    out.write_text("{}")
    values = {
        "validation_out": str(out),
        "validation_release_id": "new",
        "validation_serving_release": "old",
        "validation_previous_out": "/p.json",
        "validation_baseline_start_out": "/b.json",
    }
    run = subprocess.run(
        validation_measure.command_line("all", values), capture_output=True, text=True, check=False
    )
    assert run.returncode == 0 and run.stdout == "gone\n", run
    assert not out.exists()
    validation_measure.command_line("serving", values)
    validation_measure.command_line("baseline-start", values)
    assert asked == [
        ("all", {}),
        ("baseline", {"release": "old", "out": "/p.json"}),
        ("baseline", {"release": "new", "out": "/b.json"}),
    ]


def test_the_report_step_builds_the_missing_result_and_reports(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    exit_file = tmp_path / "exit"
    play = (
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - specdeploy.toolkit.validation_report: {step: prepare}\n"
        "    - ansible.builtin.set_fact: {validate_targets: [n1, n2]}\n"
        "    - specdeploy.toolkit.validation_report: {step: report}\n"
    )
    (tmp_path / "play.yml").write_text(play)
    # n2's model name is a template of its own variables; n1 is not in the inventory
    inventory = {
        "all": {
            "hosts": {
                "localhost": {"ansible_connection": "local"},
                "n2": {"base": "qwen", "specdeploy_served_model_name": "{{ base }}-chat"},
            }
        }
    }
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    extra = {
        "validation_report_root": str(root),
        "validation_report_dir": str(root / "run-01"),
        "validation_exit_file": str(exit_file),
        "specdeploy_toolkit_dir": str(REPO),
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml",
         "-e", json.dumps(extra)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    prepared, _, reported = (t["hosts"]["localhost"] for t in plays[0]["tasks"])
    assert prepared["validate_report_dir"] == str(root / "run-01"), prepared
    assert reported.get("not_measured") == ["n1", "n2"], json.dumps(reported)[:3000]
    assert reported["rc"] == 2 and "COULD NOT MEASURE" in reported["verdict"], reported
    result = json.loads((root / "run-01" / "results" / "n1.json").read_text())
    assert result["node"] == "n1" and result["exit_code"] == 2
    assert "unreachable" in " ".join(result["reasons"]) and result["served_model_name"] == ""
    result = json.loads((root / "run-01" / "results" / "n2.json").read_text())
    assert result["served_model_name"] == "qwen-chat"
    assert (root / "run-01" / "summary.json").is_file()
    assert (root / "latest").resolve() == (root / "run-01").resolve()
    assert exit_file.read_text() == "2\n"
    assert (root / "run-01" / "exit-code").read_text() == "2\n"
