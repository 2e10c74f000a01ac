"""Starting, reaching and stopping nodes (systemd-nspawn under a supervisor, sshd readiness)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from testbed.sandbox.config import (
    ADMIN_USER,
    Node,
    SandboxError,
    cgroup_name,
    process_starttime,
    ssh_port,
    state_dir,
)
from testbed.sandbox.files import client_key, known_hosts, prepare_layer
from testbed.sandbox.host import (
    cgroup_pids,
    cgroup_roots,
    kill_cgroup,
    mounts_under,
    node_cgroups,
    remove_cgroup,
)
from testbed.sandbox.node_wheelhouse import node_wheelhouse

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def known_nodes() -> dict[str, Node]:
    """Every node the state directory or the cgroup tree knows about, running or stale."""
    nodes: dict[str, Node] = {}
    if state_dir().is_dir():
        for path in sorted(state_dir().glob("node*/node.json")):
            node = Node.load(path)
            if node:
                nodes[node.name] = node
        for path in state_dir().glob("node*"):
            if path.is_dir() and path.name not in nodes and path.name[4:].isdigit():
                nodes[path.name] = Node.for_index(int(path.name[4:]))
    for root in cgroup_roots():
        for group in (root / cgroup_name()).glob("node*"):
            if group.name not in nodes and group.name[4:].isdigit():
                nodes[group.name] = Node.for_index(int(group.name[4:]))
    return dict(sorted(nodes.items(), key=lambda item: item[1].index))


# The node's supervisor (the shell that holds the node's mount namespace; Node.pid is its pid).
# `systemctl reboot` inside a `systemd-nspawn --boot` container makes nspawn exit with status
# 133; the supervisor then boots the node again on the same overlay (writable layer, host keys),
# as systemd-nspawn@.service's RestartForceExitStatus=133 does. Any other exit ends the node.
# SIGTERM (stop_nodes) is passed on to nspawn (an orderly poweroff) and ends the loop.
SUPERVISOR = """
stopping=0
trap 'stopping=1; kill -TERM $child 2>/dev/null' TERM INT HUP
boots=1
while :; do
  NSPAWN &
  child=$!
  rc=0; wait $child || rc=$?
  while kill -0 $child 2>/dev/null; do rc=0; wait $child || rc=$?; done
  if [ $rc -ne 133 ] || [ $stopping -ne 0 ] || [ $boots -ge 100 ]; then exit $rc; fi
  boots=$((boots + 1))
  echo "specdeploy-sandbox: the node rebooted (nspawn exit 133); boot $boots, same disk"
