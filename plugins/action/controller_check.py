"""Run a controller-side check (a Python module's command line) once per distinct input.

The plan play checks every node's inputs on the controller (specdeploy.controller.inputs, the
gates, the drafter, the baseline knob): one Python process each, 0.26-0.44 s, for every node,
although a fleet's nodes almost always share their inputs. This action runs the command like
``ansible.builtin.command`` (``argv``, optional ``stdin``, ``chdir``, ``creates``; the result
has ``rc``, ``stdout``, ``stderr`` and their ``_lines``) but keeps the answer for the rest of
the playbook run under the sha256 of exactly what the command sees: the argument list, the
standard input and the working directory. A node whose inputs differ (its host_vars, its
probed drafter) has another key and gets its own run; nodes with the same inputs share one run.
``cached`` says whether this host's answer came from another host's run.

The answers live in the run's own local temporary directory (Ansible's per-run
``ansible-local-*``, removed when ansible-playbook exits), so nothing outlives the run and a
later run checks afresh (a history that changed, a manifest edited between runs). Hosts that
ask for the same key at once wait on one lock while the first runs the check. Runs in check
mode too (read-only), like the tasks it replaces (``check_mode: false``).
"""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import (
    run_check,
    run_once_per_input,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import toolkit_dir


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        argv = self._argv(args)
        stdin = args.get("stdin")
        stdin = None if stdin is None else str(stdin)
        chdir = args.get("chdir")
        if chdir is None and "tool" in args:
            chdir = toolkit_dir(self._templar)
        chdir = None if chdir is None else str(chdir)
        try:
            once = boolean(args.get("once_per_input", True), strict=True)
        except TypeError as exc:
            raise AnsibleActionFail(f"controller_check: once_per_input: {exc}") from exc
        if not once and self._task.check_mode:
            result.update(skipped=True, changed=False, msg="it records: skipped in check mode")
            return result
        creates = args.get("creates")
        creates = None if creates is None else os.path.expanduser(str(creates))
        if creates is not None and os.path.exists(creates):  # as ansible.builtin.command's
            result.update(
                rc=0, stdout="", stderr="", stdout_lines=[], stderr_lines=[], cmd=argv,
                cached=False, changed=False, msg=f"Did not run command since '{creates}' exists",
            )  # fmt: skip
            return result
        try:
            answer, cached = (
                run_once_per_input(argv, stdin, chdir)
                if once
                else (run_check(argv, stdin, chdir), False)
            )
        except OSError as exc:
            raise AnsibleActionFail(f"controller_check: {argv[:3]}: {exc}") from exc
        result.update(answer)
        result.update(
            cmd=argv,
            cached=cached,
            changed=creates is not None and answer["rc"] == 0,  # it made what `creates` names
            stdout_lines=answer["stdout"].splitlines(),
            stderr_lines=answer["stderr"].splitlines(),
        )
        if answer["rc"] != 0:
            # the words of ansible.builtin.command, which the rollout's failure filter leaves out
            result.update(failed=True, msg="non-zero return code")
        return result

    def _argv(self, args) -> list[str]:
        """argv as given, or the toolkit's own tool run by the controller's Python (the one
        running this playbook, ansible_playbook_python)."""
        if "tool" in args:
            tool, rest = args["tool"], args.get("args", [])
            if "argv" in args:
                raise AnsibleActionFail("controller_check: give argv or tool, not both")
            if not isinstance(tool, str) or not tool.startswith("specdeploy."):
                raise AnsibleActionFail(f"controller_check: not a specdeploy module: {tool!r}")
            if not isinstance(rest, list):
                raise AnsibleActionFail("controller_check: args must be a list")
            return [sys.executable, "-m", tool, *(str(a) for a in rest)]
        argv = args.get("argv")
        if not isinstance(argv, list) or not argv:
            raise AnsibleActionFail("controller_check: argv (or tool) must be a non-empty list")
        return [str(a) for a in argv]
