"""Release directories, their manifests, the `current` symlink and the activation ledger.

Runs ON the node (stdlib only). Layout under the root:

    releases/<id>/manifest.json   what the release is and what was verified (status below)
    releases/<id>/...             venv, toolkit, config (built by the deploy)
    current -> releases/<id>      the serving release: always read from the symlink itself
    ledger.jsonl                  one line per activation, in order (rollback reads this)

Release status: building (never selected) -> verified -> active | failed | inactive.
Every command returns one object with `changed`, so Ansible can report honestly. With
``check=True`` a command changes nothing and says what it would change (Ansible's check mode:
the module specdeploy.toolkit.releases runs these functions; the command line is
specdeploy.node.release.ledger).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

# Relative: the same import as the collection's module_utils (shipped with the releases module)
# and as specdeploy.node.module_utils.release in a release's own Python.
from .specdeploy_fsio import atomic_symlink, atomic_write

STATUSES = ("building", "verified", "active", "inactive", "failed")
SELECTABLE = ("verified", "active", "inactive")


class ReleaseError(Exception):
    """A refusal with a message for the operator (exit code 1)."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def releases_dir(root: Path) -> Path:
    return root / "releases"


def release_paths(root: str | Path, release_id: str) -> dict[str, str]:
    """Where a release lives on a node, as strings: the one layout. The plan's release object and
    every role that reaches another release by id (rollback, activation, validation) take their
    paths from here (the filter specdeploy.toolkit.release_paths)."""
    base = releases_dir(Path(root)) / release_id
    return {
        "dir": str(base),
        "toolkit_dir": str(base / "toolkit"),
        "venv_dir": str(base / "venv"),
        "python": str(base / "venv" / "bin" / "python"),
        "config_dir": str(base / "config"),
        "manifest": str(base / "manifest.json"),
    }


def manifest_path(root: Path, release_id: str) -> Path:
    return releases_dir(root) / release_id / "manifest.json"


def read_manifest(root: Path, release_id: str) -> dict[str, Any]:
    path = manifest_path(root, release_id)
    if not path.is_file():
        raise ReleaseError(f"release {release_id!r} has no manifest at {path}")
    return json.loads(path.read_text())


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=0o644)


def current_release(root: Path) -> str | None:
    """The release `current` points at, read from the symlink (never from mtimes)."""
    link = root / "current"
    if not link.is_symlink():
        return None
    return Path(os.readlink(link)).name


def read_ledger(root: Path) -> list[dict[str, Any]]:
    path = root / "ledger.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append_ledger(root: Path, entry: dict[str, Any]) -> None:
    with (root / "ledger.jsonl").open("a") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def busy_pids(path: Path) -> list[int]:
    """Processes whose command line, working directory or executable is under `path`.

    An interrupted deploy (killed ansible-playbook, dropped SSH) can leave its pip or venv
    process running on the node; wiping the directory under it would mix two builds.
    """
    prefix = str(path.resolve()) + "/"
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            places = [os.readlink(proc / "cwd") + "/", os.readlink(proc / "exe")]
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in args if a] + places
        if any(prefix in word or word.startswith(prefix) for word in words):
            found.append(int(proc.name))
    return sorted(found)


