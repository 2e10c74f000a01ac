"""The monitoring role's files on its host, as items for the ``specdeploy.toolkit.files`` module
(one task per block instead of a directory task, a copy loop and a template each repeating the
owner, the group and the paths; issue 25: no programs in Jinja).

Pure: the lookup ``specdeploy.toolkit.monitoring_files`` reads the knobs, the rendered files and
the templates, and passes their text here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The knobs the items read (the lookup resolves them).
KNOBS = (
    "monitoring_prometheus_dir",
    "monitoring_prometheus_config",
    "monitoring_grafana_dashboards_dir",
    "monitoring_grafana_provisioning_dir",
    "monitoring_owner",
    "monitoring_group",
)
DASHBOARD = "specdeploy.json"  # the dashboard's name in monitoring_grafana_dashboards_dir
PROVIDER = "specdeploy.yml"  # the file provider's name in monitoring_grafana_provisioning_dir


def _directory(knobs: Mapping[str, Any], path: str) -> dict[str, str]:
    return {
        "path": str(path),
        "state": "directory",
        "owner": str(knobs["monitoring_owner"]),
        "group": str(knobs["monitoring_group"]),
        "mode": "0755",
    }


def _file(knobs: Mapping[str, Any], path: str, content: str) -> dict[str, str]:
    return {
        "path": str(path),
        "state": "file",
        "content": content,
        "owner": str(knobs["monitoring_owner"]),
        "group": str(knobs["monitoring_group"]),
        "mode": "0644",
    }


def prometheus_items(
    knobs: Mapping[str, Any], rendered: Mapping[str, str], config: str | None
) -> list[dict[str, str]]:
    """The Prometheus directory, the rendered files in it (name -> content, in their order) and,
    when monitoring_prometheus_config names one, the complete prometheus.yml (``config``)."""
    directory = str(knobs["monitoring_prometheus_dir"])
    items = [_directory(knobs, directory)]
    items += [_file(knobs, f"{directory}/{name}", text) for name, text in rendered.items()]
    if knobs["monitoring_prometheus_config"]:
        if config is None:
            raise ValueError("monitoring_prometheus_config is set but no prometheus.yml was given")
        items.append(_file(knobs, knobs["monitoring_prometheus_config"], config))
    return items


def grafana_items(knobs: Mapping[str, Any], dashboard: str, provider: str) -> list[dict[str, str]]:
    """The two Grafana directories, the dashboard and the file provider that loads it."""
    dashboards = str(knobs["monitoring_grafana_dashboards_dir"])
    provisioning = str(knobs["monitoring_grafana_provisioning_dir"])
    return [
        _directory(knobs, dashboards),
        _directory(knobs, provisioning),
        _file(knobs, f"{dashboards}/{DASHBOARD}", dashboard),
        _file(knobs, f"{provisioning}/{PROVIDER}", provider),
    ]
