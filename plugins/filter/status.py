"""The fleet table of ``make status`` (playbooks/status.yml), as filters.

``status_rows`` turns what the status play read on each node (the releases module's answer,
the service state, the current release's manifest) and the controller's last start per node
into one row per node; ``status_table`` prints the rows as the table and the fleet line.
Pure functions: no node is contacted here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

COLUMNS = ("node", "release", "engine", "patches", "service", "downtime", "validation", "deploy")
HEADER = (
    "NODE",
    "RELEASE",
    "ENGINE",
    "PATCHES",
    "SERVICE",
    "LAST DOWNTIME",
    "LAST VALIDATION",
    "DEPLOY",
)
FORMAT = "%-16s %-22s %-13s %-9s %-10s %-24s %-40s %s"


def last_starts(lines: Iterable[str]) -> dict[str, str]:
    """The newest start of each node, from ``specdeploy.controller.history starts --latest``
    (one JSON object a line): '12.3 s (deploy)', or 'not ready (rollback)'."""
    found = {}
    for line in lines:
        start = json.loads(line)
        window = start.get("window_s")
        shown = f"{window} s" if window is not None else "not ready"
        found[start["node"]] = f"{shown} ({start['action']})"
    return found


def _manifest(slurped: Mapping[str, Any] | None) -> dict[str, Any]:
    if not slurped or "content" not in slurped:
        return {}
    return json.loads(base64.b64decode(slurped["content"]))


def _engine(manifest: Mapping[str, Any]) -> str:
    """The engine the release serves with, as its requirement: "vllm==0.26.0" (every release
    without an engine input is vLLM's) or "sglang==0.5.15"."""
    inputs = manifest.get("inputs") or {}
    if inputs.get("engine") not in (None, "vllm"):
        return f"{inputs['engine']}=={inputs.get('engine_version', '?')}"
    version = manifest.get("vllm_version")
    return f"vllm=={version}" if version else "-"


def _validation(manifest: Mapping[str, Any]) -> str:
    last = manifest.get("last_validation") or {}
    if "status" not in last:
        return "-"
    acceptance = last.get("mean_acceptance_length")
    tail = f" acceptance {round(float(acceptance), 2)}" if acceptance is not None else ""
    return f"{last['status']} {last.get('at')}{tail}"


def _schedule(manifest: Mapping[str, Any]) -> Any:
    """The serving release's k schedule (num_speculative_tokens_per_batch_size), or None."""
    config = (manifest.get("inputs") or {}).get("speculative_config") or {}
    return config.get("num_speculative_tokens_per_batch_size")


def status_row(
    host: str,
    facts: Mapping[str, Any],
    starts: Mapping[str, str],
    deploy_states: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """One node's row from its registered results (status_releases, status_service,
    status_manifest) and its deploy state (``deploy_state show``'s text for it)."""
    releases = facts.get("status_releases")
    downtime = starts.get(host, "-")
    deploy = (deploy_states or {}).get(host, "-")
    if releases is None or releases.get("unreachable"):
        row = dict.fromkeys(COLUMNS, "-")
        row.update(node=host, service="unreachable", downtime=downtime)
        return row
    manifest = _manifest(facts.get("status_manifest"))
    return {
        "node": host,
        "release": releases.get("current") or "-",
        "engine": _engine(manifest),
        "patches": (manifest.get("patches") or {}).get("state", "-"),
        "service": str((facts.get("status_service") or {}).get("stdout", "")).strip(),
        "downtime": downtime,
        "validation": _validation(manifest),
        "deploy": deploy,
        "schedule": _schedule(manifest),
    }


def status_rows(
    hosts: Iterable[str], hostvars: Mapping[str, Any], start_lines=(), deploy_states=None
) -> list:
    starts = last_starts(start_lines or [])
    return [status_row(host, hostvars[host], starts, deploy_states) for host in hosts]


def status_deploy_nodes(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[dict]:
    """What ``specdeploy.controller.deploy_state show --nodes-json`` reads: each reachable
    node's lock owner (the deploy_lock module's state=shown) and current manifest."""
    nodes = []
    for host in hosts:
        lock = hostvars[host].get("status_lock")
        if not isinstance(lock, Mapping) or lock.get("skipped"):
            continue
        manifest = _manifest(hostvars[host].get("status_manifest"))
        nodes.append({"node": host, "lock": lock.get("owner"), "manifest": manifest})
    return nodes


def fleet_line(rows: list[Mapping[str, str]]) -> str:
    served = list(dict.fromkeys(r["release"] for r in rows if r["release"] != "-"))
    head = f"fleet: {len(rows)} node(s);"
    if len(served) == 1 and all(r["release"] != "-" for r in rows):
        return f"{head} every node serves {served[0]}"
    tail = "; one rollout serves one release: run deploy.yml again" if len(served) > 1 else ""
    return f"{head} releases served: {', '.join(served) or 'none'}{tail}"


def status_table(rows: list[Mapping[str, str]]) -> list[str]:
    """The header, one line per row, and the fleet line."""
    lines = [FORMAT % HEADER]
    lines += [FORMAT % tuple(row[c] for c in COLUMNS) for row in rows]
    schedules = [
        f"k schedule on {row['node']} (running requests: [first, last, k]): "
        + json.dumps(row["schedule"])
        for row in rows
        if row.get("schedule") is not None
    ]
    return [*lines, fleet_line(rows), *schedules]


class FilterModule:
    def filters(self):
        return {
            "status_rows": status_rows,
            "status_table": status_table,
            "status_deploy_nodes": status_deploy_nodes,
        }
