"""ExecStartPre of the vLLM unit: refuse to start on busy GPUs, clear our /dev/shm leftovers.

A server killed hard leaves EngineCore or tensor-parallel workers holding GPU memory and NCCL
segments in /dev/shm; a new start then fails late (out of memory after a long load) or hangs.
Runs as root from the release (stdlib only, no package imports: systemd calls it by path).
Exit codes: 0 ok, 1 GPUs busy, 2 cannot tell (nvidia-smi failed).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path


def gpu_processes(nvidia_smi: str) -> list[tuple[str, str, str]]:
    """(pid, process name, used MiB) of every compute process, as nvidia-smi reports them."""
    output = subprocess.run(
        [
            nvidia_smi,
            "--query-compute-apps=pid,process_name,used_memory",
            "--format=csv,noheader,nounits",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    rows = []
    for line in output.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and fields[0]:
            rows.append((fields[0], fields[1], fields[2]))
    return rows


def clear_shm(user: str, shm: Path) -> list[str]:
    """Remove files in /dev/shm owned by the service user (it is not running now)."""
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return []
    removed = []
    for entry in shm.iterdir() if shm.is_dir() else []:
        try:
            if entry.lstat().st_uid != uid:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry.name)
        except FileNotFoundError:
            continue
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--user", required=True, help="the service user")
    parser.add_argument("--shm", default="/dev/shm", type=Path)
    parser.add_argument("--nvidia-smi", default=shutil.which("nvidia-smi") or "nvidia-smi")
    args = parser.parse_args(argv)
    try:
        busy = gpu_processes(args.nvidia_smi)
    except (OSError, subprocess.SubprocessError) as error:
        print(
            f"prestart: cannot list GPU processes with {args.nvidia_smi}: {error}", file=sys.stderr
        )
        return 2
    if busy:
        listing = "; ".join(f"pid {pid} {name} {mib} MiB" for pid, name, mib in busy)
        print(
            f"prestart: refusing to start: GPU memory is held by {listing}. "
            "Stop those processes (a leftover vLLM worker?) and start again.",
            file=sys.stderr,
        )
        return 1
    removed = clear_shm(args.user, args.shm)
    if removed:
        print(f"prestart: removed {len(removed)} leftover /dev/shm entries of {args.user}")
    os.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
