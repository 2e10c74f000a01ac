"""Where the controller keeps the archive of a release's node-side toolkit or of the sandbox's
stand-in (roles/vllm_release vars): one archive per fingerprint.

``specdeploy_release | specdeploy.toolkit.release_archive(build_dir, part)``: ``part`` is
``toolkit`` (the release's toolkit, fingerprint ``toolkit_sha256``) or ``standin`` (the stand-in,
``standin_sha256``); the file is ``<build_dir>/<part>-<first 16 hex digits>.tar``. Pure function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PARTS = ("toolkit", "standin")


def release_archive(release: Mapping[str, Any], build_dir: str, part: str) -> str:
    if part not in PARTS:
        raise ValueError(f"release_archive: part {part!r} is not one of {', '.join(PARTS)}")
    return f"{build_dir}/{part}-{str(release[f'{part}_sha256'])[:16]}.tar"


class FilterModule:
    def filters(self):
        return {"release_archive": release_archive}
