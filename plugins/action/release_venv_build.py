"""Build a release's venv on the node in one task: link, or install and record; then compile.

One task instead of five (each task costs the controller CPU time per host), and the module
arguments come from the node's knobs in Python (plugins/plugin_utils/release_venv_build.py), not
from Jinja in the role. The steps run as the tasks they replace ran, in the same order, with the
task's become and check mode: specdeploy.toolkit.release_venv links the venv from an earlier
release of the same vLLM; where none was linked specdeploy.toolkit.release_venv_install installs
the toolkit's node-side needs and the pinned engine (by uv, or pip where uv is not to hand), and
release_venv records which wheel the venv came from;
last specdeploy.toolkit.release_bytecode compiles the venv's bytecode. The first step that fails
ends the task with that step's own result (its msg, stdout and stderr).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import release_venv_build as steps
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import require_all


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if self._task.args:
            raise AnsibleActionFail("release_venv_build: takes no arguments (it reads the knobs)")
        knobs = require_all(self._templar, steps.KNOBS, "release_venv_build")
        try:
            return self._build(result, knobs, task_vars)
        except KeyError as exc:
            raise AnsibleActionFail(f"release_venv_build: the release has no {exc}") from exc
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _build(self, result: dict, knobs: Mapping[str, Any], task_vars) -> dict:
        release = knobs["specdeploy_release"]
        vllm = steps.is_vllm(release)
        plan: list[tuple[str, str, dict[str, Any]]] = []
        if vllm:
            plan.append(
                ("link", "specdeploy.toolkit.release_venv", steps.venv_args(knobs, "linked"))
            )
        plan.append(
            ("install", "specdeploy.toolkit.release_venv_install", steps.install_args(knobs))
        )
        if vllm:
            plan.append(
                ("record", "specdeploy.toolkit.release_venv", steps.venv_args(knobs, "recorded"))
            )
        plan.append(("bytecode", "specdeploy.toolkit.release_bytecode", steps.bytecode_args(knobs)))
        changed: dict[str, bool] = {}
        linked = False
        installer = note = ""
        wheel = ""
        for step, module, args in plan:
            if linked and step in ("install", "record"):
                continue  # the venv came whole from the earlier release
            if step == "record" and wheel:
                args = {**args, "wheel": wheel}  # the link step read the whole wheel already
            answer = self._execute_module(module_name=module, module_args=args, task_vars=task_vars)
            if answer.get("failed") or answer.get("unreachable"):
                return {**answer, "step": step, "steps": changed}
            changed[step] = bool(answer.get("changed"))
            if step == "install":
                installer = answer.get("installer", "")
                note = answer.get("installer_note", "")
            linked = linked or (step == "link" and changed[step])
            wheel = wheel or str(answer.get("wheel") or "")
        how = " (linked from an earlier release)" if linked else f" (by {installer})"
        result.update(
            changed=any(changed.values()),
            linked=linked,
            steps=changed,
            installer=installer,
            msg=f"{release['package']} in {release['venv_dir']}{how}"
            + (f"; pip, not uv: {note}" if note else ""),
        )
        return result
