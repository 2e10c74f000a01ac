#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.driver_reboot_plan (plugins/action).

The work happens in the action (plugins/action/driver_reboot_plan.py, its rules in
plugins/plugin_utils/driver_reboot.py); this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: driver_reboot_plan
short_description: Decide whether a node needs a reboot into the pinned NVIDIA driver
description:
  - Reads the node's running NVIDIA kernel module version (C(/sys/module/nvidia/version)) and
    machine id (C(/etc/machine-id)) with M(ansible.builtin.slurp); either may be missing.
  - A reboot is needed when the registered C(gpu_node_driver_install) changed or the running
    module is not C(gpu_node_driver_version).
  - The node is the machine Ansible runs on when its name or C(ansible_host) is a local name,
    its connection is C(local), or its machine id is the controller's.
  - Sets the facts C(gpu_node_driver_loaded_version), C(gpu_node_driver_changed),
    C(gpu_node_reboot_needed) and C(gpu_node_is_controller); changes nothing.
  - Takes no options; it reads C(gpu_node_driver_version), C(gpu_node_driver_packages),
    C(gpu_node_reboot_allowed) and C(gpu_node_driver_install).
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
    description: The action reads the node's files with M(ansible.builtin.slurp).
"""

EXAMPLES = r"""
- name: Decide whether a reboot is needed and allowed
  specdeploy.toolkit.driver_reboot_plan: {}
  register: reboot_plan

- name: Stop and say that a reboot is needed
  ansible.builtin.fail:
    msg: "{{ reboot_plan.stop_message }}"
  when: gpu_node_reboot_needed and not gpu_node_reboot_allowed
"""

RETURN = r"""
check_note:
  description: What a real run would do (driver, running module, reboot), for check mode.
  returned: always
  type: str
stop_message:
  description: Why the run must stop for a reboot, and how to go on.
  returned: always
  type: str
"""
