"""Sandbox GPU nodes: Debian 12 hosts booted with systemd-nspawn, reachable over real SSH.

Each node is a full `systemd-nspawn -b` boot (systemd is PID 1 inside) of a Debian bookworm
root file system built once with debootstrap and cached outside the repository. A node gets its
own overlayfs writable layer, shares the host network and runs sshd only on its own loopback
address (node1 -> 127.0.0.11, node2 -> 127.0.0.12, ...). The admin user `ops` logs in with an
ed25519 key only and has passwordless sudo; host keys are generated per node and recorded in a
known_hosts file that the generated inventory uses with StrictHostKeyChecking=yes. The node has
no GPU: an nvidia-smi replay (tests/fixtures/nvidia-smi/) answers for 8 x RTX PRO 6000.

    python -m testbed.sandbox up --nodes 2      # exactly node1..node2 running
    python -m testbed.sandbox status [--json]
    python -m testbed.sandbox ssh node1 -- sudo -n true
    python -m testbed.sandbox scenario node1 seven_gpus
    python -m testbed.sandbox down              # stops everything, also stale leftovers
    python -m testbed.sandbox down --all        # every instance (test sessions too)

Nothing leaks: the overlay is mounted inside a private mount namespace that dies with the node,
every node runs in its own cgroup (killed as a whole by `down`), and `down` also cleans what a
crashed or interrupted run left behind. Several sandboxes can run side by side: instance k
(SPECDEPLOY_SANDBOX_INSTANCE=k, default 0) uses 127.0.k.1N, /run/specdeploy-sandbox-k and
inventory/sandbox-k/; pytest sessions pick a free instance by themselves (see Session).
Environment: SPECDEPLOY_CACHE (default ~/.cache/specdeploy), SPECDEPLOY_SANDBOX_INSTANCE,
SPECDEPLOY_SANDBOX_STATE (default /run/specdeploy-sandbox[-k]), SPECDEPLOY_SANDBOX_PORT
(default 22), SPECDEPLOY_SANDBOX_KEEP=1 (pytest leaves nodes up), SPECDEPLOY_DEBIAN_MIRROR
(default http://deb.debian.org/debian).
Exit codes: 0 ok, 1 a node failed to come up / check failed, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from specdeploy.node.module_utils.specdeploy_fsio import atomic_write

REPO = Path(__file__).resolve().parents[2]
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


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


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


# ---------------------------------------------------------------- host helpers


def process_starttime(pid: int, zombies: bool = False) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X") and not zombies:
        return ""  # a zombie is not alive
    return fields[19]


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


# ---------------------------------------------------------------- root file system


def rootfs_key() -> str:
    recipe = {
        "suite": SUITE,
        "packages": sorted(PACKAGES),
        "provision": PROVISION,
        "masked": sorted(MASKED_UNITS),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def rootfs_path() -> Path:
    """The current root file system: <cache>/rootfs/bookworm, a symlink to bookworm-<key>."""
    return cache_dir() / "rootfs" / SUITE


def ensure_rootfs() -> Path:
    key = rootfs_key()
    base = cache_dir() / "rootfs"
    target = base / f"{SUITE}-{key}"
    if not (target / ".specdeploy-rootfs").is_file():
        with flocked(base / ".build.lock"):  # one builder per cache; the others wait and reuse
            if not (target / ".specdeploy-rootfs").is_file():
                build_rootfs(target, key)
    with flocked(base / ".build.lock"):
        switch_rootfs_link(base, target)
    return target


def switch_rootfs_link(base: Path, target: Path) -> None:
    link = rootfs_path()
    if not link.is_symlink() or os.readlink(link) != target.name:
        tmp_link = base / f".{SUITE}.link-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            tmp_link.unlink()
        tmp_link.symlink_to(target.name)
        if link.exists() and not link.is_symlink():
            shutil.rmtree(link)
        os.replace(tmp_link, link)  # atomic switch to the new tree


def prune_rootfs(current: Path) -> None:
    """Drop root file systems of older recipes (only called while no node runs)."""
    for old in current.parent.glob(f"{SUITE}-*"):
        if old != current and old.is_dir() and not old.is_symlink():
            log(f"removing the outdated root file system {old.name}")
            shutil.rmtree(old, ignore_errors=True)
    for stale_log in current.parent.glob("debootstrap-*.log"):
        if stale_log.name != f"debootstrap-{current.name.rsplit('-', 1)[1]}.log":
            stale_log.unlink(missing_ok=True)


def build_rootfs(target: Path, key: str) -> None:
    mirror = os.environ.get("SPECDEPLOY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(".build-*"):  # left by an interrupted build
        shutil.rmtree(stale, ignore_errors=True)
    build = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=target.parent))
    os.chmod(build, 0o755)
    started = time.monotonic()
    log(f"building the {SUITE} root file system (once, ~2-3 min) into {target}")
    try:
        logfile = target.parent / f"debootstrap-{key}.log"
        with open(logfile, "w") as out:
            result = subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(PACKAGES)}",
                    SUITE,
                    str(build),
                    mirror,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if result.returncode != 0:
            tail = logfile.read_text().splitlines()[-20:]
            raise SandboxError("debootstrap failed:\n" + "\n".join(tail))
        subprocess.run(["chroot", str(build), "/bin/sh", "-c", PROVISION], check=True)
        subprocess.run(
            ["systemctl", f"--root={build}", "mask", "--quiet", *MASKED_UNITS], check=True
        )
        (build / ".specdeploy-rootfs").write_text(
            json.dumps(
                {
                    "key": key,
                    "suite": SUITE,
                    "packages": list(PACKAGES),
                    "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                }
            )
            + "\n"
        )
        if target.exists():
            shutil.rmtree(target)
        os.rename(build, target)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    log(f"root file system built in {time.monotonic() - started:.0f} s")


# ---------------------------------------------------------------- keys and files


def ssh_dir() -> Path:
    return state_dir() / "ssh"


def client_key() -> Path:
    return ssh_dir() / "id_ed25519"


def known_hosts() -> Path:
    return ssh_dir() / "known_hosts"


def ensure_client_key() -> Path:
    key = client_key()
    if not key.is_file():
        ssh_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "specdeploy-sandbox",
                "-f",
                str(key),
            ],
            check=True,
        )
    return key


def put(
    upper: Path,
    lower: Path,
    rel: str,
    content: bytes | str,
    mode: int = 0o644,
    owner: tuple[int, int] = (0, 0),
) -> None:
    """Write /<rel> into a node's writable layer; new parents copy the lower layer's metadata."""
    parts = Path(rel.lstrip("/")).parts
    for depth in range(1, len(parts)):
        sub = Path(*parts[:depth])
        up = upper / sub
        if up.is_dir():
            continue
        up.mkdir()
        low = lower / sub
        if low.is_dir():
            st = low.stat()
            os.chown(up, st.st_uid, st.st_gid)
            os.chmod(up, st.st_mode & 0o7777)
    path = upper / rel.lstrip("/")
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    os.chown(path, *owner)
    os.chmod(path, mode)


def user_ids(lower: Path, user: str) -> tuple[int, int]:
    for line in (lower / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise SandboxError(f"user {user} missing from the root file system")


def sshd_config(node: Node) -> str:
    return f"""# written by testbed.sandbox: this node listens on its own loopback address only
