"""The steady check's options from the play's variables (plugins/action/steady.py).

roles/vllm_service tasks/steady.yml gave the module eleven options, each a Jinja expression over
the knobs and the role's variables; the action fills the ones the task leaves out from the same
variables, through this pure function. The rendered files come from the lookup
specdeploy.toolkit.service_files (the action calls it), the smoke check's command line from
plugins/plugin_utils/smoke.py, the server's executables from plugins/plugin_utils/service_files.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import service_files, smoke

# The variables the options are made of (roles/vllm_service: its defaults and vars).
KNOBS = (
    *smoke.KNOBS,
    "specdeploy_release",
    "specdeploy_service_name",
    "specdeploy_server_standin",
    "specdeploy_keep_releases",
    "vllm_service_secret_files",
    "vllm_service_probe_timeout_s",
    "vllm_service_action",
)
# The smoke check's stages (port, health, models, a completion), each within one probe's timeout.
SMOKE_STAGES = 4


def module_args(knobs: Mapping[str, Any], files: list[dict]) -> dict[str, Any]:
    """The steady module's options: ``files`` are the release's config files and the installed
    ones (the unit's copy, the on-failure hook) as the deploy renders them now."""
    release = knobs["specdeploy_release"]
    probe_timeout_s = knobs["vllm_service_probe_timeout_s"]
    smoke_command = smoke.command(knobs, release["id"], probe_timeout_s)
    executables = service_files.server_files(release, bool(knobs["specdeploy_server_standin"]))
    present = [release["cache_marker"], *executables]
    return {
        "root": knobs["specdeploy_root"],
        "release_id": release["id"],
        "service": knobs["specdeploy_service_name"],
        "files": files,
        "secret_files": knobs["vllm_service_secret_files"],
        "present": present,
        "keep_releases": knobs["specdeploy_keep_releases"],
        "smoke_argv": smoke_command["argv"],
        "smoke_environment": smoke_command["environment"],
        "smoke_timeout_s": float(probe_timeout_s) * SMOKE_STAGES,
        # Steady, nothing restarted: the module records the node's downtime window as none.
        "downtime_action": knobs["vllm_service_action"],
    }
