"""The host side: packages the sandbox needs, locks, cgroups, process and mount lookups."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from testbed.sandbox.config import (
    HOST_PACKAGES,
    MAX_NODES,
    SandboxError,
    cgroup_name,
    log,
    machine_name,
    state_dir,
    suffix,
)


def ensure_host_packages() -> None:
    missing = sorted({pkg for cmd, pkg in HOST_PACKAGES.items() if shutil.which(cmd) is None})
    if not Path("/usr/share/keyrings/debian-archive-keyring.gpg").is_file():
        missing.append("debian-archive-keyring")  # debootstrap checks the archive with it
    if not missing:
        return
    if os.geteuid() != 0:
        raise SandboxError(f"missing host packages {missing}; install them as root")
    log(f"installing host packages: {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if subprocess.run(install, env=env).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(install, env=env, check=True)


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
# Every node's systemd holds inotify instances, all counted against root. Two `make test` side by
# side boot 20-odd nodes at once, and the kernel's default of 128 ran out (ci63: "Failed to
# create inotify object: Too many open files", a node never answered SSH). kind documents the
# same limit for its node containers.
NODES_INOTIFY_INSTANCES = 1024


def ensure_inotify_instances(
    minimum: int = NODES_INOTIFY_INSTANCES, setting: Path = INOTIFY_INSTANCES
) -> None:
    """Raise the host's inotify instances per user to `minimum` if it is lower (never lowers)."""
    try:
        current = int(setting.read_text().strip())
    except (OSError, ValueError) as unread:
        log(f"could not read {setting} ({unread}); nodes may fail to boot when many run")
        return
    if current >= minimum:
        return
    try:
        setting.write_text(f"{minimum}\n")
    except OSError as unwritten:
        log(f"{setting} is {current} and could not be raised ({unwritten.strerror}); "
            f"nodes may fail to boot when many run")  # fmt: skip
        return
    log(f"raised {setting} from {current} to {minimum}: every node's systemd holds some")


def lock_dir() -> Path:
    return Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """An exclusive lock on a file that is never removed (removing lock files races)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialise up/down of one sandbox instance."""
    with flocked(lock_dir() / f"specdeploy-sandbox{suffix() or '-0'}.lock"):
        state_dir().mkdir(parents=True, exist_ok=True)
        yield


def cgroup_roots() -> list[Path]:
    """The hierarchies each node gets its own cgroup in (v2 pure, or hybrid's two)."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        return [base]
    return [p for p in (base / "unified", base / "systemd") if (p / "cgroup.procs").exists()]


def node_cgroups(name: str) -> list[Path]:
    return [root / cgroup_name() / name for root in cgroup_roots()]


def cgroup_pids(group: Path) -> set[int]:
    pids: set[int] = set()
    if not group.is_dir():
        return pids
    for procs in group.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(line) for line in procs.read_text().split())
    return pids


def kill_cgroup(group: Path) -> None:
    if not group.is_dir():
        return
    kill = group / "cgroup.kill"
    if kill.exists():
        with contextlib.suppress(OSError):
            kill.write_text("1")
    for pid in cgroup_pids(group):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remove_cgroup(group: Path) -> bool:
    if not group.is_dir():
        return True
    dirs = sorted((p for p in group.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for sub in [*dirs, group]:
        with contextlib.suppress(OSError):
            sub.rmdir()
    return not group.exists()


def mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = line.split()[4].replace("\\040", " ")
            if point == str(path) or point.startswith(prefix):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def parent_pid(pid: int) -> int:
    """The parent of a process (0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def nspawn_processes(all_instances: bool = False) -> list[int]:
    """systemd-nspawn processes of this sandbox instance (or of every instance)."""
    names = {machine_name(i) for i in range(1, MAX_NODES + 1)}
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not cmdline[0].endswith("systemd-nspawn") or "--machine" not in cmdline[:-1]:
            continue
        machine = cmdline[cmdline.index("--machine") + 1]
        if machine in names or (all_instances and machine.startswith("sandbox")):
            pids.append(int(proc.name))
    return pids
