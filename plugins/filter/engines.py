"""Filters over specdeploy.controller.engines (issue 29): the engine facts stay in Python.

``sglang_argv``: the SGLang server's command line of a release, built by engines.sglang_argv
from the same knobs the vLLM unit reads (roles/vllm_service/vars/sglang.yml calls it).
``engine_requirement``: the package the release venv installs (``vllm==V`` or ``sglang==V``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# The collection is the repository (collections/ansible_collections/specdeploy/toolkit -> ../../..):
# the controller package sits three levels above this file.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from specdeploy.controller import engines  # noqa: E402  (needs the path set above)


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


def backend_names(name: str) -> list[str]:
    """An expected attention backend as either engine logs it (vLLM's name, SGLang's)."""
    return [str(name), engines.sglang_backend(str(name))] if name else []


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_argv": sglang_argv,
            "engine_requirement": engine_requirement,
            "backend_names": backend_names,
        }
