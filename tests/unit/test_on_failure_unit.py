"""The vLLM unit's OnFailure= hook, rendered by real Ansible with the deploy's templates and
checked with `systemd-analyze verify` (the firing itself, on a sandbox node, is in
tests/integration/test_on_failure.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]


def ansible_playbook(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
    )


def render_unit(tmp_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """playbooks/render-unit.yml into ``out``, the node's paths under ``tmp_path``."""
    (tmp_path / "etc").mkdir(exist_ok=True)
    return ansible_playbook(
        "playbooks/render-unit.yml",
        "-e",
        f"render_dir={out}",
        "-e",
        f"specdeploy_root={tmp_path}/root",
        "-e",
        f"specdeploy_config_dir={tmp_path}/etc",
        *extra,
    )


def render_hook(tmp_path: Path, **knobs: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    play = [
        {
            "name": "Render the failure hook unit",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
            "roles": ["specdeploy"],
            "tasks": [
                {
                    "name": "Render",
                    "ansible.builtin.template": {
                        "src": str(ROOT / "templates" / "vllm-on-failure@.service.j2"),
                        "dest": str(tmp_path / "{{ specdeploy_service_name }}-on-failure@.service"),
                        "mode": "0644",
                    },
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    extra = ["-e", json.dumps(knobs)] if knobs else []
    run = ansible_playbook("-i", "localhost,", str(tmp_path / "play.yml"), *extra)
    assert run.returncode == 0, run.stdout[-3000:]
    (hook,) = tmp_path.glob("*-on-failure@.service")
    return hook


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze not installed (Debian package systemd)")
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )


def test_unit_points_on_failure_at_the_hook(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    run = render_unit(tmp_path, out)
    assert run.returncode == 0, run.stdout[-3000:]
    unit = (out / "vllm.service").read_text()
    unit_section = unit.split("[Service]")[0]
    assert "OnFailure=vllm-on-failure@%n.service" in unit_section.splitlines()
    # The hook exists under that name and systemd accepts it, instantiated for the unit.
    hook = render_hook(tmp_path)
    assert hook.name == "vllm-on-failure@.service"
    instance = tmp_path / "vllm-on-failure@vllm.service.service"
    instance.write_text(hook.read_text())
    result = verify(instance)
    assert result.returncode == 0, result.stderr
    assert "ExecStart=/bin/echo" in hook.read_text()


def test_hook_command_is_a_knob_and_verify_rejects_a_bad_one(tmp_path):
    good = render_hook(tmp_path / "a", specdeploy_on_failure_command="/usr/bin/logger -t pager %i")
    assert "ExecStart=/usr/bin/logger -t pager %i" in good.read_text().splitlines()
    bad = render_hook(tmp_path / "b", specdeploy_on_failure_command="relative-command %i")
    instance = tmp_path / "vllm-on-failure@vllm.service.service"
    instance.write_text(bad.read_text())
    result = verify(instance)
    assert result.returncode != 0 and "relative-command" in result.stderr
