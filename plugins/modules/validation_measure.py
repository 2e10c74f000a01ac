#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.validation_measure (plugins/action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: validation_measure
short_description: Run the release's own checker on the node with the validation role's inputs
description:
  - Runs the checker of the release under test (C(specdeploy.node.validation.check) from
    C(validation_release_dir)'s venv, its toolkit on C(PYTHONPATH)) on the node, as
    M(ansible.builtin.command) runs a command. The command line is built from the validation
    role's variables; the lookup C(specdeploy.toolkit.validation_argv) returns the same ones.
  - O(measure=all) runs the smoke and acceptance checks with the release's gates (or
    C(validation_gates)) into C(validation_out), removing an earlier result there first.
  - O(measure=serving) measures the release that serves (C(validation_serving_release)) without
    gates into C(validation_previous_out); O(measure=baseline-start) the new release
    (C(validation_release_id)) started without speculation, into C(validation_baseline_start_out).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  measure:
    description: Which measurement.
    type: str
    required: true
    choices: [all, serving, baseline-start]
attributes:
  check_mode:
    support: none
    description: As with M(ansible.builtin.command), nothing runs in check mode unless the task
      turns check mode off for itself (C(check_mode=false)).
  diff_mode:
    support: none
    description: No diff.
  action:
    support: full
    description: An action plugin builds the command line on the controller and runs it on the node.
"""

EXAMPLES = r"""
- name: Run the smoke and acceptance checks with the release's gates
  specdeploy.toolkit.validation_measure:
    measure: all
  become: true
  check_mode: false
  changed_when: false
  failed_when: false
  register: validation_run
"""

RETURN = r"""
rc: {description: "The checker's exit status.", type: int, returned: always}
stdout:
  description: What it printed (its table, or a measurement's JSON).
  type: str
  returned: always
stderr: {description: "Its errors.", type: str, returned: always}
"""
