"""The toolkit's strategy (plugins/strategy/mitogen_linear.py): mitogen's mitogen_linear with
the two places where mitogen departs from Ansible brought back, read through mitogen's own
connection spec (ansible_mitogen.transport_config.PlayContextSpec, which its SSH and become
steps read).

- SSH keepalives: mitogen puts its own (30 s x 10) before ansible.cfg's ssh_args, and SSH keeps
  the first; unless the host sets mitogen_ssh_keepalive_*, the spec now answers ansible.cfg's.
- The local connection: Ansible logs in as the controller's user there, so become to that user
  runs no sudo; the spec now names that user, so mitogen runs no sudo either.

End to end, under live traffic: the network-cut fault of tests/integration/faults.
"""

from __future__ import annotations

import configparser
import getpass
import grp
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from ansible_collections.specdeploy.toolkit.plugins.strategy import mitogen_linear
from testbed.processes import left_running, running_with

REPO = Path(__file__).resolve().parents[2]


def configured_ssh_args() -> list[str]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "ansible.cfg")
    return shlex.split(config["ssh_connection"]["ssh_args"])


class Connection:
    """What PlayContextSpec reads of Ansible's connection plugin."""

    _action = None
    become = None

    def __init__(self, transport: str, options: dict, task_vars: dict) -> None:
        self.transport = transport
        self._options = options
        self._task_vars = task_vars

    def _get_task_vars(self) -> dict:
        return self._task_vars

    def get_option(self, name: str, hostvars: dict | None = None) -> object:
        return self._options[name]

    def get_task_var(self, key: str, default: object = None) -> object:
        return self._task_vars.get(key, default)


def spec(transport: str = "ssh", task_vars: dict | None = None, **options: object):
    options = {"ssh_args": " ".join(configured_ssh_args()), "ssh_common_args": "",
               "ssh_extra_args": "", "remote_user": None} | options  # fmt: skip
    connection = Connection(transport, options, task_vars or {})
    return mitogen_linear.ansible_mitogen.transport_config.PlayContextSpec(
        connection, None, transport, "node1"
    )


def test_mitogen_keeps_the_keepalives_of_ansible_cfg() -> None:
    args = configured_ssh_args()
    interval = mitogen_linear.ssh_option(args, "ServerAliveInterval")
    count = mitogen_linear.ssh_option(args, "ServerAliveCountMax")
    assert interval is not None and count is not None  # ansible.cfg bounds a lost node
    node = spec()
    assert node.mitogen_ssh_keepalive_interval() == interval
    assert node.mitogen_ssh_keepalive_count() == count


def test_keepalives_a_host_sets_for_mitogen_win() -> None:
    node = spec(task_vars={"mitogen_ssh_keepalive_interval": 5, "mitogen_ssh_keepalive_count": 2})
    assert node.mitogen_ssh_keepalive_interval() == 5
    assert node.mitogen_ssh_keepalive_count() == 2


def test_without_keepalives_anywhere_mitogen_keeps_its_own() -> None:
    node = spec(ssh_args="-o ControlMaster=auto")
    # None: mitogen's connection then uses its defaults (30 s x 10)
    assert node.mitogen_ssh_keepalive_interval() is None
    assert node.mitogen_ssh_keepalive_count() is None


def test_ssh_option_reads_every_spelling_and_keeps_the_first_as_ssh_does() -> None:
    args = ["-o", "ServerAliveInterval=15", "-oServerAliveCountMax=3", "-o", "ConnectTimeout 9",
            "-o", "serveralivecountmax=7", "-C"]  # fmt: skip
    assert mitogen_linear.ssh_option(args, "ServerAliveInterval") == "15"
    assert mitogen_linear.ssh_option(args, "ServerAliveCountMax") == "3"
    assert mitogen_linear.ssh_option(args, "ConnectTimeout") == "9"
    assert mitogen_linear.ssh_option(args, "ControlPersist") is None
    assert mitogen_linear.ssh_option(["-o"], "ServerAliveInterval") is None


def test_the_local_connection_logs_in_as_the_controllers_user() -> None:
    assert spec("local").remote_user() == getpass.getuser()
    assert spec("local", remote_user="ops").remote_user() == "ops"
    assert spec("ssh").remote_user() is None  # over SSH: as given, or SSH's own default


