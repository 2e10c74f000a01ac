#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.start_progress (plugins/action).

The work happens on the controller (plugins/action/start_progress.py), which runs
specdeploy.node.service.start_progress on the node with the release's Python; this file only carries
the documentation ansible-doc shows, the usual place for an action plugin's documentation.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: start_progress
short_description: Follow a server start on the node, one line per load phase, with an ETA
description:
  - Runs C(specdeploy.node.service.start_progress) on the node (the release's Python and
    toolkit) again and again, each time with a bounded wait for the next change, until the
    engine log says ready, the server's process ended, or O(timeout_s) passed.
  - Prints one line per phase change, for example
    C(node1 - loading weights 50% (12.3 s in; ETA 31 s from 4 earlier starts)).
  - Read-only. In check mode it is skipped (nothing was started).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  release:
    description:
      - The release that starts (its id); its Python and toolkit on the node are then the
        release's own (C(specdeploy_root)/releases/<id>/), unless O(python) and O(toolkit) name
        them.
    type: str
  unit:
    description:
      - The systemd unit of the inference server.
      - A task may leave it out; the action plugin then passes the play's
        C(specdeploy_service_name).
    type: str
  since:
    description: Epoch seconds of the start to follow; earlier journal lines are ignored.
    type: float
    required: true
  root:
    description:
      - The specdeploy root on the node (its start history lives there).
      - A task may leave it out; the action plugin then passes the play's C(specdeploy_root).
    type: path
  python:
    description: The release's Python on the node. Required without O(release).
    type: path
  toolkit:
    description:
      - The release's toolkit directory on the node (its PYTHONPATH). Required without O(release).
    type: path
  timeout_s:
    description:
      - The start budget in seconds; past it the result names the stuck phase.
      - A task may leave it out; the action plugin then passes the play's
        C(specdeploy_start_timeout_s).
    type: float
  wait_s:
    description: Bound of one node-side wait for the next change, in seconds.
    type: float
    default: 20
attributes:
  check_mode:
    support: full
    description: Skipped in check mode.
  diff_mode:
    support: none
    description: Changes nothing.
  action:
    support: full
    description: Runs on the controller and polls the node.
notes:
  - The action plugin and its node-side program are in this collection.
"""

EXAMPLES = r"""
- name: Follow the start in the engine log (load phases, ETA)
  specdeploy.toolkit.start_progress:
    unit: vllm
    since: "{{ restart_started }}"
    root: /opt/specdeploy
    python: /opt/specdeploy/releases/r1/venv/bin/python
    toolkit: /opt/specdeploy/releases/r1/toolkit
    timeout_s: 900

- name: The same for the play's server, its root and start budget (release r1's Python and toolkit)
  specdeploy.toolkit.start_progress:
    release: r1
    since: "{{ restart_started }}"
"""

RETURN = r"""
ready:
  description: Whether the engine log said ready.
  returned: always
  type: bool
ended:
  description: Whether the server's process ended before it was ready.
  returned: always
  type: bool
window:
  description: The downtime window of this start (when ready).
  returned: when ready
  type: dict
stuck:
  description: The phase it timed out in and how long it lasted.
  returned: when the start budget ran out
  type: dict
"""
