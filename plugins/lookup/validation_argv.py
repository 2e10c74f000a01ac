"""Lookup plugin: the validation's command lines (the checker on the node, the baseline plan on
the controller), computed in Python from the role's variables (plugins/plugin_utils/
validation_argv.py) instead of Jinja lists in roles/validation/vars/main.yml."""

from __future__ import annotations

DOCUMENTATION = r"""
name: validation_argv
short_description: The validation's command lines, from the validation role's variables
description:
  - Returns one command line (a list of strings) built from the host's variables, templated as a
    task's Jinja would read them.
  - C(all) is the release's own checker with its gates, the workload, the history's labels and
    the chosen baseline (C(validation_baseline)); C(baseline) the same checker measuring the
    server that runs now without gates, for O(release) into O(out); C(baseline-plan) the
    arguments of C(specdeploy.controller.baseline_plan) on the controller.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  _terms:
    description: Which command line, C(all), C(baseline) or C(baseline-plan).
    required: true
  release:
    description: The release measured (C(baseline) only).
    type: str
  out:
    description: Where the measurement goes on the node (C(baseline) only).
    type: str
"""

EXAMPLES = r"""
- name: Measure the serving release
  ansible.builtin.command:
    argv: "{{ lookup('specdeploy.toolkit.validation_argv', 'baseline', release=old, out=path) }}"
"""

RETURN = r"""
_raw:
  description: The command line.
  type: list
  elements: list
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import validation_argv
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import resolve_all


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if len(terms) != 1:
            raise AnsibleError(
                f"validation_argv: one of {', '.join(validation_argv.MODES)}, got {terms!r}"
            )
        values = resolve_all(self._templar, validation_argv.KNOBS)
        try:
            return [validation_argv.argv(terms[0], values, **kwargs)]
        except (KeyError, ValueError, TypeError) as error:
            raise AnsibleError(f"validation_argv: {type(error).__name__}: {error}") from error
