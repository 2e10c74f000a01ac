"""Running every check: Options in, Report out (the module and the command line both call run)."""

from __future__ import annotations

from pathlib import Path

from .checks_gpu import (
    check_count,
    check_driver,
    check_ecc,
    check_gpus,
    check_kernel_modules,
    check_model,
    check_persistence,
    check_processes,
    check_xid,
)
from .checks_host import check_disk, check_models, check_shm
from .checks_pcie import check_pcie
from .derive import derive
from .model import PASS, Options, Report, UsageError
from .parse import version_tuple
from .probe import Probe


def run(options: Options) -> Report:
    """Every check, read-only. UsageError (an unusable root) or ValueError (a version that is
    not one) before any check runs."""
    for text in (options.min_driver, options.vllm_version):
        if text:
            version_tuple(text)
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


def options_from_params(params: dict) -> Options:
    """The module's parameters (plugins/modules/gpu_doctor.py) as Options: the same names, the
    lists of dicts as the command line's PATH=GB and DIR[=MANIFEST] pairs."""
    return Options(
        expected_gpus=params["expected_gpus"],
        expected_model=params["expected_model"],
        expected_compute_cap=params["expected_compute_cap"],
        vllm_version=params["vllm_version"],
        min_driver=params["min_driver"],
        service_users=tuple(params["service_users"]) or ("vllm",),
        max_idle_memory_mib=params["max_idle_memory_mib"],
        kernel_log=params["kernel_log"],
        root=params["root"],
        free_disk=tuple((d["path"], float(d["min_gb"])) for d in params["free_disk"]),
        model_dirs=tuple((d["path"], d["manifest"] or "") for d in params["model_dirs"]),
        verify_checksums=params["verify_checksums"],
        min_shm_gb=params["min_shm_gb"],
        shm_path=params["shm_path"],
        require_p2p=params["require_p2p"],
        nccl_p2p=params["nccl_p2p"],
        attention_backend=params["attention_backend"],
        nvidia_smi=params["nvidia_smi"],
    )
