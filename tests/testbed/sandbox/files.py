"""What goes into a node's writable layer: keys, sshd config, nvidia-smi replay, hardware tree."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from testbed.sandbox.config import (
    ADMIN_USER,
    DEFAULT_SCENARIO,
    HW_TREE,
    NVIDIA_SMI_FIXTURES,
    Node,
    SandboxError,
    host_key_name,
    ssh_port,
    state_dir,
)


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
        ed25519_keygen(key, "specdeploy-sandbox")
    return key


def ed25519_keygen(path: Path, comment: str) -> None:
    """A new passphrase-less ed25519 key pair at path (and path.pub)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
    )


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
    ed25519_keygen(keydir / "k", f"root@{node.hostname}")
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
    if zipimport_cache_wanted():
        install_zipimport_cache(upper, lower)
    put(
        upper,
        lower,
        "etc/specdeploy-sandbox/node.json",
        json.dumps({"name": node.name, "address": node.address, "hostname": node.hostname}),
    )
    keytype, keydata = pub.split()[:2]
    return f"{host_key_name(node.address)} {keytype} {keydata}\n"


ZIPIMPORT_CACHE_SWITCH = "SPECDEPLOY_SANDBOX_ZIPIMPORT_CACHE"


def zipimport_cache_wanted() -> bool:
    """On unless the environment says off (make bench: its figures stand for a real node)."""
    value = os.environ.get(ZIPIMPORT_CACHE_SWITCH, "on").strip().lower()
    if value not in ("on", "off"):
        raise SandboxError(f"{ZIPIMPORT_CACHE_SWITCH} must be on or off, not {value!r}")
    return value == "on"


def install_zipimport_cache(upper: Path, lower: Path) -> None:
    """The node's system Python keeps what zipimport compiles (zipimport_cache.py says why)."""
    pythons = sorted(p.name for p in (lower / "usr" / "lib").glob("python3.*") if p.is_dir())
    if not pythons:
        raise SandboxError(f"no python3.X under {lower / 'usr' / 'lib'}")
    site = f"usr/local/lib/{pythons[-1]}/dist-packages"
    source = (Path(__file__).parent / "zipimport_cache.py").read_bytes()
    put(upper, lower, f"{site}/specdeploy_sandbox_zipimport_cache.py", source)
    put(
        upper,
        lower,
        f"{site}/specdeploy_sandbox_zipimport_cache.pth",
        "import specdeploy_sandbox_zipimport_cache\n",
    )
    cache = "var/cache/specdeploy-sandbox-zipimport"
    put(
        upper, lower, f"{cache}/README", "sandbox only: zipimport's compiled code, by source hash\n"
    )
    os.chmod(upper / cache, 0o1777)  # every user's module runs share it


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
