"""The gpu_node role's layout and driver words (roles/gpu_node), as filters.

``node_layout``: the directories a node needs (the release root, the model's and the drafter's
parent directories, the config directory, the service user's cache and log directories), as
items of the files module. ``reboot_plan_note``: what a driver change means for a reboot, said
in check mode. ``limits_conf`` and ``sysctl_conf``: the two settings files the provisioning
owns, whole (limits.d and sysctl.d syntax). Pure functions.
"""

from __future__ import annotations

import os
from typing import Any


def _directories(paths: list[str], mode: str, **owned: str) -> list[dict[str, str]]:
    return [{"path": path, "state": "directory", "mode": mode, **owned} for path in paths]


def node_layout(
    root: str,
    *,
    releases_dir: str,
    model_path: str,
    drafter_path: str,
    config_dir: str,
    cache_dir: str,
    log_dir: str,
    user: str,
    group: str,
) -> list[dict[str, str]]:
    """Public (0755): the root, the releases, where the weights live; root's only (0700): the
    config directory; the service user's (0750): its cache, compile cache and log directory."""
    weights = list(dict.fromkeys([os.path.dirname(model_path), os.path.dirname(drafter_path)]))
    return (
        _directories([root, releases_dir, *weights], "0755")
        + _directories([config_dir], "0700")
        + _directories(
            [cache_dir, f"{cache_dir}/compile", log_dir], "0750", owner=user, group=group
        )
    )


def _conf(head: str, lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in [f"# Managed by specdeploy ({head}", *lines])


def limits_conf(limits: list[dict[str, Any]], user: str) -> str:
    """limits.d lines for the service user's logins (``<user> - <item> <value>``)."""
    lines = [f"{user} - {limit['item']} {limit['value']}" for limit in limits]
    return _conf("gpu_node_limits): limits of the service user's logins.", lines)


def sysctl_conf(sysctls: dict[str, Any]) -> str:
    """sysctl.d lines (``key=value``), sorted by key."""
    lines = [f"{key}={value}" for key, value in sorted(sysctls.items())]
    return _conf("gpu_node_sysctls): kernel settings for a large model server.", lines)


def reboot_plan_note(needed: bool, *, allowed: bool, is_controller: bool) -> str:
    if not needed:
        return "No reboot needed."
    if allowed and not is_controller:
        return "A reboot would be needed: it would happen (gpu_node_reboot_allowed)"
    return "A reboot would be needed: the run would stop and ask for one"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "node_layout": node_layout,
            "reboot_plan_note": reboot_plan_note,
            "limits_conf": limits_conf,
            "sysctl_conf": sysctl_conf,
        }
