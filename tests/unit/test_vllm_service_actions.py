"""The actions and filters roles/vllm_service reads its variables through (issue 25: no programs
in Jinja): the steady check's options (plugin_utils/steady_args.py), the balancer's drain and
undrain (plugin_utils/balancer.py and the action specdeploy.toolkit.balancer under real
ansible-playbook), the activation's filters (filter/service_activation.py), the on-failure hook
(plugin_utils/service_files.py hook_file) and start_progress's options from a release id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.action.start_progress import (
    ActionModule as StartProgress,
)
from ansible_collections.specdeploy.toolkit.plugins.filter import service_activation
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import (
    balancer,
    service_files,
    steady_args,
)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RELEASE = {
    "id": "0.16.0-abc",
    "engine": "vllm",
    "python": "/opt/s/releases/0.16.0-abc/venv/bin/python",
    "venv_dir": "/opt/s/releases/0.16.0-abc/venv",
    "standin_dir": "/opt/s/standin/f00",
    "cache_marker": "/var/cache/s/fp/.complete",
}


SMOKE_ARGV = [
    "/opt/s/releases/0.16.0-abc/venv/bin/python", "-m", "specdeploy.node.validation.check",
    "smoke", "--base-url", "http://127.0.0.1:8000", "--served-model-name", "kimi",
    "--request-timeout", "20", "--api-key-file", "/etc/s/vllm.api-key",
    "--release", "0.16.0-abc", "--json",
]  # fmt: skip


def steady_knobs(**changes) -> dict:
    return {
        "specdeploy_root": "/opt/s",
        "specdeploy_local_url": "http://127.0.0.1:8000",
        "specdeploy_served_model_name": "kimi",
        "specdeploy_api_key_file": "/etc/s/vllm.api-key",
        "specdeploy_release": RELEASE,
        "specdeploy_service_name": "vllm",
        "specdeploy_server_standin": False,
        "specdeploy_keep_releases": 3,
        "vllm_service_secret_files": [{"path": "/etc/s/vllm.secrets.env", "mode": "0600"}],
        "vllm_service_probe_timeout_s": 20,
        "vllm_service_action": "deploy",
    } | changes


def test_the_steady_options_are_the_ones_the_task_spelled_out() -> None:
    files = [{"path": "/etc/systemd/system/vllm.service", "mode": "0644", "content": "x"}]
    args = steady_args.module_args(steady_knobs(), files)
    python = "/opt/s/releases/0.16.0-abc/venv/bin/python"
    assert args == {
        "root": "/opt/s",
        "release_id": "0.16.0-abc",
        "service": "vllm",
        "files": files,
        "secret_files": [{"path": "/etc/s/vllm.secrets.env", "mode": "0600"}],
        "present": ["/var/cache/s/fp/.complete", "/opt/s/releases/0.16.0-abc/venv/bin/vllm"],
        "keep_releases": 3,
        "smoke_argv": SMOKE_ARGV,
        "smoke_environment": {"PYTHONPATH": "/opt/s/releases/0.16.0-abc/toolkit"},
        "smoke_timeout_s": 80.0,
        "downtime_action": "deploy",
    }
    # the sandbox's stand-in: its script is the server's file that must exist
    standin = steady_args.module_args(steady_knobs(specdeploy_server_standin=True), files)
    assert standin["present"][1:] == [python, "/opt/s/standin/f00/tests/standin/vllm_standin.py"]


def ran(rc: int, kind: str = "haproxy", message: str = "out of rotation") -> dict:
    said = json.dumps({"ok": rc == 0, "kind": kind, "message": message})
    return {"rc": rc, "stdout": said + "\n", "stderr": ""}


def test_a_drain_says_what_it_did_and_fails_when_the_balancer_refused() -> None:
    done = balancer.outcome("drain", ran(0), "node1")
    assert done == {"rc": 0, "kind": "haproxy", "changed": True, "drained": True,
                    "failed": False, "msg": "out of rotation"}  # fmt: skip
    none = balancer.outcome("drain", ran(0, "none", "drain skipped"), "node1")
    assert (none["changed"], none["drained"], none["failed"]) == (False, False, False)
    refused = balancer.outcome("drain", ran(1, message="last server in rotation"), "node1")
    assert refused["failed"] and not refused["changed"]
    assert refused["msg"] == (
        "could not take node1 out of the balancer's rotation, so it was not restarted:"
        " last server in rotation"
    )
    # a command that could not even start prints no JSON: its error output is the message
    crashed = balancer.outcome("drain", {"rc": 2, "stdout": "", "stderr": "boom\n"}, "n")
    assert crashed["failed"] and crashed["msg"].endswith("restarted: boom")


def test_an_undrain_that_failed_fails_only_when_it_must_succeed() -> None:
    back = balancer.outcome("undrain", ran(0, message="back in rotation"), "n1", "vllm", "n1")
    assert (back["changed"], back["failed"], back["msg"]) == (True, False, "back in rotation")
    failed = balancer.outcome("undrain", ran(1, message="socket gone"), "n1", "vllm", "n1")
    assert failed["failed"] and not failed["changed"]
    assert failed["msg"] == (
        "n1 serves and passed its checks but STAYS OUT OF THE BALANCER'S ROTATION (drained):"
        " socket gone. Put it back by hand (HAProxy: `set server vllm/n1 state ready`; else"
        " specdeploy_undrain_command)."
    )
    reported = balancer.outcome("undrain", ran(1, message="socket gone"), "n1", must_succeed=False)
    assert (reported["failed"], reported["msg"]) == (False, "socket gone")
    with pytest.raises(ValueError, match="unknown balancer command"):
        balancer.outcome("check", ran(0), "n1")


def test_only_a_drain_waits_for_the_sessions() -> None:
    assert balancer.command_argv(["p", "-m", "d", 1], "drain", 120) == [
        "p", "-m", "d", "1", "--wait-s", "120"
    ]  # fmt: skip
    assert balancer.command_argv(["p"], "undrain", 120) == ["p"]


def test_the_balancer_action_runs_the_knobs_command_line_for_its_command(tmp_path: Path) -> None:
    """Real ansible-playbook: the action resolves specdeploy_drain_argv with the command as
    specdeploy_drain_action, runs it, and says the answer; a refused drain fails the task."""
    answer = (
        "import json, sys; action, wait = sys.argv[1], sys.argv[2:];"
        " ok = action != 'drain' or '--wait-s' in wait;"
        " print(json.dumps({'ok': ok, 'kind': 'hooks', 'message': action + ' ' + ' '.join(wait)}));"
        " sys.exit(0 if ok and 'refuse' not in action else 1)"
    )
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "specdeploy_toolkit_dir": str(REPO),
        "specdeploy_drain_timeout_s": 45,
        "specdeploy_haproxy_backend": "",
        "specdeploy_haproxy_server": "",
        "specdeploy_drain_argv": (
            "{{ [ansible_playbook_python, '-c', answer, specdeploy_drain_action] }}"
        ),
        "answer": answer,
    }
    (tmp_path / "hosts.json").write_text(json.dumps({"all": {"hosts": {"one": host_vars}}}))
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - specdeploy.toolkit.balancer: {command: drain}\n"
        "    - specdeploy.toolkit.balancer: {command: undrain}\n"
        "    - specdeploy.toolkit.balancer: {command: undrain, must_succeed: false}\n"
        "      vars: {specdeploy_drain_argv: \"{{ [ansible_playbook_python, '-c', answer,"
        " 'refuse'] }}\"}\n"
        "    - specdeploy.toolkit.balancer: {command: undrain}\n"
        "      vars: {specdeploy_drain_argv: \"{{ [ansible_playbook_python, '-c', answer,"
        " 'refuse'] }}\"}\n"
    )
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    drain, undrain, reported, refused = (t["hosts"]["one"] for t in plays[0]["tasks"])
    assert drain["msg"] == "drain --wait-s 45" and drain["drained"] and drain["changed"], drain
    assert undrain["msg"] == "undrain" and undrain["changed"] and not undrain.get("failed")
    assert reported["rc"] == 1 and not reported.get("failed") and reported["msg"] == "refuse"
    assert refused["failed"] and "STAYS OUT OF THE BALANCER'S ROTATION" in refused["msg"]


def test_the_inflight_line_says_the_gauge_or_why_it_could_not_be_read() -> None:
    done = {"rc": 0, "stdout": "  no request in flight\n", "stderr": ""}
    assert service_activation.inflight_line(done, "n1") == "n1: no request in flight"
    failed = {"rc": 1, "stdout": "", "stderr": "connection refused " * 20}
    line = service_activation.inflight_line(failed, "n1")
    assert line.startswith("n1: could not read the running-requests gauge (connection refused")
    assert line.endswith("...): stopping anyway") and len(line) < 280


def test_a_downtime_window_only_for_a_restart() -> None:
    progress = {"window": {"window_s": 12.5}}
    assert service_activation.downtime_window(progress, "r1", "deploy", True) == {
        "release": "r1", "action": "deploy", "restarted": True, "window": {"window_s": 12.5}
    }  # fmt: skip
    still = service_activation.downtime_window(progress, "r1", "rollback", "false")
    assert still == {"release": "r1", "action": "rollback", "restarted": False, "window": None}
    assert service_activation.downtime_window({}, "r1", "deploy", True)["window"] is None


def test_the_start_entry_and_the_backends_of_the_engine_log() -> None:
    log = {"stdout": json.dumps({"backends": [{"name": "FLASH_ATTN"}]})}
    progress = {"window": {"window_s": 3}, "engine": {"phases": []}}
    assert service_activation.start_entry(progress, log, "deploy", 100.0, 112.34) == {
        "action": "deploy",
        "stop_to_ready_s": 12.3,
        "backends": [{"name": "FLASH_ATTN"}],
        "window": {"window_s": 3},
        "engine": {"phases": []},
    }
    bare = service_activation.start_entry({}, {"stdout": "{}"}, "deploy", "100", 101)
    assert (bare["backends"], bare["window"], bare["engine"]) == ([], None, {})
    with pytest.raises(ValueError):  # not JSON: an error, as from_json had it
        service_activation.engine_backends({}, {"stdout": ""})


def test_the_followed_start_gives_the_backends_and_the_journal_is_not_read_again() -> None:
    progress = {"backends": [{"name": "FLASHMLA"}], "window": None}
    skipped = {"skipped": True, "changed": False}  # started.yml's read, skipped
    assert service_activation.engine_backends(progress, skipped) == [{"name": "FLASHMLA"}]
    entry = service_activation.start_entry(progress, skipped, "rollback", 10, 12)
    assert entry["backends"] == [{"name": "FLASHMLA"}]


def test_the_hook_needs_only_the_service_name_and_the_toolkit() -> None:
    hook = service_files.hook_file(
        {"specdeploy_service_name": "llm", "specdeploy_toolkit_dir": "/opt/toolkit"}
    )
    assert hook == {
        "path": "/etc/systemd/system/llm-on-failure@.service",
        "template": "/opt/toolkit/templates/vllm-on-failure@.service.j2",
        "context": {},
        "mode": "0644",
    }
    assert service_files.standin_profile_path({"vllm_service_config_dir": "/r/config"}) == (
        "/r/config/standin-profile.json"
    )


class FakeTemplar:
    def __init__(self, variables: dict) -> None:
        self.available_variables = variables

    def template(self, value):
        return value


def test_start_progress_takes_the_release_s_python_and_toolkit_and_the_knobs() -> None:
    action = StartProgress.__new__(StartProgress)
    knobs = {"specdeploy_service_name": "vllm", "specdeploy_root": "/opt/s"}
    action._templar = FakeTemplar(knobs | {"specdeploy_start_timeout_s": 900})
    assert action._options({"release": "r1", "since": 5}) == {
        "since": 5,
        "unit": "vllm",
        "root": "/opt/s",
        "timeout_s": 900,
        "python": "/opt/s/releases/r1/venv/bin/python",
        "toolkit": "/opt/s/releases/r1/toolkit",
    }
    given = {"unit": "other", "since": 5, "root": "/x", "python": "/p", "toolkit": "/t",
             "timeout_s": 1}  # fmt: skip
    assert action._options(given) == given


def test_the_controller_tools_run_from_the_toolkit_knob_or_this_collection(tmp_path) -> None:
    """controller_check, advise and validation_report run `python -m specdeploy...` from here."""
    from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import toolkit_dir

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    given = FakeTemplar({"specdeploy_toolkit_dir": str(tmp_path / "link")})
    assert toolkit_dir(given) == str(tmp_path / "real")
    root = Path(toolkit_dir(FakeTemplar({})))
    assert (root / "galaxy.yml").is_file() and (root / "specdeploy" / "controller").is_dir()
    assert toolkit_dir(FakeTemplar({"specdeploy_toolkit_dir": ""})) == str(root)
