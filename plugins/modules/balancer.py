#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.balancer (plugins/action).

The work happens on the controller (plugins/action/balancer.py); this file only carries the
documentation ansible-doc shows, the usual place for an action plugin's documentation.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: balancer
short_description: Take the node out of the load balancer's rotation, or put it back
description:
  - Runs the balancer's command line on the controller (C(specdeploy_drain_argv) for the
    command, C(specdeploy.controller.drain); HAProxy's runtime API, or the operator's
    C(specdeploy_drain_command) and C(specdeploy_undrain_command); with neither, one line says
    that the step is skipped) in the toolkit's directory (C(specdeploy_toolkit_dir)).
  - A drain waits at most C(specdeploy_drain_timeout_s) for the node's HAProxy sessions to end.
    When the balancer refuses, the task fails (the caller does not stop the server).
  - An undrain that fails fails the task unless O(must_succeed) is false (the node serves, but
    out of rotation; the message says how to put it back by hand).
  - Skipped in check mode (it changes the balancer's state).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  command:
    description: V(drain) takes the node out of rotation, V(undrain) puts it back.
    type: str
    required: true
    choices: [drain, undrain]
  must_succeed:
    description: V(false) where the caller only reports a failed undrain (it does not fail then).
    type: bool
    default: true
notes:
  - Runs on the controller, in the task's worker (no module run on the node).
"""

EXAMPLES = r"""
- name: Take the node out of the balancer's rotation
  specdeploy.toolkit.balancer:
    command: drain
  register: drained

- name: Put the node back (report only, never fail)
  specdeploy.toolkit.balancer:
    command: undrain
    must_succeed: false
"""

RETURN = r"""
rc:
  description: The balancer command's exit status.
  type: int
  returned: when it ran
kind:
  description: The balancer, C(haproxy), C(hooks), or C(none) when none is configured.
  type: str
  returned: when it ran
msg:
  description: What the balancer did, or why it could not.
  type: str
  returned: always
drained:
  description: Whether the node is now out of rotation (false when no balancer is configured).
  type: bool
  returned: for a drain
"""
