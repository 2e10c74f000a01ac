"""`make validate` on the controller (playbooks/validate.yml), in two steps.

``prepare``: names this run's report directory from the knobs validation_report_root,
validation_report_dir and validation_history_db, creates its results/ (mode 0755; where the
nodes' results are collected) and sets the facts validate_report_root, validate_report_dir and
validate_history_db.

``report``: writes a could-not-measure result for each node of the run (validate_targets) that
produced none, runs the report tool over the results (table, JSON, JUnit, Prometheus textfile,
HTML, history), points <root>/latest at the run and writes the report's exit code into the run's
directory and validation_exit_file. The report's own failure is not the task's: the play says it
after showing the table (``lines``, ``verdict``).

The paths and command lines come from plugins/plugin_utils/validation_report.py.
"""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import validation_report as vr
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import run_check
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    UNSET,
    require_all,
    resolve,
    resolve_all,
    task_args,
    toolkit_dir,
)

STEPS = ("prepare", "report")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        step = task_args(args, "validation_report", ("step",), {"step": STEPS})["step"]
        knobs = resolve_all(self._templar, vr.REPORT_KNOBS)
        if step == "prepare":
            return self._prepare(result, knobs, task_vars)
        if self._task.check_mode:  # it records into the history
            result.update(skipped=True, changed=False, msg="it records: skipped in check mode")
            return result
        return self._report(result, knobs, task_vars)

    def _prepare(self, result: dict, knobs: dict, task_vars) -> dict:
        paths = vr.report_paths(knobs, str(task_vars["playbook_dir"]))
        results_dir = f"{paths['validate_report_dir']}/results"
        changed = not os.path.isdir(results_dir)
        if not self._task.check_mode:
            try:
                os.makedirs(results_dir, exist_ok=True)
                changed = changed or (os.stat(results_dir).st_mode & 0o7777) != 0o755
                os.chmod(results_dir, 0o755)
            except OSError as error:
                raise AnsibleActionFail(f"validation_report: {error}") from error
        result.update(changed=changed, ansible_facts=paths, **paths)
        return result

    def _report(self, result: dict, knobs: dict, task_vars) -> dict:
        paths = {
            name: str(value)
            for name, value in require_all(
                self._templar, vr.PATHS_KNOBS, "validation_report"
            ).items()
        }
        chdir = toolkit_dir(self._templar)
        targets = resolve(self._templar, "validate_targets")
        built = []
        for node in vr.nodes(None if targets is UNSET else targets):
            out = vr.result_path(paths["validate_report_dir"], node)
            if os.path.exists(out):
                continue
            argv = vr.not_measured_argv(
                sys.executable, node=node, model=self._served_model(task_vars, node),
                reason=vr.UNREACHED, out=out,
            )  # fmt: skip
            answer = run_check(argv, None, chdir)
            if answer["rc"] != 0:
                result.update(answer, failed=True, cmd=argv, msg=f"{vr.RESULT_TOOL}: {node}")
                return result
            built.append(node)
        argv = vr.report_argv(sys.executable, paths, knobs)
        answer = run_check(argv, None, chdir)
        rc = answer["rc"]
        latest = vr.latest_link(paths)
        written = vr.exit_files(paths, knobs)
        try:
            if latest is not None:
                _link(paths["validate_report_dir"], latest)
            for path in written:
                _write(path, f"{rc}\n")
        except OSError as error:
            raise AnsibleActionFail(f"validation_report: {error}") from error
        result.update(
            answer,
            cmd=argv,
            changed=True,  # it records into the history
            stdout_lines=answer["stdout"].splitlines(),
            stderr_lines=answer["stderr"].splitlines(),
            not_measured=built,
            latest=latest,
            exit_files=written,
            lines=vr.shown_lines(answer, paths),
            verdict=vr.report_verdict(rc, paths["validate_report_dir"]),
        )
        if rc != 0:
            # Ansible fails a result with a non-zero rc; without a msg its headline would be
            # "Action failed: Unknown error."
            result["msg"] = result["verdict"]
        return result

    def _served_model(self, task_vars, node: str) -> str:
        """The node's specdeploy_served_model_name (templated with the node's own variables),
        '' when it has none."""
        hostvars = task_vars["hostvars"]
        if node not in hostvars:  # not a host of the inventory
            return ""
        own = hostvars.raw_get(node)
        templar = self._templar.copy_with_new_env(available_variables=own)
        model = resolve(templar, "specdeploy_served_model_name")
        return "" if model is UNSET else str(model)


def _link(target: str, link: str) -> None:
    """link -> target, replacing what link was (a link of an earlier run)."""
    tmp = f"{link}.{os.getpid()}.tmp"
    os.symlink(target, tmp)
    os.replace(tmp, link)


def _write(path: str, content: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(content)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
