"""What the baseline start says (roles/validation/tasks/baseline_start.yml), as filters.

``baseline_start_failure``: why the new release without speculation could not be measured (its
measurement's exit status and last lines). ``baseline_start_said``: what it measured per level
and what the extra start cost. Pure functions over the measurement's task result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.filter.validation import level_figures, measured
from ansible_collections.specdeploy.toolkit.plugins.module_utils.wording import truncate

FAILURE_LIMIT = 400


def baseline_start_failure(run: Mapping[str, Any], release: str) -> str:
    """``run``: the measurement's task result (rc, stderr_lines, stdout_lines)."""
    tail = [
        *list(run.get("stderr_lines") or [])[-2:],
        *list(run.get("stdout_lines") or [])[-1:],
    ]
    return (
        f"baseline start of release {release}: the release without speculation could not be"
        f" measured (exit {run.get('rc')}): {truncate(' / '.join(tail), FAILURE_LIMIT)}"
    )


def baseline_start_said(run: Mapping[str, Any], release: str, took_s: float) -> str:
    """``run``: the measurement's task result (its JSON answer on stdout); ``took_s``: seconds
    from the start's beginning until now."""
    figures = level_figures(measured(run).get("levels") or {})
    return (
        f"baseline start of release {release} (speculation off): {figures};"
        f" the baseline start took {round(float(took_s), 1)} s (start and measurement);"
        " now restarting it with speculation on"
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "baseline_start_failure": baseline_start_failure,
            "baseline_start_said": baseline_start_said,
        }
