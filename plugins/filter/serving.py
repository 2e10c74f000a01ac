"""What the vllm_service role writes and says about a server (roles/vllm_service), as filters.

``env_file_text``: an environment file of the non-empty values, under a comment (the secrets
file the unit reads). ``last_probe``: what the last readiness probe said (the smoke check's
reasons, else its stderr). ``not_ready_message``: why a release did not become ready within the
start budget, with where its engine log stopped (tasks/activate.yml).
Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.module_utils.wording import truncate


def env_file_text(values: Mapping[str, Any], comment: str) -> str:
    """``NAME=value`` lines in the given order, the empty values left out."""
    lines = [f"# {comment}"]
    lines += [f"{name}={value}" for name, value in values.items() if str(value)]
    return "\n".join(lines) + "\n"


def last_probe(ready: Mapping[str, Any]) -> str:
    """``ready``: the readiness task's result (the smoke check's JSON answer on stdout)."""
    stdout = str(ready.get("stdout", ""))
    if re.match(r"^\s*\{", stdout):
        return "; ".join(str(reason) for reason in json.loads(stdout).get("reasons", []))
    return str(ready.get("stderr", "")).strip()


def _engine_log_said(progress: Mapping[str, Any]) -> str:
    """Where the engine log stopped (start_progress's answer), '' once the engine was ready."""
    if progress.get("phase", "ready") == "ready":
        return ""
    percent = progress.get("percent")
    said = f"; the engine log stopped at: {progress['title']}"
    said += f" {percent}%" if percent is not None else ""
    said += f" for {progress['phase_elapsed_s']} s"
    if progress.get("ended"):
        error = progress.get("error")
        said += f" (its process ended{': ' + truncate(str(error), 300) if error else ''})"
    return said


def not_ready_message(
    ready: Mapping[str, Any],
    *,
    release: str,
    timeout_s: Any,
    gave_up_after_s: Any,
    progress: Mapping[str, Any] | None = None,
) -> str:
    """``ready``: the readiness task's result (rc, attempts, stdout, stderr); ``progress``: the
    start's progress (start_progress), {} when not followed."""
    probe = truncate(last_probe(ready), 300) or f"exit {ready.get('rc')}"
    return (
        f"release {release} did not become ready within specdeploy_start_timeout_s={timeout_s} s"
        f" ({ready.get('attempts', 1)} probes, gave up after {gave_up_after_s} s); last probe:"
        f" {probe}{_engine_log_said(progress or {})}"
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "env_file_text": env_file_text,
            "last_probe": last_probe,
            "not_ready_message": not_ready_message,
        }
