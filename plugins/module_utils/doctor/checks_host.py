"""The host checks: /dev/shm, free disk, the model files (with their manifest)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..specdeploy_fsio import sha256_file
from .model import FAIL, PASS, Report
from .probe import Probe


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
    report.add_outcome(
        "disk",
        short,
        "free space (old releases: `release.py prune`, caches) or grow the file system",
        lines,
    )


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
            elif digest and opts.verify_checksums and sha256_file(path) != digest:
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
    report.add_outcome(
        "model_files",
        problems,
        "copy the model again (rsync --checksum) or fix the manifest path",
        summaries,
    )
