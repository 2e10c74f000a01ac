#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.toolkit_archive (plugins/action).

The work happens on the controller (plugins/action/toolkit_archive.py); this file only carries
the documentation ansible-doc shows, the usual place for an action plugin's documentation.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: toolkit_archive
short_description: Pack the toolkit's node-side part or the stand-in for the planned release
description:
  - Writes the archive that roles/vllm_release unpacks on the nodes,
    C(<vllm_release_build_dir>/<toolkit|standin>-<fingerprint>.tar), with
    C(specdeploy.controller.toolkit_archive) run in the toolkit's directory
    (C(specdeploy_toolkit_dir)), on the controller, in the task's worker.
  - The fingerprint is the planned release's (C(specdeploy_release.toolkit_sha256) or
    C(standin_sha256)); one archive per fingerprint, so an archive that exists is not packed
    again (the task then reports no change).
  - Skipped in check mode unless the task turns check mode off for itself (C(check_mode=false)).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  part:
    description: V(release), the release's node-side toolkit, or V(standin), the sandbox's stand-in.
    type: str
    required: true
    choices: [release, standin]
notes:
  - Runs on the controller (no module run on the node).
"""

EXAMPLES = r"""
- name: Pack the node-side toolkit for the release (once, on the controller)
  specdeploy.toolkit.toolkit_archive:
    part: release
  run_once: true
  check_mode: false
"""

RETURN = r"""
path:
  description: The archive.
  type: str
  returned: always
rc:
  description: The packer's exit status.
  type: int
  returned: when it packed
"""