def wait_not_busy(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pids = busy_pids(path)
        if not pids:
            return
        if time.monotonic() >= deadline:
            raise ReleaseError(
                f"{path} is still in use by process(es) {', '.join(map(str, pids))} left by an "
                f"interrupted run (waited {timeout:g} s); they must finish or be stopped "
                "before the release is built again"
            )
        time.sleep(1.0)


def init_release(
    root: Path,
    release_id: str,
    inputs: dict[str, Any],
    busy_timeout: float = 300.0,
    check: bool = False,
) -> dict[str, Any]:
    """Create the release's manifest in status `building`, or keep a finished one.

    A release left `building` or `failed` by an earlier run is started again from scratch
    (its directory is emptied except for the manifest history), so a half-built venv is never
    trusted; processes an interrupted run left working in it are waited for first.
    """
    path = manifest_path(root, release_id)
    if path.is_file():
        manifest = json.loads(path.read_text())
        if manifest.get("status") in SELECTABLE and manifest.get("inputs") == inputs:
            return {"changed": False, "status": manifest["status"], "rebuilt": False}
        if (
            manifest.get("status") == "failed"
            and manifest.get("inputs") == inputs
            and manifest.get("failure_stage") == "serve"
        ):
            # Built and verified, then failed while serving (readiness, smoke, gate): its files
            # are what a rebuild would produce. Deploying it again retries it as it is; the
            # deploy verifies its patch state again before it can be activated.
            manifest["status"] = "verified"
            manifest.setdefault("history", []).append(
                {"at": _now(), "status": "verified", "reason": "deployed again after a failure"}
            )
            if not check:
                _write_json_atomic(path, manifest)
            return {"changed": True, "status": "verified", "rebuilt": False, "retry": True}
        if current_release(root) == release_id:
            raise ReleaseError(
                f"release {release_id!r} is what `current` points at but is "
                f"{manifest.get('status')!r}; roll back or deploy another release first"
            )
        previous_status = manifest.get("status")
        if check:
            return {"changed": True, "status": "building", "rebuilt": True}
        wait_not_busy(path.parent, busy_timeout)
        for child in path.parent.iterdir():
            if child.name != "manifest.json":
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        rebuilt = True
    else:
        if check:
            return {"changed": True, "status": "building", "rebuilt": False}
        path.parent.mkdir(parents=True, exist_ok=True)
        previous_status = None
        rebuilt = False
    manifest = {
        "release_id": release_id,
        "status": "building",
        "inputs": inputs,
        "vllm_version": inputs.get("vllm_version"),
        "created_at": _now(),
        "verified": {},
        "starts": [],
        "history": [{"at": _now(), "status": "building", "previous_status": previous_status}],
    }
    _write_json_atomic(path, manifest)
    return {"changed": True, "status": "building", "rebuilt": rebuilt}


def update_release(
    root: Path,
    release_id: str,
    fields: dict[str, Any],
    status: str | None,
    reason: str | None,
    from_status: str | None = None,
    failure_stage: str | None = None,
    check: bool = False,
) -> dict[str, Any]:
    """Merge `fields` into the manifest and move it to `status`; unchanged content is not written.

    With `from_status`, the status moves only from that status (a finished release that is
    deployed again keeps its `active`). The result's `before`/`after` are the manifests (a diff).
    """
    if check and not manifest_path(root, release_id).is_file():
        # Check mode of a release that a real run would have created first.
        return {"changed": True, "status": status, "before": {}, "after": fields}
    manifest = read_manifest(root, release_id)
    building = manifest.get("status") == "building"
    if from_status is not None and manifest.get("status") != from_status:
        status = None
    updated = json.loads(json.dumps(manifest))
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(updated.get(key), dict):
            updated[key] = {**updated[key], **value}
        else:
            updated[key] = value
    if status is not None:
        if status not in STATUSES:
            raise ReleaseError(f"status {status!r} is not one of {', '.join(STATUSES)}")
        if updated.get("status") != status:
            updated["status"] = status
            entry = {"at": _now(), "status": status}
            if reason:
                entry["reason"] = reason
            updated.setdefault("history", []).append(entry)
        if reason and status == "failed":
            updated["failure_reason"] = reason
        if status == "failed":
            # "serve": built, verified, then failed while serving (a retry reuses it as it is);
            # "build": failed while being built (a retry rebuilds it from scratch).
            updated["failure_stage"] = failure_stage or ("build" if building else "serve")
    if updated == manifest:
        return {"changed": False, "status": manifest.get("status")}
    if not check:
        _write_json_atomic(manifest_path(root, release_id), updated)
    return {"changed": True, "status": updated.get("status"), "before": manifest, "after": updated}


def record_start(
    root: Path, release_id: str, start: dict[str, Any], check: bool = False
) -> dict[str, Any]:
    """Append one start (stop-to-ready seconds, backends seen) to the manifest."""
    manifest = read_manifest(root, release_id)
    manifest.setdefault("starts", []).append({"at": _now(), **start})
    if not check:
        _write_json_atomic(manifest_path(root, release_id), manifest)
    return {"changed": True, "starts": len(manifest["starts"])}


def activate(root: Path, release_id: str, action: str, check: bool = False) -> dict[str, Any]:
    """Point `current` at the release (atomic rename) and record it in the ledger."""
    previous = current_release(root)
    if check and previous != release_id and not manifest_path(root, release_id).is_file():
        # Check mode of a release that a real run would have built first.
        return {"changed": True, "current": release_id, "previous": previous}
    manifest = read_manifest(root, release_id)
    if manifest.get("status") not in SELECTABLE:
        raise ReleaseError(
            f"release {release_id!r} is {manifest.get('status')!r}; only a finished release "
            f"({', '.join(SELECTABLE)}) can be activated"
        )
    if previous == release_id:
        return {"changed": False, "current": release_id, "previous": previous}
    if check:
        return {"changed": True, "current": release_id, "previous": previous}
    atomic_symlink(root / "current", f"releases/{release_id}")
    _append_ledger(
        root, {"at": _now(), "action": action, "release": release_id, "previous": previous}
    )
    if previous and manifest_path(root, previous).is_file():
        old = read_manifest(root, previous)
        if old.get("status") == "active":
            update_release(root, previous, {}, "inactive", f"replaced by {release_id}")
    activation = {"at": _now(), "action": action, "previous": previous}
    update_release(
        root,
        release_id,
        {"activated_at": activation["at"], "last_activation": activation},
        "active",
        action,
    )
    return {"changed": True, "current": release_id, "previous": previous}


def deactivate(root: Path, action: str, check: bool = False) -> dict[str, Any]:
    """Remove `current` (nothing serves) and record it; used when a first deploy fails."""
    previous = current_release(root)
    if previous is None:
        return {"changed": False, "current": None, "previous": None}
    if check:
        return {"changed": True, "current": None, "previous": previous}
    (root / "current").unlink()
    _append_ledger(root, {"at": _now(), "action": action, "release": None, "previous": previous})
    return {"changed": True, "current": None, "previous": previous}


def previous_release(root: Path) -> str | None:
    """The release that served before `current`, from the ledger's order of activations.

    Walks the ledger backwards, skipping the current release and any release that is no longer
    selectable (failed, or pruned), so a rollback of a rollback rolls forward again.
    """
    current = current_release(root)
    seen_current = False
    for entry in reversed(read_ledger(root)):
        release = entry["release"]
        if release is None:
            continue
        if release == current and not seen_current:
            seen_current = True
            continue
        if release == current:
            continue
        path = manifest_path(root, release)
        if path.is_file() and json.loads(path.read_text()).get("status") in SELECTABLE:
            return release
    return None


def rollback_target(root: Path, to: str | None) -> dict[str, Any]:
    """The release a rollback activates: `to`, or the one before `current` in the ledger.

    Refuses (ReleaseError) when there is none, or the target is unknown or not finished.
    """
    current = current_release(root)
    if not to:
        target = previous_release(root)
        if target is None:
            known = [e["release"] for e in read_ledger(root) if e.get("release")]
            raise ReleaseError(
                "no earlier release to go back to: the ledger has "
                + (f"only {', '.join(sorted(set(known)))}" if known else "no activation")
                + (f" and `current` is {current}" if current else " and nothing is current")
                + " (failed or pruned releases are not candidates)"
            )
    else:
        target = to
    if target == current:
        raise ReleaseError(f"release {target!r} is already current; nothing to do")
    if not manifest_path(root, target).is_file():
        known = sorted(p.parent.name for p in releases_dir(root).glob("*/manifest.json"))
        raise ReleaseError(
            f"release {target!r} does not exist on this node (known: {', '.join(known) or 'none'})"
        )
    manifest = read_manifest(root, target)
    if manifest.get("status") not in SELECTABLE:
        reason = manifest.get("failure_reason")
        raise ReleaseError(
            f"release {target!r} is {manifest.get('status')!r}"
            + (f" ({reason})" if reason else "")
            + f"; only a finished release ({', '.join(SELECTABLE)}) can be activated"
        )
    return {
        "changed": False,
        "target": target,
        "current": current,
        "status": manifest.get("status"),
        "speculative": (manifest.get("inputs") or {}).get("speculative_config") is not None,
    }


def prune(root: Path, keep: int, check: bool = False) -> dict[str, Any]:
    """Remove old releases beyond `keep`, never `current` nor the one before it."""
    protected = {r for r in (current_release(root), previous_release(root)) if r}
    order = [entry["release"] for entry in read_ledger(root) if entry["release"]]
    candidates = []
    for child in sorted(releases_dir(root).iterdir()) if releases_dir(root).is_dir() else []:
        if child.name in protected or not child.is_dir():
            continue
        manifest = child / "manifest.json"
        status = json.loads(manifest.read_text()).get("status") if manifest.is_file() else None
        if status == "building":
            continue  # possibly being built right now by this deploy
        last_use = max((i for i, r in enumerate(order) if r == child.name), default=-1)
        candidates.append((last_use, child))
    kept_slots = max(keep - len(protected), 0)
    candidates.sort(key=lambda item: item[0], reverse=True)
    removed = [child.name for _last_use, child in candidates[kept_slots:]]
    for _last_use, child in candidates[kept_slots:] if not check else []:
        shutil.rmtree(child)
    return {"changed": bool(removed), "removed": removed, "kept": sorted(protected)}


def status(root: Path) -> dict[str, Any]:
    releases = []
    if releases_dir(root).is_dir():
        for child in sorted(releases_dir(root).iterdir()):
            manifest = child / "manifest.json"
            if manifest.is_file():
                data = json.loads(manifest.read_text())
                releases.append(
                    {
                        "release_id": child.name,
                        "status": data.get("status"),
                        "vllm_version": data.get("vllm_version"),
                        "failure_reason": data.get("failure_reason"),
                    }
                )
    current = current_release(root)
    current_manifest = manifest_path(root, current) if current else None
    return {
        "changed": False,
        "current": current,
        # what the serving release was built with (its inputs, its last validation); {} when
        # nothing is deployed or the release has no manifest
        "current_manifest": (
            json.loads(current_manifest.read_text())
            if current_manifest is not None and current_manifest.is_file()
            else {}
        ),
        "previous": previous_release(root),
        "releases": releases,
        "ledger": read_ledger(root)[-10:],
    }
