"""The doctor's command line (gpu-doctor, python -m specdeploy.node.doctor): its argument parser
and output. The checks are the collection's module_utils doctor package (here
specdeploy.node.module_utils.doctor; the module specdeploy.toolkit.gpu_doctor runs the same
code)."""

from __future__ import annotations

import argparse
import json
import sys

from specdeploy.node.module_utils.doctor.model import Options, UsageError, render_text
from specdeploy.node.module_utils.doctor.runner import run


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
        prog="gpu-doctor",
        description="Hardware preflight of a GPU node (read-only): one line per check, each "
        "failure with its fix.",
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


# The command-line options that set the Options field of the same name.
_SAME_NAMED_OPTIONS = (
    "expected_gpus", "expected_model", "expected_compute_cap", "vllm_version", "min_driver",
    "max_idle_memory_mib", "kernel_log", "root", "verify_checksums", "min_shm_gb", "shm_path",
    "require_p2p", "nccl_p2p", "attention_backend", "nvidia_smi"
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return 0 if exit_.code == 0 else 2
    options = Options(
        service_users=tuple(args.service_user) or ("vllm",),
        free_disk=tuple(args.free_disk),
        model_dirs=tuple(args.model_dir),
        **{name: getattr(args, name) for name in _SAME_NAMED_OPTIONS},
    )
    try:
        report = run(options)
    except (UsageError, ValueError) as error:
        print(f"gpu-doctor: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else render_text(report))
    return 1 if report.failed else 0
