"""What the doctor derives for the server: the MLA attention backend for the compute
capability, and the NCCL settings and server flags from the PCIe topology."""

from __future__ import annotations

from ..attention import mla_backend
from .model import Gpu, Options, Report


def derive(report: Report, options: Options, gpus: list[Gpu], p2p_clear: bool | None) -> None:
    caps = sorted({g.compute_cap for g in gpus})
    cap = caps[0] if len(caps) == 1 else ""
    if options.attention_backend:
        backend, backend_source = options.attention_backend, "override"
    else:
        backend, backend_source = mla_backend(cap) if cap else "", "compute capability"
    if options.nccl_p2p in ("on", "off"):
        p2p, p2p_source = options.nccl_p2p == "on", "override"
    elif p2p_clear is None:
        p2p, p2p_source = False, "ACS/IOMMU state unknown: P2P off to be safe"
    else:
        p2p = p2p_clear
        p2p_source = "ACS off and IOMMU off/passthrough" if p2p else "ACS or IOMMU blocks P2P"
    report.derived = {
        "compute_capability": cap,
        "attention_backend": backend,
        "attention_backend_source": backend_source,
        "nccl_p2p": p2p,
        "nccl_p2p_source": p2p_source,
        "nccl_environment": {"NCCL_P2P_DISABLE": "0" if p2p else "1"},
        "server_extra_args": [] if p2p else ["--disable-custom-all-reduce"],
    }
