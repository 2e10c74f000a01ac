"""The steady-node check: does this node serve the planned release exactly as a deploy would
leave it? One read-only pass, run as the module specdeploy.toolkit.steady
(plugins/modules/steady.py), so that a no-op deploy pays one round trip per node instead of
walking the rollout (lock, build, patch, caches, render, activate, prune, unlock) with most of
its tasks skipped.

Runs ON the node (stdlib only; the collection's module_utils, shipped with the module; the
command line is specdeploy.node.release.steady). It checks what that walk checks on a node
that already serves the release:

* no other deploy or rollback holds the node's deploy lock (module_utils deploy_lock);
* `current` points at the planned release, which is finished (verified, active, inactive);
* the release's patch state: the manifest says verified, and each patched file still has the
  sha256 the patcher recorded (a hand edit since the build is drift);
* each file the deploy renders (the release's unit, environment, gates, the installed unit, the
  failure hook, the secrets files) has exactly the content, mode, owner and group the controller
  rendered just now (the templates stay the one source of truth: the content comes in);
* the paths the server needs exist (the compile caches' marker, the server's executables);
* the prune would remove nothing;
* the service is active, and the readiness smoke check (the argv the walk runs) passes.

It reports `steady` or the list of drifts; a node with any drift takes the normal path. It
changes nothing, in every mode.

    python3 -m specdeploy.node.release.steady --spec SPEC.json [--json]

SPEC.json holds the module's parameters (root, release_id, service, files, present,
keep_releases, smoke_argv, smoke_environment). Exit codes: 0 steady, 1 drift, 2 usage or
environment error.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import subprocess
from pathlib import Path
from typing import Any

# Relative: the same imports as the collection's module_utils and as
# specdeploy.node.module_utils.steady in a release's own Python.
from .deploy_lock import describe, read_owner
from .release import SELECTABLE, current_release, manifest_path, prune
from .specdeploy_fsio import sha256_file

PATCH_STATES = ("applied", "native")


def lock_drift(root: Path) -> list[str]:
    owner = read_owner(root)
    return [] if owner is None else [f"the deploy lock is held: {describe(owner, None)}"]


def release_drift(root: Path, release_id: str) -> list[str]:
    """`current`, the release's status and its patch state (manifest and files)."""
    current = current_release(root)
    if current != release_id:
        return [f"current is {current or 'absent'}, not {release_id}"]
    path = manifest_path(root, release_id)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return [f"release manifest {path}: {error}"]
    if manifest.get("status") not in SELECTABLE:
        return [f"release {release_id} is {manifest.get('status')!r}, not finished"]
    patches = manifest.get("patches") or {}
    if not patches.get("verified") or patches.get("state") not in PATCH_STATES:
        return [f"release {release_id}: its patches are not recorded as verified"]
    drifts = []
    site = Path(patches.get("site_packages") or "")
    for entry in patches.get("files") or []:
        target = site / entry["path"]
        try:
            found = sha256_file(target)
        except FileNotFoundError:
            found = "no file"
        if found != entry.get("expected_patched"):
            drifts.append(f"{target}: sha256 {found}, patched is {entry.get('expected_patched')}")
    return drifts


def file_drift(item: dict[str, Any]) -> str | None:
    """One rendered file against the node's copy: content, then mode and owner."""
    path = item["path"]
    try:
        with open(path, "rb") as handle:
            content = handle.read().decode("utf-8", errors="replace")
        info = os.lstat(path)
    except FileNotFoundError:
        return f"{path}: absent"
    if not stat.S_ISREG(info.st_mode):
        return f"{path}: not a regular file"
    if content != item["content"]:
        return f"{path}: content differs from what the deploy renders now"
    mode = int(item["mode"], 8)
    try:
        wanted = (pwd.getpwnam(item["owner"]).pw_uid, grp.getgrnam(item["group"]).gr_gid)
    except KeyError as error:
        return f"{path}: {error.args[0]}"
    if stat.S_IMODE(info.st_mode) != mode or (info.st_uid, info.st_gid) != wanted:
        return (
            f"{path}: mode {stat.S_IMODE(info.st_mode):04o} owner {info.st_uid}:{info.st_gid},"
            f" wanted {mode:04o} {wanted[0]}:{wanted[1]}"
        )
    return None


def service_drift(service: str) -> list[str]:
    proc = subprocess.run(
        ["systemctl", "is-active", f"{service}.service"],
        capture_output=True,
        text=True,
        check=False,
    )
    state = proc.stdout.strip() or proc.stderr.strip() or f"exit {proc.returncode}"
    return [] if state == "active" else [f"{service}.service is {state}, not active"]


def smoke(argv: list[str], environment: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """The readiness smoke check, the command line the walk runs (plugin_utils/smoke.py)."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
            env={**os.environ, **environment},
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "message": f"no answer within {timeout_s:.0f} s"}
    except OSError as error:
        return {"ok": False, "message": str(error)}
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = {}
    reasons = result.get("reasons") if isinstance(result, dict) else None
    message = "; ".join(reasons or []) or proc.stderr.strip()[-300:] or f"exit {proc.returncode}"
    return {"ok": proc.returncode == 0, "message": "passed" if proc.returncode == 0 else message}


# Written under the release root by a drain, removed by the put-back (roles/vllm_service).
OUT_OF_ROTATION = ".out-of-rotation"


def check(spec: dict[str, Any], run_smoke: bool = True) -> dict[str, Any]:
    """Every check of the module doc; the smoke check only when nothing else drifted."""
    root = Path(spec["root"])
    drifts = lock_drift(root) + release_drift(root, spec["release_id"])
    for item in spec.get("files") or []:
        item = {"owner": "root", "group": "root", **item}
        found = file_drift(item)
        if found:
            drifts.append(found)
    drifts += [f"{path}: absent" for path in spec.get("present") or [] if not os.path.exists(path)]
    if (root / "releases").is_dir():
        removed = prune(root, int(spec.get("keep_releases", 3)), check=True)["removed"]
        if removed:
            drifts.append(f"old releases to prune: {', '.join(removed)}")
    drifts += service_drift(spec["service"])
    result: dict[str, Any] = {"smoke": None}
    if not drifts and run_smoke and spec.get("smoke_argv"):
        result["smoke"] = smoke(
            spec["smoke_argv"],
            spec.get("smoke_environment") or {},
            float(spec.get("smoke_timeout_s", 60)),
        )
        if not result["smoke"]["ok"]:
            drifts.append(f"readiness smoke check failed: {result['smoke']['message']}")
    # A run that drained the node and then stopped (controller killed, node rebooted) left this
    # note (vllm_service drain.yml): a steady node that passed its smoke check goes back.
    result["left_drained"] = (root / OUT_OF_ROTATION).exists()
    return {"steady": not drifts, "drifts": drifts, **result}
