"""Where `make schedule` (playbooks/schedule.yml) puts the validation timer, and what it runs.

Every value the play's units and tasks use, from the knobs (schedule_*) and where the timer
lives: on the controller itself (a local connection: the repository and the venv that runs
this playbook, in place) or on another host (a copy of the toolkit and a venv under
schedule_base). These were thirteen Jinja play variables, templated again in every task that
read one; plugins/action/schedule_plan.py computes them once and sets them as host facts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import metadata
from typing import Any

KNOBS = (
    "schedule_base",
    "schedule_inventory",
    "schedule_report_root",
    "schedule_user",
    "schedule_on_calendar",
    "schedule_on_active_sec",
    "schedule_randomized_delay_s",
    "schedule_timeout_s",
    "schedule_on_failure",
    "schedule_validate_args",
    "schedule_unit",
    "ansible_connection",
    "ansible_inventory_sources",
    "ansible_playbook_python",
    "ansible_user",
    "playbook_dir",
)
DEFAULT_BASE = "/opt/specdeploy-controller"
# What a scheduling host's venv needs to run the toolkit's playbooks with its ansible.cfg:
# ansible-core, and mitogen for the strategy (plugins/strategy/mitogen_linear.py).
VENV_DISTRIBUTIONS = ("ansible-core", "mitogen")
DEFAULT_CALENDAR = "*-*-* 03:17:00"


def plan(knobs: Mapping[str, Any], controller_user: str) -> dict[str, Any]:
    """The play's facts. controller_user: $USER of the controller (the service's user when the
    timer lives there and schedule_user is not given)."""
    local = knobs.get("ansible_connection", "ssh") == "local"
    repo = os.path.dirname(str(knobs["playbook_dir"]))
    base = knobs.get("schedule_base", DEFAULT_BASE)
    if local:
        toolkit = repo
        venv = os.path.dirname(os.path.dirname(str(knobs["ansible_playbook_python"])))
        sources = knobs.get("ansible_inventory_sources") or [""]
        inventory = knobs.get("schedule_inventory", sources[0])
        report_root = knobs.get("schedule_report_root", f"{repo}/reports")
        user = knobs.get("schedule_user", controller_user)
    else:
        toolkit, venv = f"{base}/toolkit", f"{base}/venv"
        inventory = knobs.get("schedule_inventory", "")
        report_root = knobs.get("schedule_report_root", f"{base}/reports")
        user = knobs.get("schedule_user", knobs.get("ansible_user", "root"))
    exec_argv = [
        f"{venv}/bin/ansible-playbook", "-i", inventory, f"{toolkit}/playbooks/validate.yml",
        "-e", f"validation_report_root={report_root}",
        *knobs.get("schedule_validate_args", []),
    ]  # fmt: skip
    unit = knobs["schedule_unit"]
    return {
        "schedule_local": local,
        "schedule_repo": repo,
        "schedule_toolkit_path": toolkit,
        "schedule_venv_path": venv,
        "schedule_inventory_path": inventory,
        "schedule_report_root_path": report_root,
        "schedule_user_name": user,
        "schedule_calendar": knobs.get("schedule_on_calendar", DEFAULT_CALENDAR),
        "schedule_active_sec": knobs.get("schedule_on_active_sec", 0),
        "schedule_randomized_delay": knobs.get("schedule_randomized_delay_s", 600),
        "schedule_timeout_s_value": knobs.get("schedule_timeout_s", 3600),
        "schedule_on_failure_unit": knobs.get("schedule_on_failure", ""),
        "schedule_exec_argv": exec_argv,
        # what the play says after the timer's line
        "schedule_notes": [
            "runs: " + " ".join(str(arg) for arg in exec_argv),
            f"as {user}; reports and history: {report_root}",
            f"logs: journalctl -u {unit}.service; now: systemctl start {unit}.service",
            "remove: make unschedule",
        ],
    }


def venv_requirements() -> list[str]:
    """The scheduling host's venv packages, pinned to the versions this controller runs (its
    requirements.lock), so the timer's runs behave as the controller's."""
    return [f"{name}=={metadata.version(name)}" for name in VENV_DISTRIBUTIONS]
