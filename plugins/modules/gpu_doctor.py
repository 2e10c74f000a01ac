#!/usr/bin/python
"""Ansible module: the hardware doctor (is this GPU node fit to serve?), read-only, in one
round trip.

The logic is the collection's module_utils doctor package (plugins/module_utils/doctor/, stdlib
only; the node package imports the same files as specdeploy.node.module_utils.doctor, and its
command line is specdeploy.node.doctor). This file only maps the options and returns the
report.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_doctor
short_description: Check that a GPU node is fit to serve (read-only hardware preflight)
description:
  - Runs every check of the hardware doctor on the node and returns its report, one line per
    check, each failure with its fix - nvidia-smi answers, the GPU count, model and compute
    capability, the driver against the minimum for the vLLM release, the open kernel modules,
    persistence mode, no foreign process holding GPU memory, ECC and retired pages or remapped
    rows, Xid errors in this boot's kernel log, PCIe ACS on the bridges above the GPUs and the
    IOMMU mode, the size of /dev/shm, free disk, the model files.
  - Derives what the server needs - the MLA attention backend vLLM picks for the compute
    capability, and the NCCL settings (peer-to-peer on when neither ACS nor a translating IOMMU
    sits between the GPUs, else C(NCCL_P2P_DISABLE=1) and C(--disable-custom-all-reduce)).
  - A failed check is listed in RV(report.failures); with O(fail_on_failed_checks) the module then
    fails, its message naming every failure with its fix (the report, table included, is in the
    failed result). Without it the caller decides.
  - Reads only, in every mode (run it as root - the PCI config space needs it). Check mode runs
    the same checks.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  expected_gpus: {description: "How many GPUs the node must have.", type: int, default: 8}
  expected_model: {description: "Part of every GPU's name.", type: str, default: RTX PRO 6000}
  expected_compute_cap:
    description: The GPUs' compute capability; empty accepts any (the same on every GPU).
    type: str
    default: "12.0"
  vllm_version: {description: "The vLLM release; picks the minimum driver.", type: str, default: ""}
  min_driver: {description: "Overrides the minimum driver version.", type: str, default: ""}
  service_users:
    description: GPU processes of these users are the server's own (not foreign).
    type: list
    elements: str
    default: [vllm]
  max_idle_memory_mib:
    description: GPU memory another process may hold before it counts as foreign.
    type: int
    default: 2048
  kernel_log:
    description: Read Xid errors from this file; empty reads C(journalctl -k) or C(dmesg).
    type: str
    default: ""
  root: {description: "Prefix of /sys and /proc (tests).", type: path, default: /}
  fail_on_failed_checks:
    description: Fail when a check failed (one task instead of a separate stop task per node).
    type: bool
    default: false
  node:
    description: The node's name, which the failure message starts with.
    type: str
    default: ""
  nccl_environment:
    description: >-
      The operator's NCCL variables; they win over the derived ones in the fact
      C(specdeploy_nccl_environment).
    type: dict
    default: {}
  free_disk:
    description: Paths that must have free space.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: "The path (or its nearest existing parent).", type: path, required: true}
      min_gb: {description: "The free space it needs, GB.", type: float, required: true}
  model_dirs:
    description: Model directories whose files must be there.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: "The model directory.", type: path, required: true}
      manifest: {description: "Its manifest of files (empty, none).", type: str, default: ""}
  verify_checksums:
    description: Hash the files the manifests list (slow on a large model).
    type: bool
    default: false
  min_shm_gb: {description: "The size /dev/shm needs, GB.", type: float, default: 8.0}
  shm_path: {description: "The shared-memory mount.", type: path, default: /dev/shm}
  require_p2p:
    description: ACS or a translating IOMMU blocking GPU peer-to-peer traffic fails (else warns).
    type: bool
    default: false
  nccl_p2p:
    description: NCCL peer-to-peer - derived from the PCIe state (auto) or forced.
    type: str
    choices: [auto, "on", "off"]
    default: auto
  attention_backend:
    description: Overrides the derived attention backend (empty, derived).
    type: str
    default: ""
  nvidia_smi: {description: "The nvidia-smi binary.", type: str, default: nvidia-smi}
"""

EXAMPLES = r"""
- name: Run the hardware doctor on the node (read-only)
  specdeploy.toolkit.gpu_doctor:
    expected_gpus: 8
    vllm_version: 0.16.0
    free_disk:
      - {path: /opt/specdeploy, min_gb: 25}
    model_dirs:
      - {path: /srv/models/Kimi-K2.5}
  become: true
  register: doctor

- name: Stop on a failed check
  ansible.builtin.fail:
    msg: "{{ doctor.report.failures | join(' ;; ') }}"
  when: doctor.report.failures | length > 0
"""