done
"""


def start_node(node: Node, lower: Path, hosts_line_out: dict[str, str]) -> None:
    node.dir.mkdir(parents=True, exist_ok=True)
    hosts_line_out[node.name] = prepare_layer(node, lower)
    (node.dir / "known_hosts").write_text(hosts_line_out[node.name])
    wheelhouse = node_wheelhouse()  # brought up to date by up() before any node starts
    groups = node_cgroups(node.name)
    for group in groups:
        group.mkdir(parents=True, exist_ok=True)
    root = node.dir / "root"
    overlay = f"lowerdir={lower},upperdir={node.dir / 'upper'},workdir={node.dir / 'work'}"
    nspawn = [
        "systemd-nspawn",
        "--boot",
        "--directory",
        str(root),
        "--machine",
        node.machine,
        "--hostname",
        node.hostname,
        "--register=no",
        "--keep-unit",
        "--link-journal=no",
        "--resolv-conf=off",
        "--timezone=off",
        "--console=passive",
        f"--bind-ro={wheelhouse}:/srv/wheelhouse",
    ]
    # The overlay lives in a private mount namespace: it vanishes with the node, whatever
    # happens to this process. The shell joins the node's cgroups, mounts the overlay and
    # supervises nspawn (see SUPERVISOR): a reboot inside the node boots it again, same disk.
    joins = "".join(f"echo $$ > {shlex.quote(str(g / 'cgroup.procs'))}; " for g in groups)
    script = (
        f"{joins}mount -t overlay specdeploy-{node.name} -o {shlex.quote(overlay)} "
        f"{shlex.quote(str(root))} || exit 1\n" + SUPERVISOR.replace("NSPAWN", shlex.join(nspawn))
    )
    console = open(node.dir / "console.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=dict(os.environ, SYSTEMD_LOG_COLOR="0"),
    )
    console.close()
    _CHILDREN[proc.pid] = proc  # reaped by stop_nodes; no zombie, no ResourceWarning
    node.pid = proc.pid
    node.starttime = process_starttime(proc.pid)
    node.cgroups = tuple(str(g) for g in groups)
    node.save()


def port_blocked_by_wildcard(port: int) -> str:
    """A socket listening on 0.0.0.0:<port> or [::]:<port> keeps the nodes from binding it."""
    listen = "0A"
    for table, wildcard in (("/proc/net/tcp", "00000000"), ("/proc/net/tcp6", "0" * 32)):
        with contextlib.suppress(OSError), open(table) as handle:
            for line in handle.readlines()[1:]:
                fields = line.split()
                local, state = fields[1], fields[3]
                address, hexport = local.split(":")
                if state == listen and address == wildcard and int(hexport, 16) == port:
                    return "0.0.0.0" if table.endswith("tcp") else "[::]"
    return ""


def banner(address: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, ssh_port()), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def ssh_command(
    node: Node | str, *command: str, known: Path | None = None, tty: bool = False
) -> list[str]:
    address = node.address if isinstance(node, Node) else node
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        str(client_key()),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={known or known_hosts()}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "LogLevel=ERROR",
        "-p",
        str(ssh_port()),
        "-t" if tty else "-T",
        f"{ADMIN_USER}@{address}",
        "--",
        *command,
    ]


def diagnostics(node: Node, lines: int = 40) -> str:
    out = [f"--- {node.name}: last console lines ({node.dir / 'console.log'})"]
    with contextlib.suppress(OSError):
        out += (node.dir / "console.log").read_text(errors="replace").splitlines()[-lines:]
    journal = node.dir / "upper" / "var" / "log" / "journal"
    if journal.is_dir() and shutil.which("journalctl"):
        result = subprocess.run(
            [
                "journalctl",
                "--directory",
                str(journal),
                "--no-pager",
                "-n",
                str(lines),
                "-o",
                "short-monotonic",
            ],
            capture_output=True,
            text=True,
        )
        out += [f"--- {node.name}: last journal lines", *result.stdout.splitlines()]
    return "\n".join(out)


def wait_ready(nodes: list[Node], timeout: float) -> dict[str, float]:
    """Wait until every node's sshd answers and `ops` can log in; seconds per node."""
    started = time.monotonic()
    pending = {n.name: n for n in nodes}
    ready: dict[str, float] = {}
    probes: dict[str, subprocess.Popen[bytes]] = {}
    while pending:
        for name, node in list(pending.items()):
            if not node.alive():
                raise SandboxError(f"{name} exited during boot\n{diagnostics(node)}")
            probe = probes.get(name)
            if probe is None:
                if banner(node.address, 0.5):
                    probes[name] = subprocess.Popen(
                        ssh_command(node, "true"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                    )
            elif probe.poll() is not None:
                del probes[name]
                err = probe.communicate()[1].decode(errors="replace")
                if probe.returncode == 0:
                    ready[name] = time.monotonic() - started
                    del pending[name]
                else:
                    if time.monotonic() - started > timeout:
                        raise SandboxError(f"{name}: ssh login fails: {err}\n{diagnostics(node)}")
                    time.sleep(0.2)
        if not pending:
            break
        if time.monotonic() - started > timeout:
            for probe in probes.values():
                probe.kill()
                probe.communicate()
            names = ", ".join(sorted(pending))
            raise SandboxError(
                f"{names}: sshd did not answer within {timeout:g} s\n"
                + "\n".join(diagnostics(n) for n in pending.values())
            )
        time.sleep(0.05)
    return ready


def stop_nodes(nodes: list[Node], grace: float = 10.0) -> list[str]:
    """Halt nodes (SIGTERM to nspawn = orderly poweroff), then kill what is left; clean up."""
    problems: list[str] = []
    halting = [n for n in nodes if n.alive()]  # without nspawn there is nobody to ask: kill
    for node in halting:
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(
        n.alive() or any(cgroup_pids(g) for g in node_cgroups(n.name)) for n in halting
    ):
        time.sleep(0.05)
    for node in nodes:
        if node.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)
        for group in node_cgroups(node.name):
            kill_cgroup(group)
    deadline = time.monotonic() + 10
    for node in nodes:
        for group in node_cgroups(node.name):
            while cgroup_pids(group) and time.monotonic() < deadline:
                kill_cgroup(group)
                time.sleep(0.05)
            if not remove_cgroup(group):
                problems.append(f"{node.name}: cannot remove cgroup {group}")
        for mount in mounts_under(node.dir):  # only if someone mounted in the host namespace
            subprocess.run(["umount", "-l", mount], check=False)
        if mounts_under(node.dir):
            problems.append(f"{node.name}: mounts remain under {node.dir}")
        else:
            shutil.rmtree(node.dir, ignore_errors=True)
            for lockfile in node.dir.parent.glob(f".#{node.name}*"):
                with contextlib.suppress(OSError):
                    lockfile.unlink()
    for node in nodes:
        child = _CHILDREN.pop(node.pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
    reap_children()
    # An nspawn whose starter has exited is reaped by PID 1 (here: every ~2 s); wait for it so
    # that nothing, not even a zombie, is left when `down` returns.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(reaped_by_init(n) for n in nodes):
        time.sleep(0.1)
    clean_nspawn_leftovers(nodes)
    return problems


def reaped_by_init(node: Node) -> bool:
    """The node's nspawn is a zombie waiting for PID 1 (not for a live starter process)."""
    if not node.pid or process_starttime(node.pid, zombies=True) != node.starttime:
        return False
    try:
        ppid = Path(f"/proc/{node.pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return False
    return ppid == "1"


def reap_children() -> None:
    """Collect nspawn children of this process that ended (stopped by another `down`)."""
    for pid, child in list(_CHILDREN.items()):
        if child.poll() is not None:
            del _CHILDREN[pid]


def clean_nspawn_leftovers(nodes: list[Node]) -> None:
    """A killed nspawn leaves its propagation directory and image lock in /run/systemd/nspawn."""
    base = Path("/run/systemd/nspawn")
    for node in nodes:
        with contextlib.suppress(OSError):
            (base / "propagate" / node.machine).rmdir()
    for lockfile in (base / "locks").glob("inode-*"):
        try:
            with open(lockfile, "a") as handle:
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nspawn holds an OFD lock
                lockfile.unlink()
        except OSError:
            continue


def running_nodes() -> list[Node]:
    reap_children()
    return [n for n in known_nodes().values() if n.alive()]
