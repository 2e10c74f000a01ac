"""The compile cache's layout for one code fingerprint, as the items of one
``specdeploy.toolkit.files`` run (roles/compile_cache): the fingerprint's directory (and its
parent) and one per cache kind, owned by the service user, then the marker that says whose caches
they are (written last: a marker means every directory is there).

One module run instead of seven (ansible.builtin.file looped over six directories ran the module
six times, then ansible.builtin.copy once more). Pure function.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def compile_cache_items(
    release: Mapping[str, Any], kinds: Sequence[str], owner: str, group: str
) -> list[dict[str, str]]:
    root = str(release["cache_dir"]).rstrip("/")
    # <specdeploy_cache_dir>/compile too, as ansible.builtin.file made it (the service user's)
    directories = [root.rsplit("/", 1)[0], root] + [f"{root}/{kind}" for kind in kinds]
    items = [
        {"path": path, "state": "directory", "owner": owner, "group": group, "mode": "0750"}
        for path in directories
    ]
    marker = {
        "fingerprint": release["fingerprint"],
        "vllm_version": release["vllm_version"],
        "series_sha256": release["series_sha256"],
        "speculative_config": release["speculative_config"],
    }
    # the text to_nice_json wrote (the marker's format before this filter)
    content = json.dumps(marker, indent=4, sort_keys=True, separators=(",", ": "))
    items.append({"path": str(release["cache_marker"]), "content": content, "mode": "0644"})
    return items


class FilterModule:
    def filters(self):
        return {"compile_cache_items": compile_cache_items}
