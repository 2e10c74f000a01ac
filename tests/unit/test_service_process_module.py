"""The server probe module (plugins/modules/service_process.py), run as Ansible runs it, against
a systemctl that answers as systemd does and a /proc of our own."""

from __future__ import annotations

from pathlib import Path

import pytest
from module_runner import MODULES, run_module

MODULE = MODULES / "service_process.py"
RELEASE = "/opt/specdeploy/releases/0.16.0-abc"


def systemctl(tmp_path: Path, active: str, pid: int) -> Path:
    """A systemctl that says what systemd would for one unit."""
    script = tmp_path / "systemctl"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in is-active) echo {active}; [ {active} = active ];; '
        f"show) echo {pid};; *) exit 2;; esac\n"
    )
    script.chmod(0o755)
    return script


def probe(tmp_path: Path, active: str, pid: int, cmdline: bytes | None, check=False) -> dict:
    proc = tmp_path / "proc"
    if cmdline is not None:
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(cmdline)
    args = {
        "service": "vllm.service",
        "release_dir": RELEASE,
        "systemctl": str(systemctl(tmp_path, active, pid)),
        "proc": str(proc),
        "_ansible_check_mode": check,
    }
    return run_module(MODULE, tmp_path, args)


@pytest.mark.parametrize("check", [False, True])
def test_a_server_running_from_the_release_is_said_to(tmp_path, check) -> None:
    argv = f"{RELEASE}/venv/bin/python\0-m\0vllm.entrypoints.cli.main\0serve\0".encode()
    found = probe(tmp_path, "active", 4242, argv, check)
    assert found["changed"] is False
    assert (found["active"], found["main_pid"], found["runs_release_dir"]) == ("active", 4242, True)
    assert found["command_line"] == f"{RELEASE}/venv/bin/python -m vllm.entrypoints.cli.main serve"


def test_a_server_running_from_the_release_before_is_not(tmp_path) -> None:
    # a prefix of another release's name is not this release
    argv = f"{RELEASE}-old/venv/bin/python\0-m\0vllm\0".encode()
    found = probe(tmp_path, "active", 4242, argv)
    assert found["runs_release_dir"] is False


def test_an_unreadable_command_line_counts_as_another_release(tmp_path) -> None:
    assert probe(tmp_path, "active", 4242, None)["runs_release_dir"] is False


@pytest.mark.parametrize("state", ["inactive", "failed", "activating"])
def test_a_server_that_does_not_run_has_no_process_to_ask(tmp_path, state) -> None:
    found = probe(tmp_path, state, 0, None)
    assert (found["active"], found["main_pid"], found["runs_release_dir"]) == (state, 0, None)
