"""Where a deploy's no-speculation baseline comes from (issue 19), decided before any change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.controller import baseline_plan as bp

ROOT = Path(__file__).resolve().parents[2]

LEVELS = [1, 8, 32]


def test_the_knob_wins_over_everything():
    plan = bp.decide(
        LEVELS, {1: 500.0, 8: 1900.0, 32: 4000.0}, {1: 1.0, 8: 1.0, 32: 1.0}, "plain", True
    )
    assert plan.source == "knob" and plan.levels == {1: 500.0, 8: 1900.0, 32: 4000.0}
    assert not plan.extra_start


def test_history_that_covers_every_level_comes_next():
    plan = bp.decide(LEVELS, None, {1: 400.0, 8: 1500.0, 32: 3000.0, 64: 5000.0}, "plain", True)
    assert plan.source == "history" and plan.levels == {1: 400.0, 8: 1500.0, 32: 3000.0}
    assert not plan.extra_start


def test_a_serving_release_without_speculation_is_measured_before_the_switch():
    plan = bp.decide(LEVELS, None, {1: 400.0}, "plain", True)
    assert plan.source == "serving-release" and plan.levels is None and not plan.extra_start
    assert "history has c=[1] only" in plan.message and "no extra start" in plan.message


@pytest.mark.parametrize("serving", ["none", "speculative"])
def test_otherwise_a_baseline_start_which_costs_one_extra_start(serving):
    plan = bp.decide(LEVELS, None, {}, serving, True)
    assert plan.source == "baseline-start" and plan.extra_start
    assert "costs one extra start" in plan.message


def test_a_release_without_speculation_needs_no_baseline():
    plan = bp.decide(LEVELS, None, {}, "none", False)
    assert plan.source == "none" and not plan.extra_start


def test_the_knob_as_a_number_covers_every_level_and_zero_is_none():
    assert bp.knob_levels(450, LEVELS) == {1: 450.0, 8: 450.0, 32: 450.0}
    assert bp.knob_levels(0, LEVELS) is None


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ({"1": 500, "8": 1900}, "no baseline for c=[32]"),
        ({"1": 500, "8": 1900, "32": 1, "16": 2}, "validation_concurrency is [1, 8, 32]"),
        ({"one": 500}, "key 'one' is not a concurrency level"),
        ({"1": -5, "8": 1, "32": 1}, "validation_baseline_tps[1]=-5"),
        (-1, "must not be negative"),
        ("fast", "want 0, a number or a map"),
        (True, "want 0, a number or a map"),
    ],
)
def test_bad_knobs_are_one_line_errors_naming_the_knob(knob, message):
    with pytest.raises(bp.PlanInputError, match="validation_baseline_tps") as e:
        bp.knob_levels(knob, LEVELS)
    assert message in str(e.value)


@pytest.mark.parametrize("levels", ["", "1,0", "1,1", "a"])
def test_bad_levels_name_validation_concurrency(levels):
    with pytest.raises(bp.PlanInputError, match="validation_concurrency"):
        bp.parse_levels(levels)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.baseline_plan", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_cli_prints_the_plan_as_json_and_refuses_bad_input_with_exit_2(tmp_path):
    ok = run_cli(
        "--levels", "1,8", "--serving", "plain", "--history", str(tmp_path / "none.db"), "--json"
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["source"] == "serving-release"
    knob = run_cli("--levels", "1,8", "--knob", '{"1": 300, "8": 900}', "--json")
    assert json.loads(knob.stdout) == {
        "source": "knob",
        "levels": {"1": 300.0, "8": 900.0},
        "extra_start": False,
        "message": "validation_baseline_tps (operator's knob)",
    }
    bad = run_cli("--levels", "1,8", "--knob", '{"1": 300}')
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "validation_baseline_tps" in bad.stderr


def _no_spec_run(run_id: str, levels: dict[int, float], labels: dict[str, str]) -> dict:
    return {
        "schema": "specdeploy.validation/1",
        "run_id": run_id,
        "node": "n1",
        "release": "plain",
        "served_model_name": "m",
        "started_at": f"2026-12-01T00:00:0{run_id[-1]}Z",
        "status": "pass",
        "exit_code": 0,
        "labels": labels,
        "acceptance": {"status": "ok", "mode": "no_spec_baseline"},
        "speed": {
            "speculative": False,
            "levels": [{"concurrency": c, "output_tps": t} for c, t in levels.items()],
        },
    }


def test_cli_takes_the_history_of_the_same_parallel_sizes_and_hardware(tmp_path):
    from specdeploy.controller import history

    db = tmp_path / "history.sqlite"
    conn = history.connect(db)
    gpu = {"parallel": "tp=8,pp=1", "hardware": "NVIDIA H200"}
    history.record(conn, _no_spec_run("r1", {1: 400.0, 8: 1500.0}, gpu))
    # Another GPU and other parallel sizes on the same node do not count.
    history.record(conn, _no_spec_run("r2", {1: 9.0, 8: 9.0}, {**gpu, "hardware": "other"}))
    history.record(conn, _no_spec_run("r3", {1: 9.0, 8: 9.0}, {**gpu, "parallel": "tp=4,pp=2"}))
    conn.close()
    args = ["--levels", "1,8", "--history", str(db), "--node", "n1", "--model", "m"]
    args += ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "1", "--json"]
    same = run_cli(*args, "--hardware", "NVIDIA H200", "--serving", "speculative")
    assert json.loads(same.stdout)["levels"] == {"1": 400.0, "8": 1500.0}, same.stderr
    # Levels the history lacks: the next source (here a baseline start).
    more = run_cli(*args[:1], "1,8,32", *args[2:], "--hardware", "NVIDIA H200")
    assert json.loads(more.stdout)["source"] == "baseline-start"
