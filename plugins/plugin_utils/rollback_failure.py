"""The last word of a deploy or rollback that failed (roles/rollback), from the role's variables.

Each case reads the facts its tasks gathered (registered results, set facts, the rollout's note)
and says them with the message filters of plugins/filter/rollback.py:

- ``auto``: the rescue of a failed deploy after the switch (tasks/auto.yml);
- ``build_failed``: a deploy that failed before the switch (tasks/build_failed.yml);
- ``manual``: a manual rollback that failed (tasks/main.yml).

``value(name, default)`` gives a host's variable, templated, or ``default`` when it is not
defined (the action plugin specdeploy.toolkit.rollback_failure reads them so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.specdeploy.toolkit.plugins.filter.rollback import (
    auto_rollback_message,
    build_failed_message,
    drain_note,
    manual_rollback_failed_message,
)
from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths

Value = Callable[[str, Any], Any]
CASES = ("auto", "build_failed", "manual")


def _status(value: Value, registered: str) -> str:
    """The ``status`` a registered releases update returned ('' when it did not run)."""
    result = value(registered, {})
    return str(result.get("status", "")) if isinstance(result, Mapping) else ""


def _drained(value: Value) -> bool:
    """Whether the node stays out of the balancer's rotation (roles/vllm_service drain)."""
    return boolean(value("vllm_service_drained", False), strict=False)


def _kept_dir(value: Value, release_id: str) -> str:
    return release_paths(value("specdeploy_root", ""), release_id)["dir"]


def auto_said(value: Value) -> str:
    host, failed = value("inventory_hostname", ""), value("rollback_auto_failed", "")
    drain = drain_note(
        host,
        _drained(value),
        value("vllm_service_undrain", None),
        value("specdeploy_haproxy_backend", ""),
        value("specdeploy_haproxy_server", ""),
    )
    return auto_rollback_message(
        value("rollback_auto_outcome", ""),
        host=host,
        failed=failed,
        reason=value("rollback_auto_reason", ""),
        kept_dir=_kept_dir(value, failed),
        marked_failed=_status(value, "rollback_auto_mark") == "failed",
        to=value("rollback_auto_to", ""),
        serving=value("rollback_auto_serving", ""),
        policy=value("rollback_failed_gate_policy", ""),
        rollback_error=value("rollback_auto_rollback_error", ""),
        disable_error=value("rollback_auto_disable_error", None),
        drain=drain,
        rollout=value("rollback_rollout_note", ""),
    )


def build_failed_said(value: Value) -> str:
    failed = value("rollback_build_failed", "")
    smoke = value("rollback_build_smoke", {})
    return build_failed_message(
        failed,
        host=value("inventory_hostname", ""),
        reason=value("rollback_build_reason", ""),
        current=(value("rollback_build_current", {}) or {}).get("stat", {}),
        # skipped (nothing served): no rc, so it did not answer
        serving_answered=isinstance(smoke, Mapping) and smoke.get("rc", 1) == 0,
        kept_dir=_kept_dir(value, failed),
        marked_failed=_status(value, "rollback_build_mark") == "failed",
        rollout=value("rollback_rollout_note", ""),
    )


def manual_said(value: Value) -> str:
    return manual_rollback_failed_message(
        value("rollback_dest", ""),
        host=value("inventory_hostname", ""),
        error=value("rollback_error", ""),
        started_from=value("rollback_from", ""),
        drained=_drained(value),
    )


def failure_message(case: str, value: Value) -> str:
    """The message of ``case`` (one of CASES)."""
    if case == "auto":
        return auto_said(value)
    if case == "build_failed":
        return build_failed_said(value)
    if case == "manual":
        return manual_said(value)
    raise ValueError(f"unknown case {case!r}; one of {', '.join(CASES)}")
