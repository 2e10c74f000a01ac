"""The validation role's choices and words (plugins/filter/validation.py): where the speed-up
baseline comes from, what a check shows, what the serving release measured, the deploy's
plan; and the wording helpers they use (plugins/module_utils/wording.py)."""

from __future__ import annotations

import base64
import json

import pytest
from ansible_collections.specdeploy.toolkit.plugins.filter import validation
from ansible_collections.specdeploy.toolkit.plugins.module_utils import wording

NOT_READ = {"failed": True, "msg": "file not found"}


def slurped(doc: dict) -> dict:
    return {"content": base64.b64encode(json.dumps(doc).encode()).decode()}


def choice(measure: bool = False, planned: dict | None = None, *slurps: dict) -> dict:
    return validation.baseline_choice(
        measure, planned=planned, slurped=slurps or (NOT_READ, NOT_READ),
        start_out="/r/R2.baseline-start.json", previous_out="/r/R2.previous.json",
    )  # fmt: skip


def test_the_knob_or_history_comes_first_with_its_levels_in_order() -> None:
    got = choice(
        False, {"source": "history", "levels": {"8": 40.5, "1": 10}}, slurped({}), NOT_READ
    )
    assert got == {
        "source": "history",
        "argv": ["--baseline-tps", "1=10,8=40.5", "--baseline-source", "history"],
        "previous_argv": [],
    }


def test_then_the_baseline_start_then_a_serving_release_without_speculation() -> None:
    started = choice(False, {"source": "baseline-start"}, slurped({"levels": {}}), NOT_READ)
    assert started["source"] == "baseline-start"
    assert started["argv"] == [
        "--baseline-file",
        "/r/R2.baseline-start.json",
        "--baseline-source",
        "baseline-start",
    ]
    plain = choice(False, {}, NOT_READ, slurped({"speculative": False}))
    assert plain["source"] == "serving-release"
    assert plain["argv"][:2] == ["--baseline-file", "/r/R2.previous.json"]
    assert plain["previous_argv"] == ["--previous-file", "/r/R2.previous.json"]


def test_a_speculative_serving_release_is_no_baseline() -> None:
    got = choice(False, {}, NOT_READ, slurped({"speculative": True}))
    assert got["source"].startswith("none: no baseline")
    assert got["argv"] == []
    assert got["previous_argv"] == ["--previous-file", "/r/R2.previous.json"]
    unknown = choice(False, {}, NOT_READ, slurped({}))  # not said: taken as speculative
    assert unknown["argv"] == []


def test_a_release_without_speculation_measures_its_own_baseline() -> None:
    got = choice(True, {"source": "knob", "levels": {"1": 5}}, slurped({}), NOT_READ)
    assert got["source"].startswith("none: this release runs without speculation")
    assert got["argv"] == ["--no-spec-baseline"]


def test_measured_is_the_checkers_json_or_nothing() -> None:
    assert validation.measured({"rc": 0, "stdout": ' {"levels": {}}'}) == {"levels": {}}
    assert validation.measured({"rc": 1, "stdout": "{}"}) == {}
    assert validation.measured({"rc": 0, "stdout": "Traceback"}) == {}
    assert validation.measured({"skipped": True}) == {}
    assert validation.measured(None) == {}


def test_the_check_summary_shows_the_speed_up_and_the_canary_comparison() -> None:
    result = {
        "speed": {"status": "passed", "message": "1.8x at c=1"},
        "previous": {
            "release": "R1",
            "status": "passed",
            "levels": [{"change": 0.12345}, {"change": "-0.5"}],
            "max_regression": 0.1,
        },
    }
    lines = validation.check_summary(
        result, run={"stdout_lines": ["smoke: ok"], "stderr_lines": ["warn"]},
        baseline_source="history", result_written=True,
    )  # fmt: skip
    assert lines == [
        "smoke: ok",
        "baseline: history",
        "speed-up: PASSED: 1.8x at c=1",
        "vs the release it replaced (R1): PASSED 0.123, -0.5"
        " (change per level; max regression 0.1)",
    ]


def test_the_check_summary_adds_stderr_when_no_result_was_written() -> None:
    lines = validation.check_summary(
        {"exit_code": 2}, run={"stderr_lines": ["ImportError: x"]}, baseline_source="b",
        result_written=False,
    )  # fmt: skip
    assert lines == ["baseline: b", "ImportError: x"]


