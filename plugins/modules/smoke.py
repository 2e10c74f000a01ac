#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.smoke (plugins/action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: smoke
short_description: Run the readiness smoke check of a release's server on the node
description:
  - Runs the release's own checker (C(specdeploy.node.validation.check smoke)) from the
    release's venv against the server's local address (health, models, a completion), as
    M(ansible.builtin.command) runs a command.
  - The command line comes from the play's C(specdeploy_root), C(specdeploy_local_url),
    C(specdeploy_served_model_name) and C(specdeploy_api_key_file); the lookup
    C(specdeploy.toolkit.smoke_command) returns the same one.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  release:
    description: The release whose server is checked (its id).
    type: str
    required: true
  timeout_s:
    description: Each request's timeout (seconds).
    type: float
    default: 20
attributes:
  check_mode:
    support: none
    description: As with M(ansible.builtin.command), nothing runs in check mode; the check only
      reads, so the tasks that run it turn check mode off for it (C(check_mode=false)).
  diff_mode:
    support: none
    description: No diff; the check changes nothing Ansible tracks.
  action:
    support: full
    description: An action plugin builds the command line on the controller and runs it on the node.
"""

EXAMPLES = r"""
- name: Wait until the new release answers
  specdeploy.toolkit.smoke:
    release: "{{ specdeploy_release.id }}"
    timeout_s: 5
  become: true
  check_mode: false
  register: ready
  until: ready.rc == 0
  retries: 30
  delay: 2
"""

RETURN = r"""
rc: {description: "The check's exit status (0 ready).", type: int, returned: always}
stdout: {description: "Its JSON result.", type: str, returned: always}
stderr: {description: "Why it failed.", type: str, returned: always}
"""
