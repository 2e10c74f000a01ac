"""Jinja's wording helpers as plain Python, for the filters that replaced templates.

``truncate``: Jinja's ``truncate(length)`` (cut at a word boundary, end with '...', a leeway of
5). ``dictsort``: a mapping's items by key, case-insensitive, as Jinja's ``dictsort`` sorts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def truncate(text: str, length: int = 255, leeway: int = 5) -> str:
    if len(text) <= length + leeway:
        return text
    return text[: length - 3].rsplit(" ", 1)[0] + "..."


def dictsort(mapping: Mapping[Any, Any] | None) -> list[tuple[Any, Any]]:
    def key(item: tuple[Any, Any]) -> Any:
        return item[0].lower() if isinstance(item[0], str) else item[0]

    return sorted((mapping or {}).items(), key=key)
