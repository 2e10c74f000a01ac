"""Test sessions: a pytest session owns one free instance and stops its nodes at the end."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
from pathlib import Path

from testbed.sandbox.commands import down, find_node, set_scenario, up
from testbed.sandbox.config import (
    MAX_INSTANCES,
    Node,
    SandboxError,
    as_instance,
    instance,
    inventory_path,
    log,
    process_starttime,
    state_dir,
)
from testbed.sandbox.files import client_key, known_hosts
from testbed.sandbox.host import lock_dir
from testbed.sandbox.nodes import running_nodes, ssh_command


class Cluster:
    """What the pytest fixture hands out: running nodes, their inventory, an ssh helper."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.inventory = inventory_path()
        self.known_hosts = known_hosts()
        self.key = client_key()

    def node(self, which: Node | str | int) -> Node:
        if isinstance(which, Node):
            return which
        if isinstance(which, int):
            which = f"node{which}"
        for node in self.nodes:
            if which in (node.name, node.hostname, node.address):
                return node
        return find_node(which)

    def ssh(
        self,
        which: Node | str | int,
        command: str,
        check: bool = False,
        timeout: float = 120,
        known: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on the node as `ops` over real SSH (host key checked)."""
        result = subprocess.run(
            ssh_command(self.node(which), command, known=known),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise SandboxError(
                f"{which}: {command!r} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def set_scenario(self, which: Node | str | int, scenario: str) -> None:
        set_scenario(self.node(which), scenario)


def claim_session() -> None:
    """Record that this process's test session owns the instance (removed with the state)."""
    state_dir().mkdir(parents=True, exist_ok=True)
    owner = {"pid": os.getpid(), "starttime": process_starttime(os.getpid())}
    (state_dir() / "session.json").write_text(json.dumps(owner) + "\n")


def crashed_session() -> bool:
    """The instance was owned by a test session whose process is gone (killed hard)."""
    try:
        owner = json.loads((state_dir() / "session.json").read_text())
    except (OSError, ValueError):
        return False
    return process_starttime(int(owner["pid"])) != owner["starttime"]


def clean_crashed_session() -> None:
    if running_nodes() and crashed_session():
        log(f"instance {instance()}: stopping the nodes of a test session that was killed")
        for problem in down():
            log(problem)


def session_held_elsewhere() -> bool:
    """Another process's test session holds this instance right now."""
    with open(session_lock_path(instance()), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def claim_instance(first: int, wait: bool = False) -> tuple[int, object]:
    """Take a free instance for this process: (index, the held lock; keep it open).

    SPECDEPLOY_SANDBOX_INSTANCE=k takes k (``wait``: until its holder is done; else refused
    with a message). Otherwise the first instance from ``first`` on that no test session or
    demo holds and where no nodes run (a developer's `make sandbox-up`: not ours to reuse or
    stop). Nodes of a killed session are cleaned first. Children follow the choice (env)."""
    explicit = os.environ.get("SPECDEPLOY_SANDBOX_INSTANCE")
    for index in [int(explicit)] if explicit else range(first, MAX_INSTANCES):
        handle = open(session_lock_path(index), "w")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if explicit and wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            if explicit:
                raise SandboxError(
                    f"sandbox instance {index} (SPECDEPLOY_SANDBOX_INSTANCE) is held by a test "
                    "session or a demo right now: wait for it, or unset the variable to take a "
                    "free instance"
                ) from None
            continue
        with as_instance(index):
            clean_crashed_session()
            busy = not explicit and bool(running_nodes())
            if not busy:
                claim_session()
        if busy:
            handle.close()
            continue
        os.environ["SPECDEPLOY_SANDBOX_INSTANCE"] = str(index)
        return index, handle
    raise SandboxError(
        f"no free sandbox instance ({first}..{MAX_INSTANCES - 1}): every one is held by a test "
        "session or runs someone's nodes (`python -m testbed.sandbox down --all` stops them all)"
    )


def free_instance(first: int = 0) -> int | None:
    """The first instance from ``first`` on that nobody holds and where no nodes run."""
    for index in range(first, MAX_INSTANCES):
        with as_instance(index):
            if not session_held_elsewhere() and not running_nodes():
                return index
    return None


def session_lock_path(index: int) -> Path:
    return lock_dir() / f"specdeploy-sandbox-{index}.session"


# Instance 0 (127.0.0.1N, inventory/sandbox/) is the developer's: `make sandbox-up` and
# `make demo` take it first. Test sessions start at 1, so `make demo` during `make test` works.
FIRST_TEST_INSTANCE = 1


class Session:
    """Session-wide owner of a sandbox instance for pytest: `session(n)` gives >= n running
    nodes; close() (finalizer, atexit, SIGTERM) stops them all. The session takes the first
    free instance k >= 1 (127.0.k.1N, inventory/sandbox-k/) that no other session or demo holds
    and where no nodes of `make sandbox-up` run, so parallel runs and a developer's own sandbox
    are left alone. SPECDEPLOY_SANDBOX_INSTANCE=k forces one (waiting for its holder);
    SPECDEPLOY_SANDBOX_KEEP=1 keeps the nodes running after the session for debugging."""

    def __init__(self) -> None:
        self.used = False
        self.instance: int | None = None
        self._lock: object = None
        self._previous_sigterm: object = None

    def _acquire(self) -> None:
        if self.instance is not None:  # again after close(): same instance, wait for it
            handle = open(session_lock_path(self.instance), "w")  # noqa: SIM115
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._lock = handle
            os.environ["SPECDEPLOY_SANDBOX_INSTANCE"] = str(self.instance)
            clean_crashed_session()
            claim_session()
            return
        self.instance, self._lock = claim_instance(first=FIRST_TEST_INSTANCE, wait=True)

    def __call__(self, count: int = 1, timeout: float = 90.0) -> Cluster:
        if not self.used:
            self._acquire()
            self.used = True
            import atexit

            atexit.register(self.close)
            with contextlib.suppress(ValueError):  # not the main thread
                self._previous_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
        up(count, exact=False, timeout=timeout)
        claim_session()  # again: a `down` inside the session removed the state with it
        wanted = {f"node{i}" for i in range(1, count + 1)}
        return Cluster([n for n in running_nodes() if n.name in wanted])

    def close(self) -> None:
        if not self.used:
            return
        self.used = False
        if os.environ.get("SPECDEPLOY_SANDBOX_KEEP") == "1":
            log(f"SPECDEPLOY_SANDBOX_KEEP=1: nodes left running ({inventory_path()})")
        else:
            for problem in down():
                log(problem)
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)  # type: ignore[arg-type]
            self._previous_sigterm = None
        if self._lock is not None:
            self._lock.close()  # type: ignore[attr-defined]
            self._lock = None


def _sigterm_to_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # lets pytest run its finalizers
