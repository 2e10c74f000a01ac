"""The floor everything stands on: targets, the knob documentation, the shipped SSH settings."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
REQUIRED_TARGETS = [
    "setup",
    "demo",
    "test",
    "lint",
    "bench",
    "deploy",
    "rollback",
    "validate",
    "status",
    "schedule",
    "sandbox-up",
    "sandbox-down",
    "clean",
]


def test_make_help_lists_every_target_with_one_line() -> None:
    out = subprocess.run(
        ["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    listed = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    missing = [t for t in REQUIRED_TARGETS if t not in listed]
    assert not missing, f"make help does not list {missing}"
    assert all(len(listed[t].split(None, 1)) == 2 for t in REQUIRED_TARGETS)


def test_production_inventory_documents_every_knob_of_every_role(capsys) -> None:
    """The section is generated from the roles (scripts/knobs_doc.py): stale, this
    fails and names the missing knob; `python -m scripts.knobs_doc --write`."""
    from scripts import knobs_doc

    rc = knobs_doc.main(["--check"])
    assert rc == 0, capsys.readouterr().err
    documented = (REPO / "inventory/production/group_vars/gpu_nodes.yml").read_text()
    for defaults in REPO.glob("roles/*/defaults/main.yml"):
        for knob in yaml.safe_load(defaults.read_text()) or {}:
            assert re.search(rf"^# {re.escape(knob)}:", documented, re.M), (defaults, knob)


def test_every_knob_has_an_argument_spec() -> None:
    defaults = yaml.safe_load((REPO / "roles/specdeploy/defaults/main.yml").read_text())
    specs = yaml.safe_load((REPO / "roles/specdeploy/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"]["knobs"]["options"]
    assert sorted(set(defaults) - set(options)) == []
    assert sorted(set(options) - set(defaults)) == []


def _includes_a_role(node: object) -> bool:
    if isinstance(node, dict):
        if any(key.endswith(("include_role", "import_role")) for key in node):
            return True
        return any(_includes_a_role(value) for value in node.values())
    return isinstance(node, list) and any(_includes_a_role(item) for item in node)


def test_every_playbook_that_uses_a_role_checks_the_knobs_once_first() -> None:
    """The specdeploy role has no `main` spec (a role dependency would check the knobs again in
    every play of a run); each playbook imports its `knobs` entry point first instead."""
    specs = yaml.safe_load((REPO / "roles/specdeploy/meta/argument_specs.yml").read_text())
    assert "main" not in specs["argument_specs"]
    knobs = {"name": "specdeploy", "tasks_from": "knobs"}
    # rollout.yml and downtime.yml are imported by deploy.yml after plan.yml's check
    only_imported = {"rollout.yml", "downtime.yml"}
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        if path.name in only_imported:
            continue
        plays = [p for p in yaml.safe_load(path.read_text()) if "hosts" in p]
        uses = [p for p in plays if p.get("roles") or _includes_a_role(p)]
        if not uses:
            continue
        first = uses[0]
        tasks = (first.get("pre_tasks") or []) + (first.get("tasks") or [])
        checks = [t for t in tasks if t.get("ansible.builtin.import_role") == knobs]
        assert checks and tasks[0] is checks[0], f"{path.name}: the knobs are not checked first"
        assert "always" in checks[0].get("tags", []), path.name  # --tags runs it too


def test_shipped_ssh_settings_keep_host_key_checking_on() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert config.getboolean("defaults", "host_key_checking")
    for path in REPO.glob("inventory/**/*.yml"):
        text = path.read_text()
        assert "StrictHostKeyChecking=no" not in text, path
        assert "host_key_checking: false" not in text, path


def test_production_inventory_targets_no_real_address() -> None:
    hosts = yaml.safe_load((REPO / "inventory/production/hosts.yml").read_text())
    for host in hosts["all"]["children"]["gpu_nodes"]["hosts"].values():
        assert host["ansible_host"].endswith(".invalid"), "placeholder must not resolve"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert "make test" in (REPO / ".ci/run").read_text()
    assert "make test" in (REPO / "README.md").read_text()
