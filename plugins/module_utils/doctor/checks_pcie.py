"""The PCIe check: ACS on the bridges above the GPUs and the IOMMU mode (what decides NCCL P2P)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .model import (
    ACS_CTRL_BITS,
    ACS_P2P_BLOCKING,
    FAIL,
    PASS,
    PCI_BDF,
    SKIP,
    WARN,
    Gpu,
    Report,
)
from .parse import acs_control, kernel_cmdline_flags
from .probe import Probe


def nvidia_pci_devices(probe: Probe) -> list[str]:
    """BDFs of NVIDIA display/3D controllers under <root>/sys/bus/pci/devices."""
    base = probe.path("/sys/bus/pci/devices")
    found = []
    with contextlib.suppress(OSError):
        for entry in sorted(base.iterdir()):
            try:
                vendor = (entry / "vendor").read_text().strip()
                klass = (entry / "class").read_text().strip()
            except OSError:
                continue
            if vendor == "0x10de" and klass.startswith("0x03"):
                found.append(entry.name)
    return found


def upstream_bridges(probe: Probe, bdf: str) -> list[Path] | None:
    """The PCI bridges between the root complex and a device, nearest last; None if absent."""
    link = probe.path(f"/sys/bus/pci/devices/{bdf}")
    if not link.exists():
        return None
    real = Path(os.path.realpath(link))
    bridges, node = [], real.parent
    while PCI_BDF.match(node.name):
        bridges.append(node)
        node = node.parent
    return list(reversed(bridges))


def iommu_group_types(probe: Probe) -> dict[str, str]:
    """Device BDF -> its IOMMU group's default domain type (identity, DMA, DMA-FQ)."""
    types: dict[str, str] = {}
    base = probe.path("/sys/kernel/iommu_groups")
    with contextlib.suppress(OSError):
        for group in base.iterdir():
            try:
                kind = (group / "type").read_text().strip()
            except OSError:
                kind = "unknown"
            with contextlib.suppress(OSError):
                for device in (group / "devices").iterdir():
                    types[device.name] = kind
    return types


def check_pcie(report: Report, probe: Probe, gpus: list[Gpu]) -> bool | None:
    """ACS and IOMMU checks; returns whether GPU peer-to-peer over PCIe is clear (None: unknown)."""
    opts = probe.options
    if not gpus:
        report.add("pcie_acs", SKIP, "no GPU to check")
        report.add("iommu", SKIP, "no GPU to check")
        return None
    blocked_status = FAIL if opts.require_p2p else WARN
    fallback = " -> NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce"

    # --- ACS on the bridges above each GPU
    acs_clear: bool | None = True
    redirecting: dict[str, str] = {}
    unknown: list[str] = []
    absent = []
    for gpu in gpus:
        bridges = upstream_bridges(probe, gpu.bdf)
        if bridges is None:
            absent.append(gpu.bdf)
            continue
        for bridge in bridges:
            try:
                control = acs_control((bridge / "config").read_bytes())
            except (OSError, ValueError) as error:
                unknown.append(f"{bridge.name}: {getattr(error, 'strerror', None) or error}")
                continue
            if control is not None and any(control >> bit & 1 for bit in ACS_P2P_BLOCKING):
                redirecting[bridge.name] = " ".join(
                    f"{ACS_CTRL_BITS[bit]}+" for bit in ACS_P2P_BLOCKING if control >> bit & 1
                )
    if absent:
        where = probe.path("/sys/bus/pci/devices")
        unknown.insert(0, f"{len(absent)} of {len(gpus)} GPUs not under {where}")
    if redirecting:
        acs_clear = False
        by_flags: dict[str, list[str]] = {}
        for bridge_name, flags_set in sorted(redirecting.items()):
            by_flags.setdefault(flags_set, []).append(bridge_name)
        listed = "; ".join(f"{f} on {', '.join(b)}" for f, b in by_flags.items())
        report.add(
            "pcie_acs",
            blocked_status,
            f"PCIe ACS redirects peer-to-peer traffic on {len(redirecting)} bridge(s) above the "
            f"GPUs ({listed}): NCCL P2P hangs or crawls{fallback}",
            "disable ACS in the BIOS (or boot with pci=noacs, or per bridge: `setpci -s <bridge> "
            "ECAP_ACS+0x6.w=0000`), then rerun the preflight to get P2P back",
        )
    elif unknown:
        acs_clear = None
        report.add(
            "pcie_acs",
            WARN,
            f"ACS state unknown ({'; '.join(sorted(set(unknown))[:3])}){fallback} to be safe",
            "run the doctor as root on the GPU host itself (it reads the PCI config space); "
            "in a container or VM without the PCI tree, check `lspci -vvv | grep ACSCtl` on the "
            "host and set gpu_node_nccl_p2p: enabled when ReqRedir/CmpltRedir are off",
        )
    else:
        report.add("pcie_acs", PASS, "no ACS redirection on the bridges above the GPUs")

    # --- IOMMU: off, or passthrough (identity domain) for the GPUs
    cmdline = probe.read_text("/proc/cmdline") or ""
    flags = kernel_cmdline_flags(cmdline)
    groups = iommu_group_types(probe)
    by_type: dict[str, list[str]] = {}
    for g in gpus:
        kind = groups.get(g.bdf, "identity")
        if kind != "identity":
            by_type.setdefault(kind, []).append(str(g.index))
    translated = [f"GPU {','.join(ix)}: {kind}" for kind, ix in sorted(by_type.items())]
    cmd = " ".join(
        f"{k}={v}" if v else k
        for k, v in flags.items()
        if k in ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "pci")
    )
    cmd_text = f"kernel command line: {cmd or 'no IOMMU flags'}"
    iommu_clear: bool | None = True
    if translated:
        iommu_clear = False
        report.add(
            "iommu",
            blocked_status,
            f"the IOMMU translates GPU DMA ({'; '.join(translated)}; {cmd_text}): P2P between "
            f"GPUs goes through the IOMMU and NCCL can hang{fallback}",
            "boot with iommu=pt (intel_iommu=on iommu=pt or amd_iommu=on iommu=pt), or disable "
            "the IOMMU in the BIOS; then rerun the preflight",
        )
    elif not groups:
        report.add("iommu", PASS, f"IOMMU off ({cmd_text})")
    else:
        report.add("iommu", PASS, f"IOMMU in passthrough for the GPUs ({cmd_text})")
    if acs_clear is False or iommu_clear is False:
        return False
    return None if acs_clear is None else True
