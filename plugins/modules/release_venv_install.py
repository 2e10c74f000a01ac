#!/usr/bin/python
"""Ansible module: a release venv's packages installed by uv (or pip).

The logic is the collection's module_utils venv_installer (plugins/module_utils/venv_installer.py).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: release_venv_install
short_description: Install a release venv's packages with uv, or pip where uv is not to hand
description:
  - Makes the venv when it has no interpreter yet, installs the toolkit's node-side needs
    (C(requirements), without dependencies), then the engine C(package).
  - With C(installer=uv) the pinned uv is unpacked once per node from its wheel in the
    C(wheelhouse) into C(tools_dir); a node without that wheel installs with pip, and
    C(installer_note) says why.
  - Offline from the C(wheelhouse) where one is given; never compiles bytecode (the
    C(release_bytecode) module does, on every core).
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  venv:
    description: The release's venv.
    type: path
    required: true
  python:
    description: The node's Python the venv is made from.
    type: path
    required: true
  requirements:
    description: The toolkit's node-side needs (a requirements file), without dependencies.
    type: path
    required: true
  package:
    description: The engine package, C(vllm==V) or C(sglang==V).
    type: str
    required: true
  no_deps:
    description: Install the engine package without its dependencies.
    type: bool
    default: false
  wheelhouse:
    description: The node's wheel directory to install from offline; empty installs from the index.
    type: str
    default: ""
  installer:
    description: The installer; uv falls back to pip where its wheel is not in the wheelhouse.
    type: str
    choices: [uv, pip]
    default: uv
  tools_dir:
    description: Where the node keeps the unpacked uv (one per pinned version).
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Install the pinned vLLM and the toolkit's needs into the release venv
  specdeploy.toolkit.release_venv_install:
    venv: /opt/specdeploy/releases/0.16.0-abc123/venv
    python: /usr/bin/python3
    requirements: /opt/specdeploy/releases/0.16.0-abc123/toolkit/requirements-node.txt
    package: vllm==0.16.0
    wheelhouse: /srv/wheelhouse
    tools_dir: /opt/specdeploy/tools
"""

RETURN = r"""
changed:
  description: Whether the venv was made or any package installed.
  type: bool
  returned: always
installer:
  description: The installer that ran (uv, or pip where uv was not to hand).
  type: str
  returned: always
installer_note:
  description: Why pip ran although uv was asked for; empty otherwise.
  type: str
  returned: always
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.venv_installer import (
    INSTALLERS,
    InstallError,
    install,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "python": {"type": "path", "required": True},
            "requirements": {"type": "path", "required": True},
            "package": {"type": "str", "required": True},
            "no_deps": {"type": "bool", "default": False},
            "wheelhouse": {"type": "str", "default": ""},
            "installer": {"type": "str", "choices": list(INSTALLERS), "default": "uv"},
            "tools_dir": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = install(
            installer=params["installer"],
            tools_dir=Path(params["tools_dir"]),
            python=params["python"],
            venv=Path(params["venv"]),
            requirements=params["requirements"],
            package=params["package"],
            no_deps=params["no_deps"],
            wheelhouse=params["wheelhouse"],
            check=module.check_mode,
        )
    except (InstallError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
