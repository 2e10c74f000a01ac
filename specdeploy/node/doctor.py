"""Hardware doctor for a GPU node: is it fit to serve a TP-8 MLA model over PCIe?

Read-only, standard library only (it runs on the node, as root for the PCI config space).
Modelled on DeepOps' validation doctor: one line per check, each failure with its fix.

    python -m specdeploy.node.doctor --expected-gpus 8 --vllm-version 0.16.0 \\
        --free-disk /opt/specdeploy=25 --model-dir /srv/models/Kimi-K2.5 [--json]

Checks: nvidia-smi answers; GPU count; model and compute capability; driver >= the minimum
for the vLLM release; open kernel modules; persistence mode; no foreign process holding GPU
memory; ECC and retired pages / remapped rows; Xid errors in this boot's kernel log; PCIe ACS
on the bridges above the GPUs and the IOMMU mode; /dev/shm size; free disk; model files.

Derived (recorded by the provisioning role in the node's facts): the MLA attention backend
vLLM picks for the compute capability, and the NCCL choice: P2P on when neither ACS nor a
translating IOMMU sits between the GPUs, else NCCL_P2P_DISABLE=1 and
--disable-custom-all-reduce. Both can be overridden (--attention-backend, --nccl-p2p).

Test hooks: --root (prefix for /sys, /proc/cmdline, /proc/driver), --kernel-log
(a file instead of `journalctl -k` / `dmesg`), --nvidia-smi (the binary).
Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pwd
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"

# Minimum driver per vLLM release line: the CUDA runtime its torch pin is built for
# (torch 2.9/2.10: CUDA 12.8 -> 570.26; torch 2.11+ (vLLM 0.20+): CUDA 13.0 -> 580.65.06),
# and never below branch 570, the first with Blackwell (SM120) support.
DRIVER_MINIMUMS: tuple[tuple[str, str, str], ...] = (
    ("0.0", "570.26", "CUDA 12.8, torch 2.9/2.10"),
    ("0.20", "580.65.06", "CUDA 13.0, torch 2.11+"),
)
BLACKWELL_MIN_DRIVER = "570.0"

# vLLM's MLA backend priority (platforms/cuda.py `_get_backend_priorities`, 0.16 and 0.20.2)
# and the compute capabilities each backend supports: the first that supports the GPU wins.
MLA_PRIORITY_SM100 = ("FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")
MLA_PRIORITY_OTHER = ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA")
MLA_SUPPORTED_MAJOR: dict[str, tuple[int, ...] | None] = {
    "FLASH_ATTN_MLA": (9,),
    "FLASHMLA": (9, 10),
    "FLASHINFER_MLA": (10,),
    "CUTLASS_MLA": (10,),
    "TRITON_MLA": None,  # any
}

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

PCI_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
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


# ---------------------------------------------------------------- parsing helpers


def version_tuple(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", text)
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
        key, _, value = token.partition("=")
        flags[key] = value
    return flags


# ---------------------------------------------------------------- probes


class Probe:
    """Everything the doctor reads from the node; paths honour the root prefix."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.root = Path(options.root)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def smi(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.options.nvidia_smi, *args], capture_output=True, text=True, timeout=60
        )

    def read_text(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text()
        except OSError:
            return None

    def kernel_log(self) -> tuple[list[str] | None, str]:
        if self.options.kernel_log:
            try:
                text = Path(self.options.kernel_log).read_text(errors="replace")
            except OSError as error:
                return None, f"{self.options.kernel_log}: {error.strerror}"
            return text.splitlines(), self.options.kernel_log
        commands = (
            ["journalctl", "-k", "-b", "0", "--no-pager", "-q", "-o", "short-iso"],
            ["dmesg"],
        )
        for command in commands:
            if shutil.which(command[0]) is None:
                continue
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                result = subprocess.run(command, capture_output=True, text=True, timeout=60)
                if result.returncode == 0:
                    return result.stdout.splitlines(), " ".join(command[:2])
        return None, "neither `journalctl -k` nor `dmesg` could be read"

    def process_owner(self, pid: int) -> str | None:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
                try:
                    return pwd.getpwuid(uid).pw_name
                except KeyError:
                    return str(uid)
        return None


# ---------------------------------------------------------------- the checks


def fix_driver(version: str) -> str:
    return (
        f"install driver {version} or newer with the open kernel modules (inventory: "
        "gpu_node_driver_manage: true, gpu_node_driver_version: <version>), then reboot"
    )


def check_gpus(report: Report, probe: Probe) -> tuple[list[Gpu], list[dict[str, object]]]:
    opts = probe.options
    fields = ",".join(GPU_FIELDS)
    try:
        result = probe.smi(f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    except FileNotFoundError:
        report.add(
            "nvidia_smi",
            FAIL,
            f"{opts.nvidia_smi} not found: no NVIDIA driver installed",
            fix_driver(min_driver_for(opts.vllm_version)[0]),
        )
        return [], []
    except subprocess.TimeoutExpired:
        report.add(
            "nvidia_smi",
            FAIL,
            "nvidia-smi did not answer within 60 s (a GPU may hang)",
            "check `dmesg | grep -E 'NVRM|Xid'`; reset the GPU or power-cycle the node",
        )
        return [], []
    if result.returncode != 0:
        first = (result.stdout.strip() or result.stderr.strip()).splitlines()[:1]
        report.add(
            "nvidia_smi",
            FAIL,
            f"nvidia-smi exited {result.returncode}: {first[0] if first else 'no output'}",
            "the driver is not loaded or a GPU is lost: check `lsmod | grep nvidia` and "
            "`dmesg | grep NVRM`; reinstall the driver (open kernel modules) and reboot",
        )
        return [], []
    try:
        gpus = parse_gpus(result.stdout)
    except ValueError as error:
        report.add("nvidia_smi", FAIL, f"cannot parse nvidia-smi output: {error}")
        return [], []
    report.gpus = [asdict(g) | {"bdf": g.bdf} for g in gpus]
    driver = gpus[0].driver_version if gpus else "?"
    report.add("nvidia_smi", PASS, f"nvidia-smi answers: driver {driver}, {len(gpus)} GPU(s)")

    apps: list[dict[str, object]] = []
    result = probe.smi(
        f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits"
    )
    if result.returncode == 0:
        apps = parse_apps(result.stdout)
    else:
        apps = [{"error": result.stdout.strip() or result.stderr.strip()}]
    return gpus, apps


def check_count(report: Report, probe: Probe, gpus: list[Gpu]) -> None:
    expected = probe.options.expected_gpus
    if len(gpus) == expected:
        report.add("gpu_count", PASS, f"{len(gpus)} GPUs visible (expected {expected})")
        return
    seen = {g.bdf for g in gpus}
    on_bus = sorted(bdf for bdf in nvidia_pci_devices(probe) if bdf not in seen)
    missing = f"; on the PCI bus but not seen by the driver: {', '.join(on_bus)}" if on_bus else ""
    report.add(
        "gpu_count",
        FAIL,
        f"{len(gpus)} GPUs visible, expected {expected}{missing}",
        "look for Xid 79 / 'fallen off the bus' in `dmesg`; reseat or power-cycle the node; "
        "if the node really has fewer GPUs, set gpu_node_expected_gpus and "
        "specdeploy_tensor_parallel_size to match",
    )


def check_model(report: Report, probe: Probe, gpus: list[Gpu]) -> None:
    opts = probe.options
    if not gpus:
        report.add("gpu_model", SKIP, "no GPU to check")
        return
    names = sorted({g.name for g in gpus})
    caps = sorted({g.compute_cap for g in gpus})
    problems = []
    if opts.expected_model:
        wrong = [f"GPU {g.index}: {g.name}" for g in gpus if opts.expected_model not in g.name]
        if wrong:
            problems.append(f"not {opts.expected_model!r}: {', '.join(wrong)}")
    if len(caps) > 1:
        problems.append(f"mixed compute capabilities {', '.join(caps)}")
    elif opts.expected_compute_cap and caps[0] != opts.expected_compute_cap:
        problems.append(f"compute capability {caps[0]}, expected {opts.expected_compute_cap}")
    if problems:
        report.add(
            "gpu_model",
            FAIL,
            "; ".join(problems),
            "deploy to the node type the inventory describes, or set gpu_node_expected_model and "
            "gpu_node_expected_compute_capability to this node's",
        )
    else:
        report.add("gpu_model", PASS, f"{' / '.join(names)}, compute capability {caps[0]}")


def check_driver(report: Report, probe: Probe, gpus: list[Gpu]) -> None:
    opts = probe.options
    if not gpus:
        report.add("driver", SKIP, "no GPU to check")
        return
    need, why = (
        (opts.min_driver, "set by --min-driver")
        if opts.min_driver
        else (min_driver_for(opts.vllm_version))
    )
    cc_major = to_int(gpus[0].compute_cap.split(".")[0])
    if cc_major >= 10 and not version_at_least(need, BLACKWELL_MIN_DRIVER):
        need, why = BLACKWELL_MIN_DRIVER, "Blackwell needs branch 570+"
    have = gpus[0].driver_version
    release = f"vLLM {opts.vllm_version}" if opts.vllm_version else "vLLM"
    try:
        ok = version_at_least(have, need)
    except ValueError:
        ok = False
    if ok:
        report.add("driver", PASS, f"driver {have} >= {need} ({release}: {why})")
    else:
        report.add(
            "driver",
            FAIL,
            f"driver {have} is older than {need}, the minimum for {release} ({why})",
            fix_driver(need),
        )


def check_kernel_modules(report: Report, probe: Probe, gpus: list[Gpu]) -> None:
    text = probe.read_text("/proc/driver/nvidia/version")
    if text is None:
        report.add("kernel_modules", SKIP, "/proc/driver/nvidia/version not present")
        return
    first = text.splitlines()[0] if text.strip() else ""
    blackwell = any(to_int(g.compute_cap.split(".")[0]) >= 10 for g in gpus)
    if "Open Kernel Module" in first:
        report.add("kernel_modules", PASS, "NVIDIA open kernel modules loaded")
    elif blackwell:
        report.add(
            "kernel_modules",
            FAIL,
            "the proprietary NVIDIA kernel modules are loaded; Blackwell GPUs need the open ones",
            "install the open kernel modules (nvidia-open / nvidia-kernel-open-dkms) and reboot",
        )
    else:
        report.add(
            "kernel_modules", PASS, "proprietary NVIDIA kernel modules (fine before Blackwell)"
        )


def check_persistence(report: Report, gpus: list[Gpu]) -> None:
    if not gpus:
        report.add("persistence", SKIP, "no GPU to check")
        return
    off = [str(g.index) for g in gpus if g.persistence_mode != "Enabled"]
    if off:
        report.add(
            "persistence",
            WARN,
            f"persistence mode off on GPU {', '.join(off)}: slower first start, state reset "
            "between runs",
            "systemctl enable --now nvidia-persistenced (the provisioning does this)",
        )
    else:
        report.add("persistence", PASS, "persistence mode on for every GPU")


def check_processes(
    report: Report, probe: Probe, gpus: list[Gpu], apps: list[dict[str, object]]
) -> None:
    opts = probe.options
    if not gpus:
        report.add("gpu_processes", SKIP, "no GPU to check")
        return
    if apps and "error" in apps[0]:
        report.add("gpu_processes", WARN, f"cannot list GPU processes: {apps[0]['error']}")
        return
    index_of = {g.uuid: g.index for g in gpus}
    foreign, ours = [], []
    listed: dict[int, int] = {}
    for app in apps:
        pid = int(app["pid"])  # type: ignore[call-overload]
        owner = probe.process_owner(pid)
        gpu = index_of.get(str(app["gpu_uuid"]), "?")
        listed[gpu] = listed.get(gpu, 0) + int(app["used_gpu_memory_mib"])  # type: ignore[arg-type,call-overload]
        desc = (
            f"GPU {gpu}: pid {pid} ({app['process_name']}, user {owner or 'unknown'}, "
            f"{app['used_gpu_memory_mib']} MiB)"
        )
        (ours if owner in opts.service_users else foreign).append(desc)
    hidden = [
        f"GPU {g.index}: {g.memory_used_mib} MiB used by no listed process"
        for g in gpus
        if g.index not in listed and g.memory_used_mib > opts.max_idle_memory_mib
    ]
    if foreign or hidden:
        pids = sorted({int(a["pid"]) for a in apps if f"pid {a['pid']} " in " ".join(foreign)})  # type: ignore[call-overload]
        report.add(
            "gpu_processes",
            FAIL,
            "foreign process holds GPU memory: " + "; ".join(foreign + hidden),
            (
                f"stop it (`kill {' '.join(map(str, pids))}`) "
                if pids
                else "find it (another container or VM?) "
            )
            + "and rerun: vLLM needs the GPUs' memory for itself",
        )
    elif ours:
        report.add("gpu_processes", PASS, f"only the service's own processes: {'; '.join(ours)}")
    else:
        report.add("gpu_processes", PASS, "no process holds GPU memory")


def check_ecc(report: Report, probe: Probe, gpus: list[Gpu]) -> None:
    if not gpus:
        report.add("ecc", SKIP, "no GPU to check")
        return
    off = [str(g.index) for g in gpus if g.ecc_mode not in ("Enabled",)]
    counters, supported = ecc_counters(probe)
    bad = []
    for index, values in counters.items():
        for name, value in values.items():
            if name.endswith("failure") and value.lower() in ("yes", "1"):
                bad.append(f"GPU {index}: row remapping failed")
            elif name.endswith("pending") and value.lower() in ("yes", "1"):
                bad.append(f"GPU {index}: {name} (a reset is due)")
            elif name.startswith("ecc.errors.uncorrected") and to_int(value) > 0:
                bad.append(f"GPU {index}: {to_int(value)} uncorrected ECC errors ({name})")
    if bad:
        report.add(
            "ecc",
            FAIL,
            "; ".join(sorted(set(bad))),
            "drain the node, reset the GPU (`nvidia-smi -r -i N`) to apply pending retirement "
            "or remapping; replace the GPU if remapping failed or errors keep coming",
        )
    elif off:
        report.add(
            "ecc",
            WARN,
            f"ECC off on GPU {', '.join(off)}",
            "nvidia-smi -e 1 and reboot, unless disabled on purpose",
        )
    elif supported:
        report.add(
            "ecc",
            PASS,
            f"ECC on, no uncorrected errors, no pending retirement ({len(supported)} counters)",
        )
    else:
        report.add(
            "ecc",
            WARN,
            "ECC on; this nvidia-smi reports no error / retirement counters",
            "check `nvidia-smi -q -d ECC,ROW_REMAPPER` by hand",
        )


def ecc_counters(probe: Probe) -> tuple[dict[int, dict[str, str]], list[str]]:
    """Per GPU index, the ECC counters this nvidia-smi knows (fields it rejects are dropped)."""

    def query(fields: list[str]) -> list[list[str]] | None:
        result = probe.smi(f"--query-gpu=index,{','.join(fields)}", "--format=csv,noheader,nounits")
        return parse_csv(result.stdout) if result.returncode == 0 else None

    fields = list(ECC_FIELDS)
    rows = query(fields)
    if rows is None:
        fields = [f for f in ECC_FIELDS if query([f]) is not None]
        rows = query(fields) if fields else []
    out: dict[int, dict[str, str]] = {}
    for row in rows or []:
        values = dict(zip(fields, row[1:], strict=False))
        out[to_int(row[0])] = {k: v for k, v in values.items() if v not in NA_VALUES}
    supported = sorted({k for values in out.values() for k in values})
    return out, supported


def check_xid(report: Report, probe: Probe, gpus: list[Gpu]) -> None:
    lines, source = probe.kernel_log()
    if lines is None:
        report.add(
            "xid",
            WARN,
            f"cannot read the kernel log: {source}",
            "run the doctor as root (journalctl -k needs it)",
        )
        return
    xids = parse_xids(lines)
    index_of = {g.bdf[:-2]: g.index for g in gpus}  # the log names 0000:18:00
    if not xids:
        report.add("xid", PASS, f"no Xid error in the kernel log ({source})")
        return
    summary: dict[tuple[int, str], int] = {}
    for x in xids:
        key = (int(x["xid"]), str(x["bdf"]))  # type: ignore[call-overload]
        summary[key] = summary.get(key, 0) + 1
    parts = []
    for (code, bdf), count in sorted(summary.items()):
        where = f"GPU {index_of[bdf[:-2]]}" if bdf[:-2] in index_of else bdf
        name = XID_NAMES.get(code, "see NVIDIA's Xid catalogue")
        parts.append(f"Xid {code} ({name}) on {where}" + (f" x{count}" if count > 1 else ""))
    hardware = any(not x["application"] for x in xids)
    if hardware:
        report.add(
            "xid",
            FAIL,
            f"GPU errors in this boot's kernel log ({source}): " + "; ".join(parts),
            "drain the node; reset the GPU or power-cycle; check cabling, power and cooling; "
            "if the Xid comes back, replace the GPU (NVIDIA Xid catalogue has each code)",
        )
    else:
        report.add(
            "xid",
            WARN,
            "application-level Xid in the kernel log: " + "; ".join(parts),
            "usually a crashed program; watch whether it comes back",
        )


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


def check_shm(report: Report, probe: Probe) -> None:
    need, path = probe.options.min_shm_gb, probe.options.shm_path
    try:
        st = os.statvfs(path)
    except OSError as error:
        report.add("shm", FAIL, f"{path}: {error.strerror}", f"mount a tmpfs on {path}")
        return
    size = st.f_blocks * st.f_frsize / 2**30
    if size + 1e-9 >= need:
        report.add("shm", PASS, f"{path} is {size:.1f} GB (needs {need:g} GB)")
    else:
        report.add(
            "shm",
            FAIL,
            f"{path} is only {size:.1f} GB; NCCL's shared-memory transport and vLLM's "
            f"worker queues need {need:g} GB with tensor parallelism",
            "the provisioning grows it (gpu_node_shm_size_gb); by hand: "
            f"mount -o remount,size={int(need)}G {path} and persist it in /etc/fstab; in a "
            "container the host sets it (docker --shm-size)",
        )


def existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(report: Report, probe: Probe) -> None:
    if not probe.options.free_disk:
        return
    short, lines = [], []
    for raw, need in probe.options.free_disk:
        where = existing_parent(Path(raw))
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize / 2**30
        lines.append(f"{raw} {free:.1f} GB free (needs {need:g})")
        if free < need:
            short.append(f"only {free:.1f} GB free under {raw} (on {where}), needs {need:g} GB")
    if short:
        report.add(
            "disk",
            FAIL,
            "; ".join(short),
            "free space (old releases: `release.py prune`, caches) or grow the file system",
        )
    else:
        report.add("disk", PASS, "; ".join(lines))


def read_manifest(path: Path) -> list[tuple[str, int | None, str | None]]:
    """Lines `<sha256>  <file>` (sha256sum output) or `<size-in-bytes>  <file>`; # comments."""
    entries: list[tuple[str, int | None, str | None]] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: expected '<sha256 or size> <file>'")
        key, name = parts[0], parts[1].lstrip("*")
        if re.fullmatch(r"[0-9a-fA-F]{64}", key):
            entries.append((name, None, key.lower()))
        elif key.isdigit():
            entries.append((name, int(key), None))
        else:
            raise ValueError(f"{path}:{number}: {key!r} is neither a sha256 nor a size")
    return entries


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def weight_files(directory: Path) -> list[str] | None:
    """Files a Hugging Face checkpoint needs: config.json plus the shards its index lists."""
    files = ["config.json"]
    for index in sorted(directory.glob("*.safetensors.index.json")) + sorted(
        directory.glob("*.bin.index.json")
    ):
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (OSError, ValueError):
            return None
        return [*files, index.name, *sorted(set(weight_map.values()))]
    singles = sorted(p.name for p in directory.glob("*.safetensors"))
    return [*files, *singles] if singles else files


def check_models(report: Report, probe: Probe) -> None:
    opts = probe.options
    if not opts.model_dirs:
        return
    problems, summaries = [], []
    for raw, manifest in opts.model_dirs:
        directory = Path(raw)
        if not directory.is_dir():
            problems.append(f"{raw} does not exist")
            continue
        total = 0
        if manifest:
            try:
                entries = read_manifest(Path(manifest))
            except (OSError, ValueError) as error:
                problems.append(f"manifest {manifest}: {getattr(error, 'strerror', None) or error}")
                continue
        else:
            names = weight_files(directory)
            if names is None:
                problems.append(f"{raw}: unreadable weight index")
                continue
            entries = [(n, None, None) for n in names]
        missing, wrong = [], []
        for name, size, digest in entries:
            path = directory / name
            if not path.is_file():
                missing.append(name)
                continue
            actual = path.stat().st_size
            total += actual
            if size is not None and actual != size:
                wrong.append(f"{name} is {actual} B, expected {size}")
            elif size is None and digest is None and actual == 0:
                wrong.append(f"{name} is empty")
            elif digest and opts.verify_checksums and sha256_of(path) != digest:
                wrong.append(f"{name} sha256 mismatch")
        if missing:
            shown = ", ".join(missing[:5]) + (
                f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
            )
            problems.append(f"{raw}: {len(missing)} of {len(entries)} files missing: {shown}")
        if wrong:
            problems.append(f"{raw}: " + "; ".join(wrong[:5]))
        if not missing and not wrong:
            how = (
                "sha256 verified"
                if manifest and opts.verify_checksums
                else ("sizes match the manifest" if manifest else "index complete")
            )
            summaries.append(f"{raw}: {len(entries)} files, {total / 1e9:.1f} GB, {how}")
    if problems:
        report.add(
            "model_files",
            FAIL,
            "; ".join(problems),
            "copy the model again (rsync --checksum) or fix the manifest path",
        )
    else:
        report.add("model_files", PASS, "; ".join(summaries))


# ---------------------------------------------------------------- derivation


def mla_backend(compute_cap: str) -> str:
    """The MLA backend vLLM auto-selects for a compute capability (first supported in order)."""
    try:
        major = int(compute_cap.split(".")[0])
    except ValueError:
        return ""
    order = MLA_PRIORITY_SM100 if major == 10 else MLA_PRIORITY_OTHER
    for backend in order:
        supported = MLA_SUPPORTED_MAJOR[backend]
        if supported is None or major in supported:
            return backend
    return ""


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


def run(options: Options) -> Report:
    if not Path(options.root).is_dir():
        raise UsageError(f"--root {options.root}: not a directory")
    probe = Probe(options)
    report = Report()
    gpus, apps = check_gpus(report, probe)
    if gpus or report.checks[-1].status == PASS:
        check_count(report, probe, gpus)
        check_model(report, probe, gpus)
        check_driver(report, probe, gpus)
        check_kernel_modules(report, probe, gpus)
        check_persistence(report, gpus)
        check_processes(report, probe, gpus, apps)
        check_ecc(report, probe, gpus)
    p2p = check_pcie(report, probe, gpus) if gpus else None
    check_xid(report, probe, gpus)
    check_shm(report, probe)
    check_disk(report, probe)
    check_models(report, probe)
    derive(report, options, gpus, p2p)
    return report


# ---------------------------------------------------------------- CLI


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


def parse_free_disk(value: str) -> tuple[str, float]:
    path, sep, gb = value.rpartition("=")
    try:
        if not sep or not path:
            raise ValueError
        return path, float(gb)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected PATH=GB") from None


def parse_model_dir(value: str) -> tuple[str, str]:
    path, _, manifest = value.partition("=")
    if not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected DIR or DIR=MANIFEST")
    return path, manifest


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-doctor", description=__doc__.split("\n")[0] if __doc__ else None
    )
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.add_argument("--expected-gpus", type=int, default=8)
    p.add_argument("--expected-model", default="RTX PRO 6000", help="substring of the GPU name")
    p.add_argument("--expected-compute-cap", default="12.0", help="'' accepts any (uniform)")
    p.add_argument("--vllm-version", default="", help="picks the minimum driver")
    p.add_argument("--min-driver", default="", help="override the minimum driver version")
    p.add_argument(
        "--service-user", action="append", default=[], help="GPU processes of this user are ours"
    )
    p.add_argument("--max-idle-memory-mib", type=int, default=2048)
    p.add_argument("--kernel-log", default="", help="read Xids from this file")
    p.add_argument("--root", default="/", help="prefix for /sys, /proc/cmdline, /dev/shm")
    p.add_argument(
        "--free-disk", type=parse_free_disk, action="append", default=[], metavar="PATH=GB"
    )
    p.add_argument(
        "--model-dir", type=parse_model_dir, action="append", default=[], metavar="DIR[=MANIFEST]"
    )
    p.add_argument("--verify-checksums", action="store_true", help="hash files the manifest lists")
    p.add_argument("--min-shm-gb", type=float, default=8.0)
    p.add_argument("--shm-path", default="/dev/shm")
    p.add_argument("--require-p2p", action="store_true", help="ACS/IOMMU blocking P2P fails")
    p.add_argument("--nccl-p2p", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--attention-backend", default="", help="override the derived backend")
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return 0 if exit_.code == 0 else 2
    options = Options(
        expected_gpus=args.expected_gpus,
        expected_model=args.expected_model,
        expected_compute_cap=args.expected_compute_cap,
        vllm_version=args.vllm_version,
        min_driver=args.min_driver,
        service_users=tuple(args.service_user) or ("vllm",),
        max_idle_memory_mib=args.max_idle_memory_mib,
        kernel_log=args.kernel_log,
        root=args.root,
        free_disk=tuple(args.free_disk),
        model_dirs=tuple(args.model_dir),
        verify_checksums=args.verify_checksums,
        min_shm_gb=args.min_shm_gb,
        shm_path=args.shm_path,
        require_p2p=args.require_p2p,
        nccl_p2p=args.nccl_p2p,
        attention_backend=args.attention_backend,
        nvidia_smi=args.nvidia_smi,
    )
    try:
        for text in (options.min_driver, options.vllm_version):
            if text:
                version_tuple(text)
        report = run(options)
    except (UsageError, ValueError) as error:
        print(f"gpu-doctor: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else render_text(report))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
