"""The monitoring role's input from the inventory (plugins/plugin_utils/monitoring_spec.py):
the targets and gates of the nodes, and one line for each thing that stops the render."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.monitoring_spec import (
    problems,
    spec,
)

GATES = {"min_mean_acceptance_length": 1.5, "min_speed_up": 1.0}
KNOBS = {
    "monitoring_nodes_group": "gpu_nodes",
    "monitoring_prometheus_dir": "/etc/prometheus/specdeploy",
    "monitoring_node_exporter_port": 9100,
    "monitoring_validation_exporters": ["127.0.0.1:9100"],
    "monitoring_rate_window": "15m",
    "monitoring_acceptance_for": "15m",
    "monitoring_speculation_off_for": "10m",
    "monitoring_restarts_window": "3h",
    "monitoring_restarts_max": "2",
    "monitoring_validation_stale_s": 172800,
    "monitoring_ttft_p95_max_s": "10",
    "monitoring_itl_p95_max_s": 0.5,
    "monitoring_latency_for": "1h30m",
    "specdeploy_gates": GATES,
    "specdeploy_port": 8000,
    "specdeploy_speculative_enabled": True,
    "specdeploy_served_model_name": "kimi",
    "specdeploy_start_timeout_s": "1800",
    "specdeploy_service_name": "vllm",
}
GROUPS = {"gpu_nodes": ["n1", "n2"]}
HOSTVARS = {"n1": {"ansible_host": "127.0.0.5"}, "n2": {"specdeploy_port": 8123}}


def test_the_spec_has_every_nodes_target_the_shared_gates_and_typed_settings() -> None:
    made = spec(GROUPS, HOSTVARS, KNOBS)
    assert made["gates"] == GATES
    assert [t["address"] for t in made["vllm_targets"]] == ["127.0.0.5:8000", "n2:8123"]
    assert [t["address"] for t in made["node_exporter_targets"]] == ["127.0.0.5:9100", "n2:9100"]
    settings = made["settings"]
    assert (settings["restarts_max"], settings["start_timeout_s"]) == (2, 1800)
    assert settings["ttft_p95_max_s"] == 10.0 and settings["service_name"] == "vllm"
    assert problems(GROUPS, HOSTVARS, KNOBS) == []


def test_each_problem_is_one_line_naming_the_knob() -> None:
    hostvars = HOSTVARS | {"n2": {"specdeploy_gates": GATES | {"min_speed_up": 1.2}}}
    found = problems(GROUPS, hostvars, KNOBS | {"monitoring_rate_window": "15 minutes"})
    assert found == [
        "monitoring: the nodes of gpu_nodes have 2 different specdeploy_gates; the alert rules "
        "use one set: give every node the same gates",
        "monitoring: monitoring_rate_window=15 minutes is not a Prometheus duration (e.g. 15m)",
    ]
    assert problems({"gpu_nodes": []}, {}, KNOBS) == [
        "monitoring: inventory group gpu_nodes has no hosts (monitoring_nodes_group)"
    ]
