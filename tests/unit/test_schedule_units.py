"""The scheduled validation's units (plugins/action/schedule_units.py): the steps the tasks of
playbooks/schedule.yml and unschedule.yml ran, in their order and with their arguments."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ansible_collections.specdeploy.toolkit.plugins.action import schedule_units
from ansible_collections.specdeploy.toolkit.plugins.action.schedule_units import (
    ActionModule,
    StepFailed,
    purge_paths,
    removed_said,
)

UNIT = "specdeploy-validate"
UNITS = "/etc/systemd/system"


class FakeAction(ActionModule):
    """The action's steps, with the host's modules answered from a table (key: the module's
    short name, or "name path" for stat, file and template)."""

    def __init__(self, answers: dict[str, dict], check_mode: bool = False) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict, bool]] = []
        self._task = SimpleNamespace(check_mode=check_mode)
        self._diffs = []
        self._templar = None

    def _answer(self, name: str, args: dict) -> dict:
        self.calls.append((name, args, self._task.check_mode))
        key = f"{name} {args.get('path', args.get('dest', ''))}"
        return dict(self.answers.get(key, self.answers.get(name, {"changed": False})))

    def _step(self, step, module, args, task_vars):
        answer = self._answer(module.rsplit(".", 1)[-1], args)
        if answer.get("failed"):
            raise StepFailed(step, answer)
        return answer

    def _template(self, step, args, task_vars):
        return self._answer("template", args)


@pytest.fixture
def knobs(monkeypatch):
    values = {
        "schedule_unit": UNIT,
        "schedule_repo": "/repo",
        "schedule_notes": ["remove: make unschedule"],
        "schedule_report_root_path": "/srv/reports",
        "schedule_user_name": "ops",
    }

    def require_all(templar, names, who):
        return {name: values[name] for name in names}

    def resolve(templar, name):
        return values.get(name, schedule_units.UNSET)

    monkeypatch.setattr(schedule_units, "require_all", require_all)
    monkeypatch.setattr(schedule_units, "resolve", resolve)
    return values


def names(action: FakeAction) -> list[str]:
    return [name for name, _, _ in action.calls]


def test_unchanged_units_start_the_timer_without_a_restart(knobs) -> None:
    timers = {"stdout_lines": ["NEXT LEFT", "Mon 03:17 specdeploy-validate.timer"]}
    action = FakeAction({"command": timers})
    result = action._install({})
    assert names(action) == [
        "file", "template", "template", "command", "systemd_service", "command",
    ]  # fmt: skip
    assert action.calls.pop(0)[1] == {
        "path": "/srv/reports", "state": "directory", "owner": "ops", "mode": "0755",
    }  # fmt: skip
    assert action.calls[0][1] == {
        "src": "/repo/templates/specdeploy-validate.service.j2",
        "dest": f"/etc/systemd/system/{UNIT}.service",
        "owner": "root", "group": "root", "mode": "0644",
    }  # fmt: skip
    assert action.calls[1][1]["dest"] == f"/etc/systemd/system/{UNIT}.timer"
    assert action.calls[2][1]["argv"] == [
        "systemd-analyze", "verify",
        f"/etc/systemd/system/{UNIT}.service", f"/etc/systemd/system/{UNIT}.timer",
    ]  # fmt: skip
    assert action.calls[3][1] == {
        "name": f"{UNIT}.timer", "state": "started", "enabled": True, "daemon_reload": False,
    }  # fmt: skip
    assert action.calls[4][1]["argv"][-1] == f"{UNIT}.timer"
    assert result == {
        "changed": False,
        "lines": [*timers["stdout_lines"], "remove: make unschedule"],
    }


def test_a_changed_unit_restarts_the_timer_after_a_daemon_reload(knobs) -> None:
    action = FakeAction({f"template {UNITS}/{UNIT}.timer": {"changed": True}})
    result = action._install({})
    timer = action.calls[4][1]
    assert timer["state"] == "restarted" and timer["daemon_reload"] is True
    assert result["changed"] is True


def test_check_mode_skips_the_verify_and_still_lists_the_timer(knobs) -> None:
    action = FakeAction({}, check_mode=True)
    action._install({})
    assert names(action) == ["file", "template", "template", "systemd_service", "command"]
    assert action.calls[-1][2] is False  # the listing only reads (check_mode: false)
    assert action._task.check_mode is True


def test_a_failed_verify_ends_the_task_with_its_result(knobs) -> None:
    action = FakeAction({"command": {"failed": True, "rc": 1, "msg": "bad unit"}})
    with pytest.raises(StepFailed) as failed:
        action._install({})
    assert failed.value.answer["msg"] == "bad unit" and failed.value.answer["step"] == "verify"
    assert names(action) == ["file", "template", "template", "command"]


def test_removing_installed_units_stops_removes_and_reloads(knobs) -> None:
    exists = {"stat": {"exists": True}}
    action = FakeAction(
        {
            f"stat {UNITS}/{UNIT}.timer": exists,
            f"stat {UNITS}/{UNIT}.service": exists,
            "file": {"changed": True},
        }
    )
    result = action._remove({})
    assert names(action) == ["stat", "stat", "systemd_service", "file", "file", "systemd_service"]
    assert action.calls[2][1] == {"name": f"{UNIT}.timer", "state": "stopped", "enabled": False}
    assert action.calls[5][1] == {"daemon_reload": True}
    assert result == {
        "changed": True,
        "msg": f"removed {UNIT}.timer and .service; the history and reports stay",
    }


def test_removing_nothing_changes_nothing_and_says_so(knobs) -> None:
    action = FakeAction({})
    result = action._remove({})
    assert names(action) == ["stat", "stat", "file", "file"]
    assert result == {
        "changed": False,
        "msg": "no scheduled validation was installed; the history and reports stay",
    }


def test_the_purge_removes_the_copy_only_away_from_the_controller(knobs) -> None:
    knobs.update(unschedule_purge="true", schedule_base="/srv/sched")
    action = FakeAction({})
    action._remove({})
    assert [args["path"] for _, args, _ in action.calls[4:]] == [
        "/srv/sched/toolkit", "/srv/sched/venv", "/srv/sched/toolkit.tar",
    ]  # fmt: skip
    assert purge_paths({"unschedule_purge": True, "ansible_connection": "local"}) == []
    assert purge_paths({"unschedule_purge": False}) == []
    assert purge_paths({"unschedule_purge": True})[0] == "/opt/specdeploy-controller/toolkit"
    assert removed_said("u", False).startswith("no scheduled validation")


def test_a_new_report_directory_alone_does_not_restart_the_timer(knobs) -> None:
    action = FakeAction({"file /srv/reports": {"changed": True}})
    knobs["schedule_report_root_path"] = "/srv/reports"
    result = action._install({})
    assert action.calls[4][1]["state"] == "started" and result["changed"] is True
