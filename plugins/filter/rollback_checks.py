"""What the rollback role's checks run and say (roles/rollback/tasks/settle.yml, verify.yml,
lock.yml).

``settle_failure_message``: a server that did not stay up after it became ready (another
process, a restart, not active), with the last lines of its log.
``smoke_failure_reasons``: why a smoke check failed: the reasons of its JSON answer, else its
stderr.
``release_mismatch_message``: a node that is not what the release activated by a rollback was
(its unit, its serving process, its patch state).
``patch_status_command``: the release's own patcher asked for the release's patch state (argv and
environment of the command).
``lock_refused_message``: another run holds the node's deploy lock; this run changed nothing.
Pure functions: the tasks gather the facts, these say them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths
from ansible_collections.specdeploy.toolkit.plugins.module_utils.wording import truncate


def settle_failure_message(
    release: str,
    *,
    before: Mapping[str, Any],
    now: Mapping[str, Any],
    settle_s: Any,
    journal: Mapping[str, Any] | None = None,
) -> str:
    """``before``/``now``: ``systemctl show`` of MainPID, NRestarts and ActiveState after
    readiness and now; ``journal``: the registered journalctl result (its last lines)."""
    log = " | ".join(str(line) for line in (journal or {}).get("stdout_lines", []))
    return (
        f"the server of release {release} did not stay up after it became ready:"
        f" process {before['MainPID']} -> {now['MainPID']},"
        f" restarts {before['NRestarts']} -> {now['NRestarts']},"
        f" state {now['ActiveState']} within {settle_s} s (log: {truncate(log, 400)})"
    )


def smoke_failure_reasons(run: Mapping[str, Any], stderr_without_reasons: bool = False) -> str:
    """``run``: the smoke check's registered result. Its JSON answer's reasons joined by '; ';
    an answer without reasons: its stderr when ``stderr_without_reasons``, else ''. No JSON
    answer: its stderr."""
    stdout, stderr = str(run.get("stdout", "")), str(run.get("stderr", ""))
    if not re.match(r"^\s*\{", stdout):
        return stderr
    answer = json.loads(stdout)
    if "reasons" not in answer:
        return stderr if stderr_without_reasons else ""
    return "; ".join(str(reason) for reason in answer["reasons"])


def release_mismatch_message(
    release: str,
    *,
    host: str,
    unit_matches: bool,
    process: Mapping[str, Any],
    patch: Mapping[str, Any],
) -> str:
    """``process``: the service_process probe; ``patch``: release_patch_state's answer."""
    unit = "matches" if unit_matches else "DIFFERS from"
    command_line = truncate(str(process.get("command_line") or ""), 160) or "none"
    return (
        f"after activating release {release} on {host} the node is not what that release was:"
        f" installed unit {unit} the release's unit; serving process: {command_line};"
        f" patch state {patch['state']} (recorded {patch['recorded']})."
    )


def patch_status_command(
    manifest: Mapping[str, Any], root: str, release_id: str, backup_dirname: str
) -> dict[str, Any]:
    """``manifest``: the release's manifest (its vLLM version). The release's Python runs its own
    toolkit's patcher over its own patch series and pristine backups."""
    release = release_paths(root, release_id)["dir"]
    argv = [
        f"{release}/venv/bin/python", "-m", "specdeploy.node.patching.patches", "status",
        "--version", str(manifest["vllm_version"]),
        "--manifest", f"{release}/toolkit/patches/vllm/manifest.yml",
        "--backup-dir", f"{release}/{backup_dirname}",
        "--json",
    ]  # fmt: skip
    return {"argv": argv, "environment": {"PYTHONPATH": f"{release}/toolkit"}}


def lock_refused_message(lock: Mapping[str, Any], *, host: str, purpose: str, stale_s: Any) -> str:
    """``lock``: the deploy_lock module's answer that did not acquire the lock (its message
    names the holder; without one, the owner record as JSON)."""
    holder = str(lock["message"]) if "message" in lock else json.dumps(lock.get("owner", {}))
    return (
        f"REFUSED: another run holds the deploy lock on {host}: {holder}. This {purpose} changed"
        " nothing. Wait for that run to finish. If it is gone (killed on another controller), its"
        f" lock counts as stale after {stale_s} s; or check and remove the lock in"
        " /run/lock/specdeploy/ on the node by hand."
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "settle_failure_message": settle_failure_message,
            "smoke_failure_reasons": smoke_failure_reasons,
            "release_mismatch_message": release_mismatch_message,
            "patch_status_command": patch_status_command,
            "lock_refused_message": lock_refused_message,
        }
