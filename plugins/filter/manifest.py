"""A release's manifest as the playbooks read it back from a node (the releases module's
``status`` returns the serving release's as ``current_manifest``, ``{}`` without one).

``manifest | specdeploy.toolkit.served_speculation``: what the release speculates with, from
the inputs its id was made of: ``speculative_config`` (None without speculation),
``speculative`` (bool), ``schedule`` (its num_speculative_tokens_per_batch_size, '' without a k
schedule) and ``hardware`` (the GPU its last validation recorded, '' before one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
        return {"served_speculation": served_speculation}
