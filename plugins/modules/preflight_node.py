#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.preflight_node (plugins/action).

The work happens on the controller (plugins/action/preflight_node.py, its rules in
plugins/plugin_utils/preflight.py); this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_node
short_description: Judge a node's read-only probe on the controller
description:
  - Takes the registered result of M(specdeploy.toolkit.node_probe) and refuses the node when
    the node's Python does not run (with a controller wheelhouse), the model or the drafter has
    no config.json, the drafter does not fit the target (the drafter check, once per distinct
    drafter and target for the whole run), the free space is below
    C(specdeploy_min_free_disk_gb), or another program listens on C(specdeploy_port).
  - Sets C(preflight_serving_release), the finished release C(current) points at, or empty.
  - Never connects to the host and never changes anything.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  probe:
    description: The registered result of M(specdeploy.toolkit.node_probe).
    type: dict
    required: true
extends_documentation_fragment:
  - specdeploy.toolkit.read_only_action
"""

EXAMPLES = r"""
- name: Judge the probe
  specdeploy.toolkit.preflight_node:
    probe: "{{ preflight_probe }}"
  register: node_checks
"""

RETURN = r"""
errors:
  description: Every refusal, one line each (empty when the node is fine).
  returned: always
  type: list
  elements: str
messages:
  description: Notices to show (the drafter check's warnings).
  returned: always
  type: list
  elements: str
"""
