"""Where `make schedule` puts the validation timer and what it runs
(plugins/plugin_utils/schedule_plan.py), and the action that sets it as host facts
(plugins/action/schedule_plan.py), through real ansible-playbook with the unit templates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.schedule_plan import plan

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMMON = {"playbook_dir": "/repo/playbooks", "schedule_unit": "specdeploy-validate"}


def test_on_the_controller_the_repository_and_its_venv_serve_in_place():
    facts = plan(
        COMMON
        | {
            "ansible_connection": "local",
            "ansible_playbook_python": "/repo/.venv/bin/python",
            "ansible_inventory_sources": ["/repo/inventory/production/hosts.yml", "/other"],
            "ansible_user": "ignored",
        },
        "alice",
    )
    assert facts["schedule_local"] is True
    assert facts["schedule_toolkit_path"] == facts["schedule_repo"] == "/repo"
    assert facts["schedule_venv_path"] == "/repo/.venv"
    assert facts["schedule_inventory_path"] == "/repo/inventory/production/hosts.yml"
    assert facts["schedule_report_root_path"] == "/repo/reports"
    assert facts["schedule_user_name"] == "alice"
    assert facts["schedule_exec_argv"] == [
        "/repo/.venv/bin/ansible-playbook", "-i", "/repo/inventory/production/hosts.yml",
        "/repo/playbooks/validate.yml", "-e", "validation_report_root=/repo/reports",
    ]  # fmt: skip
    assert (facts["schedule_calendar"], facts["schedule_active_sec"]) == ("*-*-* 03:17:00", 0)
    assert (facts["schedule_randomized_delay"], facts["schedule_timeout_s_value"]) == (600, 3600)
    assert facts["schedule_on_failure_unit"] == ""


def test_another_host_gets_a_copy_under_the_base_and_needs_an_inventory():
    facts = plan(COMMON | {"ansible_connection": "ssh", "ansible_user": "ops"}, "alice")
    assert facts["schedule_local"] is False
    assert facts["schedule_repo"] == "/repo"
    assert facts["schedule_toolkit_path"] == "/opt/specdeploy-controller/toolkit"
    assert facts["schedule_venv_path"] == "/opt/specdeploy-controller/venv"
    assert facts["schedule_inventory_path"] == ""  # the play's check refuses it
    assert facts["schedule_user_name"] == "ops"
    assert plan(COMMON, "alice")["schedule_user_name"] == "root"  # no connection, no user
    knobs = COMMON | {
        "schedule_base": "/srv/sched",
        "schedule_inventory": "/srv/inv.yml",
        "schedule_user": "svc",
        "schedule_validate_args": ["-e", "validation_repeats=3"],
    }
    facts = plan(knobs, "alice")
    assert facts["schedule_exec_argv"] == [
        "/srv/sched/venv/bin/ansible-playbook", "-i", "/srv/inv.yml",
        "/srv/sched/toolkit/playbooks/validate.yml", "-e",
        "validation_report_root=/srv/sched/reports", "-e", "validation_repeats=3",
    ]  # fmt: skip
    assert facts["schedule_notes"] == [
        "runs: " + " ".join(facts["schedule_exec_argv"]),
        "as svc; reports and history: /srv/sched/reports",
        "logs: journalctl -u specdeploy-validate.service;"
        " now: systemctl start specdeploy-validate.service",
        "remove: make unschedule",
    ]


def test_the_action_sets_the_facts_the_unit_templates_read(tmp_path):
    hosts = {
        "all": {
            "hosts": {
                "sched1": {
                    "ansible_host": "192.0.2.1",  # never contacted
                    "schedule_inventory": "/srv/inv.yml",
                    "schedule_on_active_sec": 5,
                    "schedule_validate_args": ["-e", "x=$HOME a%b"],
                }
            }
        }
    }
    (tmp_path / "hosts.json").write_text(json.dumps(hosts))
    service = REPO / "templates" / "specdeploy-validate.service.j2"
    timer = REPO / "templates" / "specdeploy-validate.timer.j2"
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  vars:\n    schedule_unit: specdeploy-validate\n"
        "  tasks:\n    - specdeploy.toolkit.schedule_plan:\n"
        "    - ansible.builtin.debug:\n        msg:\n"
        f"          service: \"{{{{ lookup('ansible.builtin.template', '{service}') }}}}\"\n"
        f"          timer: \"{{{{ lookup('ansible.builtin.template', '{timer}') }}}}\"\n"
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
    assert run.returncode == 0, run.stdout + run.stderr
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    planned = plays[0]["tasks"][0]["hosts"]["sched1"]
    assert planned["changed"] is False and planned["ansible_facts"]["schedule_local"] is False
    # the remote venv gets what this controller's ansible.cfg needs, at this controller's versions
    assert planned["ansible_facts"]["schedule_venv_requirements"] == [
        f"ansible-core=={metadata.version('ansible-core')}",
        f"mitogen=={metadata.version('mitogen')}",
    ]
    units = plays[0]["tasks"][1]["hosts"]["sched1"]["msg"]
    assert (
        "ExecStart=/opt/specdeploy-controller/venv/bin/ansible-playbook -i /srv/inv.yml"
        " /opt/specdeploy-controller/toolkit/playbooks/validate.yml"
        " -e validation_report_root=/opt/specdeploy-controller/reports -e 'x=$$HOME a%%b'\n"
    ) in units["service"]
    assert "User=root\n" in units["service"] and "TimeoutStartSec=3600\n" in units["service"]
    assert "OnActiveSec=5\n" in units["timer"] and "RandomizedDelaySec=600\n" in units["timer"]
