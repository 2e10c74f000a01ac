#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.validation_result (plugins/action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: validation_result
short_description: Read a node's validation result, else build its could-not-measure result
description:
  - Reads the result JSON the release's checker wrote on the node (C(validation_out)), as
    M(ansible.builtin.slurp) reads it.
  - Where the checker wrote none, builds the could-not-measure result on the controller with
    the one result builder (C(specdeploy.node.validation.result not-measured)), naming the node,
    C(validation_release_id), C(specdeploy_local_url), C(specdeploy_served_model_name) and the
    checker's exit status and last stderr lines; it works also when the release's venv on the
    node does not.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  run:
    description: The checker's task result (rc, stderr).
    type: dict
    required: true
attributes:
  check_mode:
    support: full
    description: It only reads on the node; the result is built on the controller.
  diff_mode:
    support: none
    description: Changes nothing.
  action:
    support: full
    description: Reads on the node, builds on the controller.
"""

EXAMPLES = r"""
- name: Read the result the checker wrote, else build the could-not-measure one
  specdeploy.toolkit.validation_result:
    run: "{{ validation_run }}"
  become: true
  register: validation_read
"""

RETURN = r"""
result:
  description: The result document.
  type: dict
  returned: success
written:
  description: Whether the checker wrote it (false for a could-not-measure result built here).
  type: bool
  returned: success
verdict:
  description: The gate's words should the result fail (release, node, exit code, reasons).
  type: str
  returned: success
"""
