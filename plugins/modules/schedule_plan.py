#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.schedule_plan (plugins/action).

The work happens on the controller (plugins/action/schedule_plan.py, its rules in
plugins/plugin_utils/schedule_plan.py); this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: schedule_plan
short_description: Compute where the scheduled validation timer lives and what it runs
description:
  - The first step of C(make schedule) (playbooks/schedule.yml). Takes no options; it reads
    the C(schedule_*) knobs and sets the play's values as host facts.
  - On the controller itself (a C(local) connection) the timer uses the repository and the venv
    of the Python running the playbook, the inventory this run uses, C(<repo>/reports) and the
    controller's C($USER); on another host a copy of the toolkit and a venv under
    C(schedule_base) (default C(/opt/specdeploy-controller)), C(<base>/reports), C(ansible_user)
    (default C(root)), and C(schedule_inventory) must be given.
  - Never connects to the host and never changes anything.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options: {}
extends_documentation_fragment:
  - specdeploy.toolkit.read_only_action
"""

EXAMPLES = r"""
- name: Decide where the timer lives and what it runs
  specdeploy.toolkit.schedule_plan:
"""

RETURN = r"""
ansible_facts:
  description: The play's values.
  returned: always
  type: dict
  contains:
    schedule_local:
      description: Whether the timer lives on the controller itself.
      type: bool
    schedule_repo:
      description: The controller's repository (the directory above playbooks/).
      type: str
    schedule_toolkit_path:
      description: The toolkit the service runs, on the scheduling host.
      type: str
    schedule_venv_path:
      description: The venv with ansible-core, on the scheduling host.
      type: str
    schedule_inventory_path:
      description: The inventory the service validates (empty when not given for another host).
      type: str
    schedule_report_root_path:
      description: Where the reports and the history go.
      type: str
    schedule_user_name:
      description: The user the service runs as.
      type: str
    schedule_calendar:
      description: The timer's OnCalendar.
      type: str
    schedule_active_sec:
      description: The timer's OnActiveSec (0, none).
      type: int
    schedule_randomized_delay:
      description: The timer's RandomizedDelaySec.
      type: int
    schedule_timeout_s_value:
      description: The service's TimeoutStartSec.
      type: int
    schedule_on_failure_unit:
      description: The service's OnFailure= unit (empty, none).
      type: str
    schedule_exec_argv:
      description: The service's command line.
      type: list
      elements: str
    schedule_notes:
      description: What the play says after the timer's line (the command, user, logs, removal).
      type: list
      elements: str
"""
