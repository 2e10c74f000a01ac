"""Sandbox GPU nodes: real systemd boots reachable over real SSH, and nothing left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testbed import sandbox as sb
from testbed.sandbox import balancer

from specdeploy.controller import drain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]


def leftovers(pids: list[int] = ()) -> list[str]:
    """Everything the sandbox could leave on the host: processes (zombies too), mounts,
    cgroups, state, listeners."""
    sb.reap_children()  # nodes this process started are its children: collect them first
    found = [f"nspawn pid {pid}" for pid in sb.nspawn_processes()]
    found += [
        f"process {pid} (was a node's nspawn)" for pid in pids if Path(f"/proc/{pid}").exists()
    ]
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = line.split()[4]
            if point.startswith(str(sb.state_dir())) or "specdeploy-node" in line:
                found.append(f"mount {point}")
    for root in sb.cgroup_roots():
        if (root / sb.cgroup_name()).exists():
            found.append(f"cgroup {root / sb.cgroup_name()}")
    if sb.state_dir().exists():
        found.append(f"state {sb.state_dir()}")
    for index in (1, 2, 3):
        if sb.banner(sb.node_address(index), 0.3):
            found.append(f"listener {sb.node_address(index)}:22")
    for proc in Path("/proc").iterdir():  # the instance's HAProxy (zombies of a late init aside)
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(balancer.config_path()).encode() in cmdline and sb.process_starttime(int(proc.name)):
            found.append(f"haproxy pid {proc.name}")
    with (
        contextlib.suppress(OSError),
        socket.create_connection(
            (balancer.frontend_address(), balancer.frontend_port()), timeout=0.3
        ),
    ):
        found.append(f"listener {balancer.frontend_url()}")
    return found


def test_a_load_balancer_fronts_the_nodes_and_the_inventory_names_it(sandbox):
    cluster = sandbox(2)
    inventory = sb.inventory_path().read_text()
    assert f"specdeploy_haproxy_socket: {balancer.socket_path()}" in inventory
    assert "specdeploy_haproxy_backend: vllm" in inventory
    for node in cluster.nodes:  # one server per node, named as the inventory names the host
        assert drain.haproxy_sessions(str(balancer.socket_path()), "vllm", node.hostname) == 0
    with socket.create_connection((balancer.frontend_address(), balancer.frontend_port()), 5):
        pass  # the frontend listens on 127.0.k.1


def test_ops_logs_in_with_key_and_has_passwordless_sudo(sandbox):
    cluster = sandbox(2)
    for node in cluster.nodes[:2]:
        result = cluster.ssh(node, "id -un; hostname; sudo -n id -u")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["ops", node.hostname, "0"]


def test_systemd_is_pid_1_and_the_system_is_up(sandbox):
    cluster = sandbox(2)
    for node in cluster.nodes[:2]:
        assert cluster.ssh(node, "ps -p 1 -o comm=").stdout.strip() == "systemd"
        state = cluster.ssh(node, "timeout 60 systemctl is-system-running --wait").stdout
        assert state.strip() in ("running", "degraded"), state
        failed = cluster.ssh(node, "systemctl --failed --no-legend --plain").stdout
        assert failed.strip() == "", failed


def test_sshd_listens_only_on_the_node_address(sandbox):
    cluster = sandbox(2)
    for node in cluster.nodes[:2]:
        sockets = cluster.ssh(node, "sudo -n ss -Htlnp", check=True).stdout.splitlines()
        sshd = {line.split()[3] for line in sockets if '"sshd"' in line}
        assert sshd == {f"{node.address}:22"}, sockets
    config = cluster.ssh(1, "sudo -n sshd -T", check=True).stdout.splitlines()
    assert "passwordauthentication no" in config
    assert "kbdinteractiveauthentication no" in config
    assert "permitrootlogin no" in config


def test_password_login_is_refused(sandbox):
    cluster = sandbox(1)
    node = cluster.nodes[0]
    result = subprocess.run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-o",
            f"UserKnownHostsFile={cluster.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            f"ops@{node.address}",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 255
    assert "Permission denied" in result.stderr


def test_host_key_checking_rejects_a_wrong_known_hosts(sandbox, tmp_path):
    cluster = sandbox(2)
    one, two = cluster.nodes[:2]
    lines = cluster.known_hosts.read_text().splitlines()
    key_of = {line.split()[0]: line.split(None, 1)[1] for line in lines}
    assert set(key_of) >= {one.address, two.address}
    assert key_of[one.address] != key_of[two.address]  # host keys are per node
    swapped = tmp_path / "known_hosts"
    swapped.write_text(f"{one.address} {key_of[two.address]}\n")
    result = cluster.ssh(one, "true", known=swapped)
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr
    empty = tmp_path / "empty"
    empty.write_text("")
    result = cluster.ssh(one, "true", known=empty)
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr
    assert cluster.ssh(one, "true").returncode == 0


def test_inventory_reaches_every_node_with_ansible(sandbox):
    cluster = sandbox(2)
    text = cluster.inventory.read_text()
    assert "StrictHostKeyChecking=yes" in text and str(cluster.known_hosts) in text
    ansible = REPO / ".venv" / "bin" / "ansible"
    if not ansible.exists():
        pytest.skip("controller venv without ansible")
    result = subprocess.run(
        [
            str(ansible),
            "gpu_nodes",
            "-i",
            str(cluster.inventory),
            "-b",
            "-m",
            "command",
            "-a",
            "id -u",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        # Ansible's own linear strategy (the fallback without mitogen, docs/bench.md): it runs
        # modules as AnsiballZ zips, which the sandbox's zipimport cache is for; mitogen
        # (ansible.cfg) runs them in its own interpreter and does not use it.
        env={**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_STRATEGY": "linear"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for node in cluster.nodes[:2]:
        assert f"{node.hostname} | CHANGED | rc=0" in result.stdout
        # The module's code was compiled once and kept (zipimport_cache.py; docs/test-time.md).
        kept = cluster.ssh(node, "ls /var/cache/specdeploy-sandbox-zipimport", check=True)
        assert len(kept.stdout.split()) > 10, kept.stdout


def test_wheelhouse_is_mounted_read_only(sandbox):
    cluster = sandbox(1)
    result = cluster.ssh(1, "findmnt -no OPTIONS /srv/wheelhouse; sudo -n touch /srv/wheelhouse/x")
    assert result.stdout.split(",")[0] == "ro"
    assert result.returncode != 0 and "Read-only file system" in result.stderr


def test_nvidia_smi_replay_answers_like_the_real_tool(sandbox):
    cluster = sandbox(1)
    listing = cluster.ssh(1, "nvidia-smi -L", check=True).stdout.splitlines()
    assert len(listing) == 8
    assert listing[0].startswith("GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-")
    query = "--query-gpu=index,name,compute_cap,memory.total,driver_version"
    rows = cluster.ssh(1, f"nvidia-smi {query} --format=csv,noheader,nounits", check=True)
    fields = [row.split(", ") for row in rows.stdout.splitlines()]
    assert [f[0] for f in fields] == [str(i) for i in range(8)]
    assert {tuple(f[2:]) for f in fields} == {("12.0", "97887", "580.95.05")}
    apps = "--query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"
    assert cluster.ssh(1, f"nvidia-smi {apps}", check=True).stdout == ""
    table = cluster.ssh(1, "nvidia-smi", check=True).stdout
    assert "Driver Version: 580.95.05" in table and "No running processes found" in table
    try:
        cluster.set_scenario(1, "seven_gpus")
        assert len(cluster.ssh(1, "nvidia-smi -L", check=True).stdout.splitlines()) == 7
        cluster.set_scenario(1, "foreign_process")
        busy = cluster.ssh(1, f"nvidia-smi {apps}", check=True).stdout.strip()
        assert busy == "48213, /home/research/venv/bin/python3, 81920"
        cluster.set_scenario(1, "old_driver")
        driver = cluster.ssh(1, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
        assert set(driver.stdout.split()) == {"550.127.05"}
        cluster.set_scenario(1, "driver_failure")
        failed = cluster.ssh(1, "nvidia-smi -L")
        assert failed.returncode == 9 and "couldn't communicate with the NVIDIA driver" in (
            failed.stdout
        )
    finally:
        cluster.set_scenario(1, "healthy")


def test_up_keeps_running_nodes_and_replaces_a_crashed_one(sandbox):
    cluster = sandbox(2)
    one, two = cluster.nodes[:2]
    os.kill(two.pid, signal.SIGKILL)  # the node's supervisor dies hard; nspawn is orphaned
    deadline = time.monotonic() + 10
    while sb.Node.load(two.dir / "node.json").alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    states = {row["name"]: row["state"] for row in sb.status()}
    assert states["node1"] == "running" and states["node2"] == "stale"
    again = sandbox(2)
    new_one, new_two = again.nodes[:2]
    assert new_one.pid == one.pid  # kept
    assert new_two.pid != two.pid  # replaced
    assert again.ssh(new_two, "hostname", check=True).stdout.strip() == "sandbox-node2"


def init_started(cluster, node) -> str:
    """When the node's PID 1 started (host clock ticks): a new value means a new boot."""
    result = cluster.ssh(node, "cut -d' ' -f22 /proc/1/stat", timeout=20)
    return result.stdout.strip() if result.returncode == 0 else ""


