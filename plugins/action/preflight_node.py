"""Judge a node's read-only probe (specdeploy.toolkit.node_probe) on the controller.

One task instead of the plan play's former ten: the node's Python when the controller's
wheelhouse picks wheels for it, the model and drafter configs, the drafter compatibility check
(a controller-side command line, once per distinct drafter and target for the whole run), the
free space, the port, and the serving release (the automatic rollback's way back). The rules
are plugins/plugin_utils/preflight.py. Every refusal is reported, one line each; the drafter
check's warnings come back as ``messages``. Sets preflight_inputs_checked and
preflight_serving_release.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import preflight as rules
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import (
    run_once_per_input,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import resolve_all


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        probe = self._task.args.get("probe")
        if not isinstance(probe, dict) or "model_configs" not in probe:
            raise AnsibleActionFail("preflight_node: probe must be node_probe's registered result")
        knobs = resolve_all(self._templar, rules.NODE_KNOBS)
        host = str(task_vars["inventory_hostname"])
        verdict = rules.node_verdict(knobs, probe, host)
        command = rules.drafter_command(knobs, probe)
        if command is not None:
            try:
                answer, _cached = run_once_per_input(
                    command.argv, command.stdin, str(knobs["specdeploy_toolkit_dir"])
                )
            except OSError as exc:
                raise AnsibleActionFail(f"preflight_node: drafter check: {exc}") from exc
            drafter = rules.drafter_verdict(knobs, answer)
            # the drafter's refusal first: it names the knob to fix
            verdict.errors[:0] = drafter.errors
            verdict.messages += drafter.messages
        result.update(changed=False, messages=verdict.messages, errors=verdict.errors)
        if verdict.errors:
            result.update(failed=True, msg=" | ".join(verdict.errors))
        else:
            result["ansible_facts"] = verdict.facts
        return result
