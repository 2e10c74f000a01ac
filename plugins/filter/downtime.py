"""The starts a run's last play records (playbooks/downtime.yml), as a filter.

``downtime_starts``: one entry per activation of a release in this run (a node's
``vllm_service_downtimes``, else its one ``vllm_service_downtime``: release, action, restarted,
window); a baseline start and the start with speculation are two. The start the validation
followed (same release, not the baseline start) carries its throughput, speed-up and levels; a
baseline start carries its measurement (throughput/1, the ``validation_baseline_start_run``
output the validation role kept in the history right after measuring it).
Pure function; the history module records and formats the entries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean


def _median(block: Any) -> Any:
    return (block or {}).get("median") if isinstance(block or {}, Mapping) else None


def _measured(run: Any) -> Any:
    """The baseline start's throughput/1 document, or None (not run, failed, not JSON)."""
    if not isinstance(run, Mapping) or run.get("rc", 1) != 0:
        return None
    text = str(run.get("stdout") or "").strip()
    if not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def downtime_starts(nodes: Iterable[str], hostvars: Mapping[str, Any], at: str) -> list[dict]:
    starts = []
    for node in nodes:
        facts = hostvars[node]
        if facts.get("vllm_service_downtime") is None:
            continue
        validation = facts.get("validation_result") or {}
        measured = _measured(facts.get("validation_baseline_start_run"))
        for downtime in facts.get("vllm_service_downtimes") or [facts["vllm_service_downtime"]]:
            baseline = downtime["action"] == "baseline-start"
            validated = (
                isinstance(validation, Mapping)
                and validation.get("release", "") == downtime["release"]
                and not baseline
            )
            acceptance = (validation.get("acceptance") or {}) if validated else {}
            speed = (validation.get("speed") or {}) if validated else {}
            starts.append(
                {
                    "node": node,
                    "release": downtime["release"],
                    "action": downtime["action"],
                    "at": at,
                    "restarted": boolean(downtime["restarted"], strict=False),
                    "window": downtime["window"],
                    "output_tps": _median(acceptance.get("output_tokens_per_s")),
                    "speed_up": _median(acceptance.get("speed_up")),
                    "levels": speed.get("levels") or [] if validated else [],
                    "baseline": measured if baseline else None,
                    "validation_run_id": validation.get("run_id") if validated else None,
                }
            )
    return starts


class FilterModule:
    def filters(self):
        return {"downtime_starts": downtime_starts}
