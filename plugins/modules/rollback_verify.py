#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.rollback_verify (plugins/action).

The work happens in the action (plugins/action/rollback_verify.py), which runs modules on the
node; this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: rollback_verify
short_description: Read whether the node is exactly what a release was (after a rollback)
description:
  - Reads the release's manifest, the sha256 of the installed unit and of the release's rendered
    unit, the serving process (M(specdeploy.toolkit.service_process)) and the release's patch
    state (an SGLang release, the version its venv holds; a vLLM release, its own patcher's
    C(status --json) with the release's toolkit on C(PYTHONPATH)), in that order.
  - Where the node is what the release was, runs the release's smoke check (as
    M(specdeploy.toolkit.smoke) does) and returns what was verified.
  - Fails nothing itself; the caller asserts RV(node_matches) and RV(smoke) and says
    RV(mismatch) or RV(smoke_failure). A step that cannot run (no manifest) ends the task with
    that step's result.
  - Reads C(specdeploy_root), C(specdeploy_service_name), C(rollback_patch_backup_dirname) and
    the smoke check's C(specdeploy_local_url), C(specdeploy_served_model_name) and
    C(specdeploy_api_key_file).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  release:
    description: The release that must serve (its id).
    type: str
    required: true
attributes:
  check_mode:
    support: none
    description: It only reads; the task that runs it turns check mode off (C(check_mode=false)).
  diff_mode:
    support: none
    description: No diff.
  action:
    support: full
    description: The action runs the steps' modules on the node.
"""

EXAMPLES = r"""
- name: Read the release's unit, process, patch state and smoke
  specdeploy.toolkit.rollback_verify:
    release: "{{ rollback_verify_id }}"
  become: true
  check_mode: false
  register: rollback_verify_result
"""

RETURN = r"""
node_matches:
  description: The installed unit is the release's, its process runs from the release and its
    patch state is the recorded one (applied or native).
  type: bool
  returned: success
mismatch:
  description: What differs, for the message (empty when the node matches).
  type: str
  returned: success
patch:
  description: The patch state now (C(state)) and as recorded (C(recorded)).
  type: dict
  returned: success
smoke:
  description: The smoke check's C(rc), C(stdout) and C(stderr) (empty when it did not run).
  type: dict
  returned: success
smoke_failure:
  description: Why the smoke check failed, for the message (empty otherwise).
  type: str
  returned: success
verified:
  description: What was verified (C(at), C(release), C(unit_sha256), C(patch_state), C(smoke));
    empty unless everything passed.
  type: dict
  returned: success
"""
