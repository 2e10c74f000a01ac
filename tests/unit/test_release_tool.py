"""specdeploy.toolkit.release_tool (plugins/action/release_tool.py) under real ansible-playbook
on a local connection: the tool runs with the named release's venv Python and with the release's
toolkit (not the controller's) on PYTHONPATH; the deployed release is the default; a tool outside
the toolkit's node package is refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def fake_release(root: Path, release: str) -> None:
    base = root / "releases" / release
    (base / "venv" / "bin").mkdir(parents=True)
    (base / "venv" / "bin" / "python").symlink_to(sys.executable)
    # a toolkit of its own: found only through the PYTHONPATH the action sets
    package = base / "toolkit" / "specdeploy" / "node"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "where.py").write_text("import sys\nprint(__file__, sys.argv[1:])\n")


def test_the_tool_runs_with_the_releases_python_and_toolkit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for release in ("r1", "r2"):
        fake_release(root, release)
    tasks = (
        "    - specdeploy.toolkit.release_tool:\n"
        "        tool: specdeploy.node.where\n"
        "        args: [--json]\n"
        "    - specdeploy.toolkit.release_tool:\n"
        "        release: r2\n"
        "        tool: specdeploy.node.where\n"
        "    - specdeploy.toolkit.release_tool:\n"
        "        tool: json.tool\n"
        "      ignore_errors: true\n"
    )
    inventory = {
        "all": {
            "hosts": {"one": {}},
            "vars": {
                "ansible_python_interpreter": sys.executable,
                "specdeploy_root": str(root),
                "specdeploy_release": {"id": "r1"},
            },
        }
    }
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "-c", "local", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    deployed, named, refused = (t["hosts"]["one"] for t in plays[0]["tasks"])
    where = root / "releases" / "{}" / "toolkit" / "specdeploy" / "node" / "where.py"
    assert deployed["stdout"] == f"{where.as_posix().format('r1')} ['--json']", deployed
    assert deployed["cmd"][0] == str(root / "releases/r1/venv/bin/python")
    assert named["stdout"] == f"{where.as_posix().format('r2')} []", named
    assert named["cmd"][0] == str(root / "releases/r2/venv/bin/python")
    assert refused["failed"] is True and "not a node tool of the toolkit" in refused["msg"]
