"""The operations: up, down, status, find a node, switch its nvidia-smi scenario."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time

from testbed.sandbox import balancer
from testbed.sandbox.config import (
    MAX_INSTANCES,
    MAX_NODES,
    NVIDIA_SMI_FIXTURES,
    Node,
    SandboxError,
    as_instance,
    cgroup_name,
    inventory_path,
    log,
    ssh_port,
    state_dir,
)
from testbed.sandbox.files import ensure_client_key, ssh_dir, zipimport_cache_wanted
from testbed.sandbox.host import (
    cgroup_roots,
    ensure_host_packages,
    ensure_inotify_instances,
    flocked,
    locked,
    nspawn_processes,
)
from testbed.sandbox.inventory import reports_dir, write_inventory, write_known_hosts
from testbed.sandbox.node_wheelhouse import ensure_node_wheelhouse
from testbed.sandbox.nodes import (
    banner,
    known_nodes,
    port_blocked_by_wildcard,
    running_nodes,
    ssh_command,
    start_node,
    stop_nodes,
    wait_ready,
)
from testbed.sandbox.rootfs import ensure_rootfs, prune_rootfs


def up(count: int, exact: bool = True, timeout: float = 90.0) -> list[Node]:
    """Make node1..node<count> run (keeping those already up); returns the running nodes."""
    if not 1 <= count <= MAX_NODES:
        raise SandboxError(f"--nodes must be between 1 and {MAX_NODES}")
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root (systemd-nspawn, overlayfs, cgroups)")
    zipimport_cache_wanted()  # a bad switch is said before anything starts
    ensure_host_packages()
    ensure_inotify_instances()
    with locked():
        lower = ensure_rootfs()
        ensure_node_wheelhouse()
        ensure_client_key()
        known = known_nodes()
        stale = [n for n in known.values() if not n.alive()]
        extra = [n for n in known.values() if n.alive() and exact and n.index > count]
        if stale or extra:
            log(f"cleaning {', '.join(n.name for n in stale + extra)}")
            stop_nodes(stale + extra)
        wanted = [Node.for_index(i) for i in range(1, count + 1)]
        alive = {n.name: n for n in known.values() if n.alive()}
        new = [n for n in wanted if n.name not in alive]
        blocker = port_blocked_by_wildcard(ssh_port()) if new else ""
        if blocker:
            raise SandboxError(
                f"something on this host listens on {blocker}:{ssh_port()}, so the nodes' sshd "
                f"cannot bind 127.0.0.1N:{ssh_port()}; stop it, or bind it to one address, or "
                "set SPECDEPLOY_SANDBOX_PORT to a free port"
            )
        if not nspawn_processes(all_instances=True):  # no node of any instance uses a tree
            with flocked(lower.parent / ".build.lock"):
                prune_rootfs(lower)
        lines: dict[str, str] = {}
        started = time.monotonic()
        try:
            for node in new:
                start_node(node, lower, lines)
            # nodes kept from earlier are checked again: their sshd must still answer
            booting = [*new, *(alive[n.name] for n in wanted if n.name in alive)]
            write_known_hosts([*alive.values(), *new])
            ready = wait_ready(booting, timeout)
        except BaseException:
            stop_nodes(new)
            write_known_hosts(running_nodes())
            raise
        nodes = running_nodes()
        write_known_hosts(nodes)
        for node in new:
            log(
                f"{node.name} ({node.hostname}) up on {node.address}:{ssh_port()} "
                f"in {ready[node.name]:.1f} s"
            )
        kept = [n.name for n in wanted if n.name in alive]
        if kept:
            log(f"kept running: {', '.join(kept)}")
        if new:
            log(f"{len(new)} node(s) booted in {time.monotonic() - started:.1f} s")
        balancer.start(nodes)  # one HAProxy in front of the running nodes (restarted on change)
        write_inventory(nodes)
        return nodes


def down() -> list[str]:
    """Stop every node, running or stale; remove all sandbox state. Returns problems."""
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root")
    with locked():
        nodes = list(known_nodes().values())
        balancer.stop()
        with contextlib.suppress(FileNotFoundError):
            balancer.config_path().unlink()
        problems = stop_nodes(nodes)
        for root in cgroup_roots():
            with contextlib.suppress(OSError):
                (root / cgroup_name()).rmdir()
        shutil.rmtree(ssh_dir(), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            inventory_path().unlink()
        link = inventory_path().parent / "group_vars"
        if link.is_symlink():
            link.unlink()
        with contextlib.suppress(OSError):
            inventory_path().parent.rmdir()  # only if nothing else is in there
        with contextlib.suppress(FileNotFoundError):
            (state_dir() / "session.json").unlink()
        shutil.rmtree(reports_dir(), ignore_errors=True)  # the nodes' reports and history
        if not problems:
            with contextlib.suppress(OSError):
                (state_dir() / ".lock").unlink()  # left by older versions
            with contextlib.suppress(OSError):
                state_dir().rmdir()
    return problems


def instances_in_use() -> list[int]:
    """Instances with state or cgroups on this machine (for `down --all`)."""
    found = []
    for index in range(MAX_INSTANCES):
        with as_instance(index):
            if state_dir().exists() or any((r / cgroup_name()).exists() for r in cgroup_roots()):
                found.append(index)
    return found


def status() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for node in known_nodes().values():
        alive = node.alive()
        rows.append(
            {
                "name": node.name,
                "hostname": node.hostname,
                "address": node.address,
                "pid": node.pid,
                "state": "running" if alive else "stale",
                "sshd": alive and banner(node.address),
            }
        )
    return rows


def find_node(name: str) -> Node:
    key = name.removeprefix("sandbox-")
    if key.isdigit():
        key = f"node{key}"
    for node in known_nodes().values():
        if key in (node.name, node.address):
            return node
    raise SandboxError(f"no sandbox node {name!r} (see `status`)")


def set_scenario(node: Node, scenario: str) -> None:
    """Switch the node's nvidia-smi replay live (healthy, seven_gpus, ...)."""
    if not (NVIDIA_SMI_FIXTURES / "scenarios" / f"{scenario}.json").is_file():
        raise SandboxError(f"unknown nvidia-smi scenario {scenario!r}")
    command = (
        f"echo {shlex.quote(scenario)} | sudo -n tee /etc/specdeploy-sandbox/nvidia-smi-scenario"
    )
    subprocess.run(ssh_command(node, command), check=True, stdout=subprocess.DEVNULL)
