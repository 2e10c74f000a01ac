"""A release's manifest as the playbooks read it back from a node, as filters.

``slurped | specdeploy.toolkit.release_manifest``: the manifest (releases/<id>/manifest.json)
from an ``ansible.builtin.slurp`` result, ``{}`` when the file was not there.
``manifest | specdeploy.toolkit.served_speculation``: what the release speculates with, from
the inputs its id was made of: ``speculative_config`` (None without speculation),
``speculative`` (bool), ``schedule`` (its num_speculative_tokens_per_batch_size, '' without a k
schedule) and ``hardware`` (the GPU its last validation recorded, '' before one).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any


def release_manifest(slurped: Mapping[str, Any] | None) -> dict[str, Any]:
    if not slurped or "content" not in slurped:
        return {}
    manifest = json.loads(base64.b64decode(slurped["content"]))
    return manifest if isinstance(manifest, dict) else {}


def served_speculation(manifest: Mapping[str, Any]) -> dict[str, Any]:
    spec = (manifest.get("inputs") or {}).get("speculative_config")
    return {
        "speculative_config": spec,
        "speculative": spec is not None,
        "schedule": (spec or {}).get("num_speculative_tokens_per_batch_size", ""),
        "hardware": (manifest.get("last_validation") or {}).get("hardware", ""),
    }


class FilterModule:
    def filters(self):
        return {"release_manifest": release_manifest, "served_speculation": served_speculation}
