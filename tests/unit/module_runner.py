"""Run one of the collection's modules (plugins/modules) as Ansible runs it (no test cases here).

A JSON args file (ANSIBLE_MODULE_ARGS, with _ansible_check_mode and friends as given), the
module started with this Python, its stdout read back as JSON. The collection is importable as
``ansible_collections.specdeploy.toolkit`` through ``collections/`` (the path ansible.cfg's
``collections_path`` names), so a module's
``ansible_collections.specdeploy.toolkit.plugins.module_utils.*`` imports resolve to the same
files Ansible ships with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "plugins" / "modules"
MODULE_UTILS = REPO / "plugins" / "module_utils"
COLLECTIONS = REPO / "collections"
_BOOT = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_module_file(module: Path, args_file: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _BOOT, str(COLLECTIONS), str(module), str(args_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


def run_module(module: Path, tmp_path: Path, args: dict) -> dict:
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return run_module_file(module, args_file)
