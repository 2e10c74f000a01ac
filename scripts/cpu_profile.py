"""Where a test run's CPU went, from the kernel's process accounting (a maintainer tool).

`make test` on CI's two cores is CPU-bound (the machine is busy about 95% of a run), so its wall
time is its CPU divided by two: to make it shorter, find what uses the CPU. BSD process
accounting records every process that ends, with its parent, its command name (15 characters)
and its CPU time, in the namespace of the machine and of every container above it, so the
sandbox nodes' processes are there too. This tool rebuilds the process tree from the records and
sums the CPU by what ran:

- ``node module``: Ansible's modules on the sandbox nodes (below an ``sshd``), and the
  commands they start (pip, the bytecode compiler, the release's own checks);
- ``controller ansible``: ansible-playbook and its forked workers;
- ``controller module``: modules and commands Ansible runs on the controller (delegated tasks,
  the action plugins' commands);
- ``other``: the rest (pytest itself, the stand-in servers, HAProxy, the tests' own ssh).

Record a run (as root; the ``acct`` package gives ``accton``)::

    accton /var/log/account/pacct    # on; records from now on
    make test
    accton off
    python -m scripts.cpu_profile /var/log/account/pacct [--since EPOCH] [--json]

``--since``: only processes that began at or after that time (``date +%s`` when the run began),
so one accounting file can hold several runs.

Exit codes: 0 printed, 2 usage error (no such file, not an acct v3 file).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime,
# etime (float, ticks), utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm[16]
RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
HZ = 100  # AHZ: the unit of etime, utime and stime in acct v3


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    began: int  # seconds since the epoch
    elapsed_s: float
    cpu_s: float
    command: str


class UsageError(Exception):
    pass


def comp_t(value: int) -> int:
    """The kernel's 13-bit mantissa, 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (((value >> 13) & 7) * 3)


def parse(data: bytes) -> list[Process]:
    if not data:
        raise UsageError("empty: no process was accounted (was accounting on?)")
    if len(data) % RECORD.size:
        raise UsageError(f"{len(data)} bytes: not a whole number of acct v3 records")
    found = []
    for offset in range(0, len(data), RECORD.size):
        f = RECORD.unpack_from(data, offset)
        if f[1] != 3:
            raise UsageError(f"record {offset // RECORD.size}: version {f[1]}, not acct v3")
        found.append(
            Process(
                pid=f[6],
                ppid=f[7],
                began=f[8],
                elapsed_s=f[9] / HZ,
                cpu_s=(comp_t(f[10]) + comp_t(f[11])) / HZ,
                command=f[18].split(b"\0")[0].decode(errors="replace"),
            )
        )
    return found


def ancestry(processes: list[Process]) -> dict[int, list[str]]:
    """Index of each process -> its command and its ancestors' (nearest first). A parent is the
    process with the child's ppid that had begun and not yet ended when the child began (pids
    are reused); one that outlived the accounting has no record and ends the chain."""
    by_pid: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(processes):
        by_pid[p.pid].append(i)

    def parent(p: Process) -> int | None:
        candidates = [
            j
            for j in by_pid.get(p.ppid, [])
            if processes[j].began <= p.began <= processes[j].began + processes[j].elapsed_s + 2
        ]
        return candidates[-1] if candidates else None

    chains: dict[int, list[str]] = {}
    for i, p in enumerate(processes):
        chain, j, hops = [p.command], parent(p), 0
        while j is not None and hops < 64:
            chain.append(processes[j].command)
            j, hops = parent(processes[j]), hops + 1
        chains[i] = chain
    return chains


def kind(chain: list[str]) -> str:
    if any(c.startswith("sshd") for c in chain[1:]) or chain[1:3] == ["sh", "sudo"]:
        return "node module"
    if chain[0].startswith("ansible-playboo"):
        return "controller ansible"
    if "ansible-playboo" in chain:
        return "controller module"
    return "other"


def profile(processes: list[Process]) -> dict:
    chains = ancestry(processes)
    cpu: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for i, p in enumerate(processes):
        what = kind(chains[i])
        cpu[what] += p.cpu_s
        count[what] += 1
    by_command: Counter[str] = Counter()
    for p in processes:
        by_command[p.command] += p.cpu_s
    total = sum(cpu.values())
    return {
        "processes": len(processes),
        "cpu_s": round(total, 1),
        "kinds": {
            k: {
                "cpu_s": round(v, 1),
                "share": round(v / total, 3) if total else 0.0,
                "processes": count[k],
            }
            for k, v in cpu.most_common()
        },
        "commands": {k: round(v, 1) for k, v in by_command.most_common(12)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pacct", type=Path, help="the accounting file (acct v3)")
    parser.add_argument("--since", type=int, default=0, help="only processes begun from then")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    try:
        found = profile([p for p in parse(args.pacct.read_bytes()) if p.began >= args.since])
    except (OSError, UsageError) as exc:
        print(f"cpu_profile: {args.pacct}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    print(f"{found['processes']} processes, {found['cpu_s']} CPU-s")
    for name, k in found["kinds"].items():
        print(f"  {k['cpu_s']:9.1f} CPU-s {k['share']:6.1%} {k['processes']:7d} processes  {name}")
    print("by command name:")
    for name, seconds in found["commands"].items():
        print(f"  {seconds:9.1f} CPU-s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
