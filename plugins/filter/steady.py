"""What the steady-node check says, as a filter (roles/vllm_service/tasks/steady.yml).

``ansible_play_hosts | specdeploy.toolkit.steady_lines(hostvars, ansible_check_mode)``: one
``{"node": ..., "line": ...}`` per checked node, in the play's order: a drifted node, what
drifted (it takes the normal path); a steady one, why its release is not measured again (its
last validation; not said in check mode, where nothing was smoke-checked as a deploy would
leave it). Said by one task for the play instead of two per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.module_utils.wording import truncate


def steady_line(host: str, node: Mapping[str, Any], check_mode: bool = False) -> str | None:
    if "vllm_service_steady" not in node:
        return None  # not checked (failed before the check)
    release = node.get("specdeploy_release") or {}
    if not node["vllm_service_steady"]:
        drifts = truncate("; ".join(node.get("vllm_service_steady_drifts") or []), 900)
        return (
            f"{host} serves release {release.get('id')} but not as this deploy leaves it: "
            f"{drifts}. It goes through the normal rollout (render, activate, restart when "
            "needed, check)."
        )
    if check_mode:
        return None
    last = release.get("last_validation") or {}
    return (
        f"{host}: release {release.get('id')} serves unchanged (no restart) and passed its last "
        f"validation ({last.get('at', '?')}, mean acceptance length "
        f"{last.get('mean_acceptance_length', 'n/a')}); the readiness smoke check passed just "
        "now. `make validate` measures it again."
    )


def steady_lines(
    hosts: Iterable[str], hostvars: Mapping[str, Any], check_mode: bool = False
) -> list[dict]:
    lines = ((host, steady_line(host, hostvars[host], check_mode)) for host in hosts)
    return [{"node": host, "line": line} for host, line in lines if line]


class FilterModule:
    def filters(self):
        return {"steady_lines": steady_lines}
