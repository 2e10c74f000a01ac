"""What a failing node's message says in a rollout (playbooks/rollout.yml), as filters.

``failure_reason``: the failed task's name and the few lines of its result that say why (its
msg, the ``error`` of a JSON answer or the last stdout lines, the last stderr lines), without
Ansible's and SSH's noise. ``rollout_note``: where the fleet rollout stands for a failing node
(which nodes serve the release, which failed too, which still run in this stage, which are not
reached yet), empty on a single node. Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

NOISE = (re.compile(r"^Shared connection to"),)
REASON_LIMIT = 900


def _truncate(text: str, limit: int = REASON_LIMIT, leeway: int = 5) -> str:
    """Jinja's truncate(limit): cut at a word boundary and end with '...'."""
    if len(text) <= limit + leeway:
        return text
    cut = text[: limit - 3].rsplit(" ", 1)[0]
    return cut + "..."


def failure_reason(result: Mapping[str, Any] | None, task: str | None = None) -> str:
    result = result or {}
    stdout = str(result.get("stdout") or "")
    if re.match(r"^\s*\{", stdout):
        try:
            said = [str(json.loads(stdout).get("error") or "")]
        except ValueError:
            said = list(result.get("stdout_lines") or [])[-2:]
    else:
        said = list(result.get("stdout_lines") or [])[-2:]
    lines = [str(result.get("msg") or ""), *said, *list(result.get("stderr_lines") or [])[-2:]]
    kept: list[str] = []
    for line in (str(x).strip() for x in lines):
        if not line or line == "non-zero return code" or any(p.search(line) for p in NOISE):
            continue
        if line not in kept:
            kept.append(line)
    return f"{task or 'a task'}: {_truncate(' / '.join(kept)) or 'failed'}"


def rollout_note(
    release_id: str,
    host: str,
    hosts: Iterable[str],
    batch: Iterable[str],
    hostvars: Mapping[str, Any],
    max_fail_percentage: int | float = 0,
) -> str:
    """``hosts``: every node of this rollout (the steady ones and the play's); ``batch``: this
    stage's nodes; ``hostvars``: where each node's ``deploy_rollout_result`` is read."""
    others = list(dict.fromkeys(h for h in hosts if h != host))
    if not others:
        return ""
    batch = list(batch)
    results = {h: hostvars[h].get("deploy_rollout_result") for h in others}
    done = [h for h in others if results[h] == "serving"]
    failed = [h for h in others if results[h] == "failed"]
    settled = set(done) | set(failed)
    stage = [h for h in batch if h != host and h not in settled]
    later = [h for h in others if h not in settled and h not in batch]
    note = f"Rollout of {release_id}: it serves on {', '.join(done) or 'no other node'}; "
    if failed:
        note += f"failed too: {', '.join(failed)}; "
    if stage:
        note += f"still running in this stage: {', '.join(stage)}; "
    if later:
        note += (
            f"not reached yet: {', '.join(later)} (the rollout stops after this stage when more"
            f" than specdeploy_rollout_max_fail_percentage={max_fail_percentage}% of its nodes"
            " failed; those are then not touched)."
        )
    else:
        note += "this is the last stage."
    return note


class FilterModule:
    def filters(self):
        return {"failure_reason": failure_reason, "rollout_note": rollout_note}
