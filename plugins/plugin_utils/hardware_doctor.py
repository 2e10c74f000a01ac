"""The hardware doctor's arguments (the module specdeploy.toolkit.gpu_doctor) from the node's
knobs, as a pure function (issue 25: no programs in Jinja); the action
specdeploy.toolkit.hardware_doctor resolves the knobs and runs the module with them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The knobs the arguments read (the action resolves them, templated).
KNOBS = (
    "gpu_node_expected_gpus",
    "gpu_node_expected_model",
    "gpu_node_expected_compute_capability",
    "specdeploy_vllm_version",
    "gpu_node_min_driver",
    "specdeploy_service_user",
    "gpu_node_doctor_root",
    "gpu_node_doctor_kernel_log",
    "gpu_node_min_shm_gb",
    "specdeploy_root",
    "specdeploy_min_free_disk_gb",
    "specdeploy_cache_dir",
    "gpu_node_min_free_cache_gb",
    "specdeploy_model_path",
    "gpu_node_model_manifest",
    "specdeploy_speculative_enabled",
    "gpu_node_verify_checksums",
    "gpu_node_require_p2p",
    "gpu_node_nccl_p2p",
    "gpu_node_attention_backend",
    "gpu_node_nccl_environment",
)
# Read only for a speculative deployment (the drafter's directory is checked then).
DRAFTER_KNOBS = ("specdeploy_drafter_path", "gpu_node_drafter_manifest")

# The knob's words (gpu_node_nccl_p2p) -> the doctor's.
NCCL_P2P = {"auto": "auto", "enabled": "on", "disabled": "off"}


def model_dirs(knobs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The model's directory and, when speculation is on, the drafter's, each with its manifest
    ("" for none)."""
    dirs = [{"path": knobs["specdeploy_model_path"], "manifest": knobs["gpu_node_model_manifest"]}]
    if knobs["specdeploy_speculative_enabled"]:
        dirs.append(
            {
                "path": knobs["specdeploy_drafter_path"],
                "manifest": knobs["gpu_node_drafter_manifest"],
            }
        )
    return dirs


def nccl_p2p(value: Any) -> str:
    if value not in NCCL_P2P:
        raise ValueError(f"gpu_node_nccl_p2p={value!r} is not one of {', '.join(NCCL_P2P)}")
    return NCCL_P2P[value]


def doctor_args(knobs: Mapping[str, Any], node: str) -> dict[str, Any]:
    """specdeploy.toolkit.gpu_doctor's arguments for the node named ``node``; its failed checks
    fail the task."""
    return {
        "expected_gpus": knobs["gpu_node_expected_gpus"],
        "expected_model": knobs["gpu_node_expected_model"],
        "expected_compute_cap": knobs["gpu_node_expected_compute_capability"],
        "vllm_version": knobs["specdeploy_vllm_version"],
        "min_driver": knobs["gpu_node_min_driver"],
        "service_users": [knobs["specdeploy_service_user"]],
        "root": knobs["gpu_node_doctor_root"],
        "kernel_log": knobs["gpu_node_doctor_kernel_log"],
        "min_shm_gb": knobs["gpu_node_min_shm_gb"],
        "free_disk": [
            {"path": knobs["specdeploy_root"], "min_gb": knobs["specdeploy_min_free_disk_gb"]},
            {"path": knobs["specdeploy_cache_dir"], "min_gb": knobs["gpu_node_min_free_cache_gb"]},
        ],
        "model_dirs": model_dirs(knobs),
        "verify_checksums": knobs["gpu_node_verify_checksums"],
        "require_p2p": knobs["gpu_node_require_p2p"],
        "nccl_p2p": nccl_p2p(knobs["gpu_node_nccl_p2p"]),
        "attention_backend": knobs["gpu_node_attention_backend"],
        "fail_on_failed_checks": True,
        "node": node,
        "nccl_environment": knobs["gpu_node_nccl_environment"],
    }
