"""The scheduled validation's systemd units on the scheduling host, in one task: installed and
started (`make schedule`, playbooks/schedule.yml) or stopped and removed (`make unschedule`,
playbooks/unschedule.yml).

Were seven and six tasks whose paths, unit names and messages were Jinja built from
``schedule_unit``. The steps run the same modules in the same order, with the task's become,
check mode and diff: present creates the report directory (owned by the service's
user), renders the service and the timer with ansible.builtin.template
(the templates/ of the repository in place, schedule_repo), verifies them with systemd-analyze,
enables and starts the timer (restarted, with a daemon reload, when a unit changed) and reads
when it runs next; absent stops and disables an installed timer, removes both unit files,
reloads systemd when one was installed and, with unschedule_purge on a host other than the
controller, removes the toolkit copy and its venv under schedule_base. The first step that
fails ends the task with that step's own result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    UNSET,
    require_all,
    resolve,
)

UNITS_DIR = "/etc/systemd/system"
KINDS = ("service", "timer")
PURGED = ("toolkit", "venv", "toolkit.tar")
DEFAULT_BASE = "/opt/specdeploy-controller"
# schedule_plan's facts the installation reads
INSTALL_KNOBS = (
    "schedule_unit",
    "schedule_repo",
    "schedule_notes",
    "schedule_report_root_path",
    "schedule_user_name",
)


def unit_paths(unit: str) -> dict[str, str]:
    """kind -> the installed unit file."""
    return {kind: f"{UNITS_DIR}/{unit}.{kind}" for kind in KINDS}


def removed_said(unit: str, installed: bool) -> str:
    """What `make unschedule` says it did."""
    said = (
        f"removed {unit}.timer and .service"
        if installed
        else "no scheduled validation was installed"
    )
    return f"{said}; the history and reports stay"


def purge_paths(knobs: Mapping[str, Any]) -> list[str]:
    """The toolkit copy and its venv, with unschedule_purge on a host other than the controller."""
    if not boolean(knobs.get("unschedule_purge", False), strict=False):
        return []
    if knobs.get("ansible_connection", "ssh") == "local":
        return []
    base = knobs.get("schedule_base", DEFAULT_BASE)
    return [f"{base}/{name}" for name in PURGED]


class StepFailed(Exception):
    """A step's module failed: its result ends the task."""

    def __init__(self, step: str, answer: dict) -> None:
        super().__init__(step)
        self.answer = {**answer, "step": step}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        state = self._task.args.get("state")
        if set(self._task.args) != {"state"} or state not in ("present", "absent"):
            raise AnsibleActionFail("schedule_units: takes one option, state (present or absent)")
        self._diffs: list[dict] = []
        try:
            if state == "present":
                result.update(self._install(task_vars))
            else:
                result.update(self._remove(task_vars))
        except StepFailed as failed:
            return failed.answer
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        if self._diffs:
            result["diff"] = self._diffs
        return result

    def _step(self, step: str, module: str, args: dict, task_vars) -> dict:
        answer = self._execute_module(module_name=module, module_args=args, task_vars=task_vars)
        if answer.get("failed") or answer.get("unreachable"):
            raise StepFailed(step, answer)
        if answer.get("diff"):
            self._diffs.append(answer["diff"])
        return answer

    def _template(self, step: str, args: dict, task_vars) -> dict:
        """ansible.builtin.template as its own task would run it (with this task's become,
        check mode and diff)."""
        task = self._task.copy()
        task.args = args
        template = self._shared_loader_obj.action_loader.get(
            "ansible.builtin.template", task=task, connection=self._connection,
            play_context=self._play_context, loader=self._loader, templar=self._templar,
            shared_loader_obj=self._shared_loader_obj,
        )  # fmt: skip
        answer = template.run(task_vars=task_vars)
        if answer.get("failed") or answer.get("unreachable"):
            raise StepFailed(step, answer)
        if answer.get("diff"):
            diff = answer["diff"]
            self._diffs.extend(diff if isinstance(diff, list) else [diff])
        return answer

    def _read_only(self, step: str, argv: list[str], task_vars) -> dict:
        """A command that only reads: it runs in check mode too (check_mode: false)."""
        check_mode = self._task.check_mode
        self._task.check_mode = False
        try:
            return self._step(step, "ansible.builtin.command", {"argv": argv}, task_vars)
        finally:
            self._task.check_mode = check_mode

    def _install(self, task_vars) -> dict:
        knobs = require_all(self._templar, INSTALL_KNOBS, "schedule_units")
        unit, paths = str(knobs["schedule_unit"]), unit_paths(str(knobs["schedule_unit"]))
        reports = {
            "path": knobs["schedule_report_root_path"], "state": "directory",
            "owner": knobs["schedule_user_name"], "mode": "0755",
        }  # fmt: skip
        made = bool(
            self._step("reports", "ansible.builtin.file", reports, task_vars).get("changed")
        )
        changed = False  # a unit file: the timer restarts
        for kind in KINDS:
            args = {
                "src": f"{knobs['schedule_repo']}/templates/specdeploy-validate.{kind}.j2",
                "dest": paths[kind], "owner": "root", "group": "root", "mode": "0644",
            }  # fmt: skip
            changed = bool(self._template(kind, args, task_vars).get("changed")) or changed
        if not self._task.check_mode:
            self._read_only("verify", ["systemd-analyze", "verify", *paths.values()], task_vars)
        timer_args = {
            "name": f"{unit}.timer", "state": "restarted" if changed else "started",
            "enabled": True, "daemon_reload": changed,
        }  # fmt: skip
        timer = self._step("timer", "ansible.builtin.systemd_service", timer_args, task_vars)
        argv = ["systemctl", "list-timers", "--all", "--no-pager", f"{unit}.timer"]
        timers = self._read_only("list-timers", argv, task_vars)
        return {
            "changed": made or changed or bool(timer.get("changed")),
            "lines": [*timers.get("stdout_lines", []), *knobs["schedule_notes"]],
        }

    def _remove(self, task_vars) -> dict:
        unit = str(
            require_all(self._templar, ("schedule_unit",), "schedule_units")["schedule_unit"]
        )
        knobs = {}
        for name in ("unschedule_purge", "ansible_connection", "schedule_base"):
            value = resolve(self._templar, name)
            if value is not UNSET:
                knobs[name] = value
        paths = unit_paths(unit)
        exists = {}
        for kind in ("timer", "service"):
            stat_args = {"path": paths[kind], "get_checksum": False}
            stat = self._step(f"probe {kind}", "ansible.builtin.stat", stat_args, task_vars)
            exists[kind] = bool(stat.get("stat", {}).get("exists"))
        installed = any(exists.values())
        steps: list[tuple[str, dict]] = []
        if exists["timer"]:
            stop = {"name": f"{unit}.timer", "state": "stopped", "enabled": False}
            steps.append(("ansible.builtin.systemd_service", stop))
        steps += [
            ("ansible.builtin.file", {"path": paths[kind], "state": "absent"})
            for kind in ("timer", "service")
        ]
        if installed:
            steps.append(("ansible.builtin.systemd_service", {"daemon_reload": True}))
        steps += [
            ("ansible.builtin.file", {"path": path, "state": "absent"})
            for path in purge_paths(knobs)
        ]
        changed = False
        for module, args in steps:
            answer = self._step(module.rsplit(".", 1)[-1], module, args, task_vars)
            changed = bool(answer.get("changed")) or changed
        return {"changed": changed, "msg": removed_said(unit, installed)}
