"""Lookup plugin: the monitoring role's render input, or what is wrong with its inputs, from
the inventory and the role's knobs (plugins/plugin_utils/monitoring_spec.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_spec
short_description: The monitoring files' input (targets, gates, alert settings) from the inventory
description:
  - C(spec) returns the mapping C(specdeploy.controller.monitoring) renders the alert rules, the
    scrape jobs and the target lists from - the nodes of C(monitoring_nodes_group), their
    scrape addresses, their gates and the C(monitoring_*) knobs.
  - C(problems) returns what stops that render, one line each (no nodes, nodes with different
    gates, a knob that is not a Prometheus duration); an empty list when there is none.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  _terms:
    description: C(spec) or C(problems).
    required: true
"""

EXAMPLES = r"""
- name: Check the monitoring inputs
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join('; ') }}"
  vars:
    _problems: "{{ lookup('specdeploy.toolkit.monitoring_spec', 'problems') }}"
"""

RETURN = r"""
_raw:
  description: The spec (a mapping) or the problems (a list of lines).
  type: list
  elements: raw
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import monitoring_spec
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import require_all

ANSWERS = {"spec": monitoring_spec.spec, "problems": monitoring_spec.problems}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if len(terms) != 1 or terms[0] not in ANSWERS:
            raise AnsibleError(f"monitoring_spec: spec or problems, got {terms!r}")
        variables = variables if variables is not None else {}
        knobs = require_all(self._templar, monitoring_spec.KNOBS, "monitoring_spec")
        groups, hostvars = variables.get("groups", {}), variables.get("hostvars", {})
        return [ANSWERS[terms[0]](groups, hostvars, knobs)]
