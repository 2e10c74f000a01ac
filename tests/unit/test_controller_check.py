"""The plan play's controller-side checks run once per distinct input (issue 27 item 1).

Real ansible-playbook runs roles/validation/tasks/preflight.yml (the gates check and the
baseline knob check, both in the action plugin specdeploy.toolkit.preflight_inputs) on
three local hosts: two share their inventory values, the third has host_vars of its own. The
two that share get one run of each check between them; the third gets its own, with its own
verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GATES = {"min_mean_acceptance_length": 1.5, "per_position_floors": [], "min_speed_up": 1.0}


def run_play(tmp_path: Path, host_vars: dict[str, dict]) -> tuple[int, list[dict], str]:
    common = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "specdeploy_toolkit_dir": str(REPO),
        "specdeploy_release_gates": GATES,
        "specdeploy_speculative_enabled": True,
        "specdeploy_speculative_config": {"num_speculative_tokens": 3},
        "specdeploy_drafter_path": "/srv/models/drafter",
        "specdeploy_speed_up_waiver": "",
        "validation_concurrency": [1, 8],
        "validation_baseline_tps": 0,
        "validation_prompts_file": "",
    }
    hosts = {name: common | own for name, own in host_vars.items()}
    (tmp_path / "hosts.json").write_text(json.dumps({"gpu_nodes": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text(
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.include_tasks: {REPO}/roles/validation/tasks/preflight.yml\n"
    )
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    return run.returncode, plays[0]["tasks"], run.stdout + run.stderr


def results(tasks: list[dict], name_start: str) -> dict[str, dict]:
    """Each host's result of the one task whose name starts so. The JSON callback lists a task
    once for all hosts under the linear strategy and once per host under any other (mitogen_linear,
    ansible.cfg), with the same task id."""
    entries = [t for t in tasks if t["task"]["name"].startswith(name_start)]
    assert len({t["task"]["id"] for t in entries}) == 1, [t["task"]["name"] for t in entries]
    return {host: result for t in entries for host, result in t["hosts"].items()}


def test_nodes_that_share_inputs_share_one_check_and_a_node_that_differs_gets_its_own(
    tmp_path: Path,
) -> None:
    bad = dict(GATES, per_position_floors=[0.5, 0.4, 0.3, 0.2])  # 4 floors for k=3
    rc, tasks, out = run_play(
        tmp_path, {"n1": {}, "n2": {}, "n3": {"specdeploy_release_gates": bad}}
    )
    assert rc == 2, out[-3000:]  # n3's gates fail; n1 and n2 go on
    checks = results(tasks, "Check the gates")
    runs = {host: checks[host]["runs"] for host in checks}
    # one run for n1 and n2 together (whichever came first), one of its own for n3
    assert sorted(runs[h]["gates"]["cached"] for h in ("n1", "n2")) == [False, True]
    assert runs["n3"]["gates"]["cached"] is False
    assert runs["n1"]["gates"]["rc"] == runs["n2"]["gates"]["rc"] == 0
    assert runs["n3"]["gates"]["rc"] == 2
    assert "failed" not in checks["n1"] and "failed" not in checks["n2"]
    assert checks["n3"]["failed"] is True
    assert "per_position_floors" in checks["n3"]["msg"]
    assert "n3" in checks["n3"]["msg"] and "\n" not in checks["n3"]["msg"]
    # the baseline knob: all three share its inputs (n3's gates differ, not its knob)
    assert sorted(runs[h]["baseline"]["cached"] for h in runs) == [False, True, True]


def test_a_node_with_its_own_baseline_knob_gets_its_own_verdict(tmp_path: Path) -> None:
    rc, tasks, out = run_play(
        tmp_path,
        {"n1": {}, "n2": {"validation_baseline_tps": {"1": 60.0, "8": 400.0}},
         "n3": {"validation_baseline_tps": {"1": 60.0}}},
    )  # fmt: skip
    assert rc == 2, out[-3000:]
    checks = results(tasks, "Check the gates")
    knob = {host: checks[host]["runs"]["baseline"] for host in checks}
    assert [knob[h]["cached"] for h in ("n1", "n2", "n3")] == [False, False, False]
    assert knob["n1"]["rc"] == 0 and knob["n2"]["rc"] == 0
    assert knob["n3"]["rc"] != 0  # a level without a figure: refused for n3 alone
    assert checks["n3"]["failed"] is True and "validation_baseline_tps" in checks["n3"]["msg"]
    assert "failed" not in checks["n1"] and "failed" not in checks["n2"]


def test_a_command_that_records_runs_every_time_and_not_in_check_mode(tmp_path: Path) -> None:
    """once_per_input: false (the history's record): two asks, two runs; --check: none."""
    log = tmp_path / "records.txt"
    append = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('x')"]
    task = "    - specdeploy.toolkit.controller_check:\n        argv: {argv}\n{once}"
    tasks = "".join(
        task.format(argv=json.dumps(append), once=once)
        for once in ("        once_per_input: false\n",) * 2 + ("",) * 2
    )
    (tmp_path / "hosts.json").write_text(json.dumps({"all": {"hosts": {"one": {}}}}))
    (tmp_path / "play.yml").write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}")
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    base = [str(BIN / "ansible-playbook"), "-i", "hosts.json", "-c", "local", "play.yml"]
    for extra in (["--check"], []):
        run = subprocess.run(
            base + extra, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )
        assert run.returncode == 0, run.stdout + run.stderr
        if extra:  # check mode: the recording runs skipped, the read-only ones ran once
            assert log.read_text() == "x"
            log.unlink()
    # two recording runs, then the two read-only asks answered by one run
    assert log.read_text() == "xxx"


