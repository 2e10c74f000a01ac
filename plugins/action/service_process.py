"""Run specdeploy.toolkit.service_process (plugins/modules/service_process.py) with ``service``
defaulting to the play's server: ``<specdeploy_service_name>.service`` (every task of the toolkit
asks about that one unit). A task that names another service keeps it.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import UNSET, resolve

KNOB = "specdeploy_service_name"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("service") in (None, ""):
            name = resolve(self._templar, KNOB)
            if name is UNSET or not name:
                raise AnsibleActionFail(f"service_process: no service given and {KNOB} is unset")
            args["service"] = f"{name}.service"
        result.update(
            self._execute_module(
                module_name="specdeploy.toolkit.service_process",
                module_args=args,
                task_vars=task_vars,
            )
        )
        return result
