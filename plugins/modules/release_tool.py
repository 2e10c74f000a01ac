#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.release_tool (plugins/action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: release_tool
short_description: Run a node-side tool of the toolkit with a release's own Python and toolkit
description:
  - Runs C(python -m) O(tool) O(args) on the node with the release's venv Python and the
    release's toolkit directory on C(PYTHONPATH), as M(ansible.builtin.command) runs a command
    (the result has C(rc), C(stdout), C(stderr); a non-zero exit fails the task unless the task
    says otherwise).
  - The paths come from C(specdeploy_root) and the release's id (the releases' one layout).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  tool:
    description: The tool, a module of the toolkit's node package (C(specdeploy.node.*)).
    type: str
    required: true
  args:
    description: Its arguments.
    type: list
    elements: str
    default: []
  release:
    description:
      - The release whose Python and toolkit run it (its id).
      - Default the release the play deploys, C(specdeploy_release.id).
    type: str
attributes:
  check_mode:
    support: none
    description: As with M(ansible.builtin.command), nothing runs in check mode unless the task
      turns check mode off for itself.
  diff_mode:
    support: none
    description: No diff; the tool changes nothing Ansible tracks.
  action:
    support: full
    description: An action plugin builds the command line on the controller and runs it on the node.
"""

EXAMPLES = r"""
- name: Read the model ahead into the page cache
  specdeploy.toolkit.release_tool:
    release: "{{ new_release }}"
    tool: specdeploy.node.service.prefetch
    args: [--mode, always, --path, /srv/models/kimi, --json]
  become: true
"""

RETURN = r"""
rc: {description: "The tool's exit status.", type: int, returned: always}
stdout: {description: "Its standard output.", type: str, returned: always}
stderr: {description: "Its standard error.", type: str, returned: always}
"""
