"""Take a node out of a load balancer's rotation before its restart, and put it back.

Three kinds of balancer: HAProxy through its runtime API (a unix socket or a
127.0.0.1 port), any other balancer through the operator's drain/undrain commands,
or none (the step is skipped with a one-line note). The wait for in-flight requests
reads the engine's running-requests gauge through ``running_requests``, the one
function an engine other than vLLM swaps.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from specdeploy.node.validation.metrics import parse_exposition

# The gauge of requests being generated now, per engine.
RUNNING_GAUGE = {"vllm": "vllm:num_requests_running"}

SKIPPED_NOTE = (
    "no load balancer configured (specdeploy_haproxy_socket or specdeploy_drain_command):"
    " drain skipped"
)


class DrainError(RuntimeError):
    """The balancer refused or could not be reached; the message names it."""


def running_requests(metrics_text: str, engine: str = "vllm") -> float:
    """Requests in flight on the server, summed over its model labels."""
    name = RUNNING_GAUGE.get(engine)
    if name is None:
        raise DrainError(f"no running-requests gauge known for engine {engine!r}")
    values = [s.value for s in parse_exposition(metrics_text) if s.name == name]
    if not values:
        raise DrainError(f"{name} not in the server's /metrics")
    total = sum(values)
    if not math.isfinite(total):
        raise DrainError(f"{name} is not a finite number: {total}")
    return total


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


def fetch_metrics(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


@dataclass
class WaitResult:
    drained: bool
    waited_s: float
    running: float


def wait_until_idle(
    read: Callable[[], float],
    max_wait_s: float,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitResult:
    """Poll the running-requests gauge until 0 or max_wait_s (the knob's cap)."""
    start = clock()
    while True:
        running = read()
        waited = clock() - start
        if running <= 0:
            return WaitResult(True, waited, running)
        if waited >= max_wait_s:
            return WaitResult(False, waited, running)
        sleep(poll_s)
