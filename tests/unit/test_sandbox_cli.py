"""The sandbox commands as a developer meets them: `make help`'s description, and
`make sandbox-down` next to a test session that holds the instance (issue 28)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# An instance no test session of this run takes (sessions start at 1 and count up).
INSTANCE = "29"


def test_sandbox_down_leaves_an_instance_a_test_session_holds() -> None:
    """Issue 28: `make sandbox-down` stopped the nodes under a running test session."""
    env = os.environ | {"SPECDEPLOY_SANDBOX_INSTANCE": INSTANCE}
    env["PYTHONPATH"] = f"{REPO / 'tests'}:{env.get('PYTHONPATH', '')}"
    code = (
        "from testbed.sandbox.session import session_lock_path; "
        f"print(session_lock_path({INSTANCE}))"
    )
    lock = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    with open(lock, "w") as held:  # what a test session holds for its whole run
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = subprocess.run(
            [sys.executable, "-m", "testbed.sandbox", "down"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert f"sandbox instance {INSTANCE} is in use by a test session" in proc.stderr
    assert "left running" in proc.stderr


def test_make_help_says_what_sandbox_up_and_down_do() -> None:
    """Issue 28: help said sandbox-down stops "every sandbox node" (it stops one instance)
    and sandbox-up boots "GPU nodes" into inventory/sandbox (no GPU; instance k's inventory
    is inventory/sandbox-k/)."""
    out = subprocess.run(
        ["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip()}
    assert "every sandbox node" not in lines["sandbox-down"]
    assert "SPECDEPLOY_SANDBOX_INSTANCE" in lines["sandbox-down"]
    assert "refused while a test session holds it" in lines["sandbox-down"]
    assert "no GPU" in lines["sandbox-up"] and "inventory/sandbox[-k]/" in lines["sandbox-up"]


def test_the_session_that_holds_the_instance_may_stop_its_own_nodes(tmp_path) -> None:
    """test_sandbox calls `sandbox down` on the instance its own session holds: the lock is
    that session's (session.json names a process the command runs under), so it is not
    refused."""
    env = os.environ | {
        "SPECDEPLOY_SANDBOX_INSTANCE": INSTANCE,
        "SPECDEPLOY_SANDBOX_STATE": str(tmp_path / "state"),
    }
    env["PYTHONPATH"] = f"{REPO / 'tests'}:{env.get('PYTHONPATH', '')}"
    (tmp_path / "state").mkdir()
    # this test's process is the session: the command below runs under it
    (tmp_path / "state" / "session.json").write_text(f'{{"pid": {os.getpid()}}}\n')
    code = (
        "from testbed.sandbox.session import session_lock_path; "
        f"print(session_lock_path({INSTANCE}))"
    )
    lock = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = subprocess.run(
            [sys.executable, "-m", "testbed.sandbox", "down"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    assert "in use by a test session" not in proc.stderr
