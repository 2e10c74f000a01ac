"""The readiness smoke check's command line (plugins/plugin_utils/smoke.py): the release's own
checker from its venv, with its toolkit on the path, against the server's local address."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.smoke import command

KNOBS = {
    "specdeploy_root": "/opt/specdeploy",
    "specdeploy_local_url": "http://[::1]:8000",
    "specdeploy_served_model_name": "kimi",
    "specdeploy_api_key_file": "/etc/specdeploy/vllm.api-key",
}


def test_the_check_runs_from_the_named_releases_venv_and_toolkit() -> None:
    made = command(KNOBS, "r-2", timeout_s=5)
    assert made["argv"] == [
        "/opt/specdeploy/releases/r-2/venv/bin/python", "-m", "specdeploy.node.validation.check",
        "smoke", "--base-url", "http://[::1]:8000", "--served-model-name", "kimi",
        "--request-timeout", "5", "--api-key-file", "/etc/specdeploy/vllm.api-key",
        "--release", "r-2", "--json",
    ]  # fmt: skip
    assert made["environment"] == {"PYTHONPATH": "/opt/specdeploy/releases/r-2/toolkit"}
    assert "--request-timeout" in command(KNOBS, "r-2")["argv"]  # the default, 20 s
    assert command(KNOBS, "r-2")["argv"][9] == "20"


def test_no_release_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a release id"):
        command(KNOBS, "")
