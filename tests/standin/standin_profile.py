"""STAND-IN behaviour profile: the JSON file named by $SPECDEPLOY_STANDIN_PROFILE (keys in
vllm_standin.py's docstring; timing model in standin_timing.py)."""

from __future__ import annotations

import json
import os

FAULT_KEYS = (
    "never_healthy",
    "crash_after_healthy_s",
    "hang",
    "hang_after_healthy_s",
    "wrong_text",
)


def load_profile() -> dict[str, object]:
    path = os.environ.get("SPECDEPLOY_STANDIN_PROFILE")
    prof: dict[str, object] = {}
    if path:
        with open(path, encoding="utf-8") as f:
            prof = json.load(f)
        if not isinstance(prof, dict):
            raise SystemExit(f"stand-in profile {path}: not a JSON object")
    faults = dict(prof.get("faults") or {})  # type: ignore[call-overload]
    for k in FAULT_KEYS:
        if k in prof and k not in faults:
            faults[k] = prof[k]
    prof["faults"] = faults
    return prof
