"""specdeploy.toolkit.toolkit_archive (plugins/action/toolkit_archive.py) under real
ansible-playbook: it packs the part into the archive roles/vllm_release unpacks
(<vllm_release_build_dir>/<toolkit|standin>-<fingerprint>.tar), once: an archive that exists is
not packed again; check mode packs nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def play(tmp_path: Path, *options: str) -> list[dict]:
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "specdeploy_toolkit_dir": str(REPO),
        "specdeploy_release": {"standin_sha256": "0123456789abcdef" + "9" * 48},
        "vllm_release_build_dir": str(tmp_path / "build"),
    }
    (tmp_path / "hosts.json").write_text(json.dumps({"all": {"hosts": {"one": host}}}))
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - specdeploy.toolkit.toolkit_archive: {part: standin}\n"
        "    - specdeploy.toolkit.toolkit_archive: {part: nothing}\n"
        "      ignore_errors: true\n"
    )
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml", *options],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    return [t["hosts"]["one"] for t in plays[0]["tasks"]]


def test_it_packs_the_part_once_and_nothing_in_check_mode(tmp_path: Path) -> None:
    archive = tmp_path / "build" / "standin-0123456789abcdef.tar"
    (checked, _) = play(tmp_path, "--check")
    assert checked.get("skipped") and not archive.exists(), checked
    (packed, refused) = play(tmp_path)
    assert packed["changed"] and packed["rc"] == 0 and packed["path"] == str(archive), packed
    with tarfile.open(archive) as tar:
        assert "tests/standin/vllm_standin.py" in tar.getnames()
    assert refused["failed"] and "part must be one of release, standin" in refused["msg"]
    (again, _) = play(tmp_path)
    assert not again["changed"] and "rc" not in again and again["path"] == str(archive), again
