"""The monitoring role's scrape targets from the inventory (roles/monitoring/vars/main.yml).

``vllm_scrape_targets``: one target per GPU node (its scrape address and port, whether it runs
speculation, its served model), each node's own knob where it sets one, else the play's.
``node_exporter_targets``: the nodes' node_exporter addresses, none when the port is 0.
Pure functions over ``hostvars``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean


def _scrape_host(node: str, facts: Mapping[str, Any]) -> str:
    """The node's monitoring_scrape_host, else its ansible_host, else its inventory name."""
    return str(facts.get("monitoring_scrape_host", facts.get("ansible_host", node)))


def vllm_scrape_targets(
    nodes: Iterable[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    *,
    port: int,
    speculative: bool,
    model: str,
) -> list[dict[str, Any]]:
    """``port``, ``speculative``, ``model``: the play's knobs, for a node that sets none."""
    targets = []
    for node in nodes:
        facts = hostvars[node]
        address = f"{_scrape_host(node, facts)}:{facts.get('specdeploy_port', port)}"
        targets.append(
            {
                "node": node,
                "address": address,
                "speculative": boolean(
                    facts.get("specdeploy_speculative_enabled", speculative), strict=False
                ),
                "model": facts.get("specdeploy_served_model_name", model),
            }
        )
    return targets


def node_exporter_targets(
    nodes: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]], port: int
) -> list[dict[str, str]]:
    if int(port) <= 0:
        return []
    return [{"node": n, "address": f"{_scrape_host(n, hostvars[n])}:{port}"} for n in nodes]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_scrape_targets": vllm_scrape_targets,
            "node_exporter_targets": node_exporter_targets,
        }
