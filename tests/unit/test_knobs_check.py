"""Unknown knobs are refused, and the docs name only knobs that exist (issue 28: a typo in
group_vars was ignored silently; docs/advisor.md named specdeploy_num_speculative_tokens)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.controller import knobs_check

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def known() -> tuple[set[str], list[str]]:
    return knobs_check.known_names(REPO)


def inventory(tmp_path: Path, group_vars: str) -> Path:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text(group_vars)
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(
        "gpu_nodes:\n  hosts:\n"
        "    gpu-01: {ansible_host: 127.0.0.1, ansible_connection: local}\n"
        "    gpu-02: {ansible_host: 127.0.0.1, ansible_connection: local}\n"
    )
    return hosts


def test_a_typo_names_the_closest_known_knob(known) -> None:
    names, documented = known
    hostvars = {
        "gpu-01": {"specdeploy_speculative_confg": {}, "validation_concurrency": [1]},
        "gpu-02": {"specdeploy_speculative_confg": {}, "ansible_host": "127.0.0.1"},
    }
    found = knobs_check.unknown_knobs(hostvars, names, documented, knobs_check.prefixes(REPO))
    assert found == [
        ("specdeploy_speculative_confg", ["gpu-01", "gpu-02"], "specdeploy_speculative_config")
    ]
    assert knobs_check.message(*found[0]) == (
        "specdeploy_speculative_confg (set for gpu-01, gpu-02): no such knob; "
        "did you mean specdeploy_speculative_config?"
    )


def test_every_knob_a_role_documents_and_the_playbook_knobs_are_known(known) -> None:
    names, documented = known
    assert set(documented) <= names
    for playbook_knob in ("rollback_to", "advise_levels", "validation_history_db"):
        assert playbook_knob in names


def knobs_check_cli(source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.knobs_check", "--inventory", str(source)],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip


def test_the_cli_reads_the_inventory_as_ansible_does(tmp_path) -> None:
    hosts = inventory(tmp_path, "validation_concurency: [1, 8]\nspecdeploy_port: 8000\n")
    proc = knobs_check_cli(hosts)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "knobs-check: error: validation_concurency (set for gpu-01, gpu-02): no such knob; "
        "did you mean validation_concurrency?"
    ]


def test_an_inventory_that_cannot_be_parsed_is_one_line(tmp_path) -> None:
    broken = tmp_path / "hosts.yml"
    broken.write_text("all: {hosts: [\n")
    proc = knobs_check_cli(broken)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        f"knobs-check: error: --inventory {broken}: Unable to parse {broken} as an inventory source"
    ]


def run_preflight_knobs(tmp_path: Path, hosts: Path) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: preflight, tasks_from: inputs}\n"
    )
    env = os.environ | {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(hosts), str(play),
         "-e", f"specdeploy_toolkit_dir={REPO}"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False,
    )  # fmt: skip


def test_the_preflight_refuses_a_typo_in_group_vars_before_anything_changes(tmp_path) -> None:
    """The deploy's preflight (roles/preflight tasks/inputs.yml: the action preflight_inputs),
    run by real Ansible: the typo fails every host with one line naming the closest knob."""
    bad = run_preflight_knobs(
        tmp_path / "bad", inventory(_mk(tmp_path / "bad"), "specdeploy_served_model_nme: m\n")
    )
    assert bad.returncode != 0
    assert (
        "specdeploy_served_model_nme (set for gpu-01, gpu-02): no such knob; did you mean "
        "specdeploy_served_model_name?"
    ) in bad.stdout, bad.stdout[-3000:]
    good = run_preflight_knobs(
        tmp_path / "good", inventory(_mk(tmp_path / "good"), "specdeploy_served_model_name: m\n")
    )
    assert good.returncode == 0, good.stdout[-3000:]


def _mk(path: Path) -> Path:
    path.mkdir()
    return path


_PREFIXES = "|".join(knobs_check.prefixes(REPO))
KNOB_IN_DOCS = re.compile(rf"`(?:-e )?((?:{_PREFIXES})_[a-z0-9_]+)")


@pytest.mark.parametrize(
    "doc",
    sorted(
        p.relative_to(REPO).as_posix() for p in [*(REPO / "docs").glob("*.md"), REPO / "README.md"]
    ),
)
def test_the_docs_name_only_knobs_that_exist(doc: str, known, metrics) -> None:
    names, _ = known
    named = set(KNOB_IN_DOCS.findall((REPO / doc).read_text(encoding="utf-8")))
    # metric names share the prefix (`specdeploy_validation_passed`, `specdeploy_last_..._*`)
    named = {n for n in named if not any(m.startswith(n) for m in metrics)}
    assert sorted(named - names) == []


@pytest.fixture(scope="module")
def metrics() -> set[str]:
    """Every metric family the validation textfile exports."""
    from fleet_history import fleet

    from specdeploy.node.validation.textfile import prom_textfile

    return set(re.findall(r"^# TYPE (\S+)", prom_textfile(fleet()), re.M))