ListenAddress {node.address}:{ssh_port()}
HostKey /etc/ssh/ssh_host_ed25519_key
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers {ADMIN_USER}
UseDNS no
"""


def prepare_layer(node: Node, lower: Path) -> str:
    """Fill the node's writable layer before boot; returns its known_hosts line."""
    upper = node.dir / "upper"
    for sub in ("upper", "work", "root"):
        (node.dir / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(upper, 0o755)
    put(upper, lower, "etc/hostname", f"{node.hostname}\n")
    put(upper, lower, "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    put(
        upper,
        lower,
        "etc/hosts",
        f"127.0.0.1\tlocalhost\n{node.address}\t{node.hostname}\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n",
    )
    # Offline on purpose: nothing in a node may talk to an address outside 127.0.0.0/8.
    put(upper, lower, "etc/resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    put(upper, lower, "etc/ssh/sshd_config.d/10-specdeploy-sandbox.conf", sshd_config(node))
    keydir = Path(tempfile.mkdtemp(dir=node.dir))
    subprocess.run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"root@{node.hostname}",
            "-f",
            str(keydir / "k"),
        ],
        check=True,
    )
    pub = (keydir / "k.pub").read_text()
    put(upper, lower, "etc/ssh/ssh_host_ed25519_key", (keydir / "k").read_bytes(), 0o600)
    put(upper, lower, "etc/ssh/ssh_host_ed25519_key.pub", pub)
    shutil.rmtree(keydir)
    uid_gid = user_ids(lower, ADMIN_USER)
    home = f"home/{ADMIN_USER}"
    put(
        upper,
        lower,
        f"{home}/.ssh/authorized_keys",
        Path(str(client_key()) + ".pub").read_text(),
        0o600,
        uid_gid,
    )
    os.chown(upper / home / ".ssh", *uid_gid)
    os.chmod(upper / home / ".ssh", 0o700)
    install_nvidia_smi(upper, lower)
    install_hw_tree(upper, lower)
    put(
        upper,
        lower,
        "etc/specdeploy-sandbox/node.json",
        json.dumps({"name": node.name, "address": node.address, "hostname": node.hostname}),
    )
    keytype, keydata = pub.split()[:2]
    return f"{host_key_name(node.address)} {keytype} {keydata}\n"


