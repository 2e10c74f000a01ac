"""Run one of the toolkit's own Ansible modules as Ansible runs it (no test cases here).

A JSON args file (ANSIBLE_MODULE_ARGS, with _ansible_check_mode and friends as given), the
module started with this Python, its stdout read back as JSON. The toolkit's module_utils
directory (ansible.cfg `module_utils`) is importable as `ansible.module_utils.*`, as Ansible
makes it when it ships the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "specdeploy" / "node" / "module_utils"
_BOOT = (
    "import runpy, sys, ansible.module_utils as mu; mu.__path__.append(sys.argv.pop(1)); "
    "sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_module(module: Path, tmp_path: Path, args: dict) -> dict:
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    result = subprocess.run(
        [sys.executable, "-c", _BOOT, str(MODULE_UTILS), str(module), str(args_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


_LINKED = """
import importlib, runpy, sys
sys.path.insert(0, {repo!r})
sys.modules["ansible.module_utils." + {link!r}] = importlib.import_module({node!r})
runpy.run_path({module!r}, run_name="__main__")
"""


def run_linked_module(module: Path, link: str, node_module: str, args_file: Path) -> dict:
    """Run a module whose module_utils file ``link`` is a link to node code (``node_module``,
    e.g. specdeploy.node.release), as roles/*/module_utils makes it; args from ``args_file``."""
    code = _LINKED.format(repo=str(REPO), link=link, node=node_module, module=str(module))
    result = subprocess.run(
        [sys.executable, "-c", code, str(args_file)], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)
