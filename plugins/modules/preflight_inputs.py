#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.preflight_inputs (plugins/action).

The work happens on the controller (plugins/action/preflight_inputs.py, its rules in
plugins/plugin_utils/preflight.py); this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_inputs
short_description: Check a deploy's inputs on the controller before anything changes
description:
  - Reads the toolkit's knobs (the specdeploy role's variables and the validation role's) of
    the host and refuses every wrong one, one line each naming the knob, the value and what is
    allowed, all at once.
  - The checks that need the toolkit's Python (the inputs against the patch manifest, unknown
    knobs, the balancer, the gates, the baseline knob, the engine) run as command lines on the
    controller, at the same time, each once per distinct input for the whole playbook run.
  - Never connects to the host and never changes anything.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  checks:
    description:
      - The groups of checks to run (all when not given).
      - V(inputs) the shutdown timeout, unknown knobs and the inputs against the patch manifest;
        sets C(preflight_version_entry), C(preflight_version_native) and
        C(preflight_speculative_schedule).
      - V(balancer) the drain timeout and the balancer's runtime API or hooks.
      - V(knobs) the sizes, the port, the characters the unit's command line cannot carry, the
        API key rule and the wheelhouse knobs.
      - V(validation) the gates against num_speculative_tokens and the levels, the baseline
        knob, the prompt file and the speed-up waiver's notice.
      - V(engine) the gates the serving engine gives no number for.
    type: list
    elements: str
    choices: [inputs, balancer, knobs, validation, engine]
extends_documentation_fragment:
  - specdeploy.toolkit.read_only_action
"""

EXAMPLES = r"""
- name: Check every input before anything changes
  specdeploy.toolkit.preflight_inputs:
  register: input_checks

- name: Check only the balancer (a rollback)
  specdeploy.toolkit.preflight_inputs:
    checks: [balancer]
"""

RETURN = r"""
errors:
  description: Every refusal, one line each (empty when the inputs are fine).
  returned: always
  type: list
  elements: str
runs:
  description:
    - Per controller-side check that ran (knobs, inputs, balancer, gates, baseline, engine),
      its exit status C(rc) and C(cached), whether another host's run with the same inputs
      answered it.
  returned: always
  type: dict
messages:
  description: Notices to show (a waived speed-up gate).
  returned: always
  type: list
  elements: str
"""
