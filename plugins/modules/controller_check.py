#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.controller_check (plugins/action).

The work happens on the controller (plugins/action/controller_check.py); this file only carries
the documentation ansible-doc shows, the usual place for an action plugin's documentation.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: controller_check
short_description: Run a controller-side check once per distinct input for the whole run
description:
  - Runs O(argv) on the controller like M(ansible.builtin.command) and keeps the answer for
    the rest of the playbook run, keyed by the sha256 of O(argv), O(stdin) and O(chdir).
  - Hosts with the same inputs share one run of the check (the others wait for its answer);
    a host whose inputs differ gets its own run.
  - The answers live in the run's local temporary directory and go with it.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  argv:
    description: The command and its arguments. Give O(argv) or O(tool), not both.
    type: list
    elements: str
  tool:
    description:
      - One of the toolkit's own Python modules (C(specdeploy.controller.history)), run as
        C(python -m) O(tool) O(args) by the controller's Python, the one that runs the playbook
        (C(ansible_playbook_python)).
      - Without O(chdir) it runs in the toolkit's directory (C(specdeploy_toolkit_dir) where the
        play has that variable, else this collection's root), where its package is found.
    type: str
  args:
    description: The arguments of O(tool).
    type: list
    elements: str
    default: []
  stdin:
    description: Text the command reads on its standard input.
    type: str
  chdir:
    description: The directory the command runs in.
    type: path
  creates:
    description:
      - A path the command makes. When it exists, the command does not run (as with
        M(ansible.builtin.command)); when the command runs and exits 0, the task reports a change.
    type: path
  once_per_input:
    description:
      - V(false) for a command that records something (the controller's history), or whose answer
        this run may change (a history lookup after a record). It runs every time it is asked,
        never answers from another run, and is skipped in check mode unless the task turns
        check mode off for itself (C(check_mode=false)).
    type: bool
    default: true
extends_documentation_fragment:
  - specdeploy.toolkit.read_only_action
notes:
  - The answer of one run is never reused by another run.
"""

EXAMPLES = r"""
- name: Check the gates (once for every node that has the same ones)
  specdeploy.toolkit.controller_check:
    argv: [python3, -m, specdeploy.node.validation.gate, --validate, /dev/stdin]
    stdin: "{{ specdeploy_release_gates | to_json }}"
    chdir: /opt/specdeploy-toolkit
  register: gates_check

- name: Record a result in the controller's history (the toolkit's own tool, every time)
  specdeploy.toolkit.controller_check:
    tool: specdeploy.controller.history
    args: [record, --db, reports/history.sqlite]
    stdin: "{{ result | to_json }}"
    once_per_input: false
"""

RETURN = r"""
rc:
  description: The command's exit status.
  returned: always
  type: int
stdout:
  description: Its standard output.
  returned: always
  type: str
stderr:
  description: Its standard error.
  returned: always
  type: str
cached:
  description: Whether the answer came from another host's run with the same inputs.
  returned: always
  type: bool
"""
