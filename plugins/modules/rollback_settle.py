#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.rollback_settle (plugins/action).

The work happens in the action (plugins/action/rollback_settle.py), which runs commands on the
node; this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: rollback_settle
short_description: Read whether the server stayed up after validation and still answers
description:
  - Reads the service's C(MainPID), C(NRestarts) and C(ActiveState) (C(systemctl show)) and its
    last four journal lines, and compares them with the process after readiness
    (C(rollback_watch), set by the rollback role's C(watch) tasks).
  - Where the server stayed up (active, the same process, no restart), runs the smoke check of
    the plan's release (C(specdeploy_release)), as M(specdeploy.toolkit.smoke) does.
  - Fails nothing itself; the caller asserts RV(stayed_up) and RV(smoke) and says RV(message) or
    RV(smoke_failure). A C(systemctl show) that cannot run ends the task with its result.
  - Takes no options; it reads C(specdeploy_release), C(specdeploy_service_name),
    C(rollback_settle_s), C(rollback_watch), C(specdeploy_root) and the smoke check's
    C(specdeploy_local_url), C(specdeploy_served_model_name) and C(specdeploy_api_key_file).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options: {}
attributes:
  check_mode:
    support: none
    description: It only reads; the task that runs it turns check mode off (C(check_mode=false)).
  diff_mode:
    support: none
    description: No diff.
  action:
    support: full
    description: The action runs the commands on the node.
"""

EXAMPLES = r"""
- name: Read the server's process again, its last log lines, and whether it still answers
  specdeploy.toolkit.rollback_settle:
  become: true
  check_mode: false
  register: rollback_settle_result
"""

RETURN = r"""
now:
  description: C(MainPID), C(NRestarts) and C(ActiveState) now.
  type: dict
  returned: success
stayed_up:
  description: Active, the same main process as after readiness, no restart since.
  type: bool
  returned: success
message:
  description: What changed, with the last log lines (empty when it stayed up).
  type: str
  returned: success
smoke:
  description: The smoke check's C(rc), C(stdout) and C(stderr) (empty when it did not run).
  type: dict
  returned: success
smoke_failure:
  description: Why the smoke check failed, for the message (empty otherwise).
  type: str
  returned: success
"""
