"""The repository is the Ansible collection specdeploy.toolkit: it builds into a tarball that
installs with ansible-galaxy, and ansible-doc documents every module from the installed copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))


def ansible(tool: str, *args: str, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [str(BIN / tool), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_built_collection_installs_and_documents_every_module(tmp_path: Path) -> None:
    # Another directory and an empty configuration: only what was installed can be found.
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\n")
    installed = tmp_path / "collections"
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_COLLECTIONS_PATH": str(installed),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
    }
    ansible(
        "ansible-galaxy", "collection", "build", "--output-path", str(tmp_path), cwd=REPO, env=env
    )
    tarball = tmp_path / f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
    with tarfile.open(tarball) as tar:
        tops = {name.split("/")[0] for name in tar.getnames()}
    # The operator's tarball: no test bed, no maintainer tools, no link of the checkout to itself.
    assert {"plugins", "roles", "playbooks", "meta"} <= tops
    assert not tops & {"tests", "scripts", "collections", ".venv", ".git"}

    ansible(
        "ansible-galaxy", "collection", "install", "--no-deps", "-p", str(installed),
        str(tarball), cwd=tmp_path, env=env,
    )  # fmt: skip
    listed = json.loads(ansible("ansible-doc", "-l", "--json", FQCN, cwd=tmp_path, env=env))
    assert sorted(listed) == [f"{FQCN}.{name}" for name in MODULES]
    for name in MODULES:
        doc = json.loads(ansible("ansible-doc", "--json", f"{FQCN}.{name}", cwd=tmp_path, env=env))
        entry = doc[f"{FQCN}.{name}"]
        assert entry["doc"]["short_description"] and entry["examples"].strip(), name
        assert str(installed) in entry["doc"]["filename"], name
