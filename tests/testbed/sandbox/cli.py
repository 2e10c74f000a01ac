"""The command line: python -m testbed.sandbox up|down|status|ssh|scenario|build."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from testbed.sandbox.commands import down, find_node, instances_in_use, set_scenario, status, up
from testbed.sandbox.config import (
    SandboxError,
    as_instance,
    instance,
    inventory_path,
    log,
    state_dir,
)
from testbed.sandbox.host import ensure_host_packages, locked
from testbed.sandbox.node_wheelhouse import ensure_node_wheelhouse
from testbed.sandbox.nodes import ssh_command
from testbed.sandbox.rootfs import ensure_rootfs
from testbed.sandbox.session import free_instance, session_lock_path


def held_by_an_ancestor() -> bool:
    """The instance's test session (session.json's pid) is this process or one it runs under:
    the session's own `down` (test_sandbox calls the CLI on its instance), not another's."""
    try:
        owner = int(json.loads((state_dir() / "session.json").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    pid = os.getpid()
    while pid > 1:
        if pid == owner:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="boot node1..N (nodes already up are kept)")
    p_up.add_argument("--nodes", type=int, default=1)
    p_up.add_argument("--keep-extra", action="store_true", help="keep nodes above N running")
    p_up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for sshd")
    p_down = sub.add_parser(
        "down",
        help="stop this instance's nodes (SPECDEPLOY_SANDBOX_INSTANCE, default 0) and remove its "
        "state; refused while a test session or demo holds it",
    )
    p_down.add_argument(
        "--all", action="store_true", help="every instance, even those a test session holds"
    )
    p_status = sub.add_parser("status", help="list the nodes")
    p_status.add_argument("--json", action="store_true")
    p_ssh = sub.add_parser("ssh", help="run a command on a node as ops (no command: a shell)")
    p_ssh.add_argument("node")
    p_ssh.add_argument("cmd", nargs=argparse.REMAINDER)
    p_sc = sub.add_parser("scenario", help="switch a node's nvidia-smi replay scenario")
    p_sc.add_argument("node")
    p_sc.add_argument("scenario")
    sub.add_parser("build", help="build the cached root file system and the nodes' wheelhouse only")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            with open(session_lock_path(instance()), "w") as held:
                try:  # held while booting: a test session or a demo cannot take it meanwhile
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    free = free_instance()
                    log(
                        f"error: sandbox instance {instance()} is in use by a test session or a "
                        "demo right now; wait for it, or take a free one: "
                        + (
                            f"SPECDEPLOY_SANDBOX_INSTANCE={free} (127.0.{free}.1N, "
                            f"inventory/sandbox-{free}/)"
                            if free is not None
                            else "none is free"
                        )
                    )
                    return 2
                up(args.nodes, exact=not args.keep_extra, timeout=args.timeout)
            print(inventory_path())
        elif args.command == "down":
            if args.all:
                indexes = instances_in_use()
            else:  # this instance only, and never under a test session or demo that holds it
                held = open(session_lock_path(instance()), "w")  # noqa: SIM115 (held below)
                try:
                    if not held_by_an_ancestor():  # a session may stop its own nodes
                        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    held.close()
                    log(
                        f"error: sandbox instance {instance()} is in use by a test session or a "
                        f"demo ({session_lock_path(instance())} is locked); its nodes are left "
                        "running. Wait for it to end, or stop it anyway with "
                        "`python -m testbed.sandbox down --all`"
                    )
                    return 2
                indexes = [instance()]
            problems = []
            for index in indexes:
                with as_instance(index):
                    problems += down()
            for problem in problems:
                log(problem)
            if problems:
                return 1
            log("all nodes down, state removed")
        elif args.command == "status":
            rows = status()
            if args.json:
                print(
                    json.dumps(
                        {
                            "nodes": rows,
                            "inventory": str(inventory_path()),
                            "state_dir": str(state_dir()),
                        },
                        indent=2,
                    )
                )
            else:
                for row in rows:
                    print(
                        f"{row['name']:8} {row['hostname']:16} {row['address']:12} "
                        f"pid {row['pid']:<8} {row['state']:8} "
                        f"sshd {'up' if row['sshd'] else 'down'}"
                    )
                if not rows:
                    print("no sandbox nodes")
            return 0 if all(r["state"] == "running" for r in rows) else 1
        elif args.command == "ssh":
            node = find_node(args.node)
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            argv_ssh = ssh_command(node, *cmd, tty=not cmd and sys.stdin.isatty())
            return subprocess.run(argv_ssh).returncode
        elif args.command == "scenario":
            set_scenario(find_node(args.node), args.scenario)
        elif args.command == "build":
            if os.geteuid() != 0:
                raise SandboxError("building the root file system needs root")
            ensure_host_packages()
            with locked():
                print(ensure_rootfs())
                print(ensure_node_wheelhouse())
    except SandboxError as error:
        log(f"error: {error}")
        return 1 if args.command == "up" else 2
    except subprocess.CalledProcessError as error:
        log(f"error: {error}")
        return 2
    return 0
