"""What roles/vllm_service says and records about an activation, as filters (issue 25: no
programs in Jinja). Pure functions.

- ``inflight_line``: the line after the wait for the requests in flight (drain.yml), from the
  wait's registered result: the tool's own line, or why the gauge could not be read.
- ``downtime_window``: the activation's entry of the deploy's downtime summary (activate.yml,
  ``vllm_service_downtimes``); a start that did not restart has no window.
- ``start_entry``: the start that started.yml records in the release manifest (stop-to-ready
  seconds, the backends the engine log names, the window and the engine's phases).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.specdeploy.toolkit.plugins.module_utils.wording import truncate


def inflight_line(result: Mapping[str, Any], host: str) -> str:
    if result.get("rc") == 0:
        said = str(result.get("stdout") or "").strip()
    else:
        error = truncate(str(result.get("stderr") or "").strip(), 200)
        said = f"could not read the running-requests gauge ({error}): stopping anyway"
    return f"{host}: {said}"


def downtime_window(
    progress: Mapping[str, Any] | None, release: str, action: str, restarted: Any
) -> dict[str, Any]:
    """``progress``: the start's followed progress (restart.yml's start_progress), or {}."""
    restarted = boolean(restarted, strict=False)
    return {
        "release": release,
        "action": action,
        "restarted": restarted,
        "window": (progress or {}).get("window") if restarted else None,
    }


def engine_backends(progress: Mapping[str, Any] | None, engine_log: Mapping[str, Any]) -> list:
    """The attention backends the engine chose: from the followed start (start_progress reads
    them with the phases), else, for a release whose toolkit predates that, from the engine log
    reader's JSON (its registered stdout; not JSON is an error, as Jinja's from_json had it)."""
    if progress and isinstance(progress.get("backends"), list):
        return progress["backends"]
    said = json.loads(str(engine_log.get("stdout") or ""))
    return said.get("backends", []) if isinstance(said, Mapping) else []


def start_entry(
    progress: Mapping[str, Any] | None,
    engine_log: Mapping[str, Any],
    action: str,
    restart_started: Any,
    now: float,
) -> dict[str, Any]:
    """``restart_started`` and ``now``: epoch seconds (the restart's, the record's)."""
    progress = progress or {}
    return {
        "action": action,
        "stop_to_ready_s": round(float(now) - float(restart_started), 1),
        "backends": engine_backends(progress, engine_log),
        "window": progress.get("window"),
        "engine": progress.get("engine", {}),
    }


class FilterModule:
    def filters(self):
        return {
            "inflight_line": inflight_line,
            "downtime_window": downtime_window,
            "engine_backends": engine_backends,
            "start_entry": start_entry,
        }
