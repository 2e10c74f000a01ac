"""Fail the run with what happened and what serves now (roles/rollback's last word).

The message is built in Python from the role's variables (plugins/plugin_utils/rollback_failure.py
over the filters of plugins/filter/rollback.py) instead of from a dozen task vars each templated
by Jinja. It always fails, like the ``ansible.builtin.fail`` it replaces, in check mode too.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.rollback_failure import (
    CASES,
    failure_message,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import UNSET, resolve


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        case = self._task.args.get("case")
        if case not in CASES:
            raise AnsibleActionFail(f"rollback_failure: case must be one of {', '.join(CASES)}")

        def value(name: str, default: Any) -> Any:
            found = resolve(self._templar, name)
            return default if found is UNSET else found

        result.update(failed=True, changed=False, msg=failure_message(case, value))
        return result
