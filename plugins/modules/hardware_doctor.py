#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.hardware_doctor (plugins/action).

The work happens in the action (plugins/action/hardware_doctor.py, the arguments in
plugins/plugin_utils/hardware_doctor.py), which runs M(specdeploy.toolkit.gpu_doctor) on the
node; this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hardware_doctor
short_description: Run the hardware doctor on a node with the node's knobs
description:
  - Runs M(specdeploy.toolkit.gpu_doctor) on the node with the arguments the role's knobs give
    (C(gpu_node_expected_gpus), C(gpu_node_expected_model),
    C(gpu_node_expected_compute_capability), C(gpu_node_min_driver), C(gpu_node_min_shm_gb),
    C(gpu_node_doctor_root), C(gpu_node_doctor_kernel_log), C(gpu_node_verify_checksums),
    C(gpu_node_require_p2p), C(gpu_node_nccl_p2p), C(gpu_node_attention_backend),
    C(gpu_node_nccl_environment), C(specdeploy_vllm_version), C(specdeploy_service_user)).
  - The free space it checks is C(specdeploy_min_free_disk_gb) under C(specdeploy_root) and
    C(gpu_node_min_free_cache_gb) under C(specdeploy_cache_dir); the model directories are
    C(specdeploy_model_path) with C(gpu_node_model_manifest) and, when
    C(specdeploy_speculative_enabled), C(specdeploy_drafter_path) with
    C(gpu_node_drafter_manifest).
  - A failed check fails the task, with each failure's fix; the result, and the facts the module
    sets, are the module's.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options: {}
attributes:
  check_mode:
    support: full
    description: Read-only; it runs in check mode too.
  diff_mode:
    support: none
    description: Changes nothing.
  action:
    support: full
    description: The action runs M(specdeploy.toolkit.gpu_doctor) on the node.
"""

EXAMPLES = r"""
- name: Run the hardware doctor on the node (read-only)
  specdeploy.toolkit.hardware_doctor: {}
  become: true
  register: doctor
"""

RETURN = r"""
msg:
  description: The report's result line (M(specdeploy.toolkit.gpu_doctor)'s).
  type: str
  returned: always
report:
  description: The doctor's report, as M(specdeploy.toolkit.gpu_doctor) returns it.
  type: dict
  returned: always
"""
