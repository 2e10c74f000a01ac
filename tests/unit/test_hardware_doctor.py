"""The hardware doctor's arguments from the node's knobs (plugins/plugin_utils/hardware_doctor.py,
run by the action specdeploy.toolkit.hardware_doctor): those roles/gpu_node/tasks/doctor.yml gave
the module specdeploy.toolkit.gpu_doctor in Jinja."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import hardware_doctor

KNOBS = {
    "gpu_node_expected_gpus": 8,
    "gpu_node_expected_model": "RTX PRO 6000",
    "gpu_node_expected_compute_capability": "12.0",
    "specdeploy_vllm_version": "0.16.0",
    "gpu_node_min_driver": "",
    "specdeploy_service_user": "vllm",
    "gpu_node_doctor_root": "/",
    "gpu_node_doctor_kernel_log": "",
    "gpu_node_min_shm_gb": 8,
    "specdeploy_root": "/opt/specdeploy",
    "specdeploy_min_free_disk_gb": 25,
    "specdeploy_cache_dir": "/var/cache/vllm",
    "gpu_node_min_free_cache_gb": 10,
    "specdeploy_model_path": "/srv/models/kimi",
    "gpu_node_model_manifest": "/srv/models/kimi.sha256",
    "specdeploy_speculative_enabled": False,
    "gpu_node_verify_checksums": False,
    "gpu_node_require_p2p": False,
    "gpu_node_nccl_p2p": "auto",
    "gpu_node_attention_backend": "",
    "gpu_node_nccl_environment": {"NCCL_DEBUG": "WARN"},
}


def test_every_knob_reaches_its_argument() -> None:
    assert set(hardware_doctor.KNOBS) == set(KNOBS)
    assert hardware_doctor.doctor_args(KNOBS, "node1") == {
        "expected_gpus": 8,
        "expected_model": "RTX PRO 6000",
        "expected_compute_cap": "12.0",
        "vllm_version": "0.16.0",
        "min_driver": "",
        "service_users": ["vllm"],
        "root": "/",
        "kernel_log": "",
        "min_shm_gb": 8,
        "free_disk": [
            {"path": "/opt/specdeploy", "min_gb": 25},
            {"path": "/var/cache/vllm", "min_gb": 10},
        ],
        "model_dirs": [{"path": "/srv/models/kimi", "manifest": "/srv/models/kimi.sha256"}],
        "verify_checksums": False,
        "require_p2p": False,
        "nccl_p2p": "auto",
        "attention_backend": "",
        "fail_on_failed_checks": True,
        "node": "node1",
        "nccl_environment": {"NCCL_DEBUG": "WARN"},
    }


def test_the_drafter_directory_is_checked_only_with_speculation() -> None:
    knobs = KNOBS | {
        "specdeploy_speculative_enabled": True,
        "specdeploy_drafter_path": "/srv/models/eagle3",
        "gpu_node_drafter_manifest": "",
    }
    assert hardware_doctor.model_dirs(knobs) == [
        {"path": "/srv/models/kimi", "manifest": "/srv/models/kimi.sha256"},
        {"path": "/srv/models/eagle3", "manifest": ""},
    ]
    assert len(hardware_doctor.model_dirs(KNOBS)) == 1  # no drafter knobs needed without it


@pytest.mark.parametrize(
    ("knob", "word"), [("auto", "auto"), ("enabled", "on"), ("disabled", "off")]
)
def test_the_p2p_knob_becomes_the_doctor_word(knob: str, word: str) -> None:
    assert hardware_doctor.doctor_args(KNOBS | {"gpu_node_nccl_p2p": knob}, "n")["nccl_p2p"] == word


def test_an_unknown_p2p_word_is_refused_naming_the_knob() -> None:
    with pytest.raises(ValueError, match="gpu_node_nccl_p2p='on' is not one of auto, enabled"):
        hardware_doctor.nccl_p2p("on")
