"""The manifest filters (plugins/filter/manifest.py): what `make validate` and the interrupted
deploy's end read back from a node's release manifest."""

from __future__ import annotations

import base64
import json

from ansible_collections.specdeploy.toolkit.plugins.filter.manifest import (
    release_manifest,
    served_speculation,
)


def slurped(manifest: dict) -> dict:
    return {"content": base64.b64encode(json.dumps(manifest).encode()).decode()}


def test_a_release_with_a_k_schedule():
    spec = {"method": "eagle3", "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": {"1": 4, "16": 2}}  # fmt: skip
    manifest = release_manifest(slurped({"inputs": {"speculative_config": spec},
                                         "last_validation": {"hardware": "H200"}}))  # fmt: skip
    assert served_speculation(manifest) == {
        "speculative_config": spec, "speculative": True,
        "schedule": {"1": 4, "16": 2}, "hardware": "H200",
    }  # fmt: skip


def test_a_release_without_speculation_nor_validation():
    served = served_speculation(release_manifest(slurped({"inputs": {"speculative_config": None},
                                                          "last_validation": None})))  # fmt: skip
    assert served == {"speculative_config": None, "speculative": False, "schedule": "",
                      "hardware": ""}  # fmt: skip


def test_a_missing_manifest_is_empty():
    assert release_manifest({"failed": True, "msg": "file not found"}) == {}
    assert release_manifest(None) == {}
    assert served_speculation({})["speculative"] is False