def test_the_serving_release_message_gives_its_time_and_figures() -> None:
    run = {"start": "2026-12-04 10:00:00.000000", "end": "2026-12-04 10:00:12.345678"}
    previous = {
        "speculative": True,
        "levels": {"8": {"output_tps": 101.26}, "1": {"output_tps": 20}},
    }
    said = validation.serving_measured_message(previous, serving="R1", run=run)
    assert said == (
        "serving release R1 (speculation on), measured before the switch in 12.3 s:"
        " c=1 20 tok/s, c=8 101.3 tok/s"
    )


def test_the_serving_release_message_says_when_it_could_not_measure() -> None:
    said = validation.serving_measured_message(
        {}, serving="R1", run={"rc": 1, "stderr_lines": ["a", "refused " * 60]}
    )
    assert said.startswith(
        "serving release R1 could NOT be measured before the switch (exit 1: refused"
    )
    assert said.endswith("...): the canary comparison is unmeasured")


@pytest.mark.parametrize(
    ("serving", "speculative", "waiver", "tail"),
    [
        ("", True, "", ""),
        ("R2", True, "", ""),
        (
            "R1",
            True,
            "",
            "; canary comparison against the serving release R1 (measured before the switch)",
        ),
        ("", True, "drafter in training", "; the speed-up gate is WAIVED: drafter in training"),
        ("", False, "drafter in training", ""),
    ],
)
def test_the_plan_message(serving: str, speculative: bool, waiver: str, tail: str) -> None:
    plan = {"source": "knob", "message": "the operator's figures", "levels": {"8": 40, "1": 10.5}}
    said = validation.baseline_plan_message(
        plan, release="R2", host="node1", concurrency=[1, 8], serving=serving,
        speculative=speculative, waiver=waiver,
    )  # fmt: skip
    assert said == (
        "speed-up baseline for release R2 on node1: knob: the operator's figures"
        " 1=10.5, 8=40 tok/s; levels c=1,8" + tail
    )


def test_jinjas_truncate_and_dictsort() -> None:
    assert wording.truncate("short", 10) == "short"
    assert wording.truncate("a" * 14, 10) == "a" * 14  # within the leeway
    assert wording.truncate("one two three four five", 10) == "one..."
    assert wording.dictsort({"b": 1, "A": 2, "c": 3}) == [("A", 2), ("b", 1), ("c", 3)]
    assert wording.dictsort(None) == []


def test_level_figures_say_each_level_s_throughput_in_the_order_of_concurrency() -> None:
    levels = {"32": {"output_tps": 901.26}, "1": {"output_tps": 40.04}, "8": {"output_tps": 250}}
    assert validation.level_figures(levels) == "c=1 40.0 tok/s, c=8 250.0 tok/s, c=32 901.3 tok/s"
    assert validation.level_figures({}) == ""


def test_last_validation_keeps_the_verdict_the_medians_and_three_reasons() -> None:
    result = {
        "status": "fail",
        "exit_code": 1,
        "finished_at": "2026-12-05T18:00:00Z",
        "run_id": "r1",
        "acceptance": {
            "mode": "metrics",
            "mean_acceptance_length": 2.4,
            "speed_up": {"median": 0.91, "runs": [0.9, 0.91, 0.93]},
            "output_tokens_per_s": {"median": 812.5},
        },
        "reasons": ["a", "b", "c", "d"],
        "speed": {"status": "fail", "baseline_source": "baseline start"},
        "previous": {"status": "pass"},
    }
    kept = validation.last_validation(result, "NVIDIA H200")
    assert kept == {
        "status": "fail",
        "exit_code": 1,
        "at": "2026-12-05T18:00:00Z",
        "run_id": "r1",
        "mode": "metrics",
        "mean_acceptance_length": 2.4,
        "speed_up": 0.91,
        "output_tokens_per_s": 812.5,
        "reasons": ["a", "b", "c"],
        "speed_status": "fail",
        "baseline_source": "baseline start",
        "previous_status": "pass",
        "hardware": "NVIDIA H200",
    }
    # a result that could not measure has none of the optional parts (null or empty)
    bare = {**result, "acceptance": None, "speed": {}, "reasons": []}
    bare.pop("previous")
    kept = validation.last_validation(bare, "")
    assert kept["speed_up"] is None and kept["mode"] is None and kept["previous_status"] is None
    assert kept["reasons"] == [] and kept["speed_status"] is None
