"""The manifest filter (plugins/filter/manifest.py): what `make validate` reads back from the
serving release's manifest (the releases module's current_manifest)."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.filter.manifest import served_speculation


def test_a_release_with_a_k_schedule():
    spec = {"method": "eagle3", "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": {"1": 4, "16": 2}}  # fmt: skip
    manifest = {"inputs": {"speculative_config": spec}, "last_validation": {"hardware": "H200"}}
    assert served_speculation(manifest) == {
        "speculative_config": spec, "speculative": True,
        "schedule": {"1": 4, "16": 2}, "hardware": "H200",
    }  # fmt: skip


def test_a_release_without_speculation_nor_validation():
    served = served_speculation({"inputs": {"speculative_config": None}, "last_validation": None})
    assert served == {"speculative_config": None, "speculative": False, "schedule": "",
                      "hardware": ""}  # fmt: skip


def test_no_manifest_serves_without_speculation():
    assert served_speculation({})["speculative"] is False
