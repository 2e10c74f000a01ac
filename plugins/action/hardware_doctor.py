"""Run the hardware doctor (the module specdeploy.toolkit.gpu_doctor) with the node's knobs.

The module's twenty arguments, the model and drafter directories and the NCCL P2P words among
them, were Jinja in roles/gpu_node/tasks/doctor.yml; here they come from the knobs in Python
(plugins/plugin_utils/hardware_doctor.py). The module runs on the node as the task's module
would (its become, its check mode) and its result is the task's: the report, the failed checks
with their fixes, and the facts it sets.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import hardware_doctor
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import resolve_all


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if self._task.args:
            raise AnsibleActionFail("hardware_doctor: takes no arguments (it reads the knobs)")
        args = self.doctor_args(str(task_vars["inventory_hostname"]))
        try:
            result.update(
                self._execute_module(
                    module_name="specdeploy.toolkit.gpu_doctor",
                    module_args=args,
                    task_vars=task_vars,
                )
            )
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def doctor_args(self, node: str) -> dict:
        knobs = resolve_all(self._templar, hardware_doctor.KNOBS)
        missing = [name for name in hardware_doctor.KNOBS if name not in knobs]
        if knobs.get("specdeploy_speculative_enabled"):
            knobs |= resolve_all(self._templar, hardware_doctor.DRAFTER_KNOBS)
            missing += [name for name in hardware_doctor.DRAFTER_KNOBS if name not in knobs]
        if missing:
            raise AnsibleActionFail(f"hardware_doctor: undefined: {', '.join(missing)}")
        try:
            return hardware_doctor.doctor_args(knobs, node)
        except ValueError as exc:
            raise AnsibleActionFail(f"hardware_doctor: {exc}") from exc
