"""The provisioning's read-only node probe (roles/gpu_node/library/gpu_node_probe.py).

Run as Ansible runs a module; on this machine (Debian packages, root and its group exist).
"""

from __future__ import annotations

from pathlib import Path

from module_runner import MODULES, run_module

MODULE = MODULES / "gpu_node_probe.py"


def probe(tmp_path: Path, **args) -> dict:
    return run_module(MODULE, tmp_path, args)


def test_reports_missing_packages_and_the_accounts_as_they_are(tmp_path):
    out = probe(tmp_path, packages=["dpkg", "no-such-package-xyz"], user="root", group="root")
    assert out["changed"] is False
    assert out["missing_packages"] == ["no-such-package-xyz"]
    assert out["user"] == {"exists": True, "home": "/root", "shell": out["user"]["shell"], "gid": 0}
    assert out["group"] == {"exists": True, "gid": 0}
    assert out["container"]


def test_an_absent_user_and_group_read_as_absent(tmp_path):
    out = probe(tmp_path, packages=[], user="no-such-user-xyz", group="no-such-group-xyz")
    assert out["user"] == {"exists": False} and out["group"] == {"exists": False}
    assert out["missing_packages"] == []
