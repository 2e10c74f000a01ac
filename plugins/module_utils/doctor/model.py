"""The doctor's vocabulary: its options, one check's result, a GPU, the report, and the
thresholds it checks against."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"


# Minimum driver per vLLM release line: the CUDA runtime its torch pin is built for
# (torch 2.9/2.10: CUDA 12.8 -> 570.26; torch 2.11+ (vLLM 0.20+): CUDA 13.0 -> 580.65.06),
# and never below branch 570, the first with Blackwell (SM120) support.
DRIVER_MINIMUMS: tuple[tuple[str, str, str], ...] = (
    ("0.0", "570.26", "CUDA 12.8, torch 2.9/2.10"),
    ("0.20", "580.65.06", "CUDA 13.0, torch 2.11+"),
)


BLACKWELL_MIN_DRIVER = "570.0"


# Xid codes that point at the application rather than the GPU: warned about, not failed on.
XID_APPLICATION = {13, 31, 43, 45, 68}


XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement / row remapping event",
    64: "ECC page retirement / row remapper failure",
    68: "video processor exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action changed",
}


ACS_CAP_ID = 0x000D


ACS_CTRL_BITS = {
    0: "SrcValid",
    1: "TransBlk",
    2: "ReqRedir",
    3: "CmpltRedir",
    4: "UpstreamFwd",
    5: "EgressCtrl",
    6: "DirectTrans",
}


ACS_P2P_BLOCKING = (2, 3, 5)  # redirect / egress control send GPU-to-GPU traffic to the root


class UsageError(Exception):
    """Bad arguments or an unusable environment (exit 2)."""


@dataclass
class Check:
    name: str
    status: str
    message: str
    fix: str = ""


@dataclass
class Gpu:
    index: int
    name: str
    uuid: str
    bus_id: str  # as nvidia-smi prints it: 00000000:18:00.0
    compute_cap: str
    driver_version: str
    memory_total_mib: int
    memory_used_mib: int
    persistence_mode: str
    ecc_mode: str

    @property
    def bdf(self) -> str:
        return normalize_bdf(self.bus_id)


@dataclass
class Options:
    expected_gpus: int = 8
    expected_model: str = "RTX PRO 6000"
    expected_compute_cap: str = "12.0"
    vllm_version: str = ""
    min_driver: str = ""
    service_users: tuple[str, ...] = ("vllm",)
    max_idle_memory_mib: int = 2048
    kernel_log: str = ""
    root: str = "/"
    free_disk: tuple[tuple[str, float], ...] = ()
    model_dirs: tuple[tuple[str, str], ...] = ()
    verify_checksums: bool = False
    min_shm_gb: float = 8.0
    shm_path: str = "/dev/shm"
    require_p2p: bool = False
    nccl_p2p: str = "auto"
    attention_backend: str = ""
    nvidia_smi: str = "nvidia-smi"


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    derived: dict[str, object] = field(default_factory=dict)
    gpus: list[dict[str, object]] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def add(self, name: str, status: str, message: str, fix: str = "") -> Check:
        check = Check(name, status, message, fix if status in (FAIL, WARN) else "")
        self.checks.append(check)
        return check

    def add_outcome(self, name: str, problems: list[str], fix: str, passed: list[str]) -> Check:
        """FAIL with every problem (and the fix) when there is one, else PASS with what held."""
        if problems:
            return self.add(name, FAIL, "; ".join(problems), fix)
        return self.add(name, PASS, "; ".join(passed))

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": not self.failed,
            "failed": [c.name for c in self.failed],
            "warnings": [c.name for c in self.checks if c.status == WARN],
            "checks": [asdict(c) for c in self.checks],
            "derived": self.derived,
            "gpus": self.gpus,
            "table": render_text(self).splitlines(),
            "failures": [f"{c.name}: {c.message} (fix: {c.fix})" for c in self.failed],
        }


PCI_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def normalize_bdf(bus_id: str) -> str:
    """nvidia-smi's 00000000:18:00.0 (or the kernel log's 0000:18:00) -> 0000:18:00.0."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        domain, bus, devfn = parts
    elif len(parts) == 2:
        domain, (bus, devfn) = "0", parts
    else:
        return text
    if "." not in devfn:
        devfn += ".0"
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{devfn}"


def render_text(report: Report) -> str:
    width = max((len(c.name) for c in report.checks), default=8)
    lines = []
    for c in report.checks:
        line = f"{c.status.upper():<4}  {c.name:<{width}}  {c.message}"
        if c.fix:
            line += f"  [fix: {c.fix}]"
        lines.append(line)
    d = report.derived
    env = " ".join(f"{k}={v}" for k, v in sorted(dict(d.get("nccl_environment", {})).items()))  # type: ignore[call-overload]
    extra = " ".join(d.get("server_extra_args", []))  # type: ignore[arg-type]
    lines.append(
        f"derived: attention backend {d.get('attention_backend') or 'unknown'} "
        f"({d.get('attention_backend_source')}); NCCL P2P {'on' if d.get('nccl_p2p') else 'off'} "
        f"({d.get('nccl_p2p_source')}): {env}{' ' + extra if extra else ''}"
    )
    warnings = sum(1 for c in report.checks if c.status == WARN)
    failed = report.failed
    lines.append(
        f"result: {'FAIL' if failed else 'OK'}: {len(failed)} failed"
        + (f" ({', '.join(c.name for c in failed)})" if failed else "")
        + f", {warnings} warning(s), {len(report.checks)} checks"
    )
    return "\n".join(lines)
