"""What the rollback role says when a deploy fails (roles/rollback), as filters.

``drain_note``: whether a node that rolled back is back in the balancer's rotation or stays out.
``auto_rollback_message``: the automatic rollback's last word (roles/rollback/tasks/auto.yml):
what failed, what the rescue did (rolled back, speculation disabled, stopped, or the rollback
failed too), where the failed release is kept, the drain and rollout notes.
``build_failed_message``: a deploy that failed before the switch (tasks/build_failed.yml).
``manual_rollback_failed_message``: a manual rollback that failed (tasks/main.yml).
``release_patch_state``: a rolled-back-to release's patch state now and as its manifest recorded
it (tasks/verify.yml).
``failed_speculative_gate``: whether a deploy's failure is a speculative gate's (the release
served and answered its smoke check, a gate failed): the case rollback_failed_gate_policy is for.
Pure functions: the tasks gather the facts, these say them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean


def drain_note(
    host: str,
    drained: bool,
    undrain: Mapping[str, Any] | None = None,
    backend: str = "",
    server: str = "",
) -> str:
    """``undrain``: the undrain task's registered result (None when it did not run)."""
    if drained:
        return (
            f"{host} STAYS OUT OF THE BALANCER'S ROTATION (drained); put it back when it serves"
            f" again (HAProxy: set server {backend}/{server} state ready; else"
            " specdeploy_undrain_command). "
        )
    undrained = isinstance(undrain, Mapping) and not undrain.get("skipped", False)
    return "It is back in the balancer's rotation. " if undrained else ""


def _rescue_said(
    outcome: str, host: str, to: str, serving: str, policy: str, rollback_error: str
) -> str:
    if outcome == "rolled-back":
        return (
            f"Rolled back automatically: release {to} serves again (its unit, environment and"
            " patch state verified, smoke check passed). "
        )
    if outcome == "speculation-disabled" and policy != "disable_speculation":
        return (
            "FIRST DEPLOY FAILED ITS SPECULATIVE GATES and there was no earlier release to go"
            f" back to: SPECULATION IS OFF on {host}. Release {serving} (the same inputs with"
            " speculation disabled, the configuration the baseline start just measured) now"
            " serves; its smoke check passed; no acceptance or speed gate applies to it. Fix the"
            " drafter or the gates and deploy again. "
        )
    if outcome == "speculation-disabled":
        return (
            f"By rollback_failed_gate_policy=disable_speculation release {serving} (the same inputs"
            " with speculation disabled) now serves; its smoke check passed; no acceptance or"
            " speed gate applies to it. "
        )
    if outcome == "stopped":
        return (
            "There was no earlier release to go back to: the server is stopped and nothing serves"
            f" on {host}. "
        )
    return (
        f"Rolling back to {to} FAILED TOO: {rollback_error}. NOTHING MAY BE SERVING on {host}:"
        " run `make status`, then `make rollback TO=<id>`. "
    )


def auto_rollback_message(
    outcome: str,
    *,
    host: str,
    failed: str,
    reason: str,
    kept_dir: str,
    marked_failed: bool,
    to: str = "",
    serving: str = "",
    policy: str = "",
    rollback_error: str = "",
    disable_error: str | None = None,
    drain: str = "",
    rollout: str = "",
) -> str:
    """``outcome``: rolled-back, speculation-disabled, stopped, else the rollback failed too.
    ``disable_error``: why serving without speculation failed first (None when it did not)."""
    said = f"deploy of release {failed} on {host} FAILED: {reason}. "
    said += _rescue_said(outcome, host, to, serving, policy, rollback_error)
    if disable_error is not None:
        said += f"(Serving with speculation disabled failed first: {disable_error}.) "
    status = "failed" if marked_failed else "unchanged: its manifest could not be written"
    return f"{said}The failed release is kept as {kept_dir} (status {status}). {drain}{rollout}"


