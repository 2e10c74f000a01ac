#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.schedule_units (plugins/action).

The work happens in the action (plugins/action/schedule_units.py), which runs modules on the
scheduling host; this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: schedule_units
short_description: Install and start, or stop and remove, the scheduled validation's units
description:
  - O(state=present) (C(make schedule)) creates the report directory
    C(schedule_report_root_path) (owned by C(schedule_user_name), 0755), renders
    C(templates/specdeploy-validate.service.j2) and C(templates/specdeploy-validate.timer.j2) of
    C(schedule_repo) to C(/etc/systemd/system/<schedule_unit>.service) and C(.timer) with
    M(ansible.builtin.template) (root, 0644), verifies them with C(systemd-analyze verify) (not
    in check mode), enables and starts the timer with M(ansible.builtin.systemd_service)
    (restarted, with a daemon reload, when a unit changed) and reads C(systemctl list-timers)
    for the timer.
  - O(state=absent) (C(make unschedule)) stops and disables an installed timer, removes both unit
    files, reloads systemd when one was installed and, with C(unschedule_purge) on a host that is
    not the controller (C(ansible_connection) other than C(local)), removes C(toolkit),
    C(venv) and C(toolkit.tar) under C(schedule_base) (default C(/opt/specdeploy-controller)).
  - Reads C(schedule_unit) and, for O(state=present), C(schedule_repo), C(schedule_notes),
    C(schedule_report_root_path) and C(schedule_user_name) (set by
    M(specdeploy.toolkit.schedule_plan)). The first step that fails ends the task with that
    step's result.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  state:
    description: Installed and started, or stopped and removed.
    type: str
    required: true
    choices: [present, absent]
attributes:
  check_mode:
    support: full
    description: Each step runs in check mode as its module does; the timer listing runs anyway.
  diff_mode:
    support: full
    description: The rendered units' changes.
  action:
    support: full
    description: The action runs the steps' modules on the scheduling host.
"""

EXAMPLES = r"""
- name: Install, verify and start the validation service and timer
  specdeploy.toolkit.schedule_units:
    state: present
  register: schedule_units_installed

- name: Show the timer
  ansible.builtin.debug:
    msg: "{{ schedule_units_installed.lines }}"
"""

RETURN = r"""
lines:
  description: The timer's C(systemctl list-timers) lines, then C(schedule_notes).
  type: list
  elements: str
  returned: state=present
msg:
  description: What was removed (and that the history and reports stay).
  type: str
  returned: state=absent
"""
