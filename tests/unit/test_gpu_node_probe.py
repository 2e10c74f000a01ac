"""The provisioning's read-only node probe (roles/gpu_node/library/gpu_node_probe.py).

Run as Ansible runs a module; on this machine (Debian packages, root and its group exist).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "roles" / "gpu_node" / "library" / "gpu_node_probe.py"


def probe(tmp_path: Path, **args) -> dict:
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    result = subprocess.run(
        [sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


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
