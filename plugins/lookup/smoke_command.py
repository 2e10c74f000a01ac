"""Lookup plugin: the smoke check's command line and environment for a release (for a module
that runs it itself, such as specdeploy.toolkit.steady); plugins/plugin_utils/smoke.py."""

from __future__ import annotations

DOCUMENTATION = r"""
name: smoke_command
short_description: The readiness smoke check's command line and environment for a release
description:
  - Returns a mapping with C(argv) (the release's own checker, C(smoke), against the server's
    local address) and C(environment) (its C(PYTHONPATH)), from the play's C(specdeploy_*)
    variables. The action C(specdeploy.toolkit.smoke) runs the same command.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  release:
    description: The release whose server is checked.
    type: str
    required: true
  timeout_s:
    description: Each request's timeout (seconds).
    type: float
    default: 20
"""

EXAMPLES = r"""
- name: Check a node in one module run, the smoke check included
  specdeploy.toolkit.steady:
    smoke_argv: "{{ smoke.argv }}"
    smoke_environment: "{{ smoke.environment }}"
  vars:
    smoke: "{{ lookup('specdeploy.toolkit.smoke_command', release=specdeploy_release.id) }}"
"""

RETURN = r"""
_raw:
  description: The command, C(argv) (a list) and C(environment) (a mapping).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import smoke
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import resolve_all


class LookupModule(LookupBase):
    def run(self, terms, variables=None, release=None, timeout_s=smoke.DEFAULT_TIMEOUT_S, **kwargs):
        knobs = resolve_all(self._templar, smoke.KNOBS)
        try:
            return [smoke.command(knobs, release, timeout_s)]
        except (KeyError, ValueError) as error:
            raise AnsibleError(f"smoke_command: {type(error).__name__}: {error}") from error
