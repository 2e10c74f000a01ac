"""The node's copy of the controller's wheelhouse, as filters (roles/vllm_release build.yml).

The copy keeps a ``SHA256SUMS`` file in ``sha256sum -c`` format (``<digest>  <name>`` per line),
so a later build ships only the wheels it lacks.

``text | specdeploy.toolkit.sha256sums_parse``: {name: digest} (lines that are not two fields are
ignored: a torn or hand-edited file only costs a copy).
``held | specdeploy.toolkit.wheels_lacking(wanted)``: the names in ``wanted`` ({name: digest})
that ``held`` lacks or holds with another digest, sorted.
``held | specdeploy.toolkit.sha256sums_text``: the file's text, sorted by name. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping


def sha256sums_parse(text: str | None) -> dict[str, str]:
    held: dict[str, str] = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) == 2:
            held[fields[1]] = fields[0]
    return held


def wheels_lacking(held: Mapping[str, str], wanted: Mapping[str, str]) -> list[str]:
    return sorted(name for name, digest in wanted.items() if held.get(name) != digest)


def sha256sums_text(held: Mapping[str, str]) -> str:
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(held.items()))


class FilterModule:
    def filters(self):
        return {
            "sha256sums_parse": sha256sums_parse,
            "wheels_lacking": wheels_lacking,
            "sha256sums_text": sha256sums_text,
        }
