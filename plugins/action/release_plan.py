"""Compute the rollout's release object on the controller (plugins/plugin_utils/release_plan.py)
and set it as the host's fact ``as`` (the roles' ``specdeploy_release``).

The node-side code's fingerprint (and the stand-in's, sandbox only) come from
``specdeploy.controller.toolkit_archive --fingerprint``, run once for the whole playbook run
(plugin_utils/controller_checks.py). Never connects to the host; changes nothing.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import release_plan
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import (
    run_once_per_input,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import resolve_all

KNOBS = (*release_plan.PLAN_KNOBS, "ansible_playbook_python", "specdeploy_toolkit_dir")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        name = str(self._task.args.get("as") or "specdeploy_release")
        hardware = self._task.args.get("hardware") or {}
        if not isinstance(hardware, dict):
            raise AnsibleActionFail("release_plan: hardware must be a dict")
        knobs = resolve_all(self._templar, KNOBS)
        if "preflight_version_entry" not in knobs:
            raise AnsibleActionFail(
                "release_plan: the inputs were not checked first (the preflight role's main or"
                " inputs entry point sets preflight_version_entry); nothing was planned"
            )
        standin = release_plan.flag(knobs.get("specdeploy_server_standin"))
        fingerprints = [self._fingerprint(knobs, "release")]
        fingerprints.append(self._fingerprint(knobs, "standin") if standin else "")
        try:
            release = release_plan.plan(knobs, fingerprints[0], fingerprints[1], hardware)
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"release_plan: {type(exc).__name__}: {exc}") from exc
        result.update(changed=False, release=release, ansible_facts={name: release})
        return result

    @staticmethod
    def _fingerprint(knobs: dict, part: str) -> str:
        argv = [
            str(knobs["ansible_playbook_python"]),
            "-m",
            "specdeploy.controller.toolkit_archive",
            "--part",
            part,
            "--fingerprint",
        ]
        chdir = str(knobs["specdeploy_toolkit_dir"])
        answer, _cached = run_once_per_input(argv, None, chdir)
        if answer["rc"] != 0:
            raise AnsibleActionFail(f"release_plan: {part} fingerprint: {answer['stderr'].strip()}")
        return answer["stdout"].strip()