def test_creates_skips_the_command_once_its_file_exists(tmp_path: Path) -> None:
    """creates (the toolkit's archives): the first ask makes the file (changed), the second
    finds it and runs nothing (not changed), as ansible.builtin.command does."""
    made, runs = tmp_path / "archive.tar", tmp_path / "runs.txt"
    write = [sys.executable, "-c", f"open({str(runs)!r}, 'a').write('x'); open({str(made)!r}, 'w')"]
    task = (
        "    - specdeploy.toolkit.controller_check:\n"
        f"        argv: {json.dumps(write)}\n        creates: {made}\n"
        "        once_per_input: false\n"
    )
    (tmp_path / "hosts.json").write_text(json.dumps({"all": {"hosts": {"one": {}}}}))
    (tmp_path / "play.yml").write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{task * 2}")
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "-c", "local", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    tasks = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"][0]
    first, second = (t["hosts"]["one"] for t in tasks["tasks"])
    assert runs.read_text() == "x"
    assert first["changed"] is True and first["rc"] == 0
    assert second["changed"] is False and "exists" in second["msg"]


def test_a_toolkit_tool_runs_with_the_controllers_python_in_the_toolkit(tmp_path: Path) -> None:
    """tool + args (no argv, no chdir): the toolkit's module runs with the Python that runs the
    playbook, in the collection's root (run from elsewhere); argv and tool together are refused
    by name."""
    tasks = (
        "    - specdeploy.toolkit.controller_check:\n"
        "        tool: specdeploy.controller.schedule\n"
        "        args: [acceptance-concurrency, '[[1, 3, 1], [4, 16, 3], [17, 1024, 1]]']\n"
        "      register: answer\n"
        "    - specdeploy.toolkit.controller_check:\n"
        "        tool: specdeploy.controller.schedule\n"
        "        argv: [python3]\n"
        "      ignore_errors: true\n"
    )
    (tmp_path / "hosts.json").write_text(json.dumps({"all": {"hosts": {"one": {}}}}))
    (tmp_path / "play.yml").write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}")
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "-c", "local", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    tasks = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"][0]
    ran, both = (t["hosts"]["one"] for t in tasks["tasks"])
    assert ran["rc"] == 0, ran
    assert os.path.realpath(ran["cmd"][0]) == os.path.realpath(sys.executable)
    assert ran["cmd"][1:3] == ["-m", "specdeploy.controller.schedule"]
    assert ran["stdout"].strip() == "4", ran  # the smallest batch size that drafts k=3
    assert both["failed"] is True and "argv or tool" in both["msg"]
