#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.release_plan (plugins/action).

The work happens on the controller (plugins/action/release_plan.py, its rules in
plugins/plugin_utils/release_plan.py); this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: release_plan
short_description: Compute the rollout's release object on the controller
description:
  - Computes the release a deploy would build and serve on the host from the toolkit's knobs,
    what the patch manifest says of the pinned version, the node's read-only probe and the
    hardware doctor's settings; sets it as the host fact named by O(as).
  - The release id is the engine version and the first 12 hex digits of the sha256 of
    everything that defines what runs on the node (the node-side code's fingerprint, the patch
    series, the server's configuration, the hardware-derived settings).
  - The object carries the release's paths on the node (every role takes them from it), its
    compile cache's fingerprint and what deploying it means on this node (built already, a
    restart, steady (it serves it, validated, with the same gates)).
  - Never connects to the host and never changes anything.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  as:
    description: The host fact the release object is stored in.
    type: str
    default: specdeploy_release
  hardware:
    description: What the hardware doctor derived for the server; part of the release id.
    type: dict
    suboptions:
      nccl_environment:
        description: NCCL variables for the server.
        type: dict
      server_extra_args:
        description: Server arguments the hardware calls for.
        type: list
        elements: str
extends_documentation_fragment:
  - specdeploy.toolkit.read_only_action
"""

EXAMPLES = r"""
- name: Plan the release
  specdeploy.toolkit.release_plan:
    as: specdeploy_release
    hardware:
      nccl_environment: {}
      server_extra_args: []
"""

RETURN = r"""
release:
  description: The release object (id, vllm_version, engine, package, inputs, paths, fingerprint,
    cache_dir, built, restart, steady, last_start_s, ...), also set as the fact O(as).
  returned: always
  type: dict
"""
