"""plugins/modules/deploy_lock.py: plugins/module_utils/deploy_lock.py as a module.

Run as Ansible runs it (an args file, stdout JSON), with the module_utils import resolved to
specdeploy.node.release.deploy_lock the way roles/specdeploy/module_utils links it. In check mode
the
module says what it would do and the lock file stays as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from module_runner import MODULE_UTILS, MODULES, run_module_file

from specdeploy.node.module_utils import deploy_lock

MODULE = MODULES / "deploy_lock.py"
LOGIC = MODULE_UTILS / "deploy_lock.py"


def module(root: Path, check: bool = False, diff: bool = False, **args) -> dict:
    args_file = root.parent / "args.json"
    args = {"root": str(root), **args, "_ansible_check_mode": check, "_ansible_diff": diff}
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return run_module_file(MODULE, args_file)


def owner(token: str) -> dict:
    return {"token": token, "controller": "ctl", "pid": os.getpid(), "user": "ops"}


def held(root: Path) -> str | None:
    return (deploy_lock.read_owner(root) or {}).get("token")


def test_the_module_utils_file_is_the_node_code_itself():
    # One copy: the module imports the collection's module_utils file, and the node package's
    # specdeploy.node.module_utils.deploy_lock is that same file (no link, no second copy).
    assert "plugins.module_utils.deploy_lock import" in MODULE.read_text()
    assert not LOGIC.is_symlink()
    assert Path(deploy_lock.__file__).resolve() == LOGIC


def test_check_mode_says_it_would_take_the_lock_and_takes_nothing(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    out = module(root, check=True, diff=True, state="locked", owner=owner("t1"))
    assert out["changed"] and out["acquired"] and held(root) is None
    assert out["diff"]["before"] == "" and '"token": "t1"' in out["diff"]["after"]


def test_a_second_run_is_refused_naming_the_holder_and_only_the_owner_unlocks(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    first = module(root, state="locked", owner=owner("t1"))
    assert first["changed"] and first["acquired"] and held(root) == "t1"
    again = module(root, state="locked", owner=owner("t1"))
    assert again["acquired"] and not again["changed"]
    other = module(root, state="locked", owner=owner("t2"))
    assert not other["acquired"] and not other.get("failed")
    assert other["owner"]["token"] == "t1" and "ops@ctl" in other["message"]
    assert not module(root, state="unlocked", token="t2")["released"] and held(root) == "t1"
    would = module(root, check=True, diff=True, state="unlocked", token="t1")
    assert would["changed"] and would["diff"]["after"] == "" and held(root) == "t1"
    gone = module(root, state="unlocked", token="t1")
    assert gone["released"] and gone["changed"] and held(root) is None


def test_a_missing_root_fails_the_task_with_one_line(tmp_path):
    out = module(tmp_path / "absent", state="locked", owner=owner("t1"))
    assert out["failed"] and "does not exist" in out["msg"]