def test_a_reboot_inside_a_node_boots_it_again_on_the_same_disk(sandbox):
    cluster = sandbox(1)
    node = cluster.nodes[0]
    cluster.ssh(node, "echo before-reboot | sudo -n tee /var/lib/specdeploy-reboot-marker", True)
    first_boot = init_started(cluster, node)
    assert first_boot
    cluster.ssh(node, "sudo -n systemctl reboot", timeout=30)  # the connection may drop
    deadline = time.monotonic() + 180
    while init_started(cluster, node) in ("", first_boot):
        assert time.monotonic() < deadline, "the node did not come back after the reboot"
        time.sleep(0.5)
    # the same node: same disk (the writable layer), same host key (checked), same supervisor
    again = cluster.ssh(node, "hostname; cat /var/lib/specdeploy-reboot-marker", check=True)
    assert again.stdout.split() == [node.hostname, "before-reboot"]
    assert cluster.ssh(node, "ps -p 1 -o comm=", check=True).stdout.strip() == "systemd"
    state = sb.Node.load(node.dir / "node.json")
    assert state is not None and state.pid == node.pid and state.alive()
    row = next(r for r in sb.status() if r["name"] == node.name)
    assert (row["state"], row["sshd"]) == ("running", True)
    assert "the node rebooted (nspawn exit 133)" in (node.dir / "console.log").read_text()
    nspawn = [pid for pid in sb.nspawn_processes() if sb.parent_pid(pid) == node.pid]
    assert len(nspawn) == 1  # booted again by the node's own supervisor
    result = subprocess.run(
        [sys.executable, "-m", "testbed.sandbox", "down"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert leftovers([node.pid, *nspawn]) == []


def test_down_leaves_nothing_behind(sandbox):
    cluster = sandbox(3)
    assert len(cluster.nodes) == 3 and all(n.alive() for n in cluster.nodes)
    assert leftovers()  # the check sees running nodes
    pids = [n.pid for n in cluster.nodes]
    result = subprocess.run(
        [sys.executable, "-m", "testbed.sandbox", "down"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert leftovers(pids) == []
    assert not sb.inventory_path().exists()


INNER = REPO / "tests" / "sandbox" / "interrupted_session.py"


def start_inner_session() -> tuple[subprocess.Popen[str], list[sb.Node], list[str]]:
    """A child pytest whose test brings two nodes up and then hangs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-q", str(INNER)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "NODES-UP" in line:
            break
    assert any("NODES-UP" in line for line in lines), "".join(lines)
    running = [n for n in sb.known_nodes().values() if n.alive()]
    assert len(running) == 2
    return proc, running, lines


def test_a_hard_killed_session_is_cleaned_up_by_the_next(sandbox):
    sandbox(1)  # fixes which instance this session (and so its child) uses
    sandbox.close()  # the child session takes this instance over
    proc, running, _ = start_inner_session()
    proc.kill()  # SIGKILL: no finalizer, no atexit; the nodes stay orphaned
    proc.communicate(timeout=60)
    assert all(n.alive() for n in running) and sb.crashed_session()
    cluster = sandbox(1)  # the next session stops what the dead one left
    assert cluster.nodes[0].pid not in [n.pid for n in running]
    assert [pid for pid in (n.pid for n in running) if Path(f"/proc/{pid}").exists()] == []
    assert [(r["name"], r["state"]) for r in sb.status()] == [("node1", "running")]
    assert [sb.parent_pid(pid) for pid in sb.nspawn_processes()] == [cluster.nodes[0].pid]


def test_an_interrupted_test_session_leaves_nothing_behind(sandbox):
    sandbox(1)  # fixes which instance this session (and so its child) uses
    sandbox.close()  # the child sessions take this instance over
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc, running, lines = start_inner_session()
        proc.send_signal(sig)
        output = proc.communicate(timeout=120)[0]
        pids = [n.pid for n in running]
        assert leftovers(pids) == [], f"after {sig.name}:\n{''.join(lines)}{output}"


def test_an_interrupted_make_test_stops_its_sessions_and_their_nodes(sandbox):
    """Ctrl-C (SIGINT to the runner alone: its sessions have their own process groups) or
    SIGTERM on scripts/run_tests.py: every pytest session it started stops, nodes and all."""
    sandbox(1)  # fixes which instance this session (and so the runner's session) uses
    sandbox.close()
    log = REPO / "build" / "test-logs" / "interrupt-probe.log"
    command = [sys.executable, "scripts/run_tests.py", "--session", f"interrupt-probe={INNER}"]
    for sig in (signal.SIGINT, signal.SIGTERM):
        log.unlink(missing_ok=True)
        runner = subprocess.Popen(
            [*command, "--", "-s", "-q"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 300
        while "NODES-UP" not in (log.read_text() if log.exists() else ""):
            assert runner.poll() is None and time.monotonic() < deadline, runner.stdout.read()
            time.sleep(1)
        running = [n for n in sb.known_nodes().values() if n.alive()]
        session = int(json.loads((sb.state_dir() / "session.json").read_text())["pid"])
        assert len(running) == 2 and Path(f"/proc/{session}").exists()
        runner.send_signal(sig)
        output = runner.communicate(timeout=200)[0]
        assert runner.returncode == 2, output
        assert "every session stopped" in output
        assert not Path(f"/proc/{session}").exists(), f"pytest session {session} still runs"
        assert leftovers([n.pid for n in running]) == [], f"after {sig.name}:\n{output}"


def test_sandbox_up_and_the_demo_refuse_an_instance_a_test_session_holds(sandbox):
    """`make sandbox-up` (or a demo) on an instance a test session holds: one clear refusal
    that names a free instance, exit 2, and nothing of the session's nodes touched."""
    sandbox(1)  # this session holds its instance now
    before = [(row["name"], row["pid"]) for row in sb.status()]
    held = os.environ["SPECDEPLOY_SANDBOX_INSTANCE"]
    result = subprocess.run(
        [sys.executable, "-m", "testbed.sandbox", "up", "--nodes", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert f"sandbox instance {held} is in use by a test session or a demo" in result.stderr
    assert "SPECDEPLOY_SANDBOX_INSTANCE=" in result.stderr and "Traceback" not in result.stderr
    assert [(row["name"], row["pid"]) for row in sb.status()] == before
    with pytest.raises(sb.SandboxError, match=f"sandbox instance {held} .* is held by"):
        sb.claim_instance(first=0)  # the demo's claim, with the instance forced
