"""Run the release's own checker on the node (roles/validation), as ansible.builtin.command runs
a command, with the release's toolkit on PYTHONPATH: its command line comes from the role's
variables (plugins/plugin_utils/validation_argv.py, the lookup specdeploy.toolkit.validation_argv
returns the same ones).

``all``: the smoke and acceptance checks with the release's gates, into validation_out (an
earlier result there is removed first, so a checker that writes none leaves none);
``serving``: the release that serves before the switch, measured without gates into
validation_previous_out; ``baseline-start``: the new release started without speculation,
measured into validation_baseline_start_out.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import validation_argv
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.node_command import run_command
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    resolve_all,
    task_args,
)

# What each measurement measures and where it goes: (release variable, output variable).
BASELINES = {
    "serving": ("validation_serving_release", "validation_previous_out"),
    "baseline-start": ("validation_release_id", "validation_baseline_start_out"),
}
MEASURES = ("all", *BASELINES)
# `sh -c` with the result file as $1 and the command after it: remove, then run the checker.
REMOVE_THEN_RUN = 'rm -f -- "$1"; shift; exec "$@"'


def command_line(measure: str, values: dict) -> list[str]:
    if measure == "all":
        out = str(values["validation_out"])
        return ["sh", "-c", REMOVE_THEN_RUN, "sh", out, *validation_argv.argv("all", values)]
    release, out = (str(values[name]) for name in BASELINES[measure])
    return validation_argv.argv("baseline", values, release=release, out=out)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        measure = task_args(args, "validation_measure", ("measure",), {"measure": MEASURES})[
            "measure"
        ]
        names = (*validation_argv.KNOBS, *(name for pair in BASELINES.values() for name in pair))
        values = resolve_all(self._templar, names)
        try:
            argv = command_line(measure, values)
            toolkit = f"{values['validation_release_dir']}/toolkit"
        except (KeyError, ValueError, TypeError) as error:
            raise AnsibleActionFail(
                f"validation_measure: {type(error).__name__}: {error}"
            ) from error
        result.update(run_command(self, argv, {"PYTHONPATH": toolkit}, task_vars))
        return result
