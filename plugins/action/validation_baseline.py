"""Choose the no-speculation baseline of a node's check (roles/validation/tasks/main.yml): the
baseline plan on the controller (specdeploy.controller.baseline_plan: the operator's knob, else
this node's history; not asked when the release itself runs without speculation), then the
deploy's own measurements kept on the node (the baseline start's and the replaced release's,
read as ansible.builtin.slurp reads them), decided by the filter
specdeploy.toolkit.baseline_choice. Returns the choice as ``baseline`` (source, argv,
previous_argv) and the plan's answer as ``planned``.
"""

from __future__ import annotations

import json
import sys

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.filter.validation import baseline_choice
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import validation_argv
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import run_check
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    require_all,
    resolve_all,
    toolkit_dir,
)

PLAN_TOOL = "specdeploy.controller.baseline_plan"
KNOBS = ("validation_measure_baseline", "validation_baseline_start_out", "validation_previous_out")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self._task.args:
            raise AnsibleActionFail("validation_baseline: takes no options")
        knobs = require_all(self._templar, KNOBS, "validation_baseline")
        measure_baseline = boolean(knobs["validation_measure_baseline"], strict=False)
        planned = {}
        if not measure_baseline:
            values = resolve_all(self._templar, validation_argv.KNOBS)
            try:
                args = validation_argv.argv("baseline-plan", values)
            except (KeyError, ValueError, TypeError) as error:
                raise AnsibleActionFail(
                    f"validation_baseline: {type(error).__name__}: {error}"
                ) from error
            argv = [sys.executable, "-m", PLAN_TOOL, *args]
            # asked every time: this run's own measurements may have changed the history
            answer = run_check(argv, None, toolkit_dir(self._templar))
            if answer["rc"] != 0:
                result.update(answer, failed=True, cmd=argv, msg="non-zero return code")
                return result
            try:
                planned = json.loads(answer["stdout"])
            except ValueError as error:
                raise AnsibleActionFail(f"validation_baseline: {PLAN_TOOL}: {error}") from error
        start_out = str(knobs["validation_baseline_start_out"])
        previous_out = str(knobs["validation_previous_out"])
        slurped = [
            self._execute_module(
                module_name="ansible.builtin.slurp", module_args={"src": path}, task_vars=task_vars
            )
            for path in (start_out, previous_out)
        ]
        result.update(
            changed=False,
            planned=planned,
            baseline=baseline_choice(
                measure_baseline,
                planned=planned,
                slurped=slurped,
                start_out=start_out,
                previous_out=previous_out,
            ),
        )
        return result
