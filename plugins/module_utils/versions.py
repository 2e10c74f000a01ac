"""vLLM version strings, read one way by every tool (patcher, drafter check, manifest lookup,
input checks, hardware doctor). Stdlib only: the doctor runs on a node before any release.
The collection's module_utils (shipped with the gpu_doctor module); the node package and the
controller import it as specdeploy.node.module_utils.versions.

A local label (``0.16.0+cu129``, as vLLM's own wheel index names CUDA builds) marks a build,
not a release (PEP 440): it is the release ``0.16.0`` for the manifest, the patch series and
the drafter facts.
"""

from __future__ import annotations

import re


def public_version(version: str) -> str:
    """``0.16.0+cu129`` -> ``0.16.0``."""
    return version.strip().split("+", 1)[0]


def version_key(version: str) -> tuple[int, ...]:
    """The release's leading numbers, for ordering: ``0.17.1rc1`` -> (0, 17, 1)."""
    out: list[int] = []
    for part in public_version(version).split("."):
        match = re.match(r"\d+", part)
        if not match:
            break
        out.append(int(match.group(0)))
        if match.group(0) != part:
            break
    return tuple(out)
