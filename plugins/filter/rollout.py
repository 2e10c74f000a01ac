"""What a failing node's message says in a rollout (playbooks/rollout.yml), as filters.

``failure_reason``: the failed task's name and the few lines of its result that say why (its
msg, the ``error`` of a JSON answer or the last stdout lines, the last stderr lines), without
Ansible's and SSH's noise. ``rollout_note``: where the fleet rollout stands for a failing node
(which nodes serve the release, which failed too, which still run in this stage, which are not
reached yet), empty on a single node. ``rollout_summary``: the deploy's closing lines (which
release serves on how many of the fleet's nodes, the k schedule), empty when none serves it.
Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.module_utils import progress_line
from ansible_collections.specdeploy.toolkit.plugins.module_utils.wording import truncate

NOISE = (re.compile(r"^Shared connection to"),)
REASON_LIMIT = 900


def failure_reason(result: Mapping[str, Any] | None, task: str | None = None) -> str:
    result = result or {}
    return f"{task or 'a task'}: {truncate(' / '.join(_said(result)), REASON_LIMIT) or 'failed'}"


def _said(result: Mapping[str, Any]) -> list[str]:
    """The lines that say why; for a loop ("One or more items failed"), its first failed
    item's (a file task's item names its path and the error: a read-only file system)."""
    items = [r for r in result.get("results") or [] if isinstance(r, Mapping) and r.get("failed")]
    if items:
        said = _said(items[0])
        more = f"(and {len(items) - 1} more items failed)" if len(items) > 1 else ""
        return [line for line in [*said, more] if line] or ["One or more items failed"]
    stdout = str(result.get("stdout") or "")
    if re.match(r"^\s*\{", stdout):
        try:
            said = [str(json.loads(stdout).get("error") or "")]
        except ValueError:
            said = list(result.get("stdout_lines") or [])[-2:]
    else:
        said = list(result.get("stdout_lines") or [])[-2:]
    lines = [str(result.get("msg") or ""), *said, *list(result.get("stderr_lines") or [])[-2:]]
    # unarchive's msg says only "failed to unpack"; the archiver's own words (tar: "x: Cannot
    # open: Read-only file system") are in its extract_results, first, before tar's summary line
    extract = result.get("extract_results")
    archiver = str(extract.get("err") or "") if isinstance(extract, Mapping) else ""
    lines += [ln for ln in archiver.splitlines() if "Exiting with failure status" not in ln][:2]
    kept: list[str] = []
    for line in (str(x).strip() for x in lines):
        if not line or line == "non-zero return code" or any(p.search(line) for p in NOISE):
            continue
        if line not in kept:
            kept.append(line)
    return kept


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


def stage_sizes(serial: Any, count: int) -> list[int]:
    """The batch sizes Ansible makes of ``count`` hosts for a play's ``serial`` (an int, "N%"
    or a list of them, the last one repeating; a percentage of the play's hosts, at least 1)."""
    items = serial if isinstance(serial, list) else [serial]
    items = items or [count]
    sizes: list[int] = []
    left, i = count, 0
    while left > 0:
        item = str(items[min(i, len(items) - 1)]).strip()
        if item.endswith("%"):
            size = int(float(item[:-1]) / 100.0 * count) or 1
        else:
            size = int(item) if int(item) > 0 else left  # serial 0: all at once
        sizes.append(min(size, left))
        left -= sizes[-1]
        i += 1
    return sizes


def _stage_infos(
    play: str, hosts_all: Iterable[str], hostvars: Mapping[str, Any], with_host: bool = False
) -> list[Any]:
    """The stage facts (``deploy_rollout_stage``) the play's nodes recorded in this run."""
    infos: list[Any] = []
    for host in hosts_all:
        info = (hostvars.get(host) or {}).get("deploy_rollout_stage")
        if isinstance(info, Mapping) and info.get("play") == play:
            infos.append((host, dict(info)) if with_host else dict(info))
    return infos


