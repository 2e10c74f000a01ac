"""The preflight's warnings as a filter.

``ansible_play_hosts | specdeploy.toolkit.preflight_warnings(hostvars)``: one item per node that
has warnings, ``{"node": ..., "messages": [...]}``, in the play's order; the messages of the
input checks (the toolkit's and the validation role's) and of the probe's judgement, in that
order. Said once for the play instead of a task per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# The registered results whose ``messages`` are warnings, in the order they are said.
WARNING_SOURCES = ("preflight_input_checks", "validation_input_checks", "preflight_node_checks")


def preflight_warnings(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[dict]:
    found = []
    for host in hosts:
        node = hostvars[host]
        messages = [
            message
            for source in WARNING_SOURCES
            for message in ((node.get(source) or {}).get("messages") or [])
        ]
        if messages:
            found.append({"node": host, "messages": messages})
    return found


class FilterModule:
    def filters(self):
        return {"preflight_warnings": preflight_warnings}
