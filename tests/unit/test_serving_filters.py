"""The vllm_service role's filters: the vLLM command line (plugins/filter/engines.py), the
secrets environment file and the not-ready message (plugins/filter/serving.py)."""

from __future__ import annotations

import json

from ansible_collections.specdeploy.toolkit.plugins.filter import engines, serving

KNOBS = {
    "model": "/models/m",
    "served_model_name": "m",
    "host": "127.0.0.1",
    "port": 8000,
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 1,
    "max_model_len": 4096,
    "gpu_memory_utilization": 0.9,
    "trust_remote_code": False,
    "attention_backend": "",
    "hardware_server_args": ["--disable-custom-all-reduce"],
    "shutdown_timeout_s": None,
    "extra_args": ["--enforce-eager"],
}
SPEC = {"num_speculative_tokens": 3, "method": "eagle3", "model": "/models/d"}


def test_the_vllm_line_has_speculation_between_its_head_and_its_tail() -> None:
    argv = engines.vllm_argv(["/v/bin/vllm"], {**KNOBS, "attention_backend": "FLASHINFER"}, SPEC)
    assert argv == [
        "/v/bin/vllm", "serve", "/models/m", "--served-model-name", "m", "--host", "127.0.0.1",
        "--port", "8000", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--max-model-len", "4096", "--gpu-memory-utilization", "0.9",
        "--speculative-config", json.dumps(SPEC, sort_keys=True),
        "--attention-backend", "FLASHINFER", "--disable-custom-all-reduce", "--enforce-eager",
    ]  # fmt: skip


def test_the_baseline_line_only_leaves_the_speculative_config_out() -> None:
    knobs = {**KNOBS, "trust_remote_code": True, "shutdown_timeout_s": 20}
    with_spec = engines.vllm_argv(["py", "standin.py"], knobs, SPEC)
    baseline = engines.vllm_argv(["py", "standin.py"], knobs, None)
    at = with_spec.index("--speculative-config")
    assert baseline == with_spec[:at] + with_spec[at + 2 :]
    assert baseline[baseline.index("--trust-remote-code") - 1] == "0.9"
    assert baseline[-4:] == [
        "--disable-custom-all-reduce",
        "--shutdown-timeout",
        "20",
        "--enforce-eager",
    ]
    assert "--attention-backend" not in baseline


def test_the_secrets_file_has_only_the_secrets_that_are_set() -> None:
    text = serving.env_file_text({"VLLM_API_KEY": "k1", "HF_TOKEN": ""}, "Managed: secrets.")
    assert text == "# Managed: secrets.\nVLLM_API_KEY=k1\n"
    assert serving.env_file_text({"VLLM_API_KEY": ""}, "c") == "# c\n"


def test_the_last_probe_is_the_smoke_checks_reasons_else_its_stderr() -> None:
    answer = json.dumps({"reasons": ["health: refused", "models: none"]})
    assert serving.last_probe({"stdout": answer}) == "health: refused; models: none"
    assert serving.last_probe({"stdout": "", "stderr": " Traceback \n"}) == "Traceback"


def test_not_ready_says_the_budget_the_probes_and_where_the_log_stopped() -> None:
    ready = {"rc": 1, "attempts": 4, "stdout": "", "stderr": ""}
    progress = {
        "phase": "loading",
        "title": "Loading weights",
        "percent": 40,
        "phase_elapsed_s": 12.5,
    }
    said = serving.not_ready_message(
        ready, release="R2", timeout_s=600, gave_up_after_s=601.2, progress=progress
    )
    assert said == (
        "release R2 did not become ready within specdeploy_start_timeout_s=600 s (4 probes, gave up"
        " after 601.2 s); last probe: exit 1; the engine log stopped at: Loading weights 40% for"
        " 12.5 s"
    )


def test_not_ready_says_when_the_engine_process_ended() -> None:
    ready = {"rc": 2, "stdout": "", "stderr": "refused"}
    ended = {"phase": "compile", "title": "torch.compile", "percent": None, "phase_elapsed_s": 3}
    said = serving.not_ready_message(
        ready, release="R2", timeout_s=60, gave_up_after_s=61.0,
        progress={**ended, "ended": True, "error": "CUDA out of memory"},
    )  # fmt: skip
    assert "(1 probes, gave up after 61.0 s); last probe: refused" in said
    assert said.endswith("torch.compile for 3 s (its process ended: CUDA out of memory)")
    ready_log = serving.not_ready_message(
        ready, release="R2", timeout_s=60, gave_up_after_s=61.0, progress={"phase": "ready"}
    )
    assert ready_log.endswith("last probe: refused")
    assert serving.not_ready_message(ready, release="R", timeout_s=1, gave_up_after_s=2).endswith(
        "refused"
    )