RETURN = r"""
msg:
  description: The report's result line.
  type: str
  returned: always
  sample: "result: OK: 0 failed, 0 warning(s), 14 checks"
report:
  description: The doctor's report, as C(gpu-doctor --json) prints it.
  type: dict
  returned: always
  contains:
    ok: {description: "No check failed.", type: bool}
    failed: {description: "The names of the failed checks.", type: list, elements: str}
    warnings: {description: "The names of the checks that warned.", type: list, elements: str}
    checks:
      description: Each check - name, status (pass, warn, fail, skip), message, fix.
      type: list
      elements: dict
    failures: {description: "Each failed check, one line with its fix.", type: list, elements: str}
    table:
      description: The check table - one line per check, then the derived line and the result.
      type: list
      elements: str
    derived:
      description: What the server needs - compute_capability, attention_backend, nccl_p2p,
        nccl_environment, server_extra_args (each with its source).
      type: dict
    gpus: {description: "The GPUs nvidia-smi listed.", type: list, elements: dict}
ansible_facts:
  description: >-
    What the server needs, as the node's facts (a set_fact after the doctor was one more task per
    node on every deploy) - C(gpu_node_doctor) (the report), C(gpu_node_expected_attention_backend),
    C(gpu_node_nccl_p2p_enabled), C(gpu_node_server_extra_args) and C(specdeploy_nccl_environment)
    (the derived NCCL variables, O(nccl_environment) over them).
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.doctor.model import UsageError
from ansible_collections.specdeploy.toolkit.plugins.module_utils.doctor.runner import (
    options_from_params,
    run,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "expected_gpus": {"type": "int", "default": 8},
            "expected_model": {"type": "str", "default": "RTX PRO 6000"},
            "expected_compute_cap": {"type": "str", "default": "12.0"},
            "vllm_version": {"type": "str", "default": ""},
            "min_driver": {"type": "str", "default": ""},
            "service_users": {"type": "list", "elements": "str", "default": ["vllm"]},
            "max_idle_memory_mib": {"type": "int", "default": 2048},
            "kernel_log": {"type": "str", "default": ""},
            "root": {"type": "path", "default": "/"},
            "free_disk": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "path": {"type": "path", "required": True},
                    "min_gb": {"type": "float", "required": True},
                },
            },
            "model_dirs": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "path": {"type": "path", "required": True},
                    "manifest": {"type": "str", "default": ""},
                },
            },
            "verify_checksums": {"type": "bool", "default": False},
            "min_shm_gb": {"type": "float", "default": 8.0},
            "shm_path": {"type": "path", "default": "/dev/shm"},
            "require_p2p": {"type": "bool", "default": False},
            "nccl_p2p": {"type": "str", "choices": ["auto", "on", "off"], "default": "auto"},
            "attention_backend": {"type": "str", "default": ""},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "fail_on_failed_checks": {"type": "bool", "default": False},
            "node": {"type": "str", "default": ""},
            "nccl_environment": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        # Read-only in every mode: check mode runs the same checks.
        report = run(options_from_params(module.params)).to_dict()
    except (UsageError, ValueError) as error:
        module.fail_json(msg=f"gpu-doctor: error: {error}")
    # The report's own failed/warnings lists stay inside it: at the top level Ansible would
    # read them as the task's status and its warnings.
    if module.params["fail_on_failed_checks"] and report["failures"]:
        module.fail_json(
            msg=failure_message(module.params["node"], report["failures"]), report=report
        )
    module.exit_json(
        changed=False,
        msg=report["table"][-1],
        report=report,
        ansible_facts=node_facts(report, module.params["nccl_environment"]),
    )


def node_facts(report: dict, nccl_override: dict) -> dict:
    """The facts the gpu_node role's callers read (the unit's NCCL environment, the backend)."""
    derived = report["derived"]
    return {
        "gpu_node_doctor": report,
        "gpu_node_expected_attention_backend": derived["attention_backend"],
        "gpu_node_nccl_p2p_enabled": derived["nccl_p2p"],
        "gpu_node_server_extra_args": derived["server_extra_args"],
        "specdeploy_nccl_environment": {**derived["nccl_environment"], **nccl_override},
    }


def failure_message(node: str, failures: list[str]) -> str:
    """One line: the node, then each failed check with its fix."""
    prefix = f"{node}: " if node else ""
    return f"{prefix}hardware preflight failed: {' ;; '.join(failures)}"


if __name__ == "__main__":
    main()