def build_failed_hint(reason: str) -> str:
    """What a build failure's reason points at (patch target drift, a full disk, a file system
    remounted read-only), else ''."""
    if re.search(r"sha256 mismatch|drift", reason):
        return (
            "Patch target drift: the installed vLLM files are not the pristine ones the patch"
            " series was made for (a hand edit, or another build in the wheelhouse); the patcher"
            " changed nothing. "
        )
    if "No space left on device" in reason:
        return "The release root is out of space: free space or prune releases. "
    if "Read-only file system" in reason:
        return (
            "The file system is read-only: a disk error makes ext4 (errors=remount-ro) remount"
            " it so; check the disk (dmesg, smartctl) before deploying again. "
        )
    return ""


def build_failed_message(
    failed: str,
    *,
    host: str,
    reason: str,
    current: Mapping[str, Any] | None,
    serving_answered: bool,
    kept_dir: str,
    marked_failed: bool,
    rollout: str = "",
) -> str:
    """``current``: the stat of the release root's ``current`` link (its target serves; nothing
    served before when it is no link)."""
    current = current or {}
    serving = os.path.basename(str(current.get("lnk_target") or ""))
    if not current.get("islnk", False):
        switched = "no release was serving before, and none serves now."
    elif serving_answered:
        switched = f"release {serving} still serves and answered its smoke check."
    else:
        switched = f"release {serving} still serves but did NOT answer its smoke check."
    kept = (
        "marked failed and kept for inspection"
        if marked_failed
        else "left as it was (its manifest could not be written)"
    )
    return (
        f"deploy of release {failed} on {host} FAILED before the switch: {reason}."
        f" {build_failed_hint(reason)} Nothing was switched: {switched} The half-built release"
        f" {kept_dir} is {kept}; the next deploy rebuilds it from scratch. {rollout}"
    )


def manual_rollback_failed_message(
    dest: str, *, host: str, error: str, started_from: str, drained: bool
) -> str:
    """``started_from``: the release that served when the rollback started ('' for none)."""
    before = (
        f"Release {started_from} serves again (it answered its smoke check)."
        if started_from
        else "Nothing was serving before the rollback."
    )
    out = f"{host} STAYS OUT OF THE BALANCER'S ROTATION (drained)." if drained else ""
    return f"rollback of {host} to release {dest} FAILED: {error}. {before} {out}"


def release_patch_state(
    manifest: Mapping[str, Any], engine: str, sglang_run: Any = None, patcher_run: Any = None
) -> dict:
    """``manifest``: the release's manifest; ``sglang_run``: the SGLang version read from its venv
    (an SGLang release patches nothing: native when the version is the recorded one);
    ``patcher_run``: its vLLM patcher's ``status --json`` answer. Anything unreadable is unknown."""
    recorded = dict(manifest.get("patches") or {})
    if engine == "sglang":
        run = sglang_run if isinstance(sglang_run, Mapping) else {}
        same = str(run.get("stdout") or "").strip() == str(recorded.get("engine_version") or "")
        state = "native" if run.get("rc", 1) == 0 and same else "unknown"
    else:
        run = patcher_run if isinstance(patcher_run, Mapping) else {}
        try:
            answer = json.loads(str(run.get("stdout") or ""))
        except ValueError:
            answer = None
        state = str(answer.get("state") or "unknown") if isinstance(answer, dict) else "unknown"
    return {"state": state, "recorded": str(recorded.get("state") or "unknown")}


def failed_speculative_gate(result: Mapping[str, Any] | None, gate: Any = True) -> bool:
    """From the validation's result of this attempt (``validation_result``), not from the failed
    task's name: with the gate on, a result whose smoke check passed and whose gates did not
    fails the deploy at the gate itself, so such a result is the failure's cause."""
    if not result or not isinstance(result, Mapping) or not boolean(gate, strict=False):
        return False
    smoke = result.get("smoke") or {}
    gates = result.get("gates") or {}
    return bool(smoke.get("ok")) and not bool(gates.get("passed", True))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "drain_note": drain_note,
            "auto_rollback_message": auto_rollback_message,
            "build_failed_message": build_failed_message,
            "manual_rollback_failed_message": manual_rollback_failed_message,
            "failed_speculative_gate": failed_speculative_gate,
            "release_patch_state": release_patch_state,
        }
