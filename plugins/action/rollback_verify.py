"""After a rollback's activation: read whether the node is exactly what the release was, in one
task (roles/rollback/tasks/verify.yml; its checks stay there as assertions).

Was seven tasks whose paths, argv and environment were Jinja built from the release id: the
release's manifest, the installed and the release's rendered unit (sha256), the serving process
(does it run from the release?), the release's patch state (an SGLang release: the version its
venv holds; a vLLM release: its own patcher's answer), and the smoke check. The steps run the
same modules in the same order with the task's become; the smoke check runs only on a node that
is what the release was (the assertion before it stopped the play). The first step that fails
ends the task with that step's own result.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.filter.rollback import release_patch_state
from ansible_collections.specdeploy.toolkit.plugins.filter.rollback_checks import (
    patch_status_command,
    release_mismatch_message,
    smoke_failure_reasons,
)
from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import smoke
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import require_all

KNOBS = (*smoke.KNOBS, "specdeploy_service_name", "rollback_patch_backup_dirname")
SGLANG_VERSION = "import importlib.metadata as m; print(m.version('sglang'))"


def manifest_engine(manifest: Mapping[str, Any]) -> str:
    """The engine the manifest's patch record names (vllm when it names none)."""
    patches = manifest.get("patches", {})
    return str(patches.get("engine", "vllm")) if isinstance(patches, Mapping) else "vllm"


def node_matches(
    units: list[Mapping[str, Any]], process: Mapping[str, Any], patcher: Any, patch: dict
) -> tuple[bool, bool]:
    """(whether the installed unit is the release's, whether the whole node is what the release
    was). ``units``: stat of the installed and of the release's unit; ``patcher``: the vLLM
    patcher's run (None for an SGLang release)."""
    installed, rendered = (unit.get("stat", {}) for unit in units)
    unit_matches = installed.get("checksum", "a") == rendered.get("checksum", "b")
    patcher_rc = patcher.get("rc", 0) if isinstance(patcher, Mapping) else 0
    matches = (
        unit_matches
        and process.get("runs_release_dir") is True
        and patcher_rc == 0
        and patch["state"] in ("applied", "native")
        and patch["state"] == patch["recorded"]
    )
    return unit_matches, matches


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        unknown = sorted(set(self._task.args) - {"release"})
        if unknown or not self._task.args.get("release"):
            raise AnsibleActionFail("rollback_verify: takes one option, release (the release id)")
        knobs = require_all(self._templar, KNOBS, "rollback_verify")
        host = str((task_vars or {}).get("inventory_hostname", ""))
        try:
            return self._verify(result, str(self._task.args["release"]), knobs, host, task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _module(self, name: str, args: dict, task_vars, environment: dict | None = None) -> dict:
        """One module run on the node; ``environment`` is added to the task's for this run."""
        saved = self._task.environment
        if environment:
            self._task.environment = [*(saved or []), environment]
        try:
            return self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        finally:
            self._task.environment = saved

    def _verify(self, result: dict, release: str, knobs: Mapping[str, Any], host: str, task_vars):
        paths = release_paths(knobs["specdeploy_root"], release)
        unit = f"{knobs['specdeploy_service_name']}.service"
        read = self._module("ansible.builtin.slurp", {"src": paths["manifest"]}, task_vars)
        if read.get("failed") or read.get("unreachable"):
            return {**read, "step": "manifest"}
        manifest = json.loads(base64.b64decode(read["content"]))
        units = []
        for path in (f"/etc/systemd/system/{unit}", f"{paths['config_dir']}/{unit}"):
            stat_args = {"path": path, "checksum_algorithm": "sha256"}
            units.append(self._module("ansible.builtin.stat", stat_args, task_vars))
            if units[-1].get("failed") or units[-1].get("unreachable"):
                return {**units[-1], "step": "unit"}
        process_args = {"service": unit, "release_dir": paths["dir"]}
        process = self._module("specdeploy.toolkit.service_process", process_args, task_vars)
        if process.get("failed") or process.get("unreachable"):
            return {**process, "step": "process"}
        # An SGLang release patches nothing (roles/vllm_patches/tasks/sglang.yml): its state is
        # native when its venv holds the SGLang version its manifest recorded.
        engine, sglang, patcher = manifest_engine(manifest), None, None
        if engine == "sglang":
            argv = [paths["python"], "-c", SGLANG_VERSION]
            sglang = self._module("ansible.builtin.command", {"argv": argv}, task_vars)
        elif engine == "vllm":
            status = patch_status_command(
                manifest, knobs["specdeploy_root"], release, knobs["rollback_patch_backup_dirname"]
            )
            patcher = self._module(
                "ansible.builtin.command", {"argv": status["argv"]}, task_vars,
                status["environment"],
            )  # fmt: skip
        patch = release_patch_state(manifest, engine, sglang, patcher)
        unit_matches, matches = node_matches(units, process, patcher, patch)
        result.update(changed=False, node_matches=matches, patch=patch, mismatch="")
        result.update(smoke={}, smoke_failure="", verified={})
        if not matches:
            result["mismatch"] = release_mismatch_message(
                release, host=host, unit_matches=unit_matches, process=process, patch=patch
            )
            return result
        check = smoke.command(knobs, release)
        run = self._module(
            "ansible.builtin.command", {"argv": check["argv"]}, task_vars, check["environment"]
        )
        result["smoke"] = {key: run.get(key, "") for key in ("rc", "stdout", "stderr")}
        if run.get("rc") != 0:
            reasons = smoke_failure_reasons(run)
            result["smoke_failure"] = (
                f"release {release} serves but fails its smoke check: {reasons}"
            )
            return result
        result["verified"] = {
            "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "release": release,
            "unit_sha256": units[0]["stat"]["checksum"],
            "patch_state": patch["state"],
            "smoke": "pass",
        }
        return result
