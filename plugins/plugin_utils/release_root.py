"""An action that runs its module with ``root`` defaulting to the play's ``specdeploy_root``.

The modules that work on the release root of a node (specdeploy.toolkit.releases,
specdeploy.toolkit.deploy_lock) take it as ``root``; every task of the toolkit passes the one
knob, specdeploy_root, so the action fills it in when the task leaves it out (as
``module_defaults`` would, without a line in every play that may include the task). A task that
names another root keeps it.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import UNSET, resolve

KNOB = "specdeploy_root"


class RootDefaultAction(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("root") in (None, ""):
            root = resolve(self._templar, KNOB)
            if root is UNSET or not root:
                raise AnsibleActionFail(f"{self._task.action}: no root given and {KNOB} is unset")
            args["root"] = root
        result.update(
            self._execute_module(
                module_name=self._task.resolved_action or self._task.action,
                module_args=args,
                task_vars=task_vars,
            )
        )
        return result
