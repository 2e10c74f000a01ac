"""What the server of a release runs with, per engine, as pure functions (issue 25: no programs in
Jinja; issue 29: the one engine branch point).

The lookup ``specdeploy.toolkit.service_files`` renders the release's files from these; the filter
``specdeploy.toolkit.server_files`` gives the executables the steady check requires. A release
carries its engine (``specdeploy_release.engine``); the sandbox's stand-in (``standin``) takes the
same arguments as the engine it stands in for, run with the release's Python from its own
directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Argv = Callable[[list[str], Mapping[str, Any], Mapping[str, Any] | None], list[str]]

# The knobs the server's command line and environment read (the lookup resolves them).
KNOBS = (
    "specdeploy_release",
    "specdeploy_server_standin",
    "specdeploy_model_path",
    "specdeploy_served_model_name",
    "specdeploy_host",
    "specdeploy_port",
    "specdeploy_tensor_parallel_size",
    "specdeploy_pipeline_parallel_size",
    "specdeploy_max_model_len",
    "specdeploy_gpu_memory_utilization",
    "specdeploy_trust_remote_code",
    "specdeploy_attention_backend",
    "specdeploy_extra_args",
    "specdeploy_drafter_path",
    "specdeploy_start_timeout_s",
    "specdeploy_environment",
    "specdeploy_speculative_enabled",
    "specdeploy_release_gates",
    "specdeploy_standin_profile",
    "specdeploy_service_name",
    "vllm_service_unit_path",
    "vllm_service_config_dir",
    "vllm_service_rendered_unit_path",
    "vllm_service_baseline_unit_path",
    "vllm_service_gates_path",
    "specdeploy_toolkit_dir",
)

# The on-failure hook alone (the set ``hook``): activation installs it for any release, also where
# no release is planned (a rollback).
HOOK_KNOBS = ("specdeploy_service_name", "specdeploy_toolkit_dir")

# Each engine's compile and JIT caches, under the release's cache directory (its fingerprint).
CACHES = {
    "vllm": {
        "VLLM_CACHE_ROOT": "vllm",
        "TORCHINDUCTOR_CACHE_DIR": "inductor",
        "TRITON_CACHE_DIR": "triton",
        "FLASHINFER_WORKSPACE_BASE": "flashinfer",
        "DG_JIT_CACHE_DIR": "deepgemm",
    },
    "sglang": {
        "TORCHINDUCTOR_CACHE_DIR": "inductor",
        "TRITON_CACHE_DIR": "triton",
        "FLASHINFER_WORKSPACE_BASE": "flashinfer",
        "DG_JIT_CACHE_DIR": "deepgemm",
        # SGLang's tvm-ffi JIT kernels (sgl_kernel / sglang.jit_kernel), as in the GPU recipe.
        "TVM_FFI_CACHE_DIR": "tvm-ffi",
        "SGLANG_CACHE_DIR": "sglang",
    },
}


# The CI stand-in for each engine's server, in the stand-in's directory (sandbox only).
STANDINS = {"vllm": "tests/standin/vllm_standin.py", "sglang": "tests/standin/sglang_standin.py"}


def engine_of(release: Mapping[str, Any]) -> str:
    engine = str(release.get("engine") or "vllm")
    if engine not in CACHES:
        raise ValueError(f"unknown engine {engine!r} in the release (known: {', '.join(CACHES)})")
    return engine


def server_command(release: Mapping[str, Any], standin: bool) -> list[str]:
    """The command before the server's arguments."""
    engine = engine_of(release)
    if standin:
        return [str(release["python"]), f"{release['standin_dir']}/{STANDINS[engine]}"]
    if engine == "sglang":
        return [str(release["python"]), "-m", "sglang.launch_server"]
    return [f"{release['venv_dir']}/bin/vllm"]


def server_files(release: Mapping[str, Any], standin: bool) -> list[str]:
    """The server's files that must exist (the steady check): the command's absolute paths."""
    return [part for part in server_command(release, standin) if part.startswith("/")]


def server_knobs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs the engine's argv builder reads (plugins/filter/engines.py)."""
    release = knobs["specdeploy_release"]
    inputs = release.get("inputs") or {}
    common = {
        "model": knobs["specdeploy_model_path"],
        "served_model_name": knobs["specdeploy_served_model_name"],
        "host": knobs["specdeploy_host"],
        "port": knobs["specdeploy_port"],
        "tensor_parallel_size": knobs["specdeploy_tensor_parallel_size"],
        "max_model_len": knobs["specdeploy_max_model_len"],
        "gpu_memory_utilization": knobs["specdeploy_gpu_memory_utilization"],
        "trust_remote_code": knobs["specdeploy_trust_remote_code"],
        "attention_backend": knobs["specdeploy_attention_backend"],
    }
    hardware = list(inputs.get("hardware_server_args") or [])
    extra = list(knobs.get("specdeploy_extra_args") or [])
    if engine_of(release) == "sglang":
        return common | {
            "drafter_path": knobs.get("specdeploy_drafter_path"),
            "extra_args": hardware + extra,
        }
    return common | {
        "pipeline_parallel_size": knobs["specdeploy_pipeline_parallel_size"],
        "hardware_server_args": hardware,
        "shutdown_timeout_s": inputs.get("shutdown_timeout_s"),
        "extra_args": extra,
    }


