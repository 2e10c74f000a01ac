"""`make schedule`: compute where the validation timer lives and what it runs, on the controller
(plugins/plugin_utils/schedule_plan.py), and set it as the host's facts (``schedule_*``) for
the play's tasks and the unit templates. Never connects to the host; changes nothing.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import schedule_plan
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import resolve_all


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        knobs = resolve_all(self._templar, schedule_plan.KNOBS)
        if not isinstance(knobs.get("schedule_validate_args", []), list):
            raise AnsibleActionFail(
                "schedule_plan: schedule_validate_args must be a list of ansible-playbook"
                " arguments (e.g. ['-e', 'validation_repeats=3'])"
            )
        if "schedule_unit" not in knobs:
            raise AnsibleActionFail("schedule_plan: the play names no schedule_unit")
        facts = schedule_plan.plan(knobs, os.environ.get("USER", ""))
        facts["schedule_venv_requirements"] = schedule_plan.venv_requirements()
        result.update(changed=False, ansible_facts=facts)
        return result
