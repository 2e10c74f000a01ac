#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.advise_node (plugins/action).

The steps run the node's stat, slurp, uri and command modules from the controller
(plugins/action/advise_node.py, its command line in plugins/plugin_utils/advise.py); this file
only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: advise_node
short_description: Read a serving node's /metrics, MoE shape and throughput for the k advisor
description:
  - The node half of C(make advise) (playbooks/advise.yml). Takes no options; it reads the
    host's variables. Restarts nothing.
  - Refuses a node without a current release (no C(specdeploy_root/current) symlink) and a
    release whose manifest has no speculative_config, each in one line naming the node.
  - Reads the target's routed experts and experts per token from C(specdeploy_model_path)'s
    config.json (its C(text_config) for a multimodal target; 0 and 0 when unreadable), unless
    C(advise_experts) is given; the release's /metrics at C(specdeploy_local_url).
  - Runs the release's own checker (C(specdeploy.node.validation.check baseline)) at
    C(advise_levels) (default C(validation_concurrency), else 1, 8, 32) with
    C(advise_min_window_s) (5) and C(advise_repeats) (2), with the service's API key file where
    it exists.
  - Sets the host fact C(advise_inputs) (C(metrics), C(spec), C(shape)) for
    M(specdeploy.toolkit.advise).
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options: {}
attributes:
  check_mode:
    support: none
    description: The checker measures the server.
  diff_mode:
    support: none
    description: Changes nothing.
  action:
    support: full
    description: Runs the node's modules from the controller.
notes:
  - Use C(become=true); the config.json and the API key file are readable by root.
"""

EXAMPLES = r"""
- name: Read the serving release, its /metrics and its throughput per level
  specdeploy.toolkit.advise_node:
  become: true
"""

RETURN = r"""
ansible_facts:
  description: What the advisor needs of the node.
  returned: success
  type: dict
  contains:
    advise_inputs:
      description: C(metrics) (the /metrics text), C(spec) (the checker's JSON), C(shape)
        (C(experts), C(top_k)).
      type: dict
"""
