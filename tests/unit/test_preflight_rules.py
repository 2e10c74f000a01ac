"""The deploy's input rules (plugins/plugin_utils/preflight.py): what the actions
preflight_inputs and preflight_node refuse, and how they read the checks' answers. The real
Ansible runs of these actions are in test_controller_check.py, test_knobs_check.py and the
integration tests' preflight refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import (
    preflight as rules,
)

GOOD = {
    "ansible_playbook_python": "python3",
    "specdeploy_toolkit_dir": "/opt/toolkit",
    "specdeploy_speculative_enabled": True,
    "specdeploy_speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
    "specdeploy_tensor_parallel_size": 8,
    "specdeploy_pipeline_parallel_size": 1,
    "specdeploy_keep_releases": 3,
    "specdeploy_port": 8000,
    "specdeploy_host": "127.0.0.1",
    "specdeploy_gpu_memory_utilization": 0.9,
    "specdeploy_model_path": "/srv/models/Kimi-K2.5",
    "specdeploy_served_model_name": "kimi-k2.5",
    "specdeploy_drafter_path": "/srv/models/Kimi-K2.5-eagle3",
    "specdeploy_attention_backend": "",
    "specdeploy_extra_args": ["--max-num-seqs", "64"],
    "specdeploy_controller_wheelhouse": "",
    "specdeploy_vllm_wheelhouse": "",
    "specdeploy_node_wheelhouse_copy": "/opt/specdeploy/wheelhouse",
    "specdeploy_shutdown_timeout_s": 30,
    "specdeploy_stop_timeout_s": 120,
    "specdeploy_drain_timeout_s": 120,
    "specdeploy_drain_keep_in_rotation": 1,
    "specdeploy_min_free_disk_gb": 25,
    "specdeploy_root": "/opt/specdeploy",
    "specdeploy_service_name": "vllm",
    "specdeploy_vllm_version": "0.16.0",
    "specdeploy_engine": "vllm",
    "preflight_unsafe_arg_pattern": "['\\\\\\n\\r`]",
}


def errors(**changes) -> list[str]:
    return rules.knob_errors({**GOOD, **changes}, environ={})


def test_good_knobs_pass_every_rule():
    assert errors() == []
    assert rules.shutdown_errors(GOOD) == [] and rules.drain_timeout_errors(GOOD) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"specdeploy_port": 70000}, ["specdeploy_port (70000)"]),
        ({"specdeploy_port": float("nan")}, ["specdeploy_port (nan)"]),
        ({"specdeploy_gpu_memory_utilization": float("inf")}, ["gpu_memory_utilization (inf)"]),
        ({"specdeploy_gpu_memory_utilization": "most"}, ["gpu_memory_utilization (most)"]),
        ({"specdeploy_keep_releases": 1}, ["specdeploy_keep_releases (1) >= 2"]),
        ({"specdeploy_tensor_parallel_size": 0}, ["parallel sizes (0/1)"]),
        ({"specdeploy_extra_args": ["--x", "it's"]}, ["single quotes", "it's"]),
        ({"specdeploy_served_model_name": "a\nb"}, ["line breaks"]),
        ({"specdeploy_host": "0.0.0.0"}, ["specdeploy_host=0.0.0.0 is not a loopback address"]),
        (
            {"specdeploy_controller_wheelhouse": "/w", "specdeploy_vllm_wheelhouse": "/n"},
            ["set at most one of them"],
        ),
        ({"specdeploy_controller_wheelhouse": "rel/w"}, ["as an absolute path"]),
        (
            {"specdeploy_speculative_config": {"draft_tensor_parallel_size": 3}},
            ["draft_tensor_parallel_size, when given, must be 1", "(8)"],
        ),
    ],
)
def test_a_bad_knob_is_one_line_naming_it(change, words):
    (line,) = errors(**change)
    assert "\n" not in line.replace("a\nb", "")
    for word in words:
        assert word in line, line


def test_the_draft_tp_may_be_one_or_the_target_tp_and_is_not_checked_without_speculation():
    assert errors(specdeploy_speculative_config={"draft_tensor_parallel_size": 1}) == []
    assert errors(specdeploy_speculative_config={"draft_tensor_parallel_size": 8}) == []
    off = {"specdeploy_speculative_enabled": False}
    assert errors(**off, specdeploy_speculative_config={"draft_tensor_parallel_size": 3}) == []


def test_a_key_from_the_inventory_or_the_environment_opens_a_non_loopback_host():
    assert errors(specdeploy_host="10.0.0.5", specdeploy_api_key="s3cret") == []
    wide = {**GOOD, "specdeploy_host": "10.0.0.5"}
    assert rules.knob_errors(wide, environ={"SPECDEPLOY_API_KEY": "k"}) == []
    assert errors(specdeploy_host="127.1.2.3") == [] and errors(specdeploy_host="::1") == []


@pytest.mark.parametrize(("shutdown", "ok"), [(0, True), (119, True), (120, False), (-1, False),
                                              ("nan", False), ("soon", False)])  # fmt: skip
def test_the_shutdown_timeout_is_below_the_stop_timeout(shutdown, ok):
    found = rules.shutdown_errors({**GOOD, "specdeploy_shutdown_timeout_s": shutdown})
    assert (found == []) is ok
    if not ok:
        assert f"specdeploy_shutdown_timeout_s={shutdown}:" in found[0]


@pytest.mark.parametrize(("value", "ok"), [(0, True), ("30", True), (-1, False), (1.5, False)])
def test_the_drain_timeout_is_a_whole_number(value, ok):
    assert (rules.drain_timeout_errors({"specdeploy_drain_timeout_s": value}) == []) is ok


@pytest.mark.parametrize(
    ("value", "ok"), [(0, True), (1, True), ("2", True), (-1, False), ("nan", False), (None, False)]
)
def test_the_drain_guard_is_a_whole_number(value, ok):
    found = rules.drain_guard_errors({"specdeploy_drain_keep_in_rotation": value})
    assert (found == []) is ok
    if not ok:
        assert found[0].startswith(f"specdeploy_drain_keep_in_rotation={value}: ")


def test_the_prompt_file_must_exist_on_the_controller(tmp_path):
    real = tmp_path / "p.jsonl"
    real.write_text("{}\n")
    is_file = lambda path: Path(path).is_file()  # noqa: E731 (the action passes os.path.isfile)
    assert rules.validation_file_errors({"validation_prompts_file": str(real)}, is_file) == []
    assert rules.validation_file_errors({"validation_prompts_file": ""}, is_file) == []
    (line,) = rules.validation_file_errors(
        {"validation_prompts_file": str(tmp_path / "nope")}, is_file
    )
    assert "validation_prompts_file=" in line and "no such file" in line


def test_the_inputs_command_passes_the_history_only_for_an_auto_schedule():
    plain = rules.inputs_command(GOOD, "gpu-01").argv
    assert "--history" not in plain and "--no-speculation" not in plain
    auto = rules.inputs_command({**GOOD, "specdeploy_speculative_schedule": "auto"}, "gpu-01").argv
    assert auto[auto.index("--history") + 1] == "/opt/toolkit/reports/history.sqlite"
    assert auto[auto.index("--node") + 1] == "gpu-01"
    off = rules.inputs_command({**GOOD, "specdeploy_speculative_enabled": False}, "g").argv
    assert off[-1] == "--no-speculation"


def answer(rc: int, stdout: str = "", stderr: str = "") -> dict:
    return {"rc": rc, "stdout": stdout, "stderr": stderr}


def test_the_inputs_answer_gives_the_facts_or_every_error():
    ok = rules.inputs_verdict(
        answer(0, json.dumps({"ok": True, "vllm": {"entry": {"series_sha256": "ab"},
                                                   "native": False, "schedule": {"mode": "off"}}}))
    )  # fmt: skip
    assert ok.errors == []
    assert ok.facts["preflight_version_entry"] == {"series_sha256": "ab"}
    assert ok.facts["preflight_speculative_schedule"] == {"mode": "off"}
    bad = rules.inputs_verdict(
        answer(1, json.dumps({"ok": False, "errors": [{"message": "a"}, {"message": "b"}]}))
    )
    assert bad.errors == ["a | b"] and bad.facts == {}
    crashed = rules.inputs_verdict(answer(3, "", "Traceback...\nKeyError: 'x'\n"))
    assert crashed.errors == ["the input check could not run: KeyError: 'x'"]


def test_the_other_answers_become_one_line_each():
    knobs = rules.knobs_verdict(answer(2, "", "knobs-check: error: a\nknobs-check: error: b\n"))
    assert knobs.errors == ["a | b. Nothing changed."]
    gates = rules.gates_verdict(answer(2, "", "gates /dev/stdin: min_speed_up: bad\n"), "n1")
    assert gates.errors == ["specdeploy_gates on n1: min_speed_up: bad. Nothing changed."]
    knob = rules.baseline_verdict(answer(2, "", "spec-baseline-plan: error: level 8 missing\n"))
    assert knob.errors == ["level 8 missing. Nothing changed."]
    engine = rules.engine_verdict(answer(2, "", "engine-check: error: no per-position\n"))
    assert engine.errors == ["no per-position. Nothing changed."]
    usage = rules.balancer_verdict(answer(2, "", "drain: error: set both hooks\n"))
    assert usage.errors == ["set both hooks. Nothing changed."]
    down = rules.balancer_verdict(answer(1, json.dumps({"message": "socket refused"})))
    assert down.errors == ["socket refused. Nothing changed."]
    for verdict in (rules.knobs_verdict, rules.baseline_verdict, rules.engine_verdict):
        assert verdict(answer(0)).errors == []


PROBE = {
    "model_configs": [
        {"path": GOOD["specdeploy_model_path"], "exists": True, "content": "{}"},
        {"path": GOOD["specdeploy_drafter_path"], "exists": True, "content": "{}",
         "provenance": None},
    ],
    "drafter_weights": {},
    "free_kb": 100 * 1024 * 1024,
    "port_listeners": ["LISTEN 0 4096 127.0.0.1:8000 0.0.0.0:* users:((\"vllm\",pid=42,fd=3))"],
    "service_main_pid": 42,
    "current": {"islnk": True, "target": "0.16.0-abc", "manifest": {"status": "active"}},
    "python_platform": {},
}  # fmt: skip


def test_a_good_probe_passes_and_names_the_serving_release():
    verdict = rules.node_verdict(GOOD, PROBE, "gpu-01")
    assert verdict.errors == []
    assert verdict.facts == {"preflight_inputs_checked": True,
                             "preflight_serving_release": "0.16.0-abc"}  # fmt: skip


def test_a_failed_release_is_not_the_serving_one():
    probe = {**PROBE, "current": {"islnk": True, "target": "x", "manifest": {"status": "failed"}}}
    assert rules.node_verdict(GOOD, probe, "n").facts["preflight_serving_release"] == ""


def test_every_probe_finding_is_its_own_line():
    probe = {
        **PROBE,
        "model_configs": [
            {**PROBE["model_configs"][0], "exists": False},
            PROBE["model_configs"][1],
        ],
        "free_kb": 1024 * 1024,
        "service_main_pid": 7,
    }
    found = rules.node_verdict(GOOD, probe, "gpu-01").errors
    assert len(found) == 3, found
    assert found[0].startswith("specdeploy_model_path=/srv/models/Kimi-K2.5: no config.json")
    assert found[1].startswith("only 1.0 GB free under /opt/specdeploy on gpu-01")
    assert "specdeploy_port=8000 is taken on gpu-01 by another program" in found[2]
    # no drafter check without both configs (the missing model is the refusal)
    assert rules.drafter_command(GOOD, probe) is None


def test_another_address_on_the_same_port_is_no_conflict():
    probe = {
        **PROBE,
        "service_main_pid": 0,
        "port_listeners": ['LISTEN 0 5 127.0.4.12:8000 0.0.0.0:* users:(("x",pid=9,fd=3))'],
    }
    assert rules.node_verdict(GOOD, probe, "n").errors == []  # fmt: skip


def test_the_drafter_verdict_reads_the_findings():
    findings = {"findings": [{"level": "error", "message": "vocab differs"},
                             {"level": "warning", "message": "no provenance"}]}  # fmt: skip
    verdict = rules.drafter_verdict(GOOD, answer(1, json.dumps(findings)))
    assert verdict.errors == [
        "the drafter at specdeploy_drafter_path=/srv/models/Kimi-K2.5-eagle3 does not fit the "
        "target for vLLM 0.16.0: vocab differs"
    ]
    assert verdict.messages == ["drafter warnings: no provenance"]
    command = rules.drafter_command(GOOD, PROBE)
    assert command is not None and "--provenance-json" not in command.argv
    assert command.argv[command.argv.index("--served-prompt-format") + 1] == "chat-template"


def test_the_served_speculative_config_is_the_knob_the_drafter_and_the_schedule():
    """One function (before: a Jinja var in roles/specdeploy/vars) for what the server gets;
    the plan hashes it into the release id, the gates check k against it."""
    knobs = {
        "specdeploy_speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
        "specdeploy_drafter_path": "/srv/models/drafter",
    }
    assert rules.served_speculative_config(knobs, None) == {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": "/srv/models/drafter",
    }
    by_batch = {"1": 0, "16": 5}
    schedule = {
        "speculative_config": {
            "num_speculative_tokens": 5,
            "num_speculative_tokens_per_batch_size": by_batch,
        }
    }
    served = rules.served_speculative_config(knobs, schedule)
    assert served["num_speculative_tokens"] == 5 and served["model"] == "/srv/models/drafter"
    assert served["num_speculative_tokens_per_batch_size"] == by_batch
    assert knobs["specdeploy_speculative_config"]["num_speculative_tokens"] == 3  # not changed
    assert rules.served_speculative_config({}, {}) == {"model": None}
