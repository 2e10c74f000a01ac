#!/usr/bin/python
"""Ansible module: a release venv's Python bytecode compiled at build.

The logic is the collection's module_utils bytecode (plugins/module_utils/bytecode.py).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: release_bytecode
short_description: Compile a release venv's Python bytecode once, at build
description:
  - The server cannot write C(__pycache__) into its venv (an unprivileged user,
    C(ProtectSystem=strict)); without bytecode every start compiles every module it imports
    (25-32 s of a warm vLLM 0.20.2 start on an H200).
  - Compiles, with the venv's own interpreter, every source under C(lib/python3*/site-packages)
    whose bytecode is missing or does not match the source's mtime and size (what the import
    system checks); run again after the patch step for the files it replaced; files the
    compiler refuses are recorded and not retried.
  - Changes nothing when every source has current bytecode. Check mode says how many would be
    compiled.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  venv:
    description: The release's venv.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Compile the release venv's bytecode
  specdeploy.toolkit.release_bytecode:
    venv: /opt/specdeploy/releases/0.16.0-abc123/venv
"""

RETURN = r"""
changed:
  description: Whether anything was (or, in check mode, would be) compiled.
  type: bool
  returned: always
stale:
  description: Sources without current bytecode before the run.
  type: int
  returned: always
refused:
  description: Sources the compiler refused in this run (recorded, not retried).
  type: int
  returned: always
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.bytecode import (
    BytecodeError,
    compile_venv,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={"venv": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    try:
        result = compile_venv(Path(module.params["venv"]), check=module.check_mode)
    except (BytecodeError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