def rollout_stage(
    play: str,
    batch: Iterable[str],
    hosts_all: Iterable[str],
    hostvars: Mapping[str, Any],
    now: float,
) -> dict[str, Any]:
    """This batch's stage of the rollout ``play``: its number (one more than the stages the
    play's other nodes recorded), when the rollout began and when this stage began."""
    mine = set(batch)
    earlier = [
        i for h, i in _stage_infos(play, hosts_all, hostvars, with_host=True) if h not in mine
    ]
    stage = 1 + max((int(i["stage"]) for i in earlier), default=0)
    began = min((float(i["rollout_began"]) for i in earlier), default=float(now))
    return {"play": play, "stage": stage, "rollout_began": began, "stage_began": float(now)}


def rollout_stage_line(
    info: Mapping[str, Any],
    label: str,
    batch: Iterable[str],
    hosts_all: Iterable[str],
    serial: Any,
    hostvars: Mapping[str, Any],
) -> str:
    """The progress line of a stage start, in the format of every wait
    (plugins/module_utils/progress_line.py); the ETA from the stages done in this run."""
    hosts = list(hosts_all)
    total = len(stage_sizes(serial, len(hosts)))
    stage = int(info["stage"])
    began = {int(i["stage"]): float(i["stage_began"])
             for i in _stage_infos(str(info["play"]), hosts, hostvars)}  # fmt: skip
    began[stage] = float(info["stage_began"])
    done = [began[k + 1] - began[k] for k in range(1, stage) if k in began and k + 1 in began]
    elapsed = float(info["stage_began"]) - float(info["rollout_began"])
    nodes = ", ".join(batch)
    what = f"stage {stage}/{total} starts ({nodes})"
    if not done:
        return progress_line.line(f"rollout, {label}", what, elapsed,
                                  no_eta="no stage finished yet in this run")  # fmt: skip
    per = sum(done) / len(done)
    return progress_line.line(
        f"rollout, {label}",
        what,
        elapsed,
        eta_s=per * (total - stage + 1),
        basis=f"the {len(done)} stage(s) done in this run, {progress_line.span(per)} each",
    )


def stage_servers(batch: Iterable[str] | None, hostvars: Mapping[str, Any]) -> str:
    """The HAProxy servers of this stage's nodes, comma-separated, for the drain's guard: each
    node's ``specdeploy_haproxy_server`` where its inventory sets one, else its inventory name
    (the role default, which another host's hostvars do not carry)."""
    names = []
    for host in batch or []:
        try:
            name = hostvars[host].get("specdeploy_haproxy_server") if host in hostvars else None
        except Exception:  # an undefined or broken template: the default name
            name = None
        names.append(str(name) if name else str(host))
    return ",".join(names)


def rollout_summary(nodes: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """deploy.yml's summary: ``nodes`` the fleet's (groups['gpu_nodes']); a node serves the
    release when its ``deploy_rollout_result`` says so."""
    fleet = [n for n in nodes if n in hostvars]
    serving = [n for n in fleet if hostvars[n].get("deploy_rollout_result") == "serving"]
    if not serving:
        return []
    first = hostvars[serving[0]]
    release = first.get("specdeploy_release") or {}
    others = "" if len(serving) == len(fleet) else "; the others were limited out or failed earlier"
    if release.get("speculative_config"):
        schedule = (first.get("preflight_speculative_schedule") or {}).get("message") or "off"
    else:
        schedule = "off (no speculation)"
    return [
        f"rollout of release {release.get('id', '-')}: {len(serving)} of {len(fleet)} node(s)"
        f" serve it ({', '.join(serving)}){others}.",
        f"k schedule by running requests: {schedule}",
    ]


class FilterModule:
    def filters(self):
        return {
            "failure_reason": failure_reason,
            "rollout_note": rollout_note,
            "rollout_stage": rollout_stage,
            "rollout_stage_line": rollout_stage_line,
            "rollout_summary": rollout_summary,
            "stage_servers": stage_servers,
        }