def install_nvidia_smi(upper: Path, lower: Path) -> None:
    script = NVIDIA_SMI_FIXTURES / "nvidia_smi_replay.py"
    if not script.is_file():
        raise SandboxError(f"nvidia-smi replay missing: {script}")
    put(upper, lower, "usr/bin/nvidia-smi", script.read_bytes(), 0o755)
    for scenario in sorted((NVIDIA_SMI_FIXTURES / "scenarios").glob("*.json")):
        put(
            upper,
            lower,
            f"usr/share/specdeploy-sandbox/nvidia-smi/{scenario.name}",
            scenario.read_bytes(),
        )
    put(upper, lower, "etc/specdeploy-sandbox/nvidia-smi-scenario", DEFAULT_SCENARIO + "\n")


def install_hw_tree(upper: Path, lower: Path) -> None:
    """The healthy fake /sys, /proc and kernel log (hwtree.py) at HW_TREE, for the doctor's
    --root / --kernel-log (inventory/sandbox-group_vars/gpu_nodes.yml points there)."""
    script = NVIDIA_SMI_FIXTURES / "hwtree.py"
    spec = importlib.util.spec_from_file_location("specdeploy_sandbox_hwtree", script)
    if spec is None or spec.loader is None or not script.is_file():
        raise SandboxError(f"hardware tree builder missing: {script}")
    hwtree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hwtree)
    rel = HW_TREE.relative_to("/")
    put(upper, lower, f"{rel}/.keep", "")  # makes the parents like any other file of the layer
    target = upper / rel
    (target / ".keep").unlink()
    hwtree.build(target, DEFAULT_SCENARIO)
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            os.chown(path, 0, 0)
            os.chmod(path, 0o755 if path.is_dir() else 0o644)


# ---------------------------------------------------------------- cgroups


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


# ---------------------------------------------------------------- start / stop


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
    wheelhouse = cache_dir() / "wheelhouse"
    wheelhouse.mkdir(parents=True, exist_ok=True)
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


# ---------------------------------------------------------------- inventory


def write_inventory(nodes: list[Node], path: Path | None = None) -> Path:
    path = path or inventory_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    link = path.parent / "group_vars"
    if GROUP_VARS.is_dir() and not link.exists():  # the sandbox group vars kept in git
        with contextlib.suppress(FileNotFoundError):
            link.unlink()  # a dangling link
        link.symlink_to(os.path.relpath(GROUP_VARS, path.parent))
    lines = [
        "# Generated by `python -m testbed.sandbox up`; do not edit (rewritten on every up).",
        "---",
        "all:",
        "  children:",
        "    gpu_nodes:",
        "      hosts:",
    ]
    ssh_args = f"-o UserKnownHostsFile={known_hosts()} -o StrictHostKeyChecking=yes"
    for node in nodes:
        lines += [
            f"        {node.hostname}:",
            f"          ansible_host: {node.address}",
            f"          ansible_port: {ssh_port()}",
            f"          ansible_user: {ADMIN_USER}",
            f"          ansible_ssh_private_key_file: {client_key()}",
            f'          ansible_ssh_common_args: "{ssh_args}"',
            "          ansible_python_interpreter: /usr/bin/python3",
            "          sandbox_node: true",
            f"          sandbox_address: {node.address}  # nodes share the host network: bind here",
            f"          sandbox_node_name: {node.name}",
        ]
    atomic_write(path, "\n".join(lines) + "\n")
    return path


