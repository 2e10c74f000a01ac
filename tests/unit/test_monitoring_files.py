"""The monitoring role's files as specdeploy.toolkit.files items
(plugins/plugin_utils/monitoring_files.py): paths, order, owner, group, modes, content, and
prometheus.yml only when monitoring_prometheus_config names one."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.monitoring_files import (
    grafana_items,
    prometheus_items,
)

KNOBS = {
    "monitoring_prometheus_dir": "/etc/prometheus/specdeploy",
    "monitoring_prometheus_config": "/etc/prometheus/prometheus.yml",
    "monitoring_grafana_dashboards_dir": "/var/lib/grafana/dashboards/specdeploy",
    "monitoring_grafana_provisioning_dir": "/etc/grafana/provisioning/dashboards",
    "monitoring_owner": "prometheus",
    "monitoring_group": "adm",
}
RENDERED = {"specdeploy-rules.yml": "groups: []\n", "specdeploy-vllm.json": "[]\n"}


def test_prometheus_items_are_the_directory_the_rendered_files_in_order_and_the_config() -> None:
    items = prometheus_items(KNOBS, RENDERED, "global: {}\n")
    assert [(i["path"], i["state"], i["mode"]) for i in items] == [
        ("/etc/prometheus/specdeploy", "directory", "0755"),
        ("/etc/prometheus/specdeploy/specdeploy-rules.yml", "file", "0644"),
        ("/etc/prometheus/specdeploy/specdeploy-vllm.json", "file", "0644"),
        ("/etc/prometheus/prometheus.yml", "file", "0644"),
    ]
    assert [i.get("content") for i in items] == [None, "groups: []\n", "[]\n", "global: {}\n"]
    assert {(i["owner"], i["group"]) for i in items} == {("prometheus", "adm")}


def test_no_prometheus_yml_without_monitoring_prometheus_config() -> None:
    items = prometheus_items(KNOBS | {"monitoring_prometheus_config": ""}, RENDERED, None)
    assert [i["path"] for i in items][-1] == "/etc/prometheus/specdeploy/specdeploy-vllm.json"
    with pytest.raises(ValueError, match="monitoring_prometheus_config"):
        prometheus_items(KNOBS, RENDERED, None)


def test_grafana_items_are_both_directories_then_the_dashboard_and_its_provider() -> None:
    items = grafana_items(KNOBS, '{"uid": "specdeploy"}\n', "apiVersion: 1\n")
    assert [(i["path"], i["state"], i["mode"], i.get("content")) for i in items] == [
        ("/var/lib/grafana/dashboards/specdeploy", "directory", "0755", None),
        ("/etc/grafana/provisioning/dashboards", "directory", "0755", None),
        ("/var/lib/grafana/dashboards/specdeploy/specdeploy.json", "file", "0644",
         '{"uid": "specdeploy"}\n'),
        ("/etc/grafana/provisioning/dashboards/specdeploy.yml", "file", "0644", "apiVersion: 1\n"),
    ]  # fmt: skip
    assert {(i["owner"], i["group"]) for i in items} == {("prometheus", "adm")}
