"""The provisioning's read-only node probe (roles/gpu_node/library/gpu_node_probe.py).

Run as Ansible runs a module; on this machine (Debian packages, root and its group exist).
"""

from __future__ import annotations

import pwd
from pathlib import Path

from module_runner import MODULES, run_module

MODULE = MODULES / "gpu_node_probe.py"


def probe(tmp_path: Path, **args) -> dict:
    return run_module(MODULE, tmp_path, args)


ROOT_ACCOUNT = {"user": "root", "group": "root", "home": "/root"}


def test_reports_missing_packages_and_the_accounts_as_they_are(tmp_path):
    shell = pwd.getpwnam("root").pw_shell
    out = probe(tmp_path, packages=["dpkg", "no-such-package-xyz"], shell=shell, **ROOT_ACCOUNT)
    assert out["changed"] is False
    assert out["missing_packages"] == ["no-such-package-xyz"]
    assert out["user"] == {"exists": True, "home": "/root", "shell": shell, "gid": 0}
    assert out["group"] == {"exists": True, "gid": 0}
    assert out["accounts_ok"] is True  # nothing for the group and user tasks to do
    facts = out["ansible_facts"]
    assert facts["gpu_node_container"] == out["container"] and out["container"]
    assert facts["gpu_node_in_container"] == (out["container"] != "none")


def test_an_account_with_another_shell_is_not_ok(tmp_path):
    out = probe(tmp_path, packages=[], shell="/no/such/shell", **ROOT_ACCOUNT)
    assert out["user"]["exists"] and out["accounts_ok"] is False


def test_host_packages_count_as_missing_only_outside_a_container(tmp_path):
    out = probe(
        tmp_path, packages=[], host_packages=["no-such-package-xyz"], shell="/bin/sh",
        **ROOT_ACCOUNT,
    )  # fmt: skip
    in_container = out["container"] != "none"
    assert out["missing_packages"] == ([] if in_container else ["no-such-package-xyz"])


def test_an_absent_user_and_group_read_as_absent(tmp_path):
    out = probe(
        tmp_path, packages=[], user="no-such-user-xyz", group="no-such-group-xyz",
        shell="/bin/sh", home="/",
    )  # fmt: skip
    assert out["user"] == {"exists": False} and out["group"] == {"exists": False}
    assert out["missing_packages"] == [] and out["accounts_ok"] is False
