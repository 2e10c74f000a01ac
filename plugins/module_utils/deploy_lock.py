"""The per-node deploy lock: one deploy or rollback at a time on a node.

Stdlib only. Two sides, one file:

* ON THE NODE (as root; the module specdeploy.toolkit.deploy_lock runs these functions, with
  check mode and diff): `acquire`,
  `release`, `show`.
  The lock is the file `<root>/.deploy.lock`, created atomically (hard link of a complete
  temporary file: there is never a half-written lock) holding its owner as JSON: a random
  token, the controller's host name, the ansible-playbook process id and its start time,
  the user, what runs (deploy, rollback) and when it started.
* ON THE CONTROLLER: `whoami` finds the ansible-playbook process this command runs under
  (the owner to record); `alive` tells whether a recorded owner still runs (only answerable
  on the controller that took the lock: true/false, else null).

Stale locks: a lock whose owner ran on this controller and is gone (killed ansible-playbook,
dropped SSH) is broken by the next run at once (`acquire --break-token`, which only removes
the lock when it still carries that token, so two runs cannot both break it). A lock from
another controller is stale only after `--stale-after` seconds (the owner cannot be asked).

    python3 deploy_lock.py acquire --root /opt/specdeploy --owner-json '{...}' [--stale-after S]
        [--break-token TOKEN]
    python3 deploy_lock.py release --root /opt/specdeploy --token TOKEN
    python3 deploy_lock.py show --root /opt/specdeploy
    python3 deploy_lock.py whoami [--purpose deploy]
    python3 deploy_lock.py alive --owner-json '{...}'

Every command prints one JSON object. Exit codes: 0 ok (acquired, released, shown), 1 the lock
is held by someone else (acquire) or not ours (release), 2 usage or environment error.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

LOCK_NAME = ".deploy.lock"
# Outside the release root: taking and giving back the lock must not touch what a no-op
# deploy promises to leave unchanged (the root's listing, its mtime).
LOCK_DIR = Path("/run/lock/specdeploy")


def lock_dir(root: Path, create: bool = True) -> Path:
    path = LOCK_DIR / str(root).strip("/").replace("/", "_")
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def lock_path(root: Path, create: bool = True) -> Path:
    return lock_dir(root, create) / LOCK_NAME


def read_owner(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads(lock_path(root, create=False).read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return {"token": None, "corrupt": True}


def _age(owner: dict[str, Any], now: float) -> float | None:
    started = owner.get("taken_at_epoch")
    return None if not isinstance(started, (int, float)) else max(0.0, now - started)


def acquire(
    root: Path,
    owner: dict[str, Any],
    stale_after: float,
    break_token: str | None = None,
    now: float | None = None,
    check: bool = False,
) -> dict[str, Any]:
    """Take the lock, or say who holds it. Breaks it only when stale (see module doc).
    ``check``: change nothing, say whether it would be taken (and what it would break)."""
    if not owner.get("token"):
        raise ValueError("the owner needs a token")
    now = time.time() if now is None else now
    if not root.is_dir():
        raise FileNotFoundError(f"the release root {root} does not exist")
    broken = None
    held = read_owner(root)
    if held is not None:
        if held.get("token") == owner["token"]:
            return {"acquired": True, "changed": False, "owner": held, "broken": None}
        age = _age(held, now)
        expired = bool(held.get("corrupt")) or (age is not None and age > stale_after)
        gone = bool(break_token) and held.get("token") == break_token
        if not (expired or gone):
            return _held(root, now, held)
        reason = "expired" if expired else "its ansible-playbook is gone"
        outcome = True if check else _break(root, held)
        if outcome is False:
            return _held(root, now)
        if outcome:
            broken = {**held, "reason": reason}
    record = {
        **owner,
        "node": socket.gethostname(),
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "taken_at_epoch": now,
    }
    if check:
        return {"acquired": True, "changed": True, "owner": record, "broken": broken}
    tmp = lock_dir(root) / f"{LOCK_NAME}.{owner['token']}.tmp"
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
    os.chmod(tmp, 0o644)
    try:
        os.link(tmp, lock_path(root))  # atomic: fails when a lock exists
    except FileExistsError:
        return _held(root, now)
    finally:
        tmp.unlink()
    return {"acquired": True, "changed": True, "owner": record, "broken": broken}


def _break(root: Path, held: dict[str, Any]) -> bool | None:
    """Remove the stale lock ``held``: True when removed, None when it was gone already, False
    when a fresh lock had taken its place (left as it is)."""
    # Move the stale lock aside first: of two runs breaking it, one gets it.
    aside = lock_dir(root) / f"{LOCK_NAME}.stale-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(lock_path(root), aside)
    except FileNotFoundError:
        return None
    moved = read_owner_file(aside) or {}
    if moved.get("token") != held.get("token"):  # a fresh lock slipped in: restore it
        with contextlib.suppress(FileExistsError):
            os.link(aside, lock_path(root))
            aside.unlink()
        return False
    aside.unlink()
    return True


def read_owner_file(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _held(root: Path, now: float, held: dict[str, Any] | None = None) -> dict[str, Any]:
    held = held if held is not None else read_owner(root) or {}
    age = _age(held, now)
    return {
        "acquired": False,
        "changed": False,
        "owner": held,
        "age_s": None if age is None else round(age, 1),
        "message": describe(held, age),
    }


def describe(owner: dict[str, Any], age: float | None) -> str:
    if owner.get("corrupt"):
        return "an unreadable lock file"
    who = f"{owner.get('user', '?')}@{owner.get('controller', '?')}"
    since = f"{age:.0f} s ago" if age is not None else "at an unknown time"
    return (
        f"a {owner.get('purpose', 'deploy')} by {who} (ansible-playbook pid "
        f"{owner.get('pid', '?')}), started {since} ({owner.get('taken_at', '?')})"
    )


def release(root: Path, token: str, check: bool = False) -> dict[str, Any]:
    held = read_owner(root)
    if held is None:
        return {"released": False, "changed": False, "message": "no lock was held"}
    if held.get("token") != token:
        return {
            "released": False,
            "changed": False,
            "owner": held,
            "message": f"the lock belongs to {describe(held, None)}, not to this run",
        }
    if not check:
        with contextlib.suppress(FileNotFoundError):
            lock_path(root).unlink()
    return {"released": True, "changed": True, "owner": held}


def process_starttime(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def playbook_process(start: int | None = None) -> int | None:
    """The outermost ansible-playbook process among this process's ancestors."""
    pid = os.getppid() if start is None else start
    found = None
    while pid > 1:
        if any(Path(arg).name == "ansible-playbook" for arg in _cmdline(pid)[:3]):
            found = pid
        pid = _parent(pid)
    return found


def whoami(purpose: str) -> dict[str, Any]:
    pid = playbook_process() or os.getppid()
    return {
        "token": uuid.uuid4().hex,
        "controller": socket.gethostname(),
        "pid": pid,
        "pid_starttime": process_starttime(pid),
        "user": getpass.getuser(),
        "purpose": purpose,
    }


def alive(owner: dict[str, Any]) -> bool | None:
    """Is the owner's ansible-playbook still running? None: not this controller's to tell."""
    if owner.get("controller") != socket.gethostname() or not owner.get("pid"):
        return None
    current = process_starttime(int(owner["pid"]))
    return current is not None and current == owner.get("pid_starttime")
