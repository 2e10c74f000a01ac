"""The one-round-trip files module (roles/specdeploy/library/specdeploy_files.py).

Run as Ansible runs a module: a JSON args file (with _ansible_check_mode for --check), the
module's stdout read back as JSON.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from module_runner import MODULES, run_module

MODULE = MODULES / "files.py"


def run(tmp_path: Path, items: list[dict], check: bool = False) -> dict:
    args = {"items": items, "_ansible_check_mode": check, "_ansible_diff": True}
    return run_module(MODULE, tmp_path, args)


def mode(path: Path) -> str:
    return f"{stat.S_IMODE(path.stat().st_mode):04o}"


def layout(root: Path) -> list[dict]:
    return [
        {"path": str(root), "state": "directory", "mode": "0755"},
        {"path": str(root / "secrets"), "state": "directory", "mode": "0700"},
        {"path": str(root / "unit.service"), "mode": "0644", "content": "[Service]\nA=1\n"},
        {"path": str(root / "secrets" / "key"), "mode": "0600", "content": "k\n"},
    ]


def test_creates_the_items_then_a_second_run_changes_nothing(tmp_path):
    root = tmp_path / "opt" / "specdeploy"
    first = run(tmp_path, layout(root))
    assert first["changed"] is True and len(first["changed_paths"]) == 4
    assert (root / "unit.service").read_text() == "[Service]\nA=1\n"
    assert mode(root / "secrets") == "0700" and mode(root / "secrets" / "key") == "0600"
    second = run(tmp_path, layout(root))
    assert second["changed"] is False and second["changed_paths"] == []


def test_check_mode_reports_the_change_and_its_diff_without_writing(tmp_path):
    root = tmp_path / "r"
    run(tmp_path, layout(root))
    items = layout(root)
    items[2]["content"] = "[Service]\nA=2\n"
    before = (root / "unit.service").stat().st_mtime_ns
    out = run(tmp_path, items, check=True)
    assert out["changed"] is True and out["changed_paths"] == [str(root / "unit.service")]
    assert out["diff"][0]["before"] == "[Service]\nA=1\n" and out["diff"][0]["after"].endswith(
        "A=2\n"
    )
    assert (root / "unit.service").read_text() == "[Service]\nA=1\n"
    assert (root / "unit.service").stat().st_mtime_ns == before


def test_a_changed_content_is_replaced_atomically_and_a_wrong_mode_is_corrected(tmp_path):
    root = tmp_path / "r"
    run(tmp_path, layout(root))
    os.chmod(root / "secrets" / "key", 0o644)
    os.chmod(root / "secrets", 0o755)
    items = layout(root)
    items[2]["content"] = "new\n"
    out = run(tmp_path, items)
    assert sorted(out["changed_paths"]) == sorted(
        [str(root / "secrets"), str(root / "unit.service"), str(root / "secrets" / "key")]
    )
    assert (root / "unit.service").read_text() == "new\n"
    assert mode(root / "secrets" / "key") == "0600" and mode(root / "secrets") == "0700"
    assert not [p for p in root.iterdir() if p.name.startswith(".specdeploy-")]  # no temp left


def test_a_file_where_a_directory_belongs_fails_and_names_the_path(tmp_path):
    (tmp_path / "blocker").write_text("x")
    out = run(tmp_path, [{"path": str(tmp_path / "blocker"), "state": "directory", "mode": "0755"}])
    assert out.get("failed") is True
    assert str(tmp_path / "blocker") in out["msg"] and "not a directory" in out["msg"]


def test_an_unknown_owner_fails_clearly(tmp_path):
    item = {"path": str(tmp_path / "f"), "mode": "0644", "content": "", "owner": "no-such-user-x"}
    out = run(tmp_path, [item])
    assert out.get("failed") is True and str(tmp_path / "f") in out["msg"]
    assert not (tmp_path / "f").exists()


def test_check_mode_on_a_fresh_node_before_the_service_user_exists(tmp_path):
    """Issue 28: `--check --diff` on a fresh node failed with getpwnam(): name not found:
    'vllm' (the user task before it only reports in check mode). Check mode reports what it
    would create; a real run names the missing user in one line."""
    root = tmp_path / "cache"
    item = {"path": str(root), "state": "directory", "mode": "0750",
            "owner": "specdeploy-no-such-user", "group": "specdeploy-no-such-group"}  # fmt: skip
    out = run(tmp_path, [item], check=True)
    assert not out.get("failed"), out
    assert out["changed"] is True and out["changed_paths"] == [str(root)]
    assert not root.exists()
    root.mkdir(mode=0o750)  # there already (e.g. made by hand): the owner would change
    out = run(tmp_path, [item], check=True)
    assert not out.get("failed") and "a user or group this run creates" in str(out["diff"])
    real = run(tmp_path, [item])
    assert real["failed"] and "user 'specdeploy-no-such-user' does not exist" in real["msg"]
