"""Take the node out of the load balancer's rotation, or put it back (roles/vllm_service tasks
drain.yml and undrain.yml), on the controller, in the task's worker.

Runs the balancer's command line (the knob ``specdeploy_drain_argv`` with
``specdeploy_drain_action`` set to the command; a drain adds ``--wait-s
specdeploy_drain_timeout_s``) in the toolkit's directory as controller_check does with
``once_per_input: false`` (in-process, never an answer from another run), and says what it did
in the task's own result (plugins/plugin_utils/balancer.py): a drain the balancer refused
fails the task (the server is not stopped); an undrain that failed fails only with
``must_succeed``. Skipped in check mode (it changes the balancer's state).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import balancer
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import run_check
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    UNSET,
    require_all,
    resolve,
    task_args,
)

OPTIONS = {"command", "must_succeed"}
KNOBS = (
    "inventory_hostname",
    "specdeploy_toolkit_dir",
    "specdeploy_drain_timeout_s",
    "specdeploy_haproxy_backend",
    "specdeploy_haproxy_server",
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        task_args(args, "balancer", OPTIONS, {"command": balancer.COMMANDS})
        command = args["command"]
        try:
            must_succeed = boolean(args.get("must_succeed", True), strict=True)
        except TypeError as error:
            raise AnsibleActionFail(f"balancer: must_succeed: {error}") from error
        if self._task.check_mode:
            result.update(skipped=True, changed=False, msg="it changes the balancer: check mode")
            return result
        knobs = require_all(self._templar, KNOBS, "balancer")
        argv = resolve(self._templar, "specdeploy_drain_argv", {"specdeploy_drain_action": command})
        if argv is UNSET or not isinstance(argv, list):
            raise AnsibleActionFail("balancer: specdeploy_drain_argv is undefined")
        argv = balancer.command_argv(argv, command, knobs["specdeploy_drain_timeout_s"])
        try:
            answer = run_check(argv, None, str(knobs["specdeploy_toolkit_dir"]))
        except OSError as error:
            raise AnsibleActionFail(f"balancer: {argv[:3]}: {error}") from error
        result.update(
            balancer.outcome(
                command,
                answer,
                str(knobs["inventory_hostname"]),
                str(knobs["specdeploy_haproxy_backend"]),
                str(knobs["specdeploy_haproxy_server"]),
                must_succeed,
            ),
            # the message shows without -v, as the assert that said it before
            _ansible_verbose_always=True,
        )
        return result
