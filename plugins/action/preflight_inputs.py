"""Check every input of a deploy on the controller, before anything on a node changes.

One task instead of the plan play's former twenty (asserts, controller-side checks and the
facts they set): the rules are plugins/plugin_utils/preflight.py; the checks that need the
toolkit's Python (inputs against the patch manifest, unknown knobs, gates, baseline knob,
engine, balancer) run as their command lines, at once, each once per distinct input for the
whole playbook run (plugin_utils/controller_checks.py), so a fleet that shares its inputs pays
them once. Every refusal is reported, one line each, joined; nothing on the node is touched.
Sets preflight_version_entry, preflight_version_native and preflight_speculative_schedule.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import preflight as rules
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import (
    run_once_per_input,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    UNSET,
    resolve,
    resolve_all,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        groups = self._task.args.get("checks") or list(rules.GROUPS)
        unknown = sorted(set(groups) - set(rules.GROUPS))
        if unknown:
            raise AnsibleActionFail(
                f"preflight_inputs: unknown checks {unknown}; known: {', '.join(rules.GROUPS)}"
            )
        knobs = resolve_all(self._templar, rules.INPUT_KNOBS)
        host = str(task_vars["inventory_hostname"])
        chdir = str(knobs["specdeploy_toolkit_dir"])

        runs: dict[str, dict] = {}  # per check: its exit status, whether another host ran it

        def run(command: rules.Command) -> dict:
            try:
                answer, cached = run_once_per_input(command.argv, command.stdin, chdir)
            except OSError as exc:
                raise AnsibleActionFail(f"preflight_inputs: {command.name}: {exc}") from exc
            runs[command.name] = {"rc": answer["rc"], "cached": cached}
            return answer

        verdict = rules.Verdict()
        with ThreadPoolExecutor(max_workers=4) as pool:
            pending = {}
            if "inputs" in groups:
                verdict.errors += rules.shutdown_errors(knobs)
                pending["knobs"] = pool.submit(run, rules.knobs_command(knobs))
                pending["inputs"] = pool.submit(run, rules.inputs_command(knobs, host))
            if "balancer" in groups:
                verdict.errors += rules.drain_timeout_errors(knobs)
                verdict.errors += rules.drain_guard_errors(knobs)
                argv = resolve(
                    self._templar, "specdeploy_drain_argv", {"specdeploy_drain_action": "check"}
                )
                if argv is UNSET:
                    raise AnsibleActionFail("preflight_inputs: specdeploy_drain_argv is undefined")
                balancer = rules.Command("balancer", [str(a) for a in argv])
                pending["balancer"] = pool.submit(run, balancer)
            if "validation" in groups:
                pending["baseline"] = pool.submit(run, rules.baseline_command(knobs))
            if "engine" in groups:
                pending["engine"] = pool.submit(run, rules.engine_command(knobs, os.environ))
            if "knobs" in pending:
                verdict.extend(rules.knobs_verdict(pending["knobs"].result()))
            if "inputs" in pending:
                verdict.extend(rules.inputs_verdict(pending["inputs"].result()))
            if "balancer" in pending:
                verdict.extend(rules.balancer_verdict(pending["balancer"].result()))
            if "knobs" in groups:
                verdict.errors += rules.knob_errors(knobs, os.environ)
            if "validation" in groups:
                # the gates against k as the node serves it (a schedule may raise k)
                schedule = verdict.facts.get(
                    "preflight_speculative_schedule",
                    resolve(self._templar, "preflight_speculative_schedule"),
                )
                served = rules.served_speculative_config(
                    knobs, schedule if isinstance(schedule, dict) else None
                )
                verdict.extend(rules.gates_verdict(run(rules.gates_command(knobs, served)), host))
                verdict.extend(rules.baseline_verdict(pending["baseline"].result()))
                verdict.errors += rules.validation_file_errors(knobs, os.path.isfile)
                verdict.messages += rules.waiver_messages(knobs, host)
            if "engine" in pending:
                verdict.extend(rules.engine_verdict(pending["engine"].result()))

        result.update(changed=False, messages=verdict.messages, errors=verdict.errors, runs=runs)
        if verdict.errors:
            result.update(failed=True, msg=" | ".join(verdict.errors))
        else:
            result["ansible_facts"] = verdict.facts
        return result
