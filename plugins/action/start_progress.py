"""Follow a server start on the node and print one line per load phase change, with an ETA.

Runs specdeploy.node.service.start_progress on the node (the release's Python and toolkit) again and
again, each time with a bounded wait for the next change, until the engine log says ready, the
server's process ended, or ``timeout_s`` passed. Prints, per change, a line like

    sandbox-node1: loading weights 50% (12.3 s in; ETA 31 s from 4 earlier starts)

Returns the last state: the phase, ``ready``, ``ended``, the downtime ``window`` (when ready)
and, when it timed out, ``stuck`` (the phase and how long it lasted). Read-only and check-mode
safe (skipped in check mode: nothing started). Options: unit, since (epoch seconds), root,
python, toolkit, timeout_s, wait_s (bound of one node-side wait); release (an id: its Python and
toolkit). unit, root and timeout_s default to the play's specdeploy_service_name, specdeploy_root
and specdeploy_start_timeout_s.
"""

from __future__ import annotations

import json
import shlex
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.specdeploy.toolkit.plugins.module_utils import progress_line
from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import UNSET, resolve

display = Display()

# Options a task may leave out: the play's variable each defaults to.
DEFAULTS = {
    "unit": "specdeploy_service_name",
    "root": "specdeploy_root",
    "timeout_s": "specdeploy_start_timeout_s",
}


def describe(host: str, state: dict) -> str:
    """One progress line (plugins/module_utils/progress_line.py, the format every wait uses):
    the phase (weights with percentage), time in, ETA from the node's earlier starts."""
    basis = f"{state.get('starts')} earlier start(s)"
    no_history = "no earlier start recorded on this node"
    if state.get("ready"):
        window = (state.get("window") or {}).get("window_s", "?")
        head = f"{host}: ready after a downtime window of {window} s"
        if state.get("eta_s") is None:
            return f"{head} (no ETA: {no_history})"
        return f"{head} (the usual {progress_line.span(state['expected_s'])} from {basis})"
    return progress_line.line(
        host,
        state["title"],
        state["elapsed_s"],
        percent=state.get("percent"),
        eta_s=state.get("eta_s"),
        expected_s=state.get("expected_s"),
        basis=basis,
        no_eta=no_history,
    )


class ActionModule(ActionBase):
    _supports_check_mode = True
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self._task.check_mode:
            result.update(skipped=True, msg="check mode: no server starts")
            return result
        args = self._options(self._task.args)
        try:
            unit = str(args["unit"])
            since = float(args["since"])
            root = str(args["root"])
            python = str(args["python"])
            toolkit = str(args["toolkit"])
            timeout_s = float(args["timeout_s"])
        except (KeyError, TypeError, ValueError) as error:
            raise AnsibleActionFail(
                f"specdeploy.toolkit.start_progress: bad or missing option: {error}"
            ) from error
        wait_s = float(args.get("wait_s", 20))
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        deadline = time.monotonic() + timeout_s
        known, state, polls, shown = "", None, 0, set()
        while True:
            left = deadline - time.monotonic()
            argv = [
                python, "-m", "specdeploy.node.service.start_progress", "--unit", unit,
                "--since", f"{since:.3f}", "--root", root, "--known", known,
                "--wait", f"{max(0.0, min(wait_s, left)):.1f}", "--json",
            ]  # fmt: skip
            command = f"PYTHONPATH={shlex.quote(toolkit)} " + shlex.join(argv)
            res = self._low_level_execute_command(command, sudoable=True)
            polls += 1
            if res.get("rc") != 0:
                raise AnsibleActionFail(
                    "could not follow the start on the node: "
                    + (res.get("stderr") or res.get("stdout") or "").strip()[-300:]
                )
            state = json.loads(res["stdout"].strip().splitlines()[-1])
            # Phases that opened and closed between two reads get their line too.
            events = state.get("events") or []
            for event in events[:-1]:
                if event["phase"] not in shown:
                    shown.add(event["phase"])
                    began = event["at"] - events[0]["at"]
                    display.display(f"{host}: {event['title']} ({began:.1f} s in)")
            if state["key"] != known:
                shown.add(state["phase"])
                display.display(describe(host, state))
                known = state["key"]
            if state["ready"] or state["ended"] or time.monotonic() >= deadline:
                break
        result.update(changed=False, polls=polls, **state)
        if not state["ready"] and not state["ended"]:
            result["stuck"] = {"phase": state["phase"], "title": state["title"],
                               "percent": state.get("percent"),
                               "for_s": state["phase_elapsed_s"]}  # fmt: skip
        return result

    def _options(self, given) -> dict:
        """The task's options; the ones it leaves out from the play's variables (the server's
        unit, the root, the start budget) and, for ``release``, that release's Python and
        toolkit on the node (the one layout, module_utils/release.py)."""
        args = dict(given)
        for option, knob in DEFAULTS.items():
            if args.get(option) in (None, ""):
                value = resolve(self._templar, knob)
                if value is not UNSET:
                    args[option] = value
        release = args.pop("release", None)
        if release and "root" in args:
            paths = release_paths(str(args["root"]), str(release))
            args.setdefault("python", paths["python"])
            args.setdefault("toolkit", paths["toolkit_dir"])
        return args
