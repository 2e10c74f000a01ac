"""`make advise` on the controller: write the node's inputs, run the advisor over them.

The node play of playbooks/advise.yml leaves the host fact ``advise_inputs`` (its /metrics, its
throughput per level, the target's MoE shape). This action writes the first two into the advice
directory (``<host>.metrics.txt``, ``<host>.spec.json``) and runs
``python -m specdeploy.controller.advisor`` over them and the node's no-speculation baseline in
the history, with the argument list of plugins/plugin_utils/advise.py. It replaces three tasks
per host whose paths and arguments were fourteen templated values.

The advisor's exit status is the answer, not a failure of this task: the play shows the table or
the advisor's reason, then fails the node on a non-zero ``rc``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.filter.core import to_json, to_nice_json
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import advise
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import run_check
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    resolve_all,
    toolkit_dir,
)


def write_file(path: str, content: str, mode: int) -> bool:
    """Write content to path (atomically, as ansible.builtin.copy does); True when it changed."""
    try:
        if Path(path).read_text(encoding="utf-8") == content:
            os.chmod(path, mode)
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".advise-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return True


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False  # it writes the inputs; the node play measures nothing then
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        knobs = resolve_all(self._templar, advise.KNOBS)
        inputs = knobs.get("advise_inputs")
        if not isinstance(inputs, dict) or not {"metrics", "spec"} <= inputs.keys():
            raise AnsibleActionFail(
                "advise: the node's inputs (advise_inputs: metrics, spec) were not read first"
            )
        directory = os.path.expanduser(advise.advice_dir(knobs))
        files = advise.input_files(directory, str(knobs["inventory_hostname"]))
        try:
            created = not os.path.isdir(directory)
            os.makedirs(directory, exist_ok=True)
            os.chmod(directory, 0o755)
            changed = write_file(files["metrics"], str(inputs["metrics"]), 0o644)
            changed |= write_file(files["spec"], to_nice_json(inputs["spec"]), 0o644)
        except OSError as exc:
            raise AnsibleActionFail(f"advise: {exc}") from exc
        profile = to_json(knobs.get("validation_load_profile", {}))
        argv = [
            sys.executable,
            "-m",
            advise.ADVISOR,
            *advise.advisor_args(knobs, directory, profile),
        ]
        answer = run_check(argv, None, toolkit_dir(self._templar))
        result.update(answer)
        result.update(
            cmd=argv,
            changed=created or changed,  # the inputs it wrote; the advisor changes nothing
            stdout_lines=answer["stdout"].splitlines(),
            stderr_lines=answer["stderr"].splitlines(),
        )
        return result
