"""The starts a run's last play records (playbooks/downtime.yml), as a filter.

``downtime_starts``: one entry per node that activated a release in this run (its
``vllm_service_downtime`` fact: release, action, restarted, window), with the throughput and
speed-up of the validation that followed, when that validation was of the same release.
Pure function; the history module records and formats the entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean


def _median(block: Any) -> Any:
    return (block or {}).get("median") if isinstance(block or {}, Mapping) else None


def downtime_starts(nodes: Iterable[str], hostvars: Mapping[str, Any], at: str) -> list[dict]:
    starts = []
    for node in nodes:
        facts = hostvars[node]
        downtime = facts.get("vllm_service_downtime")
        if downtime is None:
            continue
        validation = facts.get("validation_result") or {}
        validated = (
            isinstance(validation, Mapping)
            and validation.get("release", "") == (downtime["release"])
        )
        acceptance = (validation.get("acceptance") or {}) if validated else {}
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
                "validation_run_id": validation.get("run_id") if validated else None,
            }
        )
    return starts


class FilterModule:
    def filters(self):
        return {"downtime_starts": downtime_starts}
