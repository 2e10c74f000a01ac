"""The release as filters.

``specdeploy_root | specdeploy.toolkit.release_paths(release_id)``: dir, toolkit_dir, venv_dir,
python, config_dir and manifest (the layout of the collection's module_utils ``release``, the
same code the releases module runs on the node).
``release | specdeploy.toolkit.release_plan_lines(schedule, baseline_plan)``: the plan's lines
for one node, as `make plan` prints them (plugin_utils ``release_plan.describe``).
``releases | specdeploy.toolkit.differing_inputs``: the input keys in which the nodes' planned
releases differ (a rollout deploys one release).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.release_plan import (
    describe,
    sha256_json,
)


def release_plan_lines(release: dict, schedule: Any = None, baseline_plan: Any = None) -> list:
    return describe(release, schedule or None, baseline_plan or None)


def differing_inputs(releases: list[dict]) -> list[str]:
    keys = sorted({key for release in releases for key in release.get("inputs", {})})
    return [
        key
        for key in keys
        if len({sha256_json(release.get("inputs", {}).get(key)) for release in releases}) > 1
    ]


class FilterModule:
    def filters(self):
        return {
            "release_paths": release_paths,
            "release_plan_lines": release_plan_lines,
            "differing_inputs": differing_inputs,
        }
