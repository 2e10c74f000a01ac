"""The GPU checks: nvidia-smi, count, model, driver, kernel modules, persistence, foreign
processes, ECC, Xid errors."""

from __future__ import annotations

import subprocess
from dataclasses import asdict

from .checks_pcie import nvidia_pci_devices
from .model import (
    BLACKWELL_MIN_DRIVER,
    FAIL,
    PASS,
    SKIP,
    WARN,
    XID_NAMES,
    Gpu,
    Report,
)
from .parse import (
    APP_FIELDS,
    ECC_FIELDS,
    GPU_FIELDS,
    NA_VALUES,
    min_driver_for,
    parse_apps,
    parse_csv,
    parse_gpus,
    parse_xids,
    to_int,
    version_at_least,
)
from .probe import Probe


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
    except OSError as e:  # there, but not a program this node can run
        report.add(
            "nvidia_smi",
            FAIL,
            f"{opts.nvidia_smi} cannot run: {e.strerror or e}",
            "point --nvidia-smi at the driver's nvidia-smi, or reinstall the driver",
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
