"""Run the readiness smoke check of a release's server on the node (plugins/plugin_utils/
smoke.py builds its command line from the play's variables), as ansible.builtin.command runs a
command: the result has rc, stdout, stderr; a failed check is a failed task unless the task says
otherwise (failed_when)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import smoke
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.node_command import run_command
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    resolve_all,
    task_args,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        task_args(args, "smoke", ("release", "timeout_s"))
        knobs = resolve_all(self._templar, smoke.KNOBS)
        try:
            command = smoke.command(
                knobs, args.get("release"), args.get("timeout_s", smoke.DEFAULT_TIMEOUT_S)
            )
        except (KeyError, ValueError) as error:
            raise AnsibleActionFail(f"smoke: {type(error).__name__}: {error}") from error
        result.update(run_command(self, command["argv"], command["environment"], task_vars))
        return result
