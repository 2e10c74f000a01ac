#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.advise (plugins/action).

The work happens on the controller (plugins/action/advise.py, its argument list in
plugins/plugin_utils/advise.py); this file only carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: advise
short_description: Write a node's advisor inputs and run the k advisor over them on the controller
description:
  - The controller half of C(make advise) (playbooks/advise.yml). Takes no options; it reads
    the host's variables.
  - Writes the host fact C(advise_inputs)'s C(metrics) (the serving release's /metrics) and
    C(spec) (its throughput per level) into the advice directory as C(<host>.metrics.txt) and
    C(<host>.spec.json) (mode 0644; the directory 0755).
  - Runs C(python -m specdeploy.controller.advisor) over them and the node's no-speculation
    baseline in the history, in the toolkit's directory (C(specdeploy_toolkit_dir), else this
    collection's root), and returns its answer. A non-zero C(rc) is the advisor's answer, not
    a failure of the task.
  - "Variables read: C(advise_out_dir) (default C(reports/advice)), C(advise_history_db)
    (default C(reports/history.sqlite)), C(advise_experts) and C(advise_top_k) (default: the
    shape the node read, C(advise_inputs.shape)), C(advise_k_max) (6),
    C(validation_load_profile), C(specdeploy_served_model_name)."
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options: {}
attributes:
  check_mode:
    support: none
    description: It writes the inputs it runs the advisor on.
  diff_mode:
    support: none
    description: No diff.
  action:
    support: full
    description: Runs on the controller only.
notes:
  - The node play of playbooks/advise.yml sets C(advise_inputs) first.
"""

EXAMPLES = r"""
- name: Run the advisor against the node's no-speculation baseline in the history
  specdeploy.toolkit.advise:
  failed_when: false
  register: advise_table
"""

RETURN = r"""
rc:
  description: The advisor's exit status.
  returned: always
  type: int
stdout:
  description: The table (predicted speed-up per k and level, the recommended k).
  returned: always
  type: str
stderr:
  description: Why there is no table (no baseline in the history, no such file).
  returned: always
  type: str
cmd:
  description: The advisor's command line.
  returned: always
  type: list
  elements: str
"""