def write_known_hosts(nodes: list[Node]) -> None:
    text = "".join((n.dir / "known_hosts").read_text() for n in nodes)
    atomic_write(known_hosts(), text)


# ---------------------------------------------------------------- commands


def running_nodes() -> list[Node]:
    reap_children()
    return [n for n in known_nodes().values() if n.alive()]


def up(count: int, exact: bool = True, timeout: float = 90.0) -> list[Node]:
    """Make node1..node<count> run (keeping those already up); returns the running nodes."""
    if not 1 <= count <= MAX_NODES:
        raise SandboxError(f"--nodes must be between 1 and {MAX_NODES}")
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root (systemd-nspawn, overlayfs, cgroups)")
    ensure_host_packages()
    with locked():
        lower = ensure_rootfs()
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
        write_inventory(nodes)
        return nodes


def down() -> list[str]:
    """Stop every node, running or stale; remove all sandbox state. Returns problems."""
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root")
    with locked():
        nodes = list(known_nodes().values())
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


def session_lock_path(index: int) -> Path:
    return lock_dir() / f"specdeploy-sandbox-{index}.session"


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


class Session:
    """Session-wide owner of a sandbox instance for pytest: `session(n)` gives >= n running
    nodes; close() (finalizer, atexit, SIGTERM) stops them all. The session takes instance 0
    (127.0.0.1N, inventory/sandbox/) unless another session holds it or nodes from
    `make sandbox-up` run there: then the next free instance k (127.0.k.1N), so parallel runs
    and a developer's own sandbox are left alone. SPECDEPLOY_SANDBOX_INSTANCE=k forces one;
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
        explicit = os.environ.get("SPECDEPLOY_SANDBOX_INSTANCE")
        for index in [int(explicit)] if explicit else range(MAX_INSTANCES):
            handle = open(session_lock_path(index), "w")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if explicit else fcntl.LOCK_NB))
            except BlockingIOError:
                handle.close()
                continue
            with as_instance(index):
                clean_crashed_session()
                busy = not explicit and bool(running_nodes())
                if not busy:
                    claim_session()
            if busy:  # someone's `make sandbox-up`: not ours to reuse or stop
                handle.close()
                continue
            self.instance, self._lock = index, handle
            os.environ["SPECDEPLOY_SANDBOX_INSTANCE"] = str(index)  # children follow
            return
        raise SandboxError(f"no free sandbox instance (0..{MAX_INSTANCES - 1})")

    def __call__(self, count: int = 1, timeout: float = 90.0) -> Cluster:
        if not self.used:
            self._acquire()
            self.used = True
            import atexit

            atexit.register(self.close)
            with contextlib.suppress(ValueError):  # not the main thread
                self._previous_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
        up(count, exact=False, timeout=timeout)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="boot node1..N (nodes already up are kept)")
    p_up.add_argument("--nodes", type=int, default=1)
    p_up.add_argument("--keep-extra", action="store_true", help="keep nodes above N running")
    p_up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for sshd")
    p_down = sub.add_parser("down", help="stop every node and remove all sandbox state")
    p_down.add_argument("--all", action="store_true", help="every instance, test sessions too")
    p_status = sub.add_parser("status", help="list the nodes")
    p_status.add_argument("--json", action="store_true")
    p_ssh = sub.add_parser("ssh", help="run a command on a node as ops (no command: a shell)")
    p_ssh.add_argument("node")
    p_ssh.add_argument("cmd", nargs=argparse.REMAINDER)
    p_sc = sub.add_parser("scenario", help="switch a node's nvidia-smi replay scenario")
    p_sc.add_argument("node")
    p_sc.add_argument("scenario")
    sub.add_parser("build", help="build the cached root file system only")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            if session_held_elsewhere():
                raise SandboxError(
                    f"a test session is using sandbox instance {instance()} right now; wait for "
                    "it, or pick another one with SPECDEPLOY_SANDBOX_INSTANCE=k (127.0.k.1N)"
                )
            up(args.nodes, exact=not args.keep_extra, timeout=args.timeout)
            print(inventory_path())
        elif args.command == "down":
            problems = []
            for index in instances_in_use() if args.all else [instance()]:
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
    except SandboxError as error:
        log(f"error: {error}")
        return 1 if args.command == "up" else 2
    except subprocess.CalledProcessError as error:
        log(f"error: {error}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
