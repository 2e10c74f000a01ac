"""The readiness smoke check of a release's server: one command line for every task that runs it
(readiness after a start, the steady check, the rollback's verify and settle, the build-failure
report, the clean-up after an interrupted run).

The release's own checker (specdeploy.node.validation.check smoke) in its venv, against the
server's local address. Was a Jinja program in roles/specdeploy/vars/main.yml that each task
fed a release id through its vars (issue 25).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths

KNOBS = (
    "specdeploy_root",
    "specdeploy_local_url",
    "specdeploy_served_model_name",
    "specdeploy_api_key_file",
)
DEFAULT_TIMEOUT_S = 20


def command(
    knobs: Mapping[str, Any], release: str, timeout_s: float | str = DEFAULT_TIMEOUT_S
) -> dict[str, Any]:
    """``argv`` and ``environment`` of the smoke check of ``release``'s server."""
    if not release:
        raise ValueError("the smoke check needs a release id")
    paths = release_paths(knobs["specdeploy_root"], str(release))
    argv = [
        paths["python"], "-m", "specdeploy.node.validation.check", "smoke",
        "--base-url", knobs["specdeploy_local_url"],
        "--served-model-name", knobs["specdeploy_served_model_name"],
        "--request-timeout", str(timeout_s),
        "--api-key-file", knobs["specdeploy_api_key_file"],
        "--release", str(release),
        "--json",
    ]  # fmt: skip
    return {"argv": [str(a) for a in argv], "environment": {"PYTHONPATH": paths["toolkit_dir"]}}
