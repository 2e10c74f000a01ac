"""JSON objects from text: a flag's value, a file, each line of a JSON Lines file (prompt
sets). One parser, so every tool names a bad flag, file or line alike.

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
        out.append((n, parse_object(line, f"{path}:{n}")))
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def loads(text: str) -> Any:
    """``json.loads`` without Python's extensions: ``NaN``, ``Infinity`` and ``-Infinity`` are
    refused (ValueError), as is a number too large for a float (``1e999`` would be infinity)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def _finite_float(text: str) -> float:
    x = float(text)
    if x in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large for a number")
    return x


def parse_object(text: str, where: str) -> dict[str, Any]:
    """``text`` as a JSON object; ValueError ``"WHERE: not JSON (...)"`` or
    ``"WHERE: not a JSON object"`` (``where``: the file and line, or the flag, it came from).
    NaN and infinities are not JSON here (see :func:`loads`)."""
    try:
        value = loads(text)
    except ValueError as e:
        raise ValueError(f"{where}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: not a JSON object")
    return value
