"""JSON Lines files of objects (prompt sets): one reader, so every tool names a bad line alike.

Node-side (stdlib only); the controller's drafter pipeline reads its prompts with it too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_objects(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``path``.

    Raises OSError when the file cannot be read, and ValueError ``"PATH:N: not JSON (...)"`` or
    ``"PATH:N: not a JSON object"`` for a bad line; what an object must hold is the caller's."""
    out: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{n}: not a JSON object")
        out.append((n, obj))
    return out
