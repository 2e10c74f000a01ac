#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.validation_baseline (plugins/action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: validation_baseline
short_description: Choose the no-speculation baseline of a node's validation
description:
  - Unless C(validation_measure_baseline) (the release runs without speculation and its own
    throughput is the baseline), asks the baseline plan on the controller
    (C(specdeploy.controller.baseline_plan)) for the operator's knob C(validation_baseline_tps),
    else this node's history; asked every time, since this run may have recorded into the
    history.
  - Reads the deploy's own measurements kept on the node (C(validation_baseline_start_out),
    C(validation_previous_out)) as M(ansible.builtin.slurp) reads them.
  - Decides with the filter C(specdeploy.toolkit.baseline_choice) - the knob or the history, the
    baseline start, the serving release when it ran without speculation, else none.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options: {}
attributes:
  check_mode:
    support: full
    description: It only reads.
  diff_mode:
    support: none
    description: Changes nothing.
  action:
    support: full
    description: Asks the plan on the controller, reads on the node.
"""

EXAMPLES = r"""
- name: Choose the no-speculation baseline
  specdeploy.toolkit.validation_baseline:
  become: true
  register: validation_baseline_choice
"""

RETURN = r"""
baseline:
  description: The choice - C(source) (the label), C(argv) (the checker's baseline arguments) and
    C(previous_argv) (the replaced release's measurement, when there is one).
  type: dict
  returned: success
planned:
  description: The baseline plan's answer ({} when not asked).
  type: dict
  returned: success
"""
