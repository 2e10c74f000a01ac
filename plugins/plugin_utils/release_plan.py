"""The plan: the ONE release object of a rollout, as a pure function (the action
specdeploy.toolkit.release_plan computes it; tests/unit/test_release_plan.py tests it).

Its id covers everything that defines what runs on the node: the node-side code (the toolkit's
release fingerprint: specdeploy/node, the patch series, requirements-node.txt), the pinned
engine and its patch series, the server's configuration, the hardware-derived settings (what
the hardware doctor derived) and the model files' content (the node probe's cheap fingerprint
of each model directory, when the plan has a probe). The release's paths are built here and
only here (the layout is module_utils ``release.release_paths``). The stand-in (sandbox only)
has its own fingerprint and directory outside the release and outside its id. From the node's
read-only probe it also says what deploying it means on that node: built already, a restart,
steady (serves it, validated, same gates: only checked), the last recorded start.

The id is the first 12 hex digits of the sha256 of the inputs as sorted JSON (Ansible's
``to_json(sort_keys=true)``, i.e. ``json.dumps(..., sort_keys=True)``), so ids planned by the
earlier Jinja plan are the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.filter.engines import engine_requirement
from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.preflight import (
    flag,
    served_speculative_config,
)

# The variables the plan reads (resolved by the action; an undefined one is absent).
PLAN_KNOBS = (
    "specdeploy_root",
    "specdeploy_cache_dir",
    "specdeploy_engine",
    "specdeploy_vllm_version",
    "specdeploy_sglang_version",
    "specdeploy_speculative_enabled",
    "specdeploy_speculative_config",
    "specdeploy_drafter_path",
    "preflight_speculative_schedule",
    "specdeploy_model_path",
    "specdeploy_served_model_name",
    "specdeploy_tensor_parallel_size",
    "specdeploy_pipeline_parallel_size",
    "specdeploy_max_model_len",
    "specdeploy_gpu_memory_utilization",
    "specdeploy_attention_backend",
    "specdeploy_extra_args",
    "specdeploy_environment",
    "specdeploy_port",
    "specdeploy_server_standin",
    "specdeploy_standin_profile",
    "specdeploy_shutdown_timeout_s",
    "specdeploy_release_gates",
    "preflight_version_entry",
    "preflight_version_native",
    "preflight_probe",
    "preflight_serving_release",
)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def model_fingerprints(probe: Any) -> dict[str, str]:
    """{model directory: fingerprint} from the node probe (node_probe's model_configs)."""
    if not isinstance(probe, Mapping):
        return {}
    return {
        str(config["path"]): str(config["fingerprint"])
        for config in probe.get("model_configs") or []
        if isinstance(config, Mapping) and config.get("fingerprint")
    }


def plan(
    knobs: Mapping[str, Any],
    toolkit_sha256: str,
    standin_sha256: str,
    hardware: Mapping[str, Any],
) -> dict[str, Any]:
    """The release object (the roles' ``specdeploy_release``)."""
    engine = str(knobs.get("specdeploy_engine") or "vllm")
    vllm_version = knobs["specdeploy_vllm_version"]
    sglang_version = knobs.get("specdeploy_sglang_version", "")
    entry = knobs.get("preflight_version_entry") or {}
    series = entry.get("series_sha256", "native")
    speculative = (
        served_speculative_config(knobs, knobs.get("preflight_speculative_schedule"))
        if flag(knobs.get("specdeploy_speculative_enabled"))
        else None
    )
    standin = knobs.get("specdeploy_server_standin")
    inputs = {
        "vllm_version": vllm_version,
        "series_sha256": series,
        "toolkit_sha256": toolkit_sha256,
        "model": knobs.get("specdeploy_model_path"),
        "served_model_name": knobs.get("specdeploy_served_model_name"),
        "speculative_config": speculative,
        "tensor_parallel_size": knobs.get("specdeploy_tensor_parallel_size"),
        "pipeline_parallel_size": knobs.get("specdeploy_pipeline_parallel_size"),
        "max_model_len": knobs.get("specdeploy_max_model_len"),
        "gpu_memory_utilization": knobs.get("specdeploy_gpu_memory_utilization"),
        "attention_backend": knobs.get("specdeploy_attention_backend"),
        "extra_args": knobs.get("specdeploy_extra_args"),
        "environment": knobs.get("specdeploy_environment"),
        "nccl_environment": hardware.get("nccl_environment") or {},
        "hardware_server_args": hardware.get("server_extra_args") or [],
        "port": knobs.get("specdeploy_port"),
        "standin": standin,
        "standin_profile": knobs.get("specdeploy_standin_profile"),
        # --shutdown-timeout where the version has it (the manifest's serve_shutdown_timeout)
        "shutdown_timeout_s": (
            int(knobs["specdeploy_shutdown_timeout_s"])
            if entry.get("serve_shutdown_timeout")
            else None
        ),
    }
    # The model files' content (the node probe's fingerprint of each model directory: the target
    # and, with speculation, the drafter): changed files under the same path are a new release.
    # Absent without a probe (a plan on the controller alone), so those ids stay what they were.
    models = model_fingerprints(knobs.get("preflight_probe"))
    if models:
        inputs["model_files"] = models
    # The engine (issue 29) joins the id and the cache key only when it is not vLLM, so the vLLM
    # releases' ids stay what they were.
    engine_inputs = {} if engine == "vllm" else {"engine": engine, "engine_version": sglang_version}
    prefix = "" if engine == "vllm" else f"{engine}-{sglang_version}-"
    release_id = f"{prefix}{vllm_version}-{sha256_json(inputs | engine_inputs)[:12]}"
    fingerprint = sha256_json(
        {"vllm": vllm_version, "series": series, "speculative_config": speculative} | engine_inputs
    )[:16]
    root = str(knobs["specdeploy_root"])
    paths = release_paths(root, release_id)
    cache_dir = f"{knobs['specdeploy_cache_dir']}/compile/{fingerprint}"

    probe = knobs.get("preflight_probe") or {}
    current = probe.get("current") or {}
    manifest = current.get("manifest") or {}
    serving = knobs.get("preflight_serving_release") or ""
    starts = [s["stop_to_ready_s"] for s in manifest.get("starts") or [] if "stop_to_ready_s" in s]
    gates = knobs.get("specdeploy_release_gates")
    validated = (manifest.get("last_validation") or {}).get("status", "") == "pass"
    return {
        "id": release_id,
        "vllm_version": vllm_version,
        "engine": engine,
        "package": engine_requirement(engine, vllm_version, sglang_version),
        "native": flag(knobs.get("preflight_version_native")),
        "series_sha256": series,
        "toolkit_sha256": toolkit_sha256,
        "speculative_config": speculative,
        "inputs": inputs,
        # where it lives on the node; every role takes its paths from here
        "dir": paths["dir"],
        "toolkit_dir": paths["toolkit_dir"],
        "venv_dir": paths["venv_dir"],
        "python": paths["python"],
        "config_dir": paths["config_dir"],
        # compile caches are keyed by the code fingerprint (vLLM, series, speculative config);
        # the marker is written last by roles/compile_cache
        "fingerprint": fingerprint,
        "cache_dir": cache_dir,
        "cache_marker": f"{cache_dir}/FINGERPRINT.json",
        # sandbox only: the stand-in's own directory, outside the release and its id
        "standin_sha256": standin_sha256,
        "standin_dir": f"{root}/standin/{standin_sha256[:16]}" if flag(standin) else "",
        # what deploying it means on this node (from the read-only probe; none on localhost)
        "serving_release": serving,
        # the node's Python (version, machine, glibc): selects the controller's wheels
        "python_platform": probe.get("python_platform") or {},
        "built": serving == release_id,
        "restart": serving != release_id or int(probe.get("service_main_pid") or 0) == 0,
        # the gates the validation applies (rendered into the release; not part of its id)
        "gates": gates,
        # the serving release's last validation (empty unless it is this release)
        "last_validation": (manifest.get("last_validation") or {}) if serving == release_id else {},
        # serves this release, validated, with the same gates: the deploy only checks it
        "steady": serving == release_id and validated and current.get("gates") == gates,
        # stop-to-ready seconds of the serving release's last recorded start (None: unknown)
        "last_start_s": starts[-1] if starts else None,
    }


def describe(
    release: Mapping[str, Any],
    schedule: Mapping[str, Any] | None,
    baseline_plan: Mapping[str, Any] | None,
) -> list[str]:
    """The plan's lines for one node (`make plan` and the deploy's first play print them)."""
    if release.get("engine", "vllm") == "sglang":
        version = str(release["package"]).removeprefix("sglang==")
        engine = f"SGLang {version} (native EAGLE-3, nothing patched)"
    else:
        how = (
            "native EAGLE-3"
            if release["native"]
            else f"patch series {release['series_sha256'][:12]}"
        )
        engine = f"vLLM {release['vllm_version']} ({how})"
    spec = release.get("speculative_config")
    speculation = f"on: {json.dumps(spec)}" if spec else "off"
    k_schedule = str((schedule or {}).get("message", "off")) if spec else "off (no speculation)"
    if release["built"]:
        where = "serves it already" + (
            ", validated, same gates: only checked" if release["steady"] else ""
        )
    else:
        where = f"would be built (serving now: {release['serving_release'] or 'nothing'})"
    if not release["restart"]:
        downtime = "none"
    elif release.get("last_start_s") is not None:
        downtime = (
            f"about {int(float(release['last_start_s']) + 0.5)} s (the last start of the "
            "serving release on this node)"
        )
    else:
        downtime = "unknown (no start recorded on this node)"
    if baseline_plan and not release["steady"]:
        baseline = f"{baseline_plan.get('source')}: {baseline_plan.get('message')}"
    else:
        baseline = (
            "none needed (the node serves this release, validated: nothing is measured again)"
        )
    return [
        f"release {release['id']}: {engine}, node code {release['toolkit_sha256'][:12]}, "
        f"speculation {speculation}",
        f"k schedule by running requests: {k_schedule}",
        f"on this node: {where}",
        f"server restarts: {'yes' if release['restart'] else 'no'}; expected downtime: {downtime}",
        f"baseline for the speed-up gate: {baseline}",
        f"gates: {json.dumps(release.get('gates'))}",
    ]
