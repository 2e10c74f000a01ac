"""Parsing what the node says: versions, nvidia-smi CSV, Xid lines, PCI config space, the
kernel command line."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable

from ..versions import public_version
from .model import (
    ACS_CAP_ID,
    ACS_CTRL_BITS,
    DRIVER_MINIMUMS,
    XID_APPLICATION,
    Gpu,
    normalize_bdf,
)

XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),?\s*(.*)")


GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "compute_cap",
    "driver_version",
    "memory.total",
    "memory.used",
    "persistence_mode",
    "ecc.mode.current",
)


ECC_FIELDS = (
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
)


APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")


NA_VALUES = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", ""}


def version_tuple(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", public_version(text))
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in parts)


def version_at_least(have: str, need: str) -> bool:
    a, b = version_tuple(have), version_tuple(need)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def min_driver_for(vllm_version: str) -> tuple[str, str]:
    """(minimum driver, reason) for a vLLM release; the table is ordered by release."""
    chosen = DRIVER_MINIMUMS[0]
    if vllm_version:
        for entry in DRIVER_MINIMUMS:
            if version_at_least(vllm_version, entry[0]):
                chosen = entry
    return chosen[1], chosen[2]


def parse_csv(text: str) -> list[list[str]]:
    """nvidia-smi --format=csv,noheader,nounits: values joined by ', '."""
    return [[v.strip() for v in line.split(", ")] for line in text.splitlines() if line.strip()]


def to_int(value: str, default: int = 0) -> int:
    try:
        return int(float(value))
    except ValueError:
        return default


def parse_gpus(text: str) -> list[Gpu]:
    gpus = []
    for row in parse_csv(text):
        if len(row) != len(GPU_FIELDS):
            raise ValueError(f"nvidia-smi row has {len(row)} fields, expected {len(GPU_FIELDS)}")
        v = dict(zip(GPU_FIELDS, row, strict=True))
        gpus.append(
            Gpu(
                index=to_int(v["index"]),
                name=v["name"],
                uuid=v["uuid"],
                bus_id=v["pci.bus_id"],
                compute_cap=v["compute_cap"],
                driver_version=v["driver_version"],
                memory_total_mib=to_int(v["memory.total"]),
                memory_used_mib=to_int(v["memory.used"]),
                persistence_mode=v["persistence_mode"],
                ecc_mode=v["ecc.mode.current"],
            )
        )
    return gpus


def parse_apps(text: str) -> list[dict[str, object]]:
    apps = []
    for row in parse_csv(text):
        if len(row) != len(APP_FIELDS):
            continue
        v = dict(zip(APP_FIELDS, row, strict=True))
        apps.append(
            {
                "gpu_uuid": v["gpu_uuid"],
                "pid": to_int(v["pid"], -1),
                "process_name": v["process_name"],
                "used_gpu_memory_mib": to_int(v["used_gpu_memory"]),
            }
        )
    return apps


def parse_xids(lines: Iterable[str]) -> list[dict[str, object]]:
    found = []
    for line in lines:
        match = XID_LINE.search(line)
        if match:
            code = int(match.group(2))
            found.append(
                {
                    "bdf": normalize_bdf(match.group(1)),
                    "xid": code,
                    "detail": match.group(3).strip(),
                    "application": code in XID_APPLICATION,
                }
            )
    return found


def acs_control(config: bytes) -> int | None:
    """The ACS Control register from a PCI config space dump; None without an ACS capability.

    Extended capabilities start at 0x100: a 32-bit header (id 16 bits, version 4, next 12);
    ACS is id 0x000D, its Control register is the 16-bit word at +6."""
    if len(config) < 0x104:
        raise ValueError("extended config space not readable (needs root)")
    offset, seen = 0x100, set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            (control,) = struct.unpack_from("<H", config, offset + 6)
            return control
        offset = (header >> 20) & 0xFFC
    return None


def acs_flags(control: int) -> str:
    return " ".join(
        f"{name}{'+' if control >> bit & 1 else '-'}" for bit, name in ACS_CTRL_BITS.items()
    )


def kernel_cmdline_flags(cmdline: str) -> dict[str, str]:
    flags: dict[str, str] = {}
    for token in cmdline.split():
        key, _sep, value = token.partition("=")
        flags[key] = value
    return flags
