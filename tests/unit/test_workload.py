"""The measured workload (specdeploy.node.validation.workload): defaults, limits, flags, JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from specdeploy.node.validation import check, loadgen
from specdeploy.node.validation.workload import Workload, WorkloadError, parse_levels


def _parsed(*argv: str, defaults: Workload | None = None) -> Workload:
    parser = argparse.ArgumentParser()
    Workload.add_arguments(parser, defaults)
    return Workload.from_args(parser.parse_args(list(argv)), defaults)


def test_defaults_are_the_checkers_and_one_level_without_levels() -> None:
    w = Workload()
    assert (w.levels, w.concurrency, w.max_requests, w.time_budget_s) == (None, 1, 20, 300.0)
    assert (w.repeats, w.warmup, w.max_tokens, w.endpoint) == (1, 1, None, "chat")
    assert (w.temperature, w.top_p, w.min_window_s, w.request_timeout_s) == (0.0, 1.0, 5.0, 120.0)
    assert w.prompts is None and w.measured_levels == [1] and w.level_max_tokens == 128
    assert _parsed() == w
    assert Workload(levels="1,8,32").measured_levels == [1, 8, 32]


def test_it_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Workload().repeats = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("repeats", 0, "--repeats 0: must be an integer >= 1"),
        ("max_requests", -1, "--max-requests -1: must be an integer >= 1"),
        ("concurrency", True, "--concurrency True: must be an integer >= 1"),
        ("warmup", -1, "--warmup -1: must be an integer >= 0"),
        ("max_tokens", 0, "--max-tokens 0: must be an integer >= 1"),
        ("temperature", float("nan"), "--temperature: nan is not a finite number"),
        ("min_window_s", float("inf"), "--min-window-s: inf is not a finite number"),
        ("min_window_s", -1.0, "--min-window-s -1.0: must be >= 0"),
        ("time_budget_s", 0.0, "--time-budget: 0.0 is not > 0"),
        ("request_timeout_s", float("-inf"), "--request-timeout: -inf is not a finite number"),
        ("top_p", 1.5, "--top-p 1.5: must be > 0 and <= 1"),
        ("top_p", "1", "--top-p: '1' is not a number"),
        ("endpoint", "grpc", "--endpoint 'grpc': one of chat, completions"),
        ("levels", "1,1", "--levels '1,1': distinct integers >= 1"),
        ("levels", "1,x", "--levels '1,x': comma-separated integers, e.g. 1,8,32"),
        ("levels", [0, 8], "--levels 0: must be an integer >= 1"),
        ("levels", "1,0", "--levels '1,0': level '0' is not a concurrency level (int >= 1)"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_flag(field: str, value: object, said: str) -> None:
    with pytest.raises(WorkloadError) as e:
        Workload(**{field: value})  # type: ignore[arg-type]
    assert str(e.value) == said


def test_levels_have_one_parser_whose_errors_name_the_flag_or_knob_given() -> None:
    """The gates' preflight and the baseline plan parse levels with the Workload's parser."""
    from specdeploy.controller import baseline_plan
    from specdeploy.node.validation import gate

    assert parse_levels("1, 8,32") == parse_levels([1, 8, 32]) == (1, 8, 32)
    for bad, said in [
        ("8,8", "validation_concurrency '8,8': distinct integers >= 1"),
        ("", "validation_concurrency '': distinct integers >= 1"),
        ("1,x", "validation_concurrency '1,x': comma-separated integers, e.g. 1,8,32"),
        ("1,-2", "validation_concurrency '1,-2': level '-2' is not a concurrency level"),
    ]:
        with pytest.raises(WorkloadError) as e:
            parse_levels(bad, "validation_concurrency")
        assert str(e.value).startswith(said)
        with pytest.raises(baseline_plan.PlanInputError) as p:
            baseline_plan.parse_levels(bad)
        assert str(p.value) == str(e.value)
    assert gate.parse_levels is parse_levels


def test_flags_override_the_json_and_the_json_overrides_the_defaults() -> None:
    doc = json.dumps({"levels": "1,8", "repeats": 3, "prompts": None, "top_p": 0.9})
    w = _parsed("--workload-json", doc, "--repeats", "5", "--timeout-s", "9")
    assert (w.levels, w.repeats, w.top_p, w.request_timeout_s) == ((1, 8), 5, 0.9, 9.0)
    assert _parsed("--prompts-file", "p.jsonl").prompts == "p.jsonl"


def test_the_json_round_trips_and_refuses_what_it_does_not_know() -> None:
    w = Workload(levels=(1, 8, 32), repeats=3, max_tokens=64, temperature=0.7, prompts="p.jsonl")
    assert Workload.from_json(w.to_json()) == w
    assert Workload.from_json(Workload().to_json()) == Workload()
    assert Workload.from_json('{"temperature": 0, "levels": [1, 8]}') == Workload(levels="1,8")
    with pytest.raises(WorkloadError, match=r"unknown workload field.*repeat$"):
        Workload.from_json('{"repeat": 3}')
    with pytest.raises(WorkloadError, match=r"^--workload-json: not JSON"):
        Workload.from_json("{")
    with pytest.raises(WorkloadError, match=r"^--workload-json: not a JSON object"):
        Workload.from_json("[1]")
    with pytest.raises(
        WorkloadError, match=r"^--workload-json: --temperature: nan is not a finite"
    ):
        Workload.from_json('{"temperature": NaN}')


def test_the_commands_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["all", "--base-url", "http://127.0.0.1:9", "--served-model-name", "m"]
    assert check.main([*base, "--temperature", "nan"]) == 2
    err = capsys.readouterr().err
    assert err == "spec-check: error: --temperature: nan is not a finite number\n"
    assert check.main([*base, "--workload-json", '{"repeats": 0}']) == 2
    err = capsys.readouterr().err
    assert err == "spec-check: error: --workload-json: --repeats 0: must be an integer >= 1\n"
    assert loadgen.main(["--base-url", "http://127.0.0.1:9", "--min-window-s", "inf"]) == 2
    assert capsys.readouterr().err.startswith("loadgen: --min-window-s: inf is not")


def test_the_load_generator_keeps_its_own_defaults() -> None:
    w = _parsed(defaults=loadgen.DEFAULT_WORKLOAD)
    assert (w.levels, w.repeats, w.max_tokens, w.warmup) == ((1, 4, 16), 3, 128, 1)


def test_the_role_passes_only_fields_the_workload_has() -> None:
    """The role's command lines (plugins/plugin_utils/validation_argv.py) name the workload's
    fields: a field renamed in Workload and not there would be refused on every node."""
    from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import validation_argv

    values = dict.fromkeys(validation_argv.KNOBS, "1") | {
        "validation_concurrency": [1, 8],
        "validation_prompts_file": "",
    }
    names = {f.name for f in dataclasses.fields(Workload)}
    assert set(validation_argv.workload(values)) <= names