def test_a_controller_without_mitogen_gets_one_line_saying_what_to_do(tmp_path: Path) -> None:
    hidden = tmp_path / "hide" / "ansible_mitogen"  # shadows the venv's copy
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("No module named ansible_mitogen")\n')
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug: {msg: ran}\n"
    )
    env = os.environ | {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                        "PYTHONPATH": str(tmp_path / "hide")}  # fmt: skip
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "ran" not in run.stdout, out
    (line,) = [x for x in out.splitlines() if "needs mitogen on the controller" in x]
    assert "ANSIBLE_STRATEGY=linear" in line and "Traceback" not in out


class Invocation:
    """What mitogen's planner hands _load_collections."""

    def __init__(self) -> None:
        self._extra_sys_paths: set[str] = set()


def test_the_collections_are_listed_once_per_run_and_every_task_gets_them(monkeypatch) -> None:
    calls = []

    def listing():
        calls.append(1)
        return iter([b"/a/ansible_collections", b"/b/ansible_collections"])

    monkeypatch.setattr(mitogen_linear.ansible.collections.list, "list_collection_dirs", listing)

    class Planner:
        pass

    list_once = mitogen_linear.collection_dirs_once(Planner)
    list_once()  # the strategy's run, in the main process before the workers fork
    first, second = Invocation(), Invocation()
    Planner._load_collections(first)
    Planner._load_collections(second)
    assert first._extra_sys_paths == second._extra_sys_paths == {
        "/a/ansible_collections", "/b/ansible_collections"}  # fmt: skip
    assert len(calls) == 1


def test_the_import_scan_compiles_a_source_once_and_a_changed_one_again() -> None:
    compiled = []

    def counting_compile(source, filename, mode, *args, **kwargs):
        compiled.append(filename)
        return compile(source, filename, mode, *args, **kwargs)

    compile_once = mitogen_linear.memoized_compile(counting_compile)
    first = compile_once(b"import os\n", "ansible.module_utils.x", "exec")
    assert compile_once(b"import os\n", "ansible.module_utils.x", "exec") is first
    changed = compile_once(b"import sys\n", "ansible.module_utils.x", "exec")
    assert changed is not first and changed.co_names == ("sys",)
    assert len(compiled) == 2
    # what mitogen's scan calls by that name now
    assert mitogen_linear.ansible_mitogen.module_finder.compile is not compile


def test_a_collection_module_runs_over_mitogen_with_the_run_wide_lists(tmp_path: Path) -> None:
    # The toolkit's own module (module_utils of the collection and of ansible) run by mitogen on
    # the local connection, twice, so the second task takes the lists the first one made.
    user, group = getpass.getuser(), grp.getgrgid(os.getgid()).gr_name
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        + "".join(
            f"    - specdeploy.toolkit.files: {{items: [{{path: {tmp_path / name},"
            f" state: directory, mode: '0755', owner: {user}, group: {group}}}]}}\n"
            for name in ("a", "b")
        )
    )
    env = os.environ | {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
         "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "a").is_dir() and (tmp_path / "b").is_dir()
    assert "changed=2" in run.stdout


def test_a_controller_killed_with_its_process_group_leaves_no_process_behind(
    tmp_path: Path,
) -> None:
    # The test suite's faults kill a deploy's process group mid-task (ssh-dropped, the killed
    # controller). Ansible's task worker has a session of its own, so the kill missed it, and
    # under mitogen it then waited for ever for the multiplexer the kill had ended.
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.shell: touch {tmp_path / 'started'} && exec sleep 60\n"
    )
    env = os.environ | {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    interpreter = f"ansible_python_interpreter={sys.executable}"
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
            "-c", "local", "-e", interpreter, str(play)]  # fmt: skip
    controller = subprocess.Popen(
        argv, cwd=tmp_path, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():
            assert controller.poll() is None, "the play ended before its task started"
            assert time.monotonic() < deadline, "the task did not start in 120 s"
            time.sleep(0.2)
        assert len(running_with(argv)) >= 3  # the controller, mitogen's multiplexer, the worker
        os.killpg(controller.pid, signal.SIGKILL)
        controller.wait()
        left = left_running(argv, wait_s=30)
        assert not left, f"still running 30 s after the controller was killed: {left}"
    finally:
        for pid in running_with(argv):
            os.kill(pid, signal.SIGKILL)