def argv_pair(
    knobs: Mapping[str, Any], builders: Mapping[str, Argv]
) -> tuple[list[str], list[str]]:
    """The unit's command line and the baseline start's (the same without speculation)."""
    release = knobs["specdeploy_release"]
    build = builders[engine_of(release)]
    command = server_command(release, bool(knobs["specdeploy_server_standin"]))
    server = server_knobs(knobs)
    return build(command, server, release.get("speculative_config")), build(command, server, None)


def environment(knobs: Mapping[str, Any], standin_profile_path: str) -> dict[str, str]:
    """vllm.env: the caches, the start budget, the release's NCCL settings, the stand-in's profile
    (sandbox), the operator's specdeploy_environment last (it wins)."""
    release = knobs["specdeploy_release"]
    cache_dir = str(release["cache_dir"])
    merged: dict[str, Any] = {
        name: f"{cache_dir}/{sub}" for name, sub in CACHES[engine_of(release)].items()
    }
    merged |= {
        "VLLM_ENGINE_READY_TIMEOUT_S": str(knobs["specdeploy_start_timeout_s"]),
        "PYTHONUNBUFFERED": "1",
    }
    merged |= dict((release.get("inputs") or {}).get("nccl_environment") or {})
    if knobs["specdeploy_server_standin"]:
        merged |= {
            "SPECDEPLOY_STANDIN_PROFILE": standin_profile_path,
            "PYTHONPATH": str(release["toolkit_dir"]),
        }
    return merged | dict(knobs.get("specdeploy_environment") or {})


def standin_profile_path(knobs: Mapping[str, Any]) -> str:
    """The stand-in's profile in the release's config directory (sandbox only)."""
    return f"{knobs['vllm_service_config_dir']}/standin-profile.json"


def hook_file(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The on-failure hook the unit's OnFailure= starts: a systemd template unit named after the
    service, from the toolkit's template."""
    return {
        "path": f"/etc/systemd/system/{knobs['specdeploy_service_name']}-on-failure@.service",
        "template": f"{knobs['specdeploy_toolkit_dir']}/templates/vllm-on-failure@.service.j2",
        "context": {},
        "mode": "0644",
    }


def file_plan(knobs: Mapping[str, Any], builders: Mapping[str, Argv]) -> dict[str, list[dict]]:
    """The files of each set, each with its path, mode and what makes its content: ``template``
    (rendered with ``context`` over the task's variables) or ``json`` (a value, as to_nice_json).

    ``config``: into the release's config directory (the env file, the unit, the gates; a
    speculative release's baseline unit; the stand-in's profile in the sandbox). ``installed``:
    the installed unit (a copy of the release's) and the on-failure hook (``hook_file``).
    """
    argv, baseline_argv = argv_pair(knobs, builders)
    env = environment(knobs, standin_profile_path(knobs))
    templates = f"{knobs['specdeploy_toolkit_dir']}/templates"
    unit_context = {"vllm_service_argv": argv, "vllm_service_environment": env}
    unit = {"template": f"{templates}/vllm.service.j2", "context": unit_context}
    config = [
        {"path": f"{knobs['vllm_service_config_dir']}/vllm.env",
         "template": f"{templates}/vllm.env.j2", "context": unit_context},
        {"path": knobs["vllm_service_rendered_unit_path"], **unit},
        {"path": knobs["vllm_service_gates_path"], "json": knobs["specdeploy_release_gates"]},
    ]  # fmt: skip
    if knobs["specdeploy_speculative_enabled"]:
        config.append(
            {
                "path": knobs["vllm_service_baseline_unit_path"],
                "template": unit["template"],
                "context": unit_context | {"vllm_service_argv": baseline_argv},
            }
        )
    if knobs["specdeploy_server_standin"]:
        config.append(
            {
                "path": standin_profile_path(knobs),
                "json": knobs["specdeploy_standin_profile"],
            }
        )
    installed = [
        {"path": knobs["vllm_service_unit_path"], **unit},
        hook_file(knobs),
    ]
    for entry in config + installed:
        entry["mode"] = "0644"
    return {"config": config, "installed": installed}
