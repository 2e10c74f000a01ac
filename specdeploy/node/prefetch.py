"""Read a model's files into the page cache before the server stops (node side, stdlib only).

A restart's weight loading reads the whole checkpoint (547 GB for Kimi-K2.5); from the page
cache it is several times faster than from disk. Before the old server stops, this asks the
kernel to read the model's files ahead (posix_fadvise POSIX_FADV_WILLNEED, the kernel's own
read-ahead; it returns once the reads are queued), when the node's MemAvailable holds them with
room to spare. Mode (the knob specdeploy_prefetch_model): ``auto`` only when they fit,
``always`` regardless of memory (the kernel evicts what does not fit), ``never``. Read-only
for the files; changes nothing but the page cache.

    python -m specdeploy.node.prefetch --mode auto --path /srv/models/target [--path DRAFTER] \\
        [--reserve-gb 16] [--json]

Exit codes: 0 read ahead or skipped with a reason, 2 usage error (a path that is no directory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MODES = ("auto", "always", "never")
# What a checkpoint directory holds that the loader reads: weights and their small companions.
SUFFIXES = (".safetensors", ".bin", ".pt", ".json", ".model", ".tiktoken", ".txt", ".py")
GIB = 1024**3


@dataclass
class Plan:
    mode: str
    files: int
    bytes: int
    mem_available: int
    reserve: int
    prefetch: bool
    reason: str
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemAvailable in bytes (0 when the kernel does not say)."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def model_files(paths: list[Path]) -> list[Path]:
    """The files the loader reads, largest first (the weights are what counts)."""
    found = {
        p
        for root in paths
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and p.suffix in SUFFIXES
    }
    return sorted(found, key=lambda p: (-p.stat().st_size, str(p)))


def plan(mode: str, files: list[Path], available: int, reserve: int) -> Plan:
    size = sum(p.stat().st_size for p in files)
    gib = f"{size / GIB:.1f} GiB in {len(files)} files"
    room = f"MemAvailable {available / GIB:.1f} GiB, reserve {reserve / GIB:.1f} GiB"
    if mode == "never":
        return Plan(mode, len(files), size, available, reserve, False, "off (never)")
    if not files:
        return Plan(mode, 0, 0, available, reserve, False, "no model files found")
    if mode == "always":
        return Plan(mode, len(files), size, available, reserve, True, f"{gib} (always; {room})")
    if size + reserve > available:
        reason = f"skipped: {gib} do not fit ({room}); the server reads them from disk"
        return Plan(mode, len(files), size, available, reserve, False, reason)
    return Plan(mode, len(files), size, available, reserve, True, f"{gib} ({room})")


def read_ahead(files: list[Path]) -> list[str]:
    """Ask the kernel to read every file ahead; errors per file, none fatal."""
    errors = []
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as error:
            errors.append(f"{path}: {error.strerror}")
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError as error:
            errors.append(f"{path}: {error.strerror}")
        finally:
            os.close(fd)
    return errors


def run(mode: str, paths: list[Path], reserve: int, meminfo: Path) -> Plan:
    files = model_files(paths) if mode != "never" else []
    result = plan(mode, files, mem_available(meminfo), reserve)
    if result.prefetch:
        started = time.monotonic()
        result.errors = read_ahead(files)
        result.seconds = round(time.monotonic() - started, 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="specdeploy.node.prefetch", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mode", choices=MODES, default="auto")
    parser.add_argument("--path", type=Path, action="append", default=[], required=True)
    parser.add_argument(
        "--reserve-gb", type=float, default=16.0, help="memory to leave free (auto mode)"
    )
    parser.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.path if not p.is_dir()]
    if missing:
        print(f"prefetch: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    result = run(args.mode, args.path, int(args.reserve_gb * GIB), args.meminfo)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        verb = "read ahead" if result.prefetch else "no read-ahead"
        print(f"prefetch: {verb}: {result.reason}")
        for error in result.errors:
            print(f"prefetch: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
