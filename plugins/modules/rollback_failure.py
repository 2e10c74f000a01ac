#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.rollback_failure (plugins/action).

The work happens on the controller (plugins/action/rollback_failure.py); this file only carries
the documentation ansible-doc shows, the usual place for an action plugin's documentation.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: rollback_failure
short_description: Fail a deploy or rollback, saying what happened and what serves now
description:
  - The last task of the rollback role's rescues. Reads the facts the role's tasks gathered
    (the release that failed and why, the registered results of marking it failed, of the
    rollback or of the smoke check, the drain state, the rollout's note) from the host's
    variables and fails with the message an operator reads.
  - Always fails, also in check mode, like M(ansible.builtin.fail).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  case:
    description:
      - V(auto) the rescue of a failed deploy after the switch (C(roles/rollback/tasks/auto.yml)).
      - V(build_failed) a deploy that failed before the switch (C(tasks/build_failed.yml)).
      - V(manual) a manual rollback that failed (C(tasks/main.yml)).
    type: str
    required: true
    choices: [auto, build_failed, manual]
extends_documentation_fragment:
  - specdeploy.toolkit.read_only_action
"""

EXAMPLES = r"""
- name: Say what happened and what serves now
  specdeploy.toolkit.rollback_failure:
    case: auto
"""

RETURN = r"""
msg:
  description: >-
    What failed, what the rescue did, what serves now and where the failed release is kept.
  returned: always
  type: str
"""
