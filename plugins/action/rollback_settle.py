"""After validation: read whether the server that passed is still the same process, never
restarted, and still answers, in one task (roles/rollback/tasks/settle.yml; its checks stay
there as assertions).

Was four tasks whose argv and messages were Jinja built from the service name and the release
id: systemctl show (MainPID, NRestarts, ActiveState), the unit's last journal lines (for the
message), and the smoke check. They run in the same order with the task's become; the smoke
check runs only when the server stayed up (the assertion before it stopped the play). The
release is the plan's (specdeploy_release), the process after readiness roles/rollback/tasks/
watch.yml's fact rollback_watch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.filter.rollback_checks import (
    settle_failure_message,
    smoke_failure_reasons,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import smoke
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import require_all

KNOBS = (
    *smoke.KNOBS,
    "specdeploy_release",
    "specdeploy_service_name",
    "rollback_settle_s",
    "rollback_watch",
)
SHOWN = ("--property=MainPID", "--property=NRestarts", "--property=ActiveState")


def shown(stdout_lines: list[str]) -> dict[str, str]:
    """``systemctl show``'s KEY=VALUE lines as a dict."""
    return dict(line.split("=", 1) for line in stdout_lines)


def stayed_up(before: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Active, the same main process, no restart since readiness."""
    return (
        now.get("ActiveState") == "active"
        and now.get("MainPID") == before.get("MainPID")
        and now.get("NRestarts") == before.get("NRestarts")
    )


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if self._task.args:
            raise AnsibleActionFail("rollback_settle: takes no options (it reads the knobs)")
        knobs = require_all(self._templar, KNOBS, "rollback_settle")
        try:
            return self._settle(result, knobs, task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _command(self, argv: list[str], task_vars, environment: dict | None = None) -> dict:
        """ansible.builtin.command on the node; ``environment`` is added for this run."""
        saved = self._task.environment
        if environment:
            self._task.environment = [*(saved or []), environment]
        try:
            return self._execute_module(
                module_name="ansible.builtin.command", module_args={"argv": argv},
                task_vars=task_vars,
            )  # fmt: skip
        finally:
            self._task.environment = saved

    def _settle(self, result: dict, knobs: Mapping[str, Any], task_vars) -> dict:
        release = str(knobs["specdeploy_release"]["id"])
        unit = f"{knobs['specdeploy_service_name']}.service"
        show = self._command(["systemctl", "show", *SHOWN, unit], task_vars)
        if show.get("failed") or show.get("unreachable"):
            return {**show, "step": "show"}
        journal_argv = ["journalctl", "-u", unit, "-n", "4", "-o", "cat", "--no-pager"]
        journal = self._command(journal_argv, task_vars)  # for the message only: may fail
        now = shown(show.get("stdout_lines", []))
        before = knobs["rollback_watch"]
        result.update(changed=False, now=now, stayed_up=stayed_up(before, now), message="")
        result.update(smoke={}, smoke_failure="")
        if not result["stayed_up"]:
            result["message"] = settle_failure_message(
                release, before=before, now=now, settle_s=knobs["rollback_settle_s"],
                journal=journal,
            )  # fmt: skip
            return result
        check = smoke.command(knobs, release)
        run = self._command(check["argv"], task_vars, check["environment"])
        result["smoke"] = {key: run.get(key, "") for key in ("rc", "stdout", "stderr")}
        if run.get("rc") != 0:
            reasons = smoke_failure_reasons(run, stderr_without_reasons=True)
            result["smoke_failure"] = (
                f"the server of release {release} stopped answering after validation: {reasons}"
            )
        return result
