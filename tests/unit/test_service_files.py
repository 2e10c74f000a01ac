"""The server's command line, environment and files per engine (plugin_utils/service_files.py,
rendered by the lookup specdeploy.toolkit.service_files; the sandbox deploys check the rendering
byte for byte through the steady check)."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.filter.engines import (
    server_files,
    sglang_argv,
    vllm_argv,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import service_files

BUILDERS = {"vllm": vllm_argv, "sglang": sglang_argv}
SPECULATIVE = {"method": "eagle3", "model": "/srv/d", "num_speculative_tokens": 3}


def release(engine: str = "vllm", **extra) -> dict:
    return {
        "id": "0.16.0-abc",
        "engine": engine,
        "python": "/opt/s/releases/r/venv/bin/python3",
        "venv_dir": "/opt/s/releases/r/venv",
        "standin_dir": "/opt/s/standin/f",
        "toolkit_dir": "/opt/s/releases/r/toolkit",
        "cache_dir": "/var/cache/s/fp",
        "speculative_config": SPECULATIVE,
        "inputs": {
            "hardware_server_args": ["--disable-custom-all-reduce"],
            "nccl_environment": {"NCCL_P2P_DISABLE": "1"},
            "shutdown_timeout_s": 20,
        },
        **extra,
    }


def knobs(engine: str = "vllm", **changes) -> dict:
    values = {
        "specdeploy_release": release(engine),
        "specdeploy_server_standin": False,
        "specdeploy_model_path": "/srv/m",
        "specdeploy_served_model_name": "kimi",
        "specdeploy_host": "127.0.0.1",
        "specdeploy_port": 8000,
        "specdeploy_tensor_parallel_size": 8,
        "specdeploy_pipeline_parallel_size": 1,
        "specdeploy_max_model_len": 32768,
        "specdeploy_gpu_memory_utilization": 0.9,
        "specdeploy_trust_remote_code": True,
        "specdeploy_attention_backend": "",
        "specdeploy_extra_args": ["--max-num-seqs", "64"],
        "specdeploy_drafter_path": "/srv/d",
        "specdeploy_start_timeout_s": 1800,
        "specdeploy_environment": {},
        "specdeploy_speculative_enabled": True,
        "specdeploy_release_gates": {"min_speed_up": 1.0},
        "specdeploy_standin_profile": {},
        "specdeploy_service_name": "vllm",
        "specdeploy_toolkit_dir": "/opt/toolkit",
        "vllm_service_unit_path": "/etc/systemd/system/vllm.service",
        "vllm_service_on_failure_unit_path": "/etc/systemd/system/vllm-on-failure@.service",
        "vllm_service_on_failure_template": "/opt/toolkit/templates/vllm-on-failure@.service.j2",
        "vllm_service_config_dir": "/opt/s/releases/r/config",
        "vllm_service_rendered_unit_path": "/opt/s/releases/r/config/vllm.service",
        "vllm_service_baseline_unit_path": "/opt/s/releases/r/config/vllm.baseline.service",
        "vllm_service_gates_path": "/opt/s/releases/r/config/gates.json",
        "vllm_service_standin_profile_path": "/opt/s/releases/r/config/standin-profile.json",
    }
    return values | changes


def test_vllm_serves_from_the_release_venv_and_the_standin_with_the_release_python():
    assert service_files.server_command(release(), standin=False) == [
        "/opt/s/releases/r/venv/bin/vllm"
    ]
    assert service_files.server_command(release(), standin=True) == [
        "/opt/s/releases/r/venv/bin/python3",
        "/opt/s/standin/f/tests/standin/vllm_standin.py",
    ]


def test_sglang_runs_as_a_python_module_and_only_absolute_paths_must_exist():
    assert service_files.server_command(release("sglang"), standin=False) == [
        "/opt/s/releases/r/venv/bin/python3", "-m", "sglang.launch_server"
    ]  # fmt: skip
    assert server_files(release("sglang"), False) == ["/opt/s/releases/r/venv/bin/python3"]
    assert server_files(release("sglang"), True)[1].endswith("/tests/standin/sglang_standin.py")


def test_an_unknown_engine_is_named():
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        service_files.server_command(release("tgi"), standin=False)


def test_the_baseline_command_line_is_the_same_without_speculation():
    argv, baseline = service_files.argv_pair(knobs(), BUILDERS)
    assert "--speculative-config" in argv
    at = argv.index("--speculative-config")
    assert argv[:at] + argv[at + 2 :] == baseline
    # the doctor's arguments, then the drain's timeout, then the operator's, last
    assert argv[-5:] == [
        "--disable-custom-all-reduce",
        "--shutdown-timeout",
        "20",
        "--max-num-seqs",
        "64",
    ]


def test_sglang_gets_the_drafter_and_the_hardware_arguments_before_the_operators():
    argv, baseline = service_files.argv_pair(knobs("sglang"), BUILDERS)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "/srv/d"
    assert "--speculative-draft-model-path" not in baseline
    assert argv.index("--disable-custom-all-reduce") < argv.index("--max-num-seqs")
    assert "--shutdown-timeout" not in argv  # vLLM's flag only


def test_the_environment_has_each_engines_caches_and_the_operators_values_win():
    env = service_files.environment(
        knobs(specdeploy_environment={"NCCL_P2P_DISABLE": "0", "X": "1"}), "/p.json"
    )
    assert env["VLLM_CACHE_ROOT"] == "/var/cache/s/fp/vllm"
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "1800"
    assert env["NCCL_P2P_DISABLE"] == "0" and env["X"] == "1"
    assert "SPECDEPLOY_STANDIN_PROFILE" not in env
    sglang = service_files.environment(knobs("sglang", specdeploy_server_standin=True), "/p.json")
    assert "VLLM_CACHE_ROOT" not in sglang
    assert sglang["SGLANG_CACHE_DIR"] == "/var/cache/s/fp/sglang"
    assert sglang["SPECDEPLOY_STANDIN_PROFILE"] == "/p.json"
    assert sglang["PYTHONPATH"] == "/opt/s/releases/r/toolkit"


def test_the_file_plan_has_the_baseline_unit_with_speculation_and_the_profile_in_the_sandbox():
    plan = service_files.file_plan(knobs(), BUILDERS)
    paths = [entry["path"] for entry in plan["config"]]
    assert paths == [
        "/opt/s/releases/r/config/vllm.env",
        "/opt/s/releases/r/config/vllm.service",
        "/opt/s/releases/r/config/gates.json",
        "/opt/s/releases/r/config/vllm.baseline.service",
    ]
    unit, baseline = plan["config"][1], plan["config"][3]
    assert "--speculative-config" not in baseline["context"]["vllm_service_argv"]
    # the installed unit is the release's, rendered alike
    installed = plan["installed"][0]
    assert (installed["template"], installed["context"]) == (unit["template"], unit["context"])
    assert all(entry["mode"] == "0644" for entry in plan["config"] + plan["installed"])
    plain = service_files.file_plan(
        knobs(specdeploy_speculative_enabled=False, specdeploy_server_standin=True), BUILDERS
    )
    assert [entry["path"].rsplit("/", 1)[1] for entry in plain["config"]] == [
        "vllm.env", "vllm.service", "gates.json", "standin-profile.json"
    ]  # fmt: skip
