"""A new release's venv from an earlier release's, by hard links (stdlib only).

Installing the pinned vLLM wheel into a fresh venv writes 1.3-1.5 GB (0.16.0: 10.7 CPU-s and
about a minute of wall time on a loaded 2-core machine) for every new release, although most
new releases change only a flag and keep the vLLM version. A release built before with the same
vLLM version, the same Python and the same node requirements has the very same files: they are
linked, not copied, and only the few files that name the venv's own path (the console scripts'
``#!`` line, ``activate*``, ``pyvenv.cfg``) are written anew.

Sharing inodes is safe because nothing writes into a release venv in place: pip and the patch
tool (``specdeploy.node.patching``) replace files by rename (``atomic_write``), the server runs
as an unprivileged user that cannot write there, and the release is immutable once verified.
The patch step that follows brings the copy to its own series (the donor's patch state comes
along: a same-series copy is already applied, another series is reverted and reapplied).

Same version is not same files: a wheelhouse can hold another build of that version (a local
hotfix, a rebuilt wheel). A venv installed from a wheelhouse records the sha256 of the vLLM
wheel(s) it came from (``WHEEL_MARKER``); a donor must have recorded the wheel the new release
would install. A venv without the record (built before it existed) is no donor.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from .specdeploy_fsio import sha256_file

# Statuses of a release whose venv is complete (built and verified at least once).
DONOR_STATUSES = ("verified", "active", "inactive")
# Files under bin/ larger than this are programs, not scripts that name the venv.
SCRIPT_MAX_BYTES = 64 * 1024
# In a release venv: which vLLM wheel(s) it was installed from (wheel_digest).
WHEEL_MARKER = "specdeploy-vllm-wheel.sha256"


class CloneError(Exception):
    """The venv could not be copied (the caller installs it the usual way)."""


def file_sha256(path: Path) -> str | None:
    # streamed: the vLLM wheel is 0.5 GB (read whole, it cost that much memory)
    try:
        return sha256_file(path)
    except OSError:
        return None


def python_version(venv: Path) -> str | None:
    """``version`` (or ``version_info``) from the venv's pyvenv.cfg."""
    try:
        text = (venv / "pyvenv.cfg").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(r"^version(?:_info)?\s*=\s*(\S+)", text, re.M)
    return found.group(1) if found else None


def wheel_digest(wheelhouse: str, vllm_version: str) -> str:
    """What the install of vllm==version takes: the sha256 of each matching wheel in the
    wheelhouse (pip picks among them), or the pin alone when it installs from an index."""
    if not wheelhouse:
        return f"index vllm=={vllm_version}"
    found = sorted(Path(wheelhouse).glob(f"vllm-{vllm_version}-*.whl"))
    if not found:
        return f"no wheel of vllm=={vllm_version} in {wheelhouse}"
    return "\n".join(f"{file_sha256(w)}  {w.name}" for w in found)


def recorded_wheel(venv: Path) -> str | None:
    try:
        return (venv / WHEEL_MARKER).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def record_wheel(venv: Path, digest: str, check: bool = False) -> bool:
    """Write the venv's wheel record (by a new file); True when it changed."""
    if recorded_wheel(venv) == digest.strip():
        return False
    if not check:
        tmp = venv / f".{WHEEL_MARKER}.tmp"
        tmp.write_text(digest.strip() + "\n", encoding="utf-8")
        os.replace(tmp, venv / WHEEL_MARKER)
    return True


def has_vllm(venv: Path, version: str) -> bool:
    return any(venv.glob(f"lib/python*/site-packages/vllm-{version}.dist-info/RECORD"))


def find_donor(
    releases_dir: Path,
    release_id: str,
    vllm_version: str,
    python: str,
    requirements_sha256: str | None,
    wheel: Callable[[], str],
) -> tuple[str, Path] | None:
    """The newest finished release with the same vLLM wheel, Python and node requirements.
    ``wheel()`` gives the digest of the wheel the release would install; it is called only when
    a release gets as far as that comparison (it reads the whole wheel)."""
    candidates = []
    for manifest_path in releases_dir.glob("*/manifest.json"):
        rid = manifest_path.parent.name
        if rid == release_id:
            continue
        try:
            manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        inputs = manifest.get("inputs") or {}
        if manifest.get("status") not in DONOR_STATUSES:
            continue
        if inputs.get("vllm_version") != vllm_version:
            continue
        venv = manifest_path.parent / "venv"
        if python_version(venv) != python or not has_vllm(venv, vllm_version):
            continue
        if recorded_wheel(venv) != wheel().strip():
            continue
        donor_requirements = manifest_path.parent / "toolkit" / "requirements-node.txt"
        if file_sha256(donor_requirements) != requirements_sha256:
            continue
        candidates.append((manifest_path.stat().st_mtime, rid, venv))
    if not candidates:
        return None
    _mtime, rid, venv = max(candidates)
    return rid, venv


def _rewrite(path: Path, old: str, new: str) -> bool:
    """Replace the donor's venv path in one small text file, by a new file (never in place:
    the old inode is the donor's)."""
    if path.is_symlink() or not path.is_file() or path.stat().st_size > SCRIPT_MAX_BYTES:
        return False
    data = path.read_bytes()
    if old.encode() not in data:
        return False
    mode = path.stat().st_mode & 0o7777
    tmp = path.with_name(f".{path.name}.specdeploy-tmp")
    tmp.write_bytes(data.replace(old.encode(), new.encode()))
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def clone_venv(donor: Path, target: Path) -> int:
    """Hard-link ``donor`` into ``target`` (which must not exist); returns the number of files
    written anew because they name the venv's path."""
    if target.exists():
        raise CloneError(f"{target} exists")
    tmp = target.with_name(target.name + ".clone-tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        shutil.copytree(donor, tmp, symlinks=True, copy_function=os.link)
        rewritten = 0
        for path in [tmp / "pyvenv.cfg", *sorted((tmp / "bin").iterdir())]:
            # the final path, not tmp's: the files are renamed with their directory below
            rewritten += _rewrite(path, str(donor), str(target))
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CloneError(f"{donor} -> {target}: {exc}") from exc
    os.replace(tmp, target)
    return rewritten


def clone_from_earlier_release(
    releases_dir: Path,
    release_id: str,
    vllm_version: str,
    python: str,
    requirements: Path,
    wheelhouse: str = "",
    check: bool = False,
) -> dict[str, Any]:
    """The module's answer: changed, donor (the release the venv came from, or ""), files."""
    target = releases_dir / release_id / "venv"
    if has_vllm(target, vllm_version):
        return {"changed": False, "donor": "", "reason": "the venv has its vLLM already"}
    if target.exists():
        return {"changed": False, "donor": "", "reason": "a venv is being built there"}
    wheel = lru_cache(maxsize=None)(lambda: wheel_digest(wheelhouse, vllm_version))
    found = find_donor(
        releases_dir, release_id, vllm_version, python, file_sha256(requirements), wheel
    )
    # the digest, when the search took it: the record step after an install reuses it
    taken = {"wheel": wheel()} if wheel.cache_info().currsize else {}
    if found is None:
        reason = "no finished release of this vLLM wheel"
        return {"changed": False, "donor": "", "reason": reason, **taken}
    rid, venv = found
    if check:
        return {"changed": True, "donor": rid, "rewritten": 0, **taken}
    return {"changed": True, "donor": rid, "rewritten": clone_venv(venv, target), **taken}
