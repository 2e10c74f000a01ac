"""The test runner's census of Ansible runs (tests/callback_plugins/census.py, run_tests.py).

A real ansible-playbook run with the runner's environment appends one line that counts its
host-tasks by outcome; the runner adds a session's lines up and skips a line it cannot read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripts.run_tests import census_env, census_totals, top_actions

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Runs
      ansible.builtin.command: "true"
      changed_when: false
    - name: Skipped
      ansible.builtin.debug:
        msg: never
      when: false
    - name: Changes
      ansible.builtin.command: "true"
"""


def run_playbook(
    tmp_path: Path, census: Path, hosts: int, runner: bool = True
) -> subprocess.CompletedProcess[str]:
    inventory = {f"h{i}": {"ansible_connection": "local"} for i in range(hosts)}
    (tmp_path / "hosts.json").write_text(json.dumps({"all": {"hosts": inventory}}))
    (tmp_path / "play.yml").write_text(PLAY)
    env = census_env(census) | {
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    if not runner:
        del env["SPECDEPLOY_CENSUS"]
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def test_each_run_appends_its_host_tasks_and_the_runner_adds_them_up(tmp_path: Path) -> None:
    census = tmp_path / "census.jsonl"
    for hosts in (2, 1):
        run = run_playbook(tmp_path, census, hosts)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    first, second = (json.loads(line) for line in census.read_text().splitlines())
    assert first["playbook"] == "play.yml"
    assert (first["host_tasks"], first["ok"], first["skipped"], first["changed"]) == (6, 4, 2, 2)
    assert second["host_tasks"] == 3 and first["cpu_s"] > 0 and first["venv_builds"] == 0
    assert first["actions"] == {"ansible.builtin.command": 4}  # what ran; the skipped debug not
    with census.open("a") as handle:
        handle.write("not json\n")  # a run killed mid-line (SIGKILL) leaves such a line
    totals = census_totals(census)
    assert (totals["runs"], totals["host_tasks"], totals["skipped"]) == (2, 9, 3)
    assert totals["cpu_s"] == round(first["cpu_s"] + second["cpu_s"], 1)
    assert totals["actions"] == {"ansible.builtin.command": 6}
    sessions = {"a": {"ansible": totals}, "b": {"ansible": {"actions": {"x.y.files": 9}}}}
    assert top_actions(sessions) == [("x.y.files", 9), ("ansible.builtin.command", 6)]


def test_a_run_outside_the_runner_writes_nothing(tmp_path: Path) -> None:
    census = tmp_path / "census.jsonl"
    run = run_playbook(tmp_path, census, 1, runner=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert not census.exists()
    assert census_totals(census)["runs"] == 0
