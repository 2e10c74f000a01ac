"""What the monitoring role renders from (specdeploy.controller.monitoring's input), from the
inventory and the role's knobs; and what is wrong with them, each as one line.

Was a Jinja mapping in roles/monitoring/vars/main.yml (issue 25: no programs in Jinja). The
targets come from plugins/filter/monitoring.py; each node's gates are the ones the deploy renders
into its releases, so the alert floors and the gates are one source of truth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.filter.monitoring import (
    node_exporter_targets,
    vllm_scrape_targets,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import jinja_int

KNOBS = (
    "monitoring_nodes_group",
    "monitoring_prometheus_dir",
    "monitoring_node_exporter_port",
    "monitoring_validation_exporters",
    "monitoring_rate_window",
    "monitoring_acceptance_for",
    "monitoring_speculation_off_for",
    "monitoring_restarts_window",
    "monitoring_restarts_max",
    "monitoring_validation_stale_s",
    "monitoring_ttft_p95_max_s",
    "monitoring_itl_p95_max_s",
    "monitoring_latency_for",
    "specdeploy_gates",
    "specdeploy_port",
    "specdeploy_speculative_enabled",
    "specdeploy_served_model_name",
    "specdeploy_start_timeout_s",
    "specdeploy_service_name",
)
DURATIONS = (
    "monitoring_rate_window",
    "monitoring_acceptance_for",
    "monitoring_speculation_off_for",
    "monitoring_restarts_window",
    "monitoring_latency_for",
)
PROMETHEUS_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def nodes(groups: Mapping[str, Sequence[str]], knobs: Mapping[str, Any]) -> list[str]:
    return list(groups.get(knobs["monitoring_nodes_group"], []))


def gate_sets(
    names: Sequence[str], hostvars: Mapping[str, Mapping[str, Any]], default: Any
) -> list[Any]:
    """The distinct gates of the nodes (each node's own, else the play's), in node order."""
    seen: dict[str, Any] = {}
    for node in names:
        gates = hostvars[node].get("specdeploy_gates", default)
        seen.setdefault(json.dumps(gates, sort_keys=True), gates)
    return list(seen.values())


def problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    knobs: Mapping[str, Any],
) -> list[str]:
    """One line per thing that stops the render, in the order an operator fixes them."""
    group = knobs["monitoring_nodes_group"]
    names = nodes(groups, knobs)
    if not names:
        return [f"monitoring: inventory group {group} has no hosts (monitoring_nodes_group)"]
    found = []
    distinct = len(gate_sets(names, hostvars, knobs["specdeploy_gates"]))
    if distinct != 1:
        found.append(
            f"monitoring: the nodes of {group} have {distinct} different specdeploy_gates; "
            "the alert rules use one set: give every node the same gates"
        )
    for name in DURATIONS:
        if not PROMETHEUS_DURATION.match(str(knobs[name])):
            found.append(
                f"monitoring: {name}={knobs[name]} is not a Prometheus duration (e.g. 15m)"
            )
    return found


def spec(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    knobs: Mapping[str, Any],
) -> dict[str, Any]:
    names = nodes(groups, knobs)
    gates = gate_sets(names, hostvars, knobs["specdeploy_gates"])
    return {
        "gates": gates[0] if gates else knobs["specdeploy_gates"],
        "targets_dir": knobs["monitoring_prometheus_dir"],
        "vllm_targets": vllm_scrape_targets(
            names,
            hostvars,
            port=knobs["specdeploy_port"],
            speculative=knobs["specdeploy_speculative_enabled"],
            model=knobs["specdeploy_served_model_name"],
        ),
        "node_exporter_targets": node_exporter_targets(
            names, hostvars, knobs["monitoring_node_exporter_port"]
        ),
        "validation_exporters": knobs["monitoring_validation_exporters"],
        "settings": {
            "rate_window": knobs["monitoring_rate_window"],
            "acceptance_for": knobs["monitoring_acceptance_for"],
            "speculation_off_for": knobs["monitoring_speculation_off_for"],
            "start_timeout_s": jinja_int(knobs["specdeploy_start_timeout_s"]),
            "restarts_window": knobs["monitoring_restarts_window"],
            "restarts_max": jinja_int(knobs["monitoring_restarts_max"]),
            "validation_stale_s": jinja_int(knobs["monitoring_validation_stale_s"]),
            "ttft_p95_max_s": float(knobs["monitoring_ttft_p95_max_s"]),
            "itl_p95_max_s": float(knobs["monitoring_itl_p95_max_s"]),
            "latency_for": knobs["monitoring_latency_for"],
            "service_name": knobs["specdeploy_service_name"],
        },
    }
