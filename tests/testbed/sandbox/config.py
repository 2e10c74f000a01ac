"""Where an instance lives (addresses, state, inventory), the node record, shared constants."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


SUITE = "bookworm"


PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "sudo",
    "python3",
    "python3-venv",
    "python3-apt",  # Ansible's apt and pip modules need these two, as on a real node
    "python3-packaging",
    "iproute2",
    "procps",
    "curl",
    "ca-certificates",
    "less",
)


HOST_PACKAGES = {  # command -> Debian package providing it
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "unshare": "util-linux",
}


ADMIN_USER = "ops"


MAX_NODES = 50


MAX_INSTANCES = 32


GROUP_VARS = REPO / "inventory" / "sandbox-group_vars"  # linked as <inventory>/group_vars


NVIDIA_SMI_FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"


DEFAULT_SCENARIO = "healthy"


HW_TREE = Path("/etc/specdeploy-sandbox/hw")  # the doctor's fake hardware (hwtree.py)


MASKED_UNITS = (  # nothing of these is wanted in a throw-away node; they only cost boot time
    "getty.target",
    "console-getty.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "systemd-timesyncd.service",
)


# Runs in the fresh debootstrap tree (chroot); part of the rootfs cache key.
PROVISION = f"""
set -eu
useradd --create-home --shell /bin/bash --user-group {ADMIN_USER}
usermod --password '*' {ADMIN_USER}
passwd --lock root
printf '%s ALL=(ALL:ALL) NOPASSWD: ALL\\n' {ADMIN_USER} > /etc/sudoers.d/{ADMIN_USER}
chmod 0440 /etc/sudoers.d/{ADMIN_USER}
rm -f /etc/ssh/ssh_host_*
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
mkdir -p /var/log/journal /srv/wheelhouse /etc/specdeploy-sandbox
ln -sf /lib/systemd/system/multi-user.target /etc/systemd/system/default.target
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
"""


class SandboxError(Exception):
    """A node could not be built, started, reached or stopped."""


def cache_dir() -> Path:
    return Path(os.environ.get("SPECDEPLOY_CACHE") or Path.home() / ".cache" / "specdeploy")


def instance() -> int:
    """Which sandbox of this machine: 0 (default; make sandbox-up, demo) or 1.. (parallel test
    sessions pick a free one). Instance k uses 127.0.k.1N, its own state dir, cgroup, inventory."""
    value = int(os.environ.get("SPECDEPLOY_SANDBOX_INSTANCE") or 0)
    if not 0 <= value < MAX_INSTANCES:
        raise SandboxError(f"SPECDEPLOY_SANDBOX_INSTANCE must be 0..{MAX_INSTANCES - 1}")
    return value


def suffix() -> str:
    return f"-{instance()}" if instance() else ""


def state_dir() -> Path:
    default = f"/run/specdeploy-sandbox{suffix()}"
    return Path(os.environ.get("SPECDEPLOY_SANDBOX_STATE") or default)


def cgroup_name() -> str:
    return f"specdeploy-sandbox{suffix()}"


def inventory_path() -> Path:
    """inventory/sandbox/hosts.yml; instance k: inventory/sandbox-k/ (group_vars linked)."""
    return REPO / "inventory" / f"sandbox{suffix()}" / "hosts.yml"


def node_address(index: int) -> str:
    return f"127.0.{instance()}.{10 + index}"


def machine_name(index: int) -> str:
    return f"sandbox-node{index}" if not instance() else f"sandbox{instance()}-node{index}"


def ssh_port() -> int:
    """22 unless SPECDEPLOY_SANDBOX_PORT says otherwise (a host sshd on *:22 blocks 22)."""
    return int(os.environ.get("SPECDEPLOY_SANDBOX_PORT") or 22)


def host_key_name(address: str) -> str:
    port = ssh_port()
    return address if port == 22 else f"[{address}]:{port}"


def log(message: str) -> None:
    print(f"sandbox: {message}", file=sys.stderr, flush=True)


@dataclass
class Node:
    """One sandbox node as the state directory records it."""

    name: str  # node1
    index: int
    address: str
    hostname: str
    pid: int = 0  # the systemd-nspawn process
    starttime: str = ""  # /proc/<pid>/stat field 22, guards against pid reuse
    cgroups: tuple[str, ...] = ()

    @property
    def dir(self) -> Path:
        return state_dir() / self.name

    @property
    def machine(self) -> str:
        return machine_name(self.index)

    @classmethod
    def for_index(cls, index: int) -> Node:
        return cls(f"node{index}", index, node_address(index), f"sandbox-node{index}")

    @classmethod
    def load(cls, path: Path) -> Node | None:
        try:
            data = json.loads(path.read_text())
            data["cgroups"] = tuple(data.get("cgroups", ()))
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def save(self) -> None:
        (self.dir / "node.json").write_text(json.dumps(asdict(self), indent=2) + "\n")
        (self.dir / "nspawn.pid").write_text(f"{self.pid}\n")

    def alive(self) -> bool:
        return self.pid > 0 and process_starttime(self.pid) == self.starttime


def process_starttime(pid: int, zombies: bool = False) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X") and not zombies:
        return ""  # a zombie is not alive
    return fields[19]


@contextlib.contextmanager
def as_instance(index: int) -> Iterator[None]:
    previous = os.environ.get("SPECDEPLOY_SANDBOX_INSTANCE")
    os.environ["SPECDEPLOY_SANDBOX_INSTANCE"] = str(index)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SPECDEPLOY_SANDBOX_INSTANCE"]
        else:
            os.environ["SPECDEPLOY_SANDBOX_INSTANCE"] = previous
