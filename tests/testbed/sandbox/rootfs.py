"""The Debian root file system: built once with debootstrap, cached, pruned."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.sandbox.config import (
    MASKED_UNITS,
    PACKAGES,
    PROVISION,
    SUITE,
    SandboxError,
    cache_dir,
    log,
)
from testbed.sandbox.host import flocked


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
        # stdout is the hosts file's path for `make sandbox-up`: passwd's "password changed"
        # went there on a fresh machine's first boot and broke the model staging after it
        subprocess.run(
            ["chroot", str(build), "/bin/sh", "-c", PROVISION], check=True, stdout=sys.stderr
        )
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
