#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.release_venv_build (plugins/action).

The work happens in the action (plugins/action/release_venv_build.py, its steps in
plugins/plugin_utils/release_venv_build.py), which runs modules on the node; this file only
carries what ansible-doc shows.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: release_venv_build
short_description: Build a release's venv (link or install, record, compile) in one task
description:
  - Links the venv from an earlier release of the same vLLM with M(specdeploy.toolkit.release_venv)
    (a vLLM release only; an SGLang release's venv is never linked).
  - Where none was linked, installs the toolkit's node-side needs (C(requirements-node.txt) of
    the release's toolkit, C(--no-deps), making the venv from C(specdeploy_python)) and then the
    release's engine package (C(specdeploy_release.package); C(--no-deps) where
    C(specdeploy_vllm_install_dependencies) is false) with
    M(specdeploy.toolkit.release_venv_install) (uv, or pip where C(specdeploy_venv_installer) is
    pip or the node's wheelhouse has no uv wheel), offline from C(specdeploy_node_wheelhouse)
    where it is set, and records which wheel the venv came from
    (M(specdeploy.toolkit.release_venv), O(specdeploy.toolkit.release_venv#module:state=recorded),
    a vLLM release only).
  - Last, compiles the venv's bytecode with M(specdeploy.toolkit.release_bytecode).
  - Takes no options; it reads C(specdeploy_root), C(specdeploy_release), C(specdeploy_python),
    C(specdeploy_node_wheelhouse), C(specdeploy_vllm_install_dependencies) and
    C(specdeploy_venv_installer).
  - The first step that fails ends the task with that step's result.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options: {}
attributes:
  check_mode:
    support: full
    description: Each step runs in check mode, as its module does.
  diff_mode:
    support: none
    description: No diff.
  action:
    support: full
    description: The action runs the steps' modules on the node.
"""

EXAMPLES = r"""
- name: Build the release venv
  specdeploy.toolkit.release_venv_build: {}
  become: true
"""

RETURN = r"""
linked:
  description: Whether the venv was linked from an earlier release (nothing was installed then).
  returned: success
  type: bool
steps:
  description: Each step that ran (C(link), C(toolkit_needs), C(engine), C(record), C(bytecode))
    and whether it changed anything.
  returned: always
  type: dict
step:
  description: The step that failed.
  returned: failure
  type: str
"""
