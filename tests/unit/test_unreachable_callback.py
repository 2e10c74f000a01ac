"""The unreachable callback (plugins/callback/unreachable.py): a node lost mid-run gets the
toolkit's own words after the recap. A real ansible-playbook run with the repository's
ansible.cfg against a host whose SSH port is closed (on loopback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.unreachable import Lost, report

ROOT = Path(__file__).resolve().parents[2]

PLAY = """\
- name: Build, patch, switch and check the release (canary first, then stages)
  hosts: lost
  gather_facts: false
  tasks:
    - name: Take the node's deploy lock
      ansible.builtin.command: "true"
"""


def closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound, never listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_play(tmp_path, play: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    lost:\n"
        f"      ansible_host: 127.0.0.1\n      ansible_port: {closed_port()}\n"
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env["ANSIBLE_SSH_ARGS"] = "-o ConnectTimeout=5"  # no ControlMaster socket left behind
    env["ANSIBLE_HOST_KEY_CHECKING"] = "False"
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_node_lost_mid_rollout_is_said_after_the_recap(tmp_path):
    run = run_play(tmp_path, PLAY)
    assert run.returncode == 4, run.stdout + run.stderr  # Ansible's exit code: unreachable
    said = run.stderr[run.stderr.find("specdeploy: lost") :]
    assert said.startswith(
        "specdeploy: lost became UNREACHABLE during 'Take the node's deploy lock' (play 'Build, "
        "patch, switch and check the release (canary first, then stages)'; "
    ), run.stderr
    assert "the rollout stopped at this node's stage" in said
    assert "run the same command again" in said
    assert run.stdout.index("PLAY RECAP") >= 0  # (stdout: Ansible's own lines, as before)


def test_a_play_that_handles_unreachable_nodes_gets_no_paragraph(tmp_path):
    """make status lists an unreachable node in its table (ignore_unreachable): nothing stopped."""
    task = "      ansible.builtin.command:"
    handled = PLAY.replace(task, "      ignore_unreachable: true\n" + task)
    run = run_play(tmp_path, handled)
    assert "ignore_unreachable: true" in handled
    assert "UNREACHABLE" in run.stdout  # Ansible's own line, as before
    assert "specdeploy: lost became UNREACHABLE" not in run.stderr, run.stderr


def test_one_paragraph_per_host_and_an_empty_cause_named():
    text = report(
        [
            Lost("gpu-01", "Provision the GPU nodes", "Lay out the directories", ""),
            Lost("gpu-02", "Build, patch, switch and check the release (x)", "Restart", "a\n b"),
        ]
    )
    first, second = text.splitlines()
    assert first.startswith("specdeploy: gpu-01 became UNREACHABLE during 'Lay out")
    assert "Ansible gave no cause" in first and "the run stopped for this node" in first
    assert "(play 'Build, patch, switch and check the release (x)'; a b)" in second
    assert "the rollout stopped at this node's stage" in second
