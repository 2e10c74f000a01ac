"""The balancer's answer as a filter (roles/vllm_service tasks drain.yml and undrain.yml).

``result | specdeploy.toolkit.balancer_answer``: what the drain or undrain command
(specdeploy.controller.balancer, run by controller_check) answered, as
``{"ok": bool, "kind": str, "message": str}``: its JSON line when it printed one, else its
error output (a command that could not even start prints no JSON). ``kind`` is ``none`` when no
balancer is configured (nothing was taken out of rotation). A skipped task gives ``ok`` and
kind ``none``. Pure function.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def balancer_answer(result: Mapping[str, Any] | None) -> dict:
    result = result or {}
    if result.get("skipped"):
        return {"ok": True, "kind": "none", "message": "skipped"}
    stdout = str(result.get("stdout") or "").strip()
    answer: dict = {}
    if stdout.startswith("{"):
        try:
            loaded = json.loads(stdout)
        except ValueError:
            loaded = None
        answer = loaded if isinstance(loaded, dict) else {}
    message = answer.get("message") or str(result.get("stderr") or "").strip() or stdout
    return {
        "ok": result.get("rc") == 0,
        "kind": str(answer.get("kind") or "none"),
        "message": str(message).strip(),
    }


class FilterModule:
    def filters(self):
        return {"balancer_answer": balancer_answer}
