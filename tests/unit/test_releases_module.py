"""roles/specdeploy/library/specdeploy_releases.py: specdeploy/node/release/ledger.py as a module.

Run as Ansible runs it (an args file, stdout JSON), with the module_utils import resolved to
specdeploy.node.release.ledger the way roles/specdeploy/module_utils links it. Check mode and diff
are
the module's own: nothing on disk changes in check mode.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from module_runner import MODULE_UTILS, MODULES, run_module_file

from specdeploy.node.module_utils import release

MODULE = MODULES / "releases.py"
LOGIC = MODULE_UTILS / "release.py"


def module(tmp_path: Path, check: bool = False, diff: bool = False, **args) -> dict:
    args_file = tmp_path / "args.json"
    args = {"root": str(tmp_path / "root"), **args}
    args.update(_ansible_check_mode=check, _ansible_diff=diff)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return run_module_file(MODULE, args_file)


def listing(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_text())
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def test_the_module_utils_file_is_the_node_code_itself():
    # One copy: the module imports the collection's module_utils file, and the node package's
    # specdeploy.node.module_utils.release is that same file (no link, no second copy).
    assert "plugins.module_utils.release import" in MODULE.read_text()
    assert not LOGIC.is_symlink()
    assert Path(release.__file__).resolve() == LOGIC


def test_build_activate_and_a_second_run_changes_nothing(tmp_path):
    inputs = {"vllm_version": "0.16.0", "x": 1}
    first = module(tmp_path, command="init", release_id="r1", inputs=inputs)
    assert first["changed"] and first["status"] == "building"
    marked = module(tmp_path, command="update", release_id="r1", status="verified")
    assert marked["changed"] and marked["status"] == "verified"
    assert module(tmp_path, command="init", release_id="r1", inputs=inputs)["changed"] is False
    on = module(tmp_path, command="activate", release_id="r1", action="deploy")
    assert on["changed"] and on["current"] == "r1"
    again = module(tmp_path, command="activate", release_id="r1", action="deploy")
    assert again["changed"] is False


def test_check_mode_says_what_would_change_shows_the_diff_and_writes_nothing(tmp_path):
    root = tmp_path / "root"
    for rid in ("r1", "r2"):
        module(tmp_path, command="init", release_id=rid, inputs={"id": rid})
        module(tmp_path, command="update", release_id=rid, status="verified")
    module(tmp_path, command="activate", release_id="r1")
    before = listing(root)

    switch = module(tmp_path, check=True, diff=True, command="activate", release_id="r2")
    assert switch["changed"] and switch["diff"] == {
        "before": "current -> releases/r1\n",
        "after": "current -> releases/r2\n",
    }
    field = module(
        tmp_path, check=True, diff=True, command="update", release_id="r1", fields={"note": 1}
    )
    assert field["changed"] and '"note": 1' in field["diff"]["after"]
    assert '"note"' not in field["diff"]["before"]
    new = module(tmp_path, check=True, command="init", release_id="r3", inputs={"id": "r3"})
    assert new["changed"] and new["status"] == "building"
    # A release the check run would have built first: activating it would change `current`.
    assert module(tmp_path, check=True, command="activate", release_id="r3")["changed"]
    assert module(tmp_path, check=True, command="deactivate", action="stop")["changed"]
    assert listing(root) == before


def test_a_missing_rollback_target_is_an_answer_and_a_bad_update_a_failure(tmp_path):
    module(tmp_path, command="init", release_id="r1", inputs={"id": "r1"})
    refused = module(tmp_path, command="target", to="")
    assert not refused.get("failed") and refused["target"] == ""
    assert refused["error"].startswith("no earlier release to go back to")
    failed = module(tmp_path, command="update", release_id="nope", status="verified")
    assert failed["failed"] and "has no manifest" in failed["msg"]
    missing = module(tmp_path, command="activate")
    assert missing["failed"] and "release_id" in missing["msg"]
