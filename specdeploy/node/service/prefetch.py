"""Read a model's files into the page cache before the server stops (node side, stdlib only).

A restart's weight loading reads the whole checkpoint (547 GB for Kimi-K2.5); from the page
cache it is several times faster than from disk. Before the old server stops, this asks the
kernel to read the model's files ahead (posix_fadvise POSIX_FADV_WILLNEED, the kernel's own
read-ahead, which returns once the reads are queued) and then waits until every byte is
resident, by reading the files through on a few threads (pages already read cost a copy, the
rest is waited for), so the stop comes after the read and the read is outside the downtime
window; at most --timeout-s, then the stop goes ahead and the kernel keeps reading. Only when
the node's MemAvailable holds the files with room to spare. Mode (the knob
specdeploy_prefetch_model): ``auto`` only when they fit, ``always`` regardless of memory (the
kernel evicts what does not fit), ``never``. Read-only for the files; changes nothing but the
page cache.

    python -m specdeploy.node.service.prefetch --mode auto --path /srv/models/target [--path
    DRAFTER] \\
        [--reserve-gb 16] [--timeout-s 900] [--json]

Exit codes: 0 read ahead or skipped with a reason, 2 usage error (a path that is no directory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

MODES = ("auto", "always", "never")
# What a checkpoint directory holds that the loader reads: weights and their small companions.
SUFFIXES = (".safetensors", ".bin", ".pt", ".json", ".model", ".tiktoken", ".txt", ".py")
GIB = 1024**3
# Concurrent read-throughs: a deep enough queue for NVMe and RAID (a single reader left the
# H200 machine's virtual disk at 1.53-1.59 GB/s; docs/load-times.md), few enough for the node.
READ_THREADS = 8
CHUNK = 16 << 20


@dataclass
class Plan:
    mode: str
    files: int
    bytes: int
    mem_available: int
    reserve: int
    prefetch: bool
    reason: str
    seconds: float = 0.0  # until every byte was resident, or the timeout
    resident_bytes: int = 0
    # from the unrounded time: a small model read in under 5 ms still has a rate
    gb_per_s: float | None = None
    timed_out: bool = False
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


def advise(files: list[Path]) -> list[str]:
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


def read_through(path: Path, deadline: float) -> tuple[int, str | None]:
    """Read a file to its end (into the page cache), or until the monotonic deadline."""
    done = 0
    buffer = bytearray(CHUNK)
    try:
        with open(path, "rb", buffering=0) as handle:
            while time.monotonic() < deadline:
                n = handle.readinto(buffer)
                if not n:
                    break
                done += n
    except OSError as error:
        return done, f"{path}: {error.strerror}"
    return done, None


def run(mode: str, paths: list[Path], reserve: int, meminfo: Path, timeout_s: float) -> Plan:
    files = model_files(paths) if mode != "never" else []
    result = plan(mode, files, mem_available(meminfo), reserve)
    if not result.prefetch:
        return result
    started = time.monotonic()
    result.errors = advise(files)
    deadline = started + timeout_s
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(files))) as pool:
        for done, error in pool.map(lambda p: read_through(p, deadline), files):
            result.resident_bytes += done
            if error:
                result.errors.append(error)
    elapsed = time.monotonic() - started
    result.seconds = round(elapsed, 2)
    result.gb_per_s = round(result.resident_bytes / elapsed / 1e9, 2) if elapsed > 0 else None
    result.timed_out = result.resident_bytes < result.bytes and time.monotonic() >= deadline
    return result


def message(result: Plan) -> str:
    """The line a deploy prints before the stop (roles/vllm_service/tasks/restart.yml)."""
    text = f"page cache read-ahead {result.reason}"
    if result.prefetch:
        text += f": resident in {result.seconds} s ({result.gb_per_s} GB/s)"
    if result.timed_out:
        text += "; stopped waiting at the timeout, the kernel keeps reading"
    return text


def report(result: Plan) -> dict:
    return {**asdict(result), "message": message(result)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="specdeploy.node.service.prefetch", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mode", choices=MODES, default="auto")
    parser.add_argument("--path", type=Path, action="append", default=[], required=True)
    parser.add_argument(
        "--reserve-gb", type=float, default=16.0, help="memory to leave free (auto mode)"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=900.0, help="wait at most this long for the read"
    )
    parser.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.path if not p.is_dir()]
    if missing:
        print(f"prefetch: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    result = run(args.mode, args.path, int(args.reserve_gb * GIB), args.meminfo, args.timeout_s)
    if args.json:
        print(json.dumps(report(result)))
    else:
        print(message(result))
        for error in result.errors:
            print(f"prefetch: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
