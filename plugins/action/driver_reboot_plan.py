"""Decide whether a node needs a reboot into the pinned NVIDIA driver, in one task.

It reads the node's running kernel module (/sys/module/nvidia/version) and machine id
(/etc/machine-id) with ansible.builtin.slurp, as the two probe tasks it replaces did, compares
the machine id with the controller's, and sets the role's facts; the rules and the words are
plugins/plugin_utils/driver_reboot.py. The check-mode note and the message the run stops with
come back as ``check_note`` and ``stop_message``.
"""

from __future__ import annotations

import base64
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import driver_reboot
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    UNSET,
    require_all,
    resolve,
)

KNOBS = ("gpu_node_driver_version", "gpu_node_driver_packages", "gpu_node_reboot_allowed")
MODULE_VERSION = "/sys/module/nvidia/version"
MACHINE_ID = "/etc/machine-id"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if self._task.args:
            raise AnsibleActionFail("driver_reboot_plan: takes no arguments (it reads the knobs)")
        knobs = require_all(self._templar, KNOBS, "driver_reboot_plan")
        host = str(task_vars["inventory_hostname"])
        try:
            loaded = self._read(MODULE_VERSION, task_vars)
            own_id = self._read(MACHINE_ID, task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        controller = driver_reboot.is_controller(
            host,
            str(self._knob("ansible_host", host)),
            str(self._knob("ansible_connection", "ssh")),
            own_id,
            controller_machine_id(),
        )
        version = str(knobs["gpu_node_driver_version"])
        facts = driver_reboot.reboot_facts(
            version=version,
            loaded=loaded,
            install_changed=driver_reboot.changed(self._knob("gpu_node_driver_install", {})),
            controller=controller,
        )
        result.update(
            changed=False,
            ansible_facts=facts,
            check_note=driver_reboot.check_note(
                facts,
                version=version,
                packages=list(knobs["gpu_node_driver_packages"]),
                allowed=knobs["gpu_node_reboot_allowed"],
            ),
            stop_message=driver_reboot.stop_message(facts, host=host, version=version),
        )
        return result

    def _knob(self, name: str, default):
        value = resolve(self._templar, name)
        return default if value is UNSET else value

    def _read(self, path: str, task_vars) -> str:
        """The file's text on the node, stripped; "" when it cannot be read (no module loaded)."""
        answer = self._execute_module(
            module_name="ansible.builtin.slurp", module_args={"src": path}, task_vars=task_vars
        )
        if answer.get("failed") or "content" not in answer:
            return ""
        return base64.b64decode(answer["content"]).decode(errors="replace").strip()


def controller_machine_id() -> str:
    """The controller's machine id; "" when it has none."""
    try:
        return Path(MACHINE_ID).read_text(errors="replace").strip()
    except OSError:
        return ""
