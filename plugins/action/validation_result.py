"""A node's validation result (roles/validation/tasks/main.yml): the result JSON the checker
wrote on the node (validation_out, read as ansible.builtin.slurp reads it), else the
could-not-measure result built on the controller by the one result builder
(specdeploy.node.validation.result), which works also when the release's venv on the node does
not. Returns the result, whether the checker wrote it, and the gate's words should it fail.

The command line and the words come from plugins/plugin_utils/validation_report.py.
"""

from __future__ import annotations

import base64
import json
import sys

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import validation_report as vr
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import (
    run_once_per_input,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    require_all,
    task_args,
    toolkit_dir,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        task_args(args, "validation_result", ("run",))
        run = args.get("run")
        if not isinstance(run, dict):
            raise AnsibleActionFail("validation_result: run must be the checker's task result")
        knobs = require_all(self._templar, vr.RESULT_KNOBS, "validation_result")
        slurped = self._execute_module(
            module_name="ansible.builtin.slurp",
            module_args={"src": str(knobs["validation_out"])},
            task_vars=task_vars,
        )
        written = "content" in slurped
        if written:
            document = json.loads(base64.b64decode(slurped["content"]).decode("utf-8"))
        else:
            argv = vr.not_measured_argv(
                sys.executable,
                node=str(knobs["inventory_hostname"]),
                model=str(knobs["specdeploy_served_model_name"]),
                reason=vr.checker_failure_reason(run),
                release=str(knobs["validation_release_id"]),
                base_url=str(knobs["specdeploy_local_url"]),
            )
            answer, _cached = run_once_per_input(argv, None, toolkit_dir(self._templar))
            if answer["rc"] != 0:
                result.update(
                    answer, failed=True, cmd=argv, msg=f"{vr.RESULT_TOOL}: exit {answer['rc']}"
                )
                return result
            document = json.loads(answer["stdout"])
        result.update(
            changed=False,  # reading a log, or building a result on the controller
            result=document,
            written=written,
            verdict=vr.gate_verdict(
                document, str(knobs["validation_release_id"]), str(knobs["inventory_hostname"])
            ),
        )
        return result
