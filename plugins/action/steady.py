"""Run the steady check (plugins/modules/steady.py) with the options the task leaves out filled
from the play's variables (plugins/plugin_utils/steady_args.py): the release, the service, the
files the deploy renders (the lookup specdeploy.toolkit.service_files, sets config and
installed), the secrets files, the server's executables, the prune's keep, the smoke check.

The task in roles/vllm_service tasks/steady.yml was eleven Jinja expressions; an option the task
gives wins (the module's own tests give them all).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import steady_args
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import require_all

# Options the action fills; a task that gives them all runs the module as it is.
FILLED = frozenset(
    ("root", "release_id", "service", "files", "secret_files", "present", "keep_releases",
     "smoke_argv", "smoke_environment", "smoke_timeout_s", "downtime_action")
)  # fmt: skip


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if not set(args) >= FILLED:
            knobs = require_all(self._templar, steady_args.KNOBS, "steady")
            try:
                filled = steady_args.module_args(knobs, self._service_files())
            except (KeyError, TypeError, ValueError) as error:
                raise AnsibleActionFail(f"steady: {type(error).__name__}: {error}") from error
            args = filled | args
        result.update(
            self._execute_module(
                module_name="specdeploy.toolkit.steady", module_args=args, task_vars=task_vars
            )
        )
        return result

    def _service_files(self) -> list[dict]:
        """The release's config files and the installed ones, as tasks/render.yml writes them."""
        lookup = self._shared_loader_obj.lookup_loader.get(
            "specdeploy.toolkit.service_files", loader=self._loader, templar=self._templar
        )
        if lookup is None:
            raise AnsibleActionFail("steady: no lookup specdeploy.toolkit.service_files")
        try:
            [files] = lookup.run(
                ["config", "installed"], variables=self._templar.available_variables
            )
        except AnsibleError as error:
            raise AnsibleActionFail(f"steady: {error}") from error
        return files
