"""Take a node out of a load balancer's rotation before its restart, and put it back.

Three kinds of balancer: HAProxy through its runtime API (a unix socket or a
127.0.0.1 port), any other balancer through the operator's drain/undrain commands,
or none (the step is skipped with a one-line note). The wait for in-flight requests
reads the engine's running-requests gauge through ``running_requests``, the one
function an engine other than vLLM swaps.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
from dataclasses import dataclass

# The wait for in-flight requests runs on the node (its /metrics need not be reachable from
# here); the same functions, for callers on this side.
from specdeploy.node.service.inflight import (  # noqa: F401 (re-exported)
    RUNNING_GAUGE,
    InflightError,
    WaitResult,
    fetch_metrics,
    running_requests,
    wait_until_idle,
)

SKIPPED_NOTE = (
    "no load balancer configured (specdeploy_haproxy_socket or specdeploy_drain_command):"
    " drain skipped"
)


class DrainError(RuntimeError):
    """The balancer refused or could not be reached; the message names it."""


def _loopback_only(host: str) -> None:
    if host not in ("127.0.0.1", "::1", "localhost") and not host.startswith("127."):
        raise DrainError(f"runtime API address {host!r} is not on loopback")


def haproxy_command(address: str, command: str, timeout_s: float = 5.0) -> str:
    """Send one runtime-API command; address is a socket path or host:port on loopback."""
    try:
        if address.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            sock.connect(address)
        else:
            host, _, port = address.rpartition(":")
            _loopback_only(host)
            sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        with sock:
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except (OSError, ValueError) as e:
        raise DrainError(f"HAProxy runtime API {address} unreachable: {e}") from e
    return b"".join(chunks).decode(errors="replace")


def haproxy_set_state(address: str, backend: str, server: str, state: str) -> None:
    """``set server <backend>/<server> state drain|ready|maint``; an answer is an error."""
    if state not in ("drain", "ready", "maint"):
        raise DrainError(f"unknown server state {state!r}")
    answer = haproxy_command(address, f"set server {backend}/{server} state {state}").strip()
    if answer:
        raise DrainError(f"HAProxy refused {backend}/{server} -> {state}: {answer.splitlines()[0]}")


def haproxy_rotation(address: str, backend: str) -> dict[str, str]:
    """Each server of the backend: ``in rotation`` (operationally UP, no maintenance or drain
    flag in its admin state), ``drained``, ``maintenance`` or ``down``, from ``show servers
    state``."""
    lines = haproxy_command(address, f"show servers state {backend}").splitlines()
    header = next((line for line in lines if line.startswith("#")), None)
    if header is None:
        raise DrainError(f"HAProxy has no backend {backend}: {' '.join(lines)[:120]}")
    names = header.lstrip("# ").split()
    name, op, admin = (names.index(k) for k in ("srv_name", "srv_op_state", "srv_admin_state"))
    states = {}
    for line in lines[lines.index(header) + 1 :]:
        cols = line.split()
        if len(cols) < len(names):
            continue
        flags = int(cols[admin])
        states[cols[name]] = (
            "drained"
            if flags & 0x18  # FDRAIN, IDRAIN
            else "maintenance"
            if flags
            else "in rotation"
            if int(cols[op]) == 2  # SRV_ST_RUNNING
            else "down"
        )
    return states


def rotation_guard(
    states: dict[str, str], server: str, stage: set[str], keep: int, backend: str
) -> str | None:
    """Why draining ``server`` must not go ahead (None: it may). At least ``keep`` servers of
    the backend that are not in this stage must stay in rotation, as many as there are: a
    backend of one server and a stage that takes every node at once (the operator's choice of
    downtime) pass; a fleet whose other nodes are down or drained by someone else does not."""
    if states.get(server) != "in rotation":
        return None  # it takes no traffic now (a first start, down, drained): nothing changes
    others = {s: st for s, st in states.items() if s != server and s not in stage}
    needed = min(keep, len(others))
    serving = [s for s, st in others.items() if st == "in rotation"]
    if len(serving) >= needed:
        return None
    out = ", ".join(f"{s} {st}" for s, st in sorted(others.items()) if st != "in rotation")
    return (
        f"taking {backend}/{server} out would leave {len(serving)} other server(s) of the "
        f"backend in rotation, fewer than specdeploy_drain_keep_in_rotation={keep} ({out}; "
        "none of them in this stage): the node was not touched. Bring them back into rotation, "
        "take this node in the same stage as them, or lower specdeploy_drain_keep_in_rotation "
        "(0: no guard)"
    )


def haproxy_sessions(address: str, backend: str, server: str) -> int:
    """Current sessions of one server, from ``show stat`` (CSV, column scur)."""
    lines = haproxy_command(address, "show stat").splitlines()
    if not lines or not lines[0].startswith("# "):
        raise DrainError(f"HAProxy 'show stat' gave no CSV header: {lines[:1]}")
    header = lines[0][2:].split(",")
    px, sv, cur = header.index("pxname"), header.index("svname"), header.index("scur")
    for line in lines[1:]:
        cols = line.split(",")
        if len(cols) > cur and cols[px] == backend and cols[sv] == server:
            return int(cols[cur] or 0)
    raise DrainError(f"HAProxy has no server {backend}/{server}")


def run_hook(command: str, node: str, timeout_s: float = 60.0) -> None:
    """An operator's drain/undrain command, with SPECDEPLOY_NODE in its environment."""
    env = {**os.environ, "SPECDEPLOY_NODE": node}
    try:
        proc = subprocess.run(
            command,
            shell=True,
            env=env,
            stdin=subprocess.DEVNULL,  # never the controller's terminal or Ansible's worker's
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise DrainError(f"drain hook timed out after {timeout_s:g} s: {command}") from e
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise DrainError(f"drain hook exited {proc.returncode}: {command}: {last[0]}")


@dataclass
class Balancer:
    """Where a node sits in rotation: HAProxy's runtime API, operator hooks, or nothing."""

    haproxy: str = ""  # runtime API: a socket path or host:port on loopback
    backend: str = ""
    server: str = ""
    drain_command: str = ""
    undrain_command: str = ""
    hook_timeout_s: float = 60.0
    stage: frozenset[str] = frozenset()  # the servers this stage of the rollout restarts
    keep_in_rotation: int = 1  # rotation_guard; 0: no guard

    @property
    def kind(self) -> str:
        return "haproxy" if self.haproxy else "hooks" if self.drain_command else "none"

    def problems(self) -> list[str]:
        """What is wrong with the knobs, one line each, naming the knob (empty: usable)."""
        out = []
        if self.haproxy and (self.drain_command or self.undrain_command):
            out.append(
                "specdeploy_haproxy_socket and specdeploy_drain_command are both set: "
                "choose one balancer"
            )
        if self.haproxy:
            if not self.backend:
                out.append("specdeploy_haproxy_backend is empty: name the backend of the nodes")
            if not self.server:
                out.append("specdeploy_haproxy_server is empty: name this node's server")
            if not self.haproxy.startswith("/"):
                host, _, port = self.haproxy.rpartition(":")
                if not port.isdigit() or not host:
                    out.append(
                        f"specdeploy_haproxy_socket={self.haproxy!r}: a socket path or "
                        "127.0.0.1:PORT"
                    )
                else:
                    try:
                        _loopback_only(host)
                    except DrainError as e:
                        out.append(f"specdeploy_haproxy_socket: {e}")
        if bool(self.drain_command) != bool(self.undrain_command):
            out.append(
                "specdeploy_drain_command and specdeploy_undrain_command go together: "
                "set both or neither"
            )
        return out

    def drain(self, node: str, wait_s: float = 0.0) -> str:
        """Out of rotation; with HAProxy, then wait (at most wait_s) until the balancer's own
        sessions to the node ended: a response is over for the client only then, a moment
        after the engine's gauge dropped."""
        if self.kind == "haproxy":
            if self.keep_in_rotation > 0:
                states = haproxy_rotation(self.haproxy, self.backend)
                refused = rotation_guard(
                    states, self.server, set(self.stage), self.keep_in_rotation, self.backend
                )
                if refused:
                    raise DrainError(refused)
            haproxy_set_state(self.haproxy, self.backend, self.server, "drain")
            waited = wait_until_idle(
                lambda: haproxy_sessions(self.haproxy, self.backend, self.server), wait_s, 0.2
            )
            ended = (
                f"its sessions ended in {waited.waited_s:.1f} s"
                if waited.drained
                else f"{waited.running:g} session(s) still open after {waited.waited_s:.1f} s"
            )
            return (
                f"{node}: out of rotation (HAProxy {self.backend}/{self.server} state drain; "
                f"{ended})"
            )
        if self.kind == "hooks":
            run_hook(self.drain_command, node, self.hook_timeout_s)
            return f"{node}: out of rotation (specdeploy_drain_command ran)"
        return f"{node}: {SKIPPED_NOTE}"

    def undrain(self, node: str) -> str:
        if self.kind == "haproxy":
            haproxy_set_state(self.haproxy, self.backend, self.server, "ready")
            return f"{node}: back in rotation (HAProxy {self.backend}/{self.server} state ready)"
        if self.kind == "hooks":
            run_hook(self.undrain_command, node, self.hook_timeout_s)
            return f"{node}: back in rotation (specdeploy_undrain_command ran)"
        return f"{node}: no load balancer configured: nothing to put back"

    def check(self, node: str) -> str:
        """Read-only: the runtime API answers and knows this node's server."""
        if self.kind == "haproxy":
            sessions = haproxy_sessions(self.haproxy, self.backend, self.server)
            return (
                f"{node}: HAProxy {self.backend}/{self.server} found at {self.haproxy} "
                f"({sessions} session(s) now)"
            )
        if self.kind == "hooks":
            return f"{node}: drained and put back by specdeploy_drain_command/undrain_command"
        return f"{node}: {SKIPPED_NOTE}"


def main(argv: list[str] | None = None) -> int:
    """drain | undrain | check one node; one line (or --json); exit 0 ok, 1 the balancer
    refused or could not be reached, 2 bad knobs."""
    parser = argparse.ArgumentParser(prog="specdeploy.controller.drain", description=__doc__)
    parser.add_argument("action", choices=("drain", "undrain", "check"))
    parser.add_argument("--node", required=True)
    parser.add_argument("--haproxy", default="", help="runtime API: socket path or 127.0.0.1:PORT")
    parser.add_argument("--backend", default="")
    parser.add_argument("--server", default="")
    parser.add_argument("--drain-command", default="")
    parser.add_argument("--undrain-command", default="")
    parser.add_argument(
        "--wait-s", type=float, default=0.0, help="drain: wait this long for HAProxy's sessions"
    )
    parser.add_argument(
        "--stage-servers", default="", help="HAProxy servers of this rollout stage (comma list)"
    )
    parser.add_argument(
        "--keep-in-rotation",
        type=int,
        default=1,
        help="drain: refuse when fewer other servers (not in this stage) would stay in rotation",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not math.isfinite(args.wait_s) or args.wait_s < 0:
        print(f"drain: error: --wait-s {args.wait_s}: not a finite number >= 0", file=sys.stderr)
        return 2
    if args.keep_in_rotation < 0:
        print(
            f"drain: error: specdeploy_drain_keep_in_rotation={args.keep_in_rotation}: "
            "must be 0 or more",
            file=sys.stderr,
        )
        return 2
    balancer = Balancer(
        args.haproxy,
        args.backend,
        args.server,
        args.drain_command,
        args.undrain_command,
        stage=frozenset(s for s in args.stage_servers.split(",") if s),
        keep_in_rotation=args.keep_in_rotation,
    )
    problems = balancer.problems()
    if problems:
        print(f"drain: error: {'; '.join(problems)}", file=sys.stderr)
        return 2
    try:
        if args.action == "drain":
            text = balancer.drain(args.node, args.wait_s)
        else:
            text = getattr(balancer, args.action)(args.node)
        rc = 0
    except DrainError as e:
        text, rc = f"{args.node}: {args.action} failed: {e}", 1
    if args.json:
        print(json.dumps({"ok": rc == 0, "kind": balancer.kind, "message": text}))
    else:
        print(text, file=sys.stdout if rc == 0 else sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
