"""`make advise` on each node: what the serving release measures, read without any restart.

One task instead of the node play's eight: the current symlink (nothing deployed: refused), the
release's manifest (no speculation: refused), the target's config.json (its MoE shape, unless
advise_experts is given), the release's /metrics, the API key file, and the release's own
checker measuring the throughput per level. Each step is the module the play ran
(stat, slurp, uri, command), as the task's user (``become``); the argument lists come from
plugins/plugin_utils/advise.py. Sets the host fact ``advise_inputs`` (metrics, spec, shape) that
plugins/action/advise.py writes out and runs the advisor over on the controller.
"""

from __future__ import annotations

import base64
import json

from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.filter.advise import advise_moe_shape
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import advise
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import resolve_all


class StepFailed(Exception):
    """A step's module failed: its result is the task's."""

    def __init__(self, result: dict) -> None:
        super().__init__(result.get("msg", "failed"))
        self.result = result


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False  # the checker runs a measurement (the command module's skip)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        self._task_vars = task_vars
        knobs = resolve_all(self._templar, advise.NODE_KNOBS)
        host = str(knobs["inventory_hostname"])
        try:
            inputs = self._read(knobs, host)
        except StepFailed as failed:
            result.update(failed.result, failed=True, changed=False)
            return result
        result.update(changed=False, ansible_facts={"advise_inputs": inputs})
        return result

    def _read(self, knobs: dict, host: str) -> dict:
        release = advise.release_dir(knobs)
        current = self._step("ansible.legacy.stat", {"path": release, "get_checksum": False})
        if not current["stat"].get("islnk", False):
            raise StepFailed({"msg": advise.not_deployed(host)})
        manifest = self._step("ansible.legacy.slurp", {"src": f"{release}/manifest.json"})
        if advise.served_speculation(json.loads(base64.b64decode(manifest["content"]))) is None:
            raise StepFailed({"msg": advise.not_speculative(host)})
        if "advise_experts" in knobs:
            shape = advise_moe_shape({})  # given: the config is not read
        else:  # a target without a readable config.json reads as dense
            config = f"{knobs['specdeploy_model_path']}/config.json"
            shape = advise_moe_shape(self._module("ansible.legacy.slurp", {"src": config}))
        url = f"{knobs['specdeploy_local_url']}/metrics"
        metrics = self._step("ansible.legacy.uri", {"url": url, "return_content": True})
        key_file = {"path": advise.api_key_path(knobs), "get_checksum": False}
        key = self._step("ansible.legacy.stat", key_file)
        argv = advise.checker_argv(knobs, key["stat"]["path"] if key["stat"]["exists"] else None)
        environment = self._task.environment
        self._task.environment = [{"PYTHONPATH": f"{release}/toolkit"}]  # for the checker only
        try:
            measured = self._step("ansible.legacy.command", {"argv": argv})
        finally:
            self._task.environment = environment
        return {
            "metrics": metrics["content"],
            "spec": json.loads(measured["stdout"]),
            "shape": shape,
        }

    def _module(self, name: str, args: dict) -> dict:
        return self._execute_module(module_name=name, module_args=args, task_vars=self._task_vars)

    def _step(self, name: str, args: dict) -> dict:
        answer = self._module(name, args)
        if answer.get("failed"):
            raise StepFailed(answer)
        return answer
