"""Filters over specdeploy.controller.engines (issue 29): the engine facts stay in Python.

``vllm_argv``: the ``vllm serve`` command line of a release (the lookup service_files),
``--speculative-config`` left out for the baseline start (speculative None).
``sglang_argv``: the SGLang server's command line of a release, built by engines.sglang_argv
from the same knobs the vLLM unit reads (the lookup service_files calls it).
``server_files``: the server's executables a steady node must have (the lookup service_files
renders the command line that runs them).
``engine_requirement``: the package the release venv installs (``vllm==V`` or ``sglang==V``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import service_files

# The collection is the repository (collections/ansible_collections/specdeploy/toolkit -> ../../..):
# the controller package sits three levels above this file.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from specdeploy.controller import engines  # noqa: E402  (needs the path set above)


def vllm_argv(
    server: list[str], knobs: Mapping[str, Any], speculative: Mapping[str, Any] | None
) -> list[str]:
    """``server``: the command before ``serve``; ``knobs``: the server knobs
    (plugin_utils/service_files.server_knobs), the doctor's ``hardware_server_args`` and the
    operator's ``extra_args`` last."""
    argv = [*server, "serve", str(knobs["model"]),
            "--served-model-name", str(knobs["served_model_name"]),
            "--host", str(knobs["host"]),
            "--port", str(knobs["port"]),
            "--tensor-parallel-size", str(knobs["tensor_parallel_size"]),
            "--pipeline-parallel-size", str(knobs["pipeline_parallel_size"]),
            "--max-model-len", str(knobs["max_model_len"]),
            "--gpu-memory-utilization", str(knobs["gpu_memory_utilization"])]  # fmt: skip
    if knobs.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    if speculative:
        argv += ["--speculative-config", json.dumps(speculative, sort_keys=True)]
    if knobs.get("attention_backend"):
        argv += ["--attention-backend", str(knobs["attention_backend"])]
    argv += list(knobs.get("hardware_server_args") or [])
    if knobs.get("shutdown_timeout_s") is not None:
        argv += ["--shutdown-timeout", str(knobs["shutdown_timeout_s"])]
    return argv + list(knobs.get("extra_args") or [])


def sglang_argv(
    server: list[str], knobs: dict[str, Any], speculative: dict[str, Any] | None
) -> list[str]:
    spec = None
    if speculative:
        spec = engines.SpecConfig(
            draft_model=str(knobs["drafter_path"]),
            num_steps=int(speculative["num_speculative_tokens"]),
            topk=int(speculative.get("topk", 1)),
            num_draft_tokens=speculative.get("num_draft_tokens"),
        )
    return engines.sglang_argv(
        list(server),
        model=str(knobs["model"]),
        served_name=str(knobs["served_model_name"]),
        host=str(knobs["host"]),
        port=int(knobs["port"]),
        tp_size=int(knobs["tensor_parallel_size"]),
        context_length=int(knobs["max_model_len"]),
        mem_fraction=float(knobs["gpu_memory_utilization"]),
        spec=spec,
        attention_backend=str(knobs.get("attention_backend") or ""),
        disable_custom_all_reduce=bool(knobs.get("disable_custom_all_reduce")),
        trust_remote_code=bool(knobs.get("trust_remote_code")),
        extra=list(knobs.get("extra_args") or []),
    )


def engine_requirement(eng: str, vllm_version: str, sglang_version: str) -> str:
    """``name==version`` of the engine package the release venv installs."""
    return engines.engine_requirement(str(eng), str(vllm_version), str(sglang_version))


def server_files(release: Mapping[str, Any], standin: bool) -> list[str]:
    """The server's executables a steady node must have (the command's absolute paths)."""
    return service_files.server_files(release, bool(standin))


def backend_names(name: str) -> list[str]:
    """An expected attention backend as either engine logs it (vLLM's name, SGLang's)."""
    return [str(name), engines.sglang_backend(str(name))] if name else []


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_argv": vllm_argv,
            "sglang_argv": sglang_argv,
            "server_files": server_files,
            "engine_requirement": engine_requirement,
            "backend_names": backend_names,
        }
